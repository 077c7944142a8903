"""``operations.audit.lifecycle``: the audit reports pools on ended, legacy and soon-ending
driver branches, judged on the audit's date, one finding per pool named as plan-drivers names
it."""

from __future__ import annotations

from datetime import date

from cudasched.cluster.fleet import Fleet
from cudasched.cluster.snapshot import bundled_snapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.images import ImageTable
from cudasched.operations.audit import audit
from cudasched.operations.pools import node_pools
from tests.support.planning_cluster import cluster, gpu_node

TODAY = date(2026, 12, 1)


def _lifecycle(report: object) -> list[tuple[str, str, str]]:
    return [
        (f.code, f.object, f.message)
        for f in report.findings  # type: ignore[attr-defined]
        if f.code.startswith("driver-branch-")
    ]


def test_the_sample_cluster_runs_ended_and_legacy_branches(kb: KnowledgeBase) -> None:
    snapshot = bundled_snapshot()
    fleet = Fleet.from_snapshot(snapshot, kb)
    report = audit(snapshot, fleet, ImageTable.builtin(kb), today=TODAY)
    found = _lifecycle(report)
    pools = {p.name: p for p in node_pools(snapshot, fleet)}
    ended = [o for c, o, _ in found if c == "driver-branch-ended"]
    legacy = [o for c, o, _ in found if c == "driver-branch-legacy"]
    # 15 of the 20 GPU nodes run an ended branch (R535, R550, R570), 4 the legacy R470.
    assert sum(len(pools[o.removeprefix("Pool/")].nodes) for o in ended) == 15
    assert sum(len(pools[o.removeprefix("Pool/")].nodes) for o in legacy) == 4
    assert "Pool/k80-r470-ubuntu20.04" in legacy
    k80 = next(f for f in report.findings if f.object == "Pool/k80-r470-ubuntu20.04")
    assert k80.fix is not None and "Kepler GPUs end at R470" in k80.fix
    # The B200 on R580 runs a branch supported until 2028-06: nothing to say.
    assert not any("b200-r580" in o for _, o, _ in found)
    # Without a date the audit judges no lifecycle (as before).
    assert _lifecycle(audit(snapshot, fleet, ImageTable.builtin(kb))) == []


def test_a_branch_ending_within_the_window_is_reported(kb: KnowledgeBase) -> None:
    snapshot = cluster(gpu_node("h100", "NVIDIA-H100-80GB-HBM3", "595.91.07"))
    fleet = Fleet.from_snapshot(snapshot, kb)
    images = ImageTable.builtin(kb)
    [ending] = _lifecycle(audit(snapshot, fleet, images, today=TODAY))
    assert ending[0] == "driver-branch-ending" and "R595" in ending[2]
    assert _lifecycle(audit(snapshot, fleet, images, today=TODAY, min_support_months=3)) == []
    # Judged on the date: in April 2027 R595 has ended.
    [later] = _lifecycle(audit(snapshot, fleet, images, today=date(2027, 4, 1)))
    assert later[0] == "driver-branch-ended"
