"""The agent's own Node through the API (the kmock emulator, the real lightkube client): read
as a plain dict, and its labels merge-patched, keys set to ``None`` deleted, others untouched."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import kmock as kmock_lib
import pytest

from cudasched.kube.client import make_client
from cudasched.kube.nodes import patch_node_labels, read_node

NODES = kmock_lib.resource("v1/nodes")
NAME = "gpu-node-1"


@pytest.fixture
async def client(kmock: Any) -> AsyncIterator[Any]:
    kmock.objects[NODES, None, NAME] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NAME,
            "uid": "3f0c1c58-node-uid",
            "labels": {"team": "inference", "cudasched.io/driver": "535.104.05"},
            "managedFields": [{"manager": "kubelet"}],
        },
        "status": {"nodeInfo": {"kernelVersion": "6.8.0-1015-aws"}},
    }
    c = make_client(server=str(kmock.url).rstrip("/"))
    yield c
    await c.close()


async def test_a_node_is_read_as_a_plain_dict(client: Any) -> None:
    node = await read_node(client, NAME)
    assert type(node) is dict
    assert node["metadata"]["uid"] == "3f0c1c58-node-uid"
    assert node["status"]["nodeInfo"]["kernelVersion"] == "6.8.0-1015-aws"
    assert "managedFields" not in node["metadata"]


async def test_labels_are_merge_patched(kmock: Any, client: Any) -> None:
    await patch_node_labels(
        client, NAME, {"cudasched.io/driver": None, "cudasched.io/cuda": "12.4"}
    )
    (patch,) = [r for r in kmock if str(r.method).lower().endswith("patch")]
    assert "merge-patch+json" in patch.headers["Content-Type"]
    labels = kmock.objects[NODES, None, NAME]["metadata"]["labels"]
    assert dict(labels) == {"team": "inference", "cudasched.io/cuda": "12.4"}
