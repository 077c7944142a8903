"""The container toolkit's mode, read from the GPU Operator's ClusterPolicy per release:
``spec.cdi.enabled`` defaults to true from v25.10, before it CDI needed ``enabled`` and
``default`` both; no ClusterPolicy reads as legacy."""

from __future__ import annotations

from typing import Any

import pytest

from cudasched.compat.operatorrelease import reduced
from cudasched.compat.toolkitmode import toolkit_mode_of
from cudasched.knowledge import KnowledgeBase
from cudasched.vocab.requirements import ToolkitMode
from tests.support.gpu_operator import cluster_policy


def policy(release: str | None, **cdi: bool) -> dict[str, Any]:
    made = cluster_policy(release)
    if cdi:
        made["spec"]["cdi"] = cdi
    return made


@pytest.mark.parametrize(
    ("release", "cdi", "mode", "said"),
    [
        ("v25.10.0", {}, ToolkitMode.CDI, "spec.cdi.enabled (default true) (GPU Operator 25.10)"),
        ("v26.7.0", {"enabled": True}, ToolkitMode.CDI, "spec.cdi.enabled (GPU Operator 26.7)"),
        ("v26.7.0", {"enabled": False}, ToolkitMode.LEGACY, "spec.cdi.enabled=false"),
        ("v25.3.0", {}, ToolkitMode.LEGACY, "CDI is not the default (GPU Operator 25.3"),
        ("v25.3.0", {"enabled": True}, ToolkitMode.LEGACY, "needs spec.cdi.enabled and"),
        ("v25.3.0", {"enabled": True, "default": True}, ToolkitMode.CDI, "and spec.cdi.default"),
        (None, {}, ToolkitMode.LEGACY, "release not read"),
    ],
)
def test_the_mode_per_release(
    kb: KnowledgeBase, release: str | None, cdi: dict[str, bool], mode: ToolkitMode, said: str
) -> None:
    read = toolkit_mode_of(kb, [policy(release, **cdi)])
    assert read.mode is mode and said in read.source


def test_no_cluster_policy_reads_as_legacy(kb: KnowledgeBase) -> None:
    read = toolkit_mode_of(kb, [])
    assert read.mode is ToolkitMode.LEGACY and "no GPU Operator ClusterPolicy" in read.source


def test_a_live_read_keeps_what_the_mode_needs(kb: KnowledgeBase) -> None:
    kept = reduced(policy("v26.7.0", enabled=False))
    # spec.cdi is kept beside the driver settings the planner reads, and nothing else of spec
    assert kept["spec"]["cdi"] == {"enabled": False}
    assert set(kept["spec"]) <= {"cdi", "driver"}
    assert toolkit_mode_of(kb, [kept]).mode is ToolkitMode.LEGACY
