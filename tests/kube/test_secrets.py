"""One Secret or ServiceAccount got by name: a name Kubernetes could not have given (it would be
a URL path segment, where ``..`` or ``/`` reaches another namespace's object) is refused before
any request; a missing one is ``None``; other failures name the object and the status only."""

from __future__ import annotations

from typing import Any

import pytest

from cudasched.kube.secrets import read_secret, read_service_account
from cudasched.vocab.errors import InputError
from tests.support.apierror import ApiError


class _Client:
    """Records the gets it is asked for, answering ``found`` (or raising it)."""

    def __init__(self, found: Any) -> None:
        self.found = found
        self.asked: list[tuple[str, str | None]] = []

    async def get(self, resource: Any, name: str, *, namespace: str | None = None) -> Any:
        self.asked.append((name, namespace))
        if isinstance(self.found, BaseException):
            raise self.found
        return self.found


@pytest.mark.parametrize(
    ("namespace", "name", "said"),
    [
        ("../kube-system", "pull", "not a DNS label"),
        ("ML", "pull", "not a DNS label"),
        ("ml\n", "pull", "not a DNS label"),
        ("ml", "../../secrets/x", "not a DNS-1123 subdomain"),
        ("ml", "a/b", "not a DNS-1123 subdomain"),
        ("ml", "x" * 254, "not a DNS-1123 subdomain"),
    ],
)
async def test_a_name_kubernetes_could_not_give_is_refused_before_any_request(
    namespace: str, name: str, said: str
) -> None:
    client = _Client({})
    with pytest.raises(InputError, match=said):
        await read_secret(client, namespace, name)
    assert client.asked == []


async def test_a_secret_is_read_as_a_plain_dict() -> None:
    client = _Client({"metadata": {"name": "pull", "managedFields": [{}]}, "type": "x"})
    found = await read_secret(client, "ml", "registry.example.com-pull")
    assert found == {"metadata": {"name": "pull"}, "type": "x"}
    assert client.asked == [("registry.example.com-pull", "ml")]


async def test_a_missing_object_is_none_and_a_refusal_names_the_object() -> None:
    assert await read_service_account(_Client(ApiError(404)), "ml", "default") is None
    with pytest.raises(InputError) as err:
        await read_service_account(_Client(ApiError(403)), "ml", "default")
    assert str(err.value) == "cannot get ServiceAccount ml/default: HTTP 403"
