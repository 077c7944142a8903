"""The pod a ResourceClaim was made for, read by name: a plain dict carrying its kind, ``None``
when it is gone (404), other failures named by status, and a name Kubernetes could not have
given refused before any request."""

from __future__ import annotations

from typing import Any

import pytest

from cudasched.kube.ownerpod import read_owner_pod
from cudasched.vocab.errors import InputError
from tests.support.apierror import ApiError


class _Client:
    """Answers every get with ``answer`` (an exception is raised), recording each get."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.asked: list[tuple[str, str, str]] = []

    async def get(self, resource: Any, name: str, *, namespace: str) -> Any:
        self.asked.append((resource._api_info.plural, namespace, name))
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


async def test_the_pod_is_read_by_name_as_a_plain_object_with_its_kind() -> None:
    client = _Client({"metadata": {"name": "llm", "namespace": "ml"}, "spec": {}})
    pod = await read_owner_pod(client, "ml", "llm")
    assert pod is not None and (pod["apiVersion"], pod["kind"]) == ("v1", "Pod")
    assert client.asked == [("pods", "ml", "llm")]


async def test_a_gone_pod_is_none_and_other_failures_are_named() -> None:
    assert await read_owner_pod(_Client(ApiError(404)), "ml", "llm") is None
    with pytest.raises(InputError, match="cannot read pod ml/llm: HTTP 403"):
        await read_owner_pod(_Client(ApiError(403)), "ml", "llm")


async def test_a_name_kubernetes_could_not_have_given_is_refused_unasked() -> None:
    client = _Client({})
    with pytest.raises(InputError, match="not a valid name"):
        await read_owner_pod(client, "ml", "../nodes")
    assert client.asked == []
