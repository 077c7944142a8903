"""Pull secrets as credentials: the two Secret types the kubelet reads, everything else
ignored, bad data refused without showing it; the reader keeps a namespace's keychain for its
TTL only and reads by name in the scope's namespace (a Kubernetes API on kmock)."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import kmock as kmock_lib
import orjson
import pytest

from cudasched.knowledge.imageconfig import PullScope
from cudasched.kube.client import make_client
from cudasched.registry.auth import Credentials
from cudasched.registry.pullsecrets import PullSecretReader, keychain_of_secret
from cudasched.vocab.errors import InputError
from tests.support.kube_api import ClusterApi, write_kubeconfig

AUTH = base64.b64encode(b"reader:t0ps3cret").decode()


def secret(kind: str, key: str, doc: object, name: str = "regcred") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "ml"},
        "type": kind,
        "data": {key: base64.b64encode(orjson.dumps(doc)).decode()},
    }


def test_the_kubelets_two_pull_secret_types_and_nothing_else() -> None:
    modern = secret(
        "kubernetes.io/dockerconfigjson",
        ".dockerconfigjson",
        {"auths": {"harbor.corp": {"auth": AUTH}}},
    )
    legacy = secret(
        "kubernetes.io/dockercfg", ".dockercfg", {"https://harbor.corp": {"auth": AUTH}}
    )
    opaque = secret("Opaque", ".dockerconfigjson", {"auths": {"harbor.corp": {"auth": AUTH}}})
    found = [keychain_of_secret(s, "pull secret ml/regcred") for s in (modern, legacy, opaque)]
    creds = [k.get("harbor.corp") if k is not None else None for k in found]
    assert creds == [Credentials("reader", "t0ps3cret")] * 2 + [None]


def test_bad_data_is_refused_without_showing_it() -> None:
    bad = secret("kubernetes.io/dockerconfigjson", ".dockerconfigjson", {})
    bad["data"][".dockerconfigjson"] = "not base64 t0ps3cret!"
    with pytest.raises(InputError) as refused:
        keychain_of_secret(bad, "pull secret ml/regcred")
    no_auths = secret("kubernetes.io/dockerconfigjson", ".dockerconfigjson", {"x": AUTH})
    with pytest.raises(InputError) as missing:
        keychain_of_secret(no_auths, "pull secret ml/regcred")
    messages = [str(refused.value), str(missing.value)]
    assert all("pull secret ml/regcred" in m for m in messages)
    assert [m for m in messages if "t0ps3cret" in m or AUTH in m] == []


def test_an_auth_that_is_not_ascii_is_refused_as_bad_data() -> None:
    """``base64.b64decode`` refuses a non-ASCII string with a plain ValueError, not the
    binascii.Error of bad base64: it must still be the InputError that names the Secret (the
    reader counts it as failed and keeps the empty keychain), not an exception that escapes
    the reader."""
    doc = {"auths": {"harbor.corp": {"auth": "t0ps3crét"}}}
    bad = secret("kubernetes.io/dockerconfigjson", ".dockerconfigjson", doc)
    with pytest.raises(InputError) as refused:
        keychain_of_secret(bad, "pull secret ml/regcred")
    message = str(refused.value)
    assert "pull secret ml/regcred" in message and "t0ps3cr" not in message


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_namespaces_keychain_is_kept_for_its_ttl_only(
    kmock: kmock_lib.KubernetesEmulator, tmp_path: Path
) -> None:
    doc = {"auths": {"harbor.corp": {"auth": AUTH}}}
    api = ClusterApi.start(
        kmock, [secret("kubernetes.io/dockerconfigjson", ".dockerconfigjson", doc)]
    )
    kubeconfig = write_kubeconfig(tmp_path, kmock.url)
    clock = Clock()
    reader = PullSecretReader(
        lambda: make_client(kubeconfig=kubeconfig), ttl_seconds=60, clock=clock
    )
    scope = PullScope("ml", ("regcred",))

    def reads() -> list[bool]:
        seen = [reader.keychain_for(scope).get("harbor.corp") is not None]
        clock.now += 59
        seen.append(reader.keychain_for(scope).get("harbor.corp") is not None)
        clock.now += 2
        seen.append(reader.keychain_for(scope).get("harbor.corp") is not None)
        # The same name in another namespace is that namespace's Secret (there is none).
        seen.append(reader.keychain_for(PullScope("web", ("regcred",))).get("harbor.corp") is None)
        return seen

    try:
        assert await asyncio.to_thread(reads) == [True, True, True, True]
    finally:
        await asyncio.to_thread(reader.close)
    gets = [(r.namespace, r.name) for r in api.requests if r.plural == "secrets"]
    assert gets == [("ml", "regcred"), ("ml", "regcred"), ("web", "regcred")]


async def test_a_secret_name_cannot_reach_another_namespace(
    kmock: kmock_lib.KubernetesEmulator, tmp_path: Path
) -> None:
    """Names a workload writes become URL path segments: ``..`` (or ``/``, ``?``) in one must
    not turn a read in the workload's namespace into a read of another namespace's Secret
    (HTTP clients remove dot segments before sending)."""
    doc = {"auths": {"harbor.corp": {"auth": AUTH}}}
    kept = secret("kubernetes.io/dockerconfigjson", ".dockerconfigjson", doc, name="registry")
    kept["metadata"]["namespace"] = "kube-system"
    robot = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "robot", "namespace": "kube-system"},
        "imagePullSecrets": [{"name": "registry"}],
    }
    api = ClusterApi.start(kmock, [kept, robot])
    kubeconfig = write_kubeconfig(tmp_path, kmock.url)
    reader = PullSecretReader(lambda: make_client(kubeconfig=kubeconfig))
    scopes = [
        PullScope("ml", ("../../kube-system/secrets/registry",)),
        PullScope("ml", ("..%2F..%2Fkube-system%2Fsecrets%2Fregistry",)),
        PullScope("ml", (), "../../kube-system/serviceaccounts/robot"),
    ]
    try:
        found = await asyncio.to_thread(
            lambda: [reader.keychain_for(s).get("harbor.corp") for s in scopes]
        )
    finally:
        await asyncio.to_thread(reader.close)
    assert found == [None, None, None]
    assert [r for r in api.requests if r.namespace != "ml"] == []


async def test_one_bad_secret_name_does_not_cost_the_others(
    kmock: kmock_lib.KubernetesEmulator, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The kubelet gets each named pull secret on its own and skips one it cannot get
    (kubernetes/kubernetes pkg/kubelet/kubelet_pods.go ``getPullSecretsForPod``: it logs
    "Unable to retrieve pull secret" and goes on with the rest). So does the reader: a name
    no Secret could have (refused before any request) and a Secret that does not exist are
    skipped, and the valid Secret named after them still gives its credentials."""
    doc = {"auths": {"harbor.corp": {"auth": AUTH}}}
    api = ClusterApi.start(
        kmock, [secret("kubernetes.io/dockerconfigjson", ".dockerconfigjson", doc)]
    )
    kubeconfig = write_kubeconfig(tmp_path, kmock.url)
    reader = PullSecretReader(lambda: make_client(kubeconfig=kubeconfig))
    scope = PullScope("ml", ("Bad_Name", "missing", "regcred"))
    try:
        found = await asyncio.to_thread(lambda: reader.keychain_for(scope).get("harbor.corp"))
    finally:
        await asyncio.to_thread(reader.close)
    assert found == Credentials("reader", "t0ps3cret")
    gets = [(r.namespace, r.name) for r in api.requests if r.plural == "secrets"]
    assert gets == [("ml", "missing"), ("ml", "regcred")]
    assert [m for m in caplog.messages if "Bad_Name" in m and "DNS-1123" in m] != []
