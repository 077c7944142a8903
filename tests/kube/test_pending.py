"""The unbound pods of one namespace listed now: the API server is asked for them with the field
selector ``spec.nodeName=`` (so it leaves out every bound pod), in that namespace only; answers
are plain dicts; a failure is named by its status, and a namespace Kubernetes could not have
given is refused before any request."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from cudasched.kube.pending import list_unbound_pods
from cudasched.vocab.errors import InputError
from tests.support.apierror import ApiError
from tests.support.builders import pod
from tests.support.listing import listed


class _Client:
    """Answers every list with ``found`` (an exception is raised), recording what was asked."""

    def __init__(self, found: Any) -> None:
        self.found = found
        self.asked: list[tuple[str, str | None, Any]] = []

    def list(
        self, resource: Any, *, namespace: str | None = None, fields: Any = None
    ) -> AsyncIterator[Any]:
        self.asked.append((resource._api_info.plural, namespace, fields))
        return listed(self.found)


async def test_only_unbound_pods_of_the_namespace_are_asked_for() -> None:
    stored = pod("train-x1", "ml")
    stored["metadata"]["managedFields"] = [{"manager": "kube-controller-manager"}]
    client = _Client([stored])
    listed = await list_unbound_pods(client, "ml")
    assert client.asked == [("pods", "ml", {"spec.nodeName": ""})]
    assert [p["metadata"]["name"] for p in listed] == ["train-x1"]
    assert "managedFields" not in listed[0]["metadata"]


async def test_a_refused_list_is_named_by_its_status() -> None:
    with pytest.raises(InputError, match="cannot list pods in ml: HTTP 403"):
        await list_unbound_pods(_Client(ApiError(403)), "ml")


async def test_a_namespace_kubernetes_could_not_give_is_never_asked() -> None:
    client = _Client([])
    with pytest.raises(InputError, match="not a DNS label"):
        await list_unbound_pods(client, "../nodes")
    assert client.asked == []
