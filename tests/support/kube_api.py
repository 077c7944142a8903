"""A Kubernetes API server for live-read tests, on kmock: it serves a set of objects the way a
real API server lists and gets them, over real HTTP.

* lists are paged: ``limit`` is honoured and a ``continue`` token returned while items remain;
* list items carry no ``kind``/``apiVersion`` (the list itself is a typed ``PodList``...);
* a kind that is not served (a CRD not installed) answers 404, as do missing objects;
* a Namespace is served for every namespace the objects are in, as a real cluster has one;
* failures on demand: any status (401, 403, 500...) for one resource or for all, and ``410
  Gone`` for the next N ``continue`` requests of a resource (an expired token).

Every request is recorded (``requests``: resource plural, namespace, query parameters).

Every answer is a ``kmock.Response`` with an explicit status: kmock keeps the status of a
``Response`` a callable returned on the reaction itself, so a 404 once would stick to every
later answer of the same reaction.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kmock as kmock_lib
import yaml

from cudasched.vocab.kinds import (
    CONTROLLERS,
    ENDPOINT_SLICE,
    GPU_OPERATOR_KINDS,
    IMAGE_FACTS,
    KINDS,
    MUTATING_WEBHOOK_CONFIGURATION,
    NAMESPACE,
    SECRET,
    SERVICE_ACCOUNT,
    Kind,
)

#: Every kind served: the watched ones, controllers, the GPU Operator's, what pull secrets are
#: read from, namespaces, what tells whether cudasched's webhook is registered and ready, and
#: the images' stored facts.
ALL_KINDS: tuple[Kind, ...] = (
    *KINDS,
    *CONTROLLERS,
    *GPU_OPERATOR_KINDS,
    SECRET,
    SERVICE_ACCOUNT,
    NAMESPACE,
    MUTATING_WEBHOOK_CONFIGURATION,
    ENDPOINT_SLICE,
    IMAGE_FACTS,
)


@dataclass
class Seen:
    """One request the server answered."""

    plural: str
    namespace: str | None
    name: str | None
    params: dict[str, str]


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    """A ``v1 Status`` body, as the API server sends with every error."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def forbidden(kind: Kind, user: str = "system:serviceaccount:ops:reader") -> dict[str, Any]:
    """The API server's own 403 for a cluster-wide list of ``kind``."""
    return status(
        403,
        "Forbidden",
        f'{kind.plural}{"." + kind.group if kind.group else ""} is forbidden: User "{user}" '
        f'cannot list resource "{kind.plural}" in API group "{kind.group}" at the cluster scope',
    )


def answer(code: int, body: dict[str, Any]) -> kmock_lib.Response:
    return kmock_lib.Response(status=code, payload=body)


EXPIRED = status(
    410,
    "Expired",
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter.",
)
UNAUTHORIZED = status(401, "Unauthorized", "Unauthorized")


@dataclass
class ClusterApi:
    """Objects served by a kmock emulator; see the module docstring."""

    server: kmock_lib.KubernetesEmulator
    objects: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # by plural
    served: set[str] = field(default_factory=set)
    failures: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    expire: dict[str, int] = field(default_factory=dict)
    requests: list[Seen] = field(default_factory=list)
    #: failures for one identity only: (bearer token, plural) -> answer
    token_failures: dict[tuple[str, str], tuple[int, dict[str, Any]]] = field(default_factory=dict)

    @classmethod
    def start(
        cls,
        server: kmock_lib.KubernetesEmulator,
        objects: Iterable[Mapping[str, Any]],
        *,
        missing: Iterable[Kind] = (),
    ) -> ClusterApi:
        """Serve ``objects`` (every declared kind is served except ``missing`` ones)."""
        absent = {k.plural for k in missing}
        api = cls(server, served={k.plural for k in ALL_KINDS} - absent)
        by_kind = {(k.api_version, k.kind): k for k in ALL_KINDS}
        used: set[str] = set()
        for obj in objects:
            kind = by_kind.get((obj.get("apiVersion"), obj.get("kind")))
            if kind is not None:
                api.objects.setdefault(kind.plural, []).append(copy.deepcopy(dict(obj)))
                if kind.namespaced:
                    used.add(str((obj.get("metadata") or {}).get("namespace") or "default"))
        listed = {o["metadata"]["name"] for o in api.objects.get(NAMESPACE.plural, [])}
        api.objects.setdefault(NAMESPACE.plural, []).extend(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            for name in sorted(used - listed)
        )
        server[server.action.LIST] << api._list
        server[server.action.FETCH] << api._get
        return api

    def fail(self, kind: Kind | None, code: int, body: dict[str, Any]) -> None:
        """Answer every request for ``kind`` (``None``: for anything) with ``code``."""
        self.failures[kind.plural if kind else "*"] = (code, body)

    def fail_for_token(self, token: str, kind: Kind, code: int, body: dict[str, Any]) -> None:
        """Answer requests for ``kind`` made with bearer ``token`` with ``code`` (another
        identity, with other permissions, on the same server)."""
        self.token_failures[(token, kind.plural)] = (code, body)

    def lists_of(self, kind: Kind) -> list[Seen]:
        return [r for r in self.requests if r.plural == kind.plural and r.name is None]

    # ------------------------------------------------------------------ handlers

    def _kind(self, request: kmock_lib.Request) -> Kind | None:
        resource = request.resource
        for kind in ALL_KINDS:
            if resource is not None and (kind.group, kind.version, kind.plural) == (
                resource.group,
                resource.version,
                resource.plural,
            ):
                return kind
        return None

    def _failure(
        self, kind: Kind | None, request: kmock_lib.Request | None = None
    ) -> kmock_lib.Response | None:
        if request is not None and kind is not None and self.token_failures:
            auth = str(request.headers.get("Authorization", ""))
            token = auth.removeprefix("Bearer ").strip()
            if (token, kind.plural) in self.token_failures:
                code, body = self.token_failures[(token, kind.plural)]
                return answer(code, body)
        for key in (kind.plural if kind else "", "*"):
            if key in self.failures:
                code, body = self.failures[key]
                return answer(code, body)
        return None

    def _namespace(self, request: kmock_lib.Request) -> Any:
        """``GET /api/v1/namespaces/NAME``, which kmock reads as a request in namespace NAME
        for no resource."""
        self.requests.append(Seen(NAMESPACE.plural, None, request.namespace, {}))
        failed = self._failure(NAMESPACE, request)
        if failed is not None:
            return failed
        for obj in self.objects.get(NAMESPACE.plural, []):
            if obj["metadata"]["name"] == request.namespace:
                return answer(200, obj)
        return answer(404, status(404, "NotFound", f'namespaces "{request.namespace}" not found'))

    def _list(self, request: kmock_lib.Request) -> Any:
        if _namespace_itself(request):
            return self._namespace(request)
        kind = self._kind(request)
        params = {k: str(v) for k, v in request.params.items()}
        self.requests.append(Seen(kind.plural if kind else "?", request.namespace, None, params))
        failed = self._failure(kind, request)
        if failed is not None:
            return failed
        if kind is None or kind.plural not in self.served:
            return answer(
                404, status(404, "NotFound", "the server could not find the requested resource")
            )
        token = params.get("continue")
        if token and self.expire.get(kind.plural, 0) > 0:
            self.expire[kind.plural] -= 1
            return answer(410, EXPIRED)
        items = [
            o
            for o in self.objects.get(kind.plural, [])
            if request.namespace is None
            or (o.get("metadata") or {}).get("namespace") == request.namespace
        ]
        start = int(token.removeprefix(f"{kind.plural}:")) if token else 0
        limit = int(params["limit"]) if "limit" in params else len(items)
        page = items[start : start + limit]
        meta: dict[str, Any] = {"resourceVersion": "4242"}
        if start + limit < len(items):
            meta["continue"] = f"{kind.plural}:{start + limit}"
            meta["remainingItemCount"] = len(items) - start - limit
        body = {
            "kind": f"{kind.kind}List",
            "apiVersion": kind.api_version,
            "metadata": meta,
            "items": [
                {k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in page
            ],
        }
        return answer(200, body)

    def _get(self, request: kmock_lib.Request) -> Any:
        if _namespace_itself(request):
            return self._namespace(request)
        kind = self._kind(request)
        self.requests.append(
            Seen(kind.plural if kind else "?", request.namespace, request.name, {})
        )
        failed = self._failure(kind, request)
        if failed is not None:
            return failed
        for obj in self.objects.get(kind.plural if kind else "", []):
            meta = obj.get("metadata") or {}
            if meta.get("name") == request.name and meta.get("namespace") == request.namespace:
                return answer(200, obj)
        return answer(404, status(404, "NotFound", f'"{request.name}" not found'))


def _namespace_itself(request: kmock_lib.Request) -> bool:
    """``GET /api/v1/namespaces/NAME``: kmock reads it as the namespace NAME of no resource."""
    resource = request.resource
    plural = resource.plural if resource is not None else None
    return plural is None and bool(request.namespace) and request.name is None


def write_kubeconfig(
    directory: Path, url: Any, *, namespace: str = "default", token: str = "t0ken"
) -> Path:
    """A kubeconfig whose current context points at ``url`` with a bearer token."""
    path = directory / "kubeconfig"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "mock", "cluster": {"server": str(url).rstrip("/")}}],
        "users": [{"name": "reader", "user": {"token": token}}],
        "contexts": [
            {
                "name": "mock",
                "context": {"cluster": "mock", "user": "reader", "namespace": namespace},
            }
        ],
        "current-context": "mock",
    }
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path
