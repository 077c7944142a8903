"""A small, explicit Kubernetes API client over httpx for the harness, tests and benchmarks.

Why not a client library: the tests must see exactly what the API server answers (status codes,
``Warning`` headers, ``Status`` bodies, continue tokens) and the benchmarks time single requests;
a thin wrapper over HTTP shows all of it. cudasched's own client is not used on purpose: the
end-to-end tests drive cudasched only through its command line.
"""

from __future__ import annotations

import builtins
import json
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

__all__ = ["Api", "ApiError", "Credentials", "resource_path"]

JSON = dict[str, Any]

#: apiVersion/kind -> (plural, namespaced) for what the harness and tests write.
_RESOURCES: dict[tuple[str, str], tuple[str, bool]] = {
    ("v1", "Namespace"): ("namespaces", False),
    ("v1", "Node"): ("nodes", False),
    ("v1", "Pod"): ("pods", True),
    ("v1", "Service"): ("services", True),
    ("v1", "ServiceAccount"): ("serviceaccounts", True),
    ("v1", "ConfigMap"): ("configmaps", True),
    ("v1", "Secret"): ("secrets", True),
    ("v1", "Event"): ("events", True),
    ("coordination.k8s.io/v1", "Lease"): ("leases", True),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): ("customresourcedefinitions", False),
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"): (
        "mutatingwebhookconfigurations",
        False,
    ),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): (
        "validatingadmissionpolicies",
        False,
    ),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): (
        "validatingadmissionpolicybindings",
        False,
    ),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): ("clusterroles", False),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): ("clusterrolebindings", False),
    ("serving.kserve.io/v1beta1", "InferenceService"): ("inferenceservices", True),
    ("serving.kserve.io/v1alpha1", "ServingRuntime"): ("servingruntimes", True),
    ("serving.kserve.io/v1alpha1", "ClusterServingRuntime"): ("clusterservingruntimes", False),
    ("serving.kserve.io/v1alpha1", "LLMInferenceService"): ("llminferenceservices", True),
    ("serving.kserve.io/v1alpha2", "LLMInferenceService"): ("llminferenceservices", True),
    ("nvidia.com/v1alpha1", "NVIDIADriver"): ("nvidiadrivers", False),
    ("nvidia.com/v1", "ClusterPolicy"): ("clusterpolicies", False),
    ("resource.k8s.io/v1", "ResourceClaimTemplate"): ("resourceclaimtemplates", True),
    ("resource.k8s.io/v1", "DeviceClass"): ("deviceclasses", False),
    ("resource.k8s.io/v1", "ResourceSlice"): ("resourceslices", False),
    ("resource.k8s.io/v1", "ResourceClaim"): ("resourceclaims", True),
    ("apps/v1", "ReplicaSet"): ("replicasets", True),
    ("cudasched.io/v1alpha1", "PlacementTable"): ("placementtables", True),
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy"): (
        "mutatingadmissionpolicies",
        False,
    ),
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicyBinding"): (
        "mutatingadmissionpolicybindings",
        False,
    ),
}


def resource_path(api_version: str, kind: str, namespace: str | None = None) -> str:
    """The collection URL path of a kind the harness knows (``/api/v1/namespaces/x/pods``)."""
    try:
        plural, namespaced = _RESOURCES[(api_version, kind)]
    except KeyError:
        raise KeyError(f"the harness does not know {api_version} {kind}") from None
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    if namespaced:
        return f"{base}/namespaces/{namespace or 'default'}/{plural}"
    return f"{base}/{plural}"


class ApiError(RuntimeError):
    """A non-2xx answer: the status code and the API server's ``Status`` message."""

    def __init__(self, method: str, path: str, response: httpx.Response) -> None:
        self.status_code = response.status_code
        try:
            self.body: JSON = response.json()
        except ValueError:
            self.body = {"message": response.text}
        self.reason = str(self.body.get("reason", ""))
        self.message = str(self.body.get("message", response.text))
        super().__init__(f"{method} {path}: {self.status_code} {self.reason}: {self.message}")


@dataclass(frozen=True)
class Credentials:
    """Where and as whom to connect: a CA, and a client certificate or a bearer token."""

    server: str
    ca_file: Path
    cert_file: Path | None = None
    key_file: Path | None = None
    token: str | None = None

    def with_token(self, token: str) -> Credentials:
        return Credentials(self.server, self.ca_file, token=token)

    def tls(self) -> ssl.SSLContext:
        """Trust the CA; present the client certificate when there is one."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if self.cert_file and self.key_file:
            context.load_cert_chain(str(self.cert_file), str(self.key_file))
        return context


@dataclass
class Api:
    """One connection pool to the API server; thread-safe (httpx's sync client is)."""

    credentials: Credentials
    timeout: float = 30.0
    user_agent: str = "cudasched-e2e"
    _client: httpx.Client = field(init=False, repr=False)

    def __post_init__(self) -> None:
        creds = self.credentials
        headers = {"User-Agent": self.user_agent, "Accept": "application/json"}
        if creds.token:
            headers["Authorization"] = f"Bearer {creds.token}"
        self._client = httpx.Client(
            base_url=creds.server,
            verify=creds.tls(),
            headers=headers,
            timeout=self.timeout,
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=64),
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- raw ---------------------------------------------------------------------------------
    def send(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> httpx.Response:
        """One request; the response whatever its status."""
        content = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type} if content is not None else {}
        return self._client.request(method, path, content=content, params=params, headers=headers)

    def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> JSON:
        response = self.send(method, path, body=body, params=params, content_type=content_type)
        if response.status_code >= 300:
            raise ApiError(method, path, response)
        return response.json() if response.content else {}

    # -- objects -----------------------------------------------------------------------------
    def create(self, obj: JSON, *, strict: bool = True, dry_run: bool = False) -> JSON:
        """POST ``obj`` to its collection; ``strict`` asks for strict field validation."""
        meta = obj.get("metadata", {})
        path = resource_path(obj["apiVersion"], obj["kind"], meta.get("namespace"))
        params = {"fieldValidation": "Strict"} if strict else {}
        if dry_run:
            params["dryRun"] = "All"
        return self.call("POST", path, body=obj, params=params)

    def get(self, path: str) -> JSON:
        return self.call("GET", path)

    def exists(self, path: str) -> bool:
        return self.send("GET", path).status_code == 200

    def delete(self, path: str, *, missing_ok: bool = True) -> None:
        response = self.send("DELETE", path)
        if response.status_code == 404 and missing_ok:
            return
        if response.status_code >= 300:
            raise ApiError("DELETE", path, response)

    def patch(self, path: str, patch: Any, *, kind: str = "merge") -> JSON:
        types = {
            "merge": "application/merge-patch+json",
            "json": "application/json-patch+json",
            "strategic": "application/strategic-merge-patch+json",
        }
        return self.call("PATCH", path, body=patch, content_type=types[kind])

    def list(self, path: str, *, limit: int = 500, **params: str) -> Iterator[JSON]:
        """Every item of a collection, page by page."""
        query = {"limit": str(limit), **params}
        while True:
            page = self.call("GET", path, params=query)
            yield from page.get("items", [])
            token = page.get("metadata", {}).get("continue")
            if not token:
                return
            query = {"limit": str(limit), "continue": token, **params}

    def wait_for(
        self,
        what: str,
        check: Callable[[], bool],
        *,
        timeout: float = 60.0,
        interval: float = 0.2,
    ) -> None:
        """Poll ``check`` until it is true; raise ``TimeoutError`` naming ``what``."""
        limit = time.monotonic() + timeout
        while not check():
            if time.monotonic() > limit:
                raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(interval)

    def ensure_namespace(self, name: str, labels: dict[str, str] | None = None) -> None:
        """Create namespace ``name`` unless it exists; wait for its default ServiceAccount
        (kube-controller-manager creates it; pods cannot be created before)."""
        try:
            self.create(
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": name, "labels": labels or {}},
                }
            )
        except ApiError as exc:
            if exc.status_code != 409:
                raise
        self.wait_for(
            f"the default ServiceAccount of namespace {name}",
            lambda: self.exists(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
            timeout=60,
        )

    def apply_documents(self, text: str, *, strict: bool = True) -> builtins.list[JSON]:
        """Create every object of a multi-document YAML (a ``List`` is unpacked)."""
        created = []
        for doc in yaml.safe_load_all(text):
            if not doc:
                continue
            items = doc.get("items", []) if doc.get("kind") == "List" else [doc]
            for item in items:
                created.append(self.create(item, strict=strict))
        return created
