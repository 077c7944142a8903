"""The agent following a knowledge bundle: a GPU the built-in knowledge does not know is
labelled from a bundle published later, at the next probe after the follower pulled it,
through a real registry (Debian's ``docker-registry``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from cudasched.agent.discovery import Discovery
from cudasched.agent.knowledge import FollowedCatalog
from cudasched.agent.loop import Agent
from cudasched.agent.publish import NfdFilePublisher
from cudasched.cli.knowledgesource import Following, FollowPlan
from cudasched.knowledge.bundle import builtin_bundle
from cudasched.knowledge.bundlecheck import builtin_knowledge
from cudasched.nodes.hostfacts import DriverFacts, GpuFacts
from cudasched.registry.bundles import push_bundle
from cudasched.registry.client import RegistryClient
from cudasched.vocab import labels as L
from cudasched.vocab.versions import CudaVersion, DriverVersion
from tests.support.bundles import planted
from tests.support.discovery import Outcomes
from tests.support.registry import Registry, run_registry

#: A node whose driver names its GPU but not its compute capability (``nvidia-smi``'s plain
#: table): only the knowledge can say it.
Z100 = DriverFacts(
    DriverVersion(595, 58, 3), CudaVersion(13, 2), (GpuFacts("NVIDIA Z100"),), "nvidia-smi"
)


@pytest.fixture(scope="module")
def registry() -> Iterator[Registry]:
    with run_registry() as found:
        yield found


def test_the_next_probe_labels_with_the_bundle_the_follower_pulled(
    registry: Registry, tmp_path: Path
) -> None:
    ref = f"{registry.host}/cudasched/agent-follow:stable"
    with RegistryClient(plain_http=[registry.host]) as c:
        push_bundle(c, ref, builtin_bundle())
    follower = FollowPlan(Following(ref)).follower(builtin_knowledge(), interval_seconds=3600)
    catalog = FollowedCatalog(lambda: follower.current.kb)
    path = tmp_path / "cudasched"
    agent = Agent(Discovery((Outcomes(Z100),), kb=catalog), NfdFilePublisher(path), archs=catalog)
    try:
        first = follower.check()
        before = asyncio.run(agent.step()).labels
        cut_before = catalog.truncated_product("NVIDIA Z10")
        with RegistryClient(plain_http=[registry.host]) as c:
            push_bundle(c, ref, planted(["new-gpu"], version="agent.1"))
        second = follower.check()
        after = asyncio.run(agent.step()).labels
    finally:
        follower.stop()
    assert (first.result.value, second.result.value) == ("updated", "updated")
    assert L.COMPUTE_CODE not in before and not cut_before
    assert after[L.COMPUTE_CODE] == "90" and after[L.GPU_ARCH] == "hopper"
    assert catalog.truncated_product("NVIDIA Z10"), "a prefix of a name the bundle knows"
    assert f"{L.COMPUTE_CODE}=90" in path.read_text().splitlines()
