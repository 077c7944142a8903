"""A namespace's ServingRuntimes and the cluster's ClusterServingRuntimes listed now: plain dicts
that carry their kind (list items arrive without it), a KServe CRD not installed read as none,
other failures named by kind and status, and a namespace Kubernetes could not have given refused
before any request."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from cudasched.kube.runtimes import read_runtimes
from cudasched.vocab.errors import InputError
from tests.support.apierror import ApiError
from tests.support.listing import listed


class _Client:
    """Lists what ``answers`` holds per plural (an exception is raised), recording each list."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, str | None]] = []

    def list(self, resource: Any, *, namespace: str | None = None) -> AsyncIterator[Any]:
        plural = resource._api_info.plural
        self.asked.append((plural, namespace))
        return listed(self.answers[plural])


def _runtime(name: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "managedFields": [{"manager": "kubectl"}]}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"metadata": meta, "spec": {"containers": [{"name": "kserve-container"}]}}


async def test_both_kinds_are_listed_as_plain_objects_with_their_kind() -> None:
    client = _Client(
        {
            "servingruntimes": [_runtime("triton", "ml")],
            "clusterservingruntimes": [_runtime("aml-triton-cuda-12.1")],
        }
    )
    serving, cluster = await read_runtimes(client, "ml")
    assert sorted(client.asked, key=str) == [
        ("clusterservingruntimes", None),
        ("servingruntimes", "ml"),
    ]
    assert [(o["kind"], o["apiVersion"], o["metadata"]) for o in serving] == [
        ("ServingRuntime", "serving.kserve.io/v1alpha1", {"name": "triton", "namespace": "ml"})
    ]
    assert [(o["kind"], o["metadata"]["name"]) for o in cluster] == [
        ("ClusterServingRuntime", "aml-triton-cuda-12.1")
    ]


async def test_a_crd_not_installed_reads_as_none_and_other_failures_name_the_kind() -> None:
    absent = _Client({"servingruntimes": ApiError(404), "clusterservingruntimes": []})
    assert await read_runtimes(absent, "ml") == ([], [])
    denied = _Client({"servingruntimes": [], "clusterservingruntimes": ApiError(403)})
    with pytest.raises(InputError, match="cannot list clusterservingruntimes: HTTP 403"):
        await read_runtimes(denied, "ml")


async def test_a_namespace_kubernetes_could_not_give_is_refused_before_any_request() -> None:
    client = _Client({})
    with pytest.raises(InputError, match="not a DNS label"):
        await read_runtimes(client, "../kube-system")
    assert client.asked == []
