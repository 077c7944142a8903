"""Driver advice on every cluster shape people run (issue 28): GKE (COS and Ubuntu pools), AKS
(its own driver and the operator's), EKS (Amazon Linux 2, AL2023, Bottlerocket, self-managed
Ubuntu), OpenShift (RHCOS 4.18 and 4.20 with a RHEL compute node), Grace/arm64 and an
on-premises fleet with workstation boards (``examples/clusters``, built from the label sets
``tests/support/cluster_shapes.py`` documents). On each:

* no NVIDIADriver selects a node the operator's driver DaemonSet does not reach;
* no runbook step cordons or drains a node whose driver the plan does not change;
* every driver image named exists for the node's OS and CPU architecture;
* every fix names nodes the workload could use and a branch one can install;
* ``check``/``explain``, ``audit``, ``recommend-driver`` and ``plan-drivers`` agree.
"""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from cudasched.cli.explain import explain_snapshot
from cudasched.cluster.fleet import Fleet
from cudasched.cluster.snapshot import ClusterSnapshot, load_snapshot
from cudasched.compat.branches import LifecycleState, data_date, lifecycle
from cudasched.compat.containers import container_release, precompiled_problem
from cudasched.compat.drivermanager import driver_manager
from cudasched.compat.operatorrelease import operator_of_cluster
from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.images import ImageTable
from cudasched.operations.audit import audit
from cudasched.operations.drivers.plan import DriverPlan
from cudasched.operations.drivers.planning import plan_drivers
from cudasched.operations.drivers.recommend import recommend
from cudasched.operations.drivers.runbook import render_script
from cudasched.operations.fit import usable
from cudasched.operations.pools import node_pools, snapshot_drivers
from cudasched.vocab.labels import LabelScheme
from cudasched.vocab.objects import labels_of, name_of
from cudasched.vocab.requirements import Policy
from cudasched.vocab.versions import CudaVersion
from tests.support import cluster_shapes as shapes

ROOT = Path(__file__).resolve().parents[1]
TODAY = date(2026, 12, 1)
NAMES = sorted(shapes.SHAPES)


def _load(name: str) -> ClusterSnapshot:
    return load_snapshot(ROOT / "examples" / "clusters" / f"{name}.yaml")


def _plan(snapshot: ClusterSnapshot, kb: KnowledgeBase, **options: Any) -> DriverPlan:
    """The plan as ``plan-drivers`` makes it: for the release the cluster shows."""
    read = operator_of_cluster(kb, snapshot.other, snapshot.nvidia_drivers)
    options.setdefault("operator", read.version if read is not None else kb.operator.newest)
    fleet = Fleet.from_snapshot(snapshot, kb)
    return plan_drivers(snapshot, fleet, ImageTable.builtin(kb), today=TODAY, **options)


@pytest.mark.parametrize("name", NAMES)
def test_the_shape_files_are_what_the_builder_writes(name: str) -> None:
    """The examples are the label sets ``tests/support/cluster_shapes.py`` documents
    (regenerate with ``python -m tests.support.cluster_shapes``)."""
    written = (ROOT / "examples" / "clusters" / f"{name}.yaml").read_text(encoding="utf-8")
    assert written == shapes.shape(name)


@pytest.mark.parametrize("name", NAMES)
def test_no_nvidiadriver_selects_a_node_the_operator_does_not_reach(
    name: str, kb: KnowledgeBase
) -> None:
    snapshot = _load(name)
    plan = _plan(snapshot, kb)
    evidence = snapshot_drivers(snapshot, Fleet.from_snapshot(snapshot, kb))
    nodes = {name_of(n): n for n in snapshot.nodes}
    managers = {
        node: driver_manager(kb, labels_of(nodes[node]), evidence, node)
        for node in plan.node_labels
    }
    assert [n for n, m in managers.items() if not m.operator] == []
    # Every GPU node the operator does not reach gets an action instead of an object.
    hosts = {n for d in plan.decisions if not d.operator for n in d.pool.nodes}
    assert not hosts & set(plan.node_labels)


@pytest.mark.parametrize("name", NAMES)
def test_the_runbook_drains_only_nodes_whose_driver_changes(name: str, kb: KnowledgeBase) -> None:
    plan = _plan(_load(name), kb)
    script = render_script(plan, name)
    cordoned = {
        node
        for line in script.splitlines()
        if "kubectl cordon" in line or 'drain_gpu_pods "${node}"' in line
        for node in re.findall(r"for node in (.*?); do", line)[0].split()
    }
    changing = {n for d in plan.decisions if d.changes for n in d.pool.nodes}
    assert cordoned <= changing
    assert all(d.operator for d in plan.decisions if set(d.pool.nodes) & cordoned)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("precompiled", [False, True])
def test_every_image_named_exists_for_the_nodes_os_and_architecture(
    name: str, precompiled: bool, kb: KnowledgeBase
) -> None:
    plan = _plan(_load(name), kb, precompiled=precompiled)
    named = [d for d in plan.decisions if d.image is not None]
    for d in named:
        opt = d.chosen
        assert opt is not None
        if opt.precompiled:
            assert (
                precompiled_problem(kb, d.pool.os, d.pool.kernel, opt.branch, d.pool.arch) is None
            )
            continue
        found = container_release(kb, opt.branch, d.pool.os, TODAY, plan.operator, d.pool.arch)
        assert not isinstance(found, str), (d.pool.name, found)
        assert found >= opt.release, d.pool.name
    assert named or not plan.objects


_INSTALL = re.compile(r"install R(\d+) >= (\S+)")


@pytest.mark.parametrize("name", NAMES)
def test_every_fix_names_usable_nodes_and_an_installable_branch(
    name: str, kb: KnowledgeBase
) -> None:
    snapshot = _load(name)
    fleet = Fleet.from_snapshot(snapshot, kb)
    report = audit(snapshot, fleet, ImageTable.builtin(kb), today=TODAY)
    fixes = [f for f in report.findings if f.fix]
    pods = {f"Pod/{p['metadata'].get('namespace')}/{name_of(p)}": p for p in snapshot.pods}
    branches = [int(b) for f in fixes for b, _ in _INSTALL.findall(f.fix or "")]
    assert all(lifecycle(kb, b, TODAY).state is not LifecycleState.END_OF_LIFE for b in branches)
    named: list[tuple[str, str | None]] = []
    for f in fixes:
        recreate = re.search(r"can run it and that its own .*? \((.*?)\)", f.fix or "")
        if recreate is not None and f.object in pods:
            allowed = usable(pods[f.object]["spec"], snapshot.nodes)
            named += [(n.strip(), allowed[n.strip()]) for n in recreate.group(1).split(",")]
    assert [n for n, why in named if why is not None] == []
    assert fixes, name


def _cudas(plan: DriverPlan, served: frozenset[int]) -> list[CudaVersion]:
    """The CUDA versions of the plan's demand groups in ``served``."""
    found = {
        g.requirement.cuda.release
        for g in plan.demand.groups
        if g.number in served and g.requirement.cuda is not None
    }
    return sorted(found)


@pytest.mark.parametrize("name", NAMES)
def test_recommend_driver_agrees_with_the_plan_for_every_pool_that_moves(
    name: str, kb: KnowledgeBase
) -> None:
    """For a pool the plan moves, recommend-driver asked for its GPU, OS, architecture, kernel
    and installer and the CUDA versions of the workloads the plan's choice runs there answers
    the same branch, release and image: one rule (the most workloads, then a supported
    long-term branch, then the newest)."""
    plan = _plan(_load(name), kb)
    moved = [d for d in plan.decisions if d.changes and d.chosen is not None]
    answers = []
    for d in moved:
        assert d.chosen is not None
        pool = d.pool
        answer = recommend(
            kb,
            (pool.gpu or "").split("/")[0],
            _cudas(plan, d.chosen.serves),
            today=TODAY,
            os=pool.os,
            kernel=pool.kernel,
            operator=plan.operator if d.operator else None,
            arch=pool.arch,
        )
        answers.append(answer)
        assert (answer.branch, answer.version) == (d.chosen.branch, d.chosen.release), pool.name
        assert answer.image == d.image, pool.name
    assert len(answers) == len(moved) and moved


@pytest.mark.parametrize("name", NAMES)
def test_check_explain_and_audit_fixes_name_the_branch_recommend_driver_names(
    name: str, kb: KnowledgeBase
) -> None:
    """A driver-too-old fix (check and explain share it) names the branch recommend-driver
    gives for that GPU and CUDA on the same day; the audit's fixes name branches of the same
    rule."""
    snapshot = _load(name)
    fleet = Fleet.from_snapshot(snapshot, kb)
    images = ImageTable.builtin(kb)
    workloads = [*snapshot.pods, *snapshot.inference_services]
    explained = explain_snapshot(workloads, fleet, Policy.STRICT, LabelScheme.AUTO, images)
    gpus = {n: p.gpu for p in node_pools(snapshot, fleet) for n in p.nodes}
    named: set[tuple[str, CudaVersion, int]] = set()
    for item in explained:
        req = item.explanation.requirement
        if req is None or req.cuda is None:
            continue
        for node in item.explanation.nodes:
            blocking = [r for r in node.reasons if r.blocking]
            # A driver fix is the whole answer only where the driver is all the node lacks.
            if [r.code for r in blocking] != ["driver-too-old"]:
                continue
            found = _INSTALL.search(blocking[0].fix or "")
            if found is not None:
                gpu = (gpus.get(node.node) or "").split("/")[0]
                named.add((gpu, req.cuda.release, int(found.group(1))))
    day = data_date(kb)
    said = {(g, c, b, recommend(kb, g, [c], today=day).branch) for g, c, b in named}
    assert [s for s in said if s[2] != s[3]] == []
    report = audit(snapshot, fleet, images, today=day)
    audit_branches = {int(b) for f in report.findings for b, _ in _INSTALL.findall(f.fix or "")}
    assert audit_branches <= {b for *_, b in said}
    assert named, name


def test_a_pin_is_drained_where_the_operator_reinstalls_the_driver(kb: KnowledgeBase) -> None:
    """Before v26.3 a restarting driver pod reinstalls the driver: a re-owned pin is drained;
    from v26.3 it keeps the loaded driver and is not."""
    snapshot = _load("onprem")
    for version, drained in (("25.10", True), ("26.7", False)):
        plan = _plan(snapshot, kb, operator=kb.operator.version(version))
        pins = {n for d in plan.decisions if d.reown for n in d.pool.nodes}
        script = render_script(plan, "onprem")
        cordon = [line for line in script.splitlines() if "kubectl cordon" in line]
        touched = {n for line in cordon for n in line.split("; do")[0].split()[3:]}
        assert pins and (pins <= touched) is drained and (not pins & touched) is not drained
