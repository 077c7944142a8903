"""One Node read by name, and its labels merge-patched: what the node agent asks of the API
about its own node (RBAC: ``get`` and ``patch`` on ``nodes``, :mod:`cudasched.install.agent`).

The Node comes back as a plain ``dict`` like every object cudasched reads. A merge patch of
``metadata.labels`` sets the keys it names and deletes those it sets to ``None``; labels it
does not name stay as they are, so the agent never writes over anyone else's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cudasched.kube.reflector import plain_object
from cudasched.kube.resources import resource_of
from cudasched.vocab.kinds import NODE

__all__ = ["patch_node_labels", "read_node"]


async def read_node(client: Any, name: str) -> dict[str, Any]:
    """The Node ``name`` as a plain dict (the client's error when it cannot be read)."""
    return plain_object(await client.get(resource_of(NODE), name))


async def patch_node_labels(client: Any, name: str, labels: Mapping[str, str | None]) -> None:
    """Merge-patch ``metadata.labels`` of the Node ``name``: a value sets its key, ``None``
    deletes it, and keys not named are left alone."""
    from lightkube.types import PatchType

    await client.patch(
        resource_of(NODE),
        name,
        {"metadata": {"labels": dict(labels)}},
        patch_type=PatchType.MERGE,
    )
