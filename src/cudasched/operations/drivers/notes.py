"""The notes and warnings that close a driver plan: per pool (lifecycle, support scope, OS, pins
of unpublished tags, assumed operator nodes: :func:`pool_warnings`), for the cluster
(:func:`cluster_warnings`: a default object that cannot drive a pool's GPUs, Amazon Linux 2 nodes
beside other OSes) and for the plan as a whole (NVIDIADriver mode, said in Helm's or OLM's words,
the fields the target operator version accepts, the rollout, labels, the default object,
replaced objects, host pools, OpenShift nodes the operator skips: :func:`plan_notes`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import date
from typing import TYPE_CHECKING, Any

from cudasched.compat.branches import (
    LEGACY_BRANCHES,
    LifecycleState,
    months_left,
)
from cudasched.compat.containers import (
    container_release,
    image_os_tag,
    operator_os_problem,
    scope_problem,
)
from cudasched.compat.drivermanager import OPENSHIFT_SKIPPED, group_noun
from cudasched.nodes.autoscaling import KARPENTER_NODEPOOL_LABEL
from cudasched.operations.drivers.nvidiadriver import (
    DriverObject,
    Replacement,
)
from cudasched.operations.drivers.plan import (
    PoolDecision,
)
from cudasched.operations.drivers.planoptions import (
    Option,
)
from cudasched.vocab import labels as L
from cudasched.vocab.objects import labels_of, name_of

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.knowledge.operator import OperatorVersion
    from cudasched.operations.pools import Pool

__all__ = ["cluster_warnings", "label_homes", "plan_notes", "pool_warnings"]


def pool_warnings(
    decisions: list[PoolDecision],
    kb: KnowledgeBase,
    op: OperatorVersion,
    today: date,
    min_support_months: int,
    alternatives: Mapping[str, list[Option]],
    total: int,
) -> list[str]:
    """Each pool's warnings, in pool order: its branch's lifecycle, what the GPU Operator needs
    of it, and a driver manager assumed rather than read. Pools whose branch's lifecycle reads
    the same share one warning, at the place of the first: ten pools that take one branch
    ending soon are one fact, said once."""
    out: list[str] = []
    lifecycles: dict[str, list[str]] = {}  # a lifecycle warning's words -> the pools it is about
    for d in decisions:
        pool, opt = d.pool, d.chosen
        if opt is None:
            if pool.manager.operator and pool.current is None and pool.target is not None:
                out.append(
                    f"pool {pool.name}: no driver reported and no branch can be installed: the "
                    "default NVIDIADriver will take these nodes"
                )
            continue
        lifecycle = _lifecycle_warning(
            pool, opt, today, min_support_months, alternatives.get(pool.name, ()), total
        )
        if lifecycle is not None:
            if lifecycle not in lifecycles:
                out.append(lifecycle)
            lifecycles.setdefault(lifecycle, []).append(pool.name)
        if pool.manager.operator and pool.target is not None:
            out.extend(_operator_warnings(d, opt, kb, op))
        if pool.manager.assumed and pool.manager.operator:
            out.append(
                f"pool {pool.name}: its nodes carry no {kb.operator.driver_manager.deploy_label} "
                "label; planned as GPU Operator nodes (the operator labels every GPU node it "
                "manages): if their driver is installed on the host, label them "
                f"{kb.operator.driver_manager.deploy_label}=false"
            )
    return [_about(lifecycles[w], w) if w in lifecycles else w for w in out]


def _about(pools: list[str], words: str) -> str:
    """``pool a: words`` or, for several, ``pools a, b: words``."""
    return f"pool {pools[0]}: {words}" if len(pools) == 1 else f"pools {', '.join(pools)}: {words}"


def _lifecycle_warning(
    pool: Pool,
    opt: Option,
    today: date,
    min_support_months: int,
    alternatives: Iterable[Option],
    total: int,
) -> str | None:
    """An ended branch, a legacy branch, or one that ends within ``min_support_months`` (with
    the branches supported longer and what they would serve), in words that name no pool."""
    lc = opt.lifecycle
    if lc.state is LifecycleState.END_OF_LIFE:
        return (
            f"{'keeps' if opt.keep else 'takes'} R{opt.branch}, "
            f"{lc.describe()}: it gets no fixes any more"
        )
    if lc.state is LifecycleState.UNKNOWN and opt.branch in LEGACY_BRANCHES:
        arch = pool.target.arch if pool.target is not None else None
        capped = arch is not None and arch.last_driver_branch == opt.branch
        return (
            f"{'keeps' if opt.keep else 'takes'} R{opt.branch}, a legacy "
            "branch NVIDIA no longer maintains"
            + (f" ({arch.name} GPUs end there)" if capped and arch is not None else "")
        )
    left = months_left(lc.eol, today)
    if left is None or left >= min_support_months:
        return None
    longer = [
        f"R{o.branch} ({o.lifecycle.describe()}) serves {o.weight}"
        for o in alternatives
        if (m := months_left(o.lifecycle.eol, today)) is not None and m >= min_support_months
    ]
    return (
        f"R{opt.branch} ({lc.describe()}) ends within "
        f"{min_support_months} months (--min-support-months): plan the next move"
        + (f"; {'; '.join(longer)} of {total}" if longer else "")
    )


def _operator_warnings(
    d: PoolDecision, opt: Option, kb: KnowledgeBase, op: OperatorVersion
) -> list[str]:
    """For a pool the GPU Operator drives: a GPU outside its support scope, nodes without OS
    labels, and for a pin an OS it does not support or a driver image not known as published."""
    pool = d.pool
    assert pool.target is not None
    out: list[str] = []
    problem = scope_problem(kb, pool.gpu.split("/") if pool.gpu else (), pool.target.datacenter)
    if problem is not None:
        out.append(f"pool {pool.name}: {problem}")
    if pool.os is None:
        out.append(
            f"pool {pool.name}: its nodes have no NFD system-os_release labels; the GPU "
            "Operator skips such nodes (install Node Feature Discovery)"
        )
    if not (opt.keep and d.driver_object is not None):
        return out
    problem = operator_os_problem(op, pool.os)
    if problem is not None:
        out.append(
            f"pool {pool.name}: {problem}; the pin keeps today's driver, but move "
            "the nodes to a supported OS"
        )
    found = container_release(kb, opt.branch, pool.os, None, op, pool.arch)
    if isinstance(found, str) or found < opt.release:
        tag = image_os_tag(pool.os, op) if pool.os is not None else pool.os_text
        out.append(
            f"pool {pool.name}: the pin names driver:{opt.release}-{tag}, "
            "which cudasched's sources do not list as published; check the tag "
            "before applying"
        )
    return out


def cluster_warnings(
    decisions: list[PoolDecision], kb: KnowledgeBase, default_version: str | None
) -> list[str]:
    """Warnings about the cluster as a whole: a default NVIDIADriver whose branch cannot drive
    an operator pool's GPUs (R595 no longer drives Maxwell, Pascal and Volta, which the
    operator still supports), and Amazon Linux 2 nodes beside nodes of another OS (NVIDIA's
    operator does not support the mix)."""
    out: list[str] = []
    branch = int(default_version.split(".", 1)[0]) if default_version else None
    for d in decisions:
        arch = d.pool.target.arch if d.pool.target is not None else None
        cap = arch.last_driver_branch if arch is not None else None
        if branch is None or not d.operator or cap is None or branch <= cap:
            continue
        assert arch is not None
        obj = d.driver_object or "its NVIDIADriver"
        out.append(
            f"pool {d.pool.name}: the default NVIDIADriver's R{branch} cannot drive its "
            f"{arch.name} GPUs ({arch.name} GPUs end at R{cap}): nodes like them that join "
            f"without the pool label get a driver that cannot run them; declare "
            f"{L.DRIVER_POOL}={obj} where they come from"
        )
    out.extend(_al2_warnings(decisions, kb))
    return out


def _al2_warnings(decisions: list[PoolDecision], kb: KnowledgeBase) -> list[str]:
    """Amazon Linux 2 pools beside pools of another OS under the GPU Operator."""
    ended = {
        d.pool.name: image
        for d in decisions
        if (image := kb.operator.node_image(str(d.pool.os) if d.pool.os else "")) is not None
        and image.ended is not None
        and image.mix_source
    }
    others = [d.pool.name for d in decisions if d.pool.name not in ended]
    if not ended or not others or not any(d.operator for d in decisions):
        return []
    image = next(iter(ended.values()))
    return [
        f"pools {', '.join(ended)} run the {image.family} beside {', '.join(others[:3])}"
        + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        + ": NVIDIA's GPU Operator does not support Amazon Linux 2 nodes mixed with nodes of "
        f"another OS in one cluster; move them to {' or '.join(image.successors)}"
    ]


def plan_notes(
    objects: tuple[DriverObject, ...],
    decisions: list[PoolDecision],
    op: OperatorVersion,
    op_source: str,
    default_note: str | None,
    replaced: list[Replacement],
    homes: Mapping[str, str] | None = None,
    olm: bool = False,
) -> list[str]:
    """The plan's closing notes (module docstring); ``homes``: per object, where its nodes come
    from (:func:`label_homes`); ``olm``: the operator was installed without Helm (OLM), so the
    notes name the objects to edit rather than Helm values."""
    notes = _object_notes(objects, op, op_source, homes or {}, olm) if objects else []
    if default_note is not None:
        notes.append(default_note)
    for r in replaced:
        notes.append(
            f"delete NVIDIADriver/{r.name} after the rollout: {r.why}"
            + (f" (NVIDIADriver/{r.by} takes its nodes)" if r.by else "")
        )
    hosts = [d for d in decisions if not d.operator and d.changes]
    if hosts:
        notes.append(
            f"{len(hosts)} pool(s) get their driver from the host or a node image (no driver "
            "DaemonSet of the GPU Operator reaches them: each pool's driverManager evidence "
            "says why): no NVIDIADriver can change it; their actions are listed per pool"
        )
    skipped = [d.pool.name for d in decisions if OPENSHIFT_SKIPPED in d.pool.manager.evidence]
    if skipped:
        notes.append(
            f"pool(s) {', '.join(skipped)}: OpenShift nodes without the RHCOS OSTREE_VERSION "
            "label (RHEL compute nodes) are skipped by the GPU Operator's driver pools, so an "
            "NVIDIADriver does nothing there; their driver is installed on the host"
        )
    return notes


def _mode_notes(
    objects: tuple[DriverObject, ...], op: OperatorVersion, op_source: str, olm: bool
) -> list[str]:
    """The CRD switch (in Helm's or OLM's words), the release the objects are written for and
    the drivers its component matrix does not list."""
    if olm:
        switch = (
            "the GPU Operator reconciles NVIDIADriver objects only with ClusterPolicy "
            "spec.driver.useNvidiaDriverCRD=true: edit the ClusterPolicy (an OLM install has no "
            "Helm values; upgrade the operator through its OLM subscription)"
        )
    else:
        switch = (
            "the GPU Operator reconciles NVIDIADriver objects only with ClusterPolicy "
            "spec.driver.useNvidiaDriverCRD=true (Helm driver.nvidiaDriverCRD.enabled=true); "
            "from a release before v26.7 NVIDIA's migration takes two Helm upgrades: first to "
            "v26.7 with driver.nvidiaDriverCRD.enabled=false, then again with it enabled "
            "(gpu-driver-configuration.rst)"
        )
    notes = [switch]
    minimum = (
        "spec.default and spec.upgradePolicy need GPU Operator v26.7 or newer, "
        "kernelModuleType v25.3 or newer"
    )
    notes.append(
        f"NVIDIADriver objects written for GPU Operator {op.version} "
        f"({op_source or '--gpu-operator-version'}): {minimum}; fields an older version "
        "does not define are left out"
    )
    listed = [str(v) for v in op.drivers]
    unlisted = sorted(
        {o.version for o in objects if listed and not o.pin and not o.precompiled} - set(listed)
    )
    if unlisted:
        notes.append(
            f"GPU Operator {op.version}'s component matrix lists drivers {', '.join(listed)}; "
            f"{', '.join(unlisted)} is a driver container NVIDIA publishes but not one the "
            "matrix lists (NVIDIA adds drivers validated after a release as recommended updates)"
        )
    return notes


def _older_release_notes(op: OperatorVersion, olm: bool) -> list[str]:
    """What a release before v26.7 lacks: a per-object upgrade policy, and objects without
    nodeSelector that do not fall back."""
    notes: list[str] = []
    if not op.accepts("upgradePolicy"):
        where = (
            "the ClusterPolicy's spec.driver.upgradePolicy"
            if olm
            else ("the cluster's driver.upgradePolicy in the Helm values")
        )
        notes.append(
            f"GPU Operator {op.version} has no per-object upgradePolicy: set {where} "
            "(maxParallelUpgrades, maxUnavailable)"
        )
    if not op.accepts("default"):
        off = (
            "create no NVIDIADriver without nodeSelector"
            if olm
            else "install with driver.nvidiaDriverCRD.deployDefaultCR=false"
        )
        notes.append(
            "before v26.7 an NVIDIADriver without nodeSelector selects every GPU node and "
            f"conflicts with the pool objects: {off}"
        )
    return notes


def _object_notes(
    objects: tuple[DriverObject, ...],
    op: OperatorVersion,
    op_source: str,
    homes: Mapping[str, str],
    olm: bool = False,
) -> list[str]:
    """What applying the NVIDIADriver objects takes: the CRD switch (in Helm's or OLM's words),
    the operator version they are written for, the pins, the rollout and where the pool label
    must be declared."""
    notes = [*_mode_notes(objects, op, op_source, olm), *_older_release_notes(op, olm)]
    pins = [
        f"NVIDIADriver {o.name} for pool{'s' if len(o.pools) > 1 else ''} {', '.join(o.pools)}"
        for o in objects
        if o.pin
    ]
    if pins:
        notes.append(
            "pools that keep their driver are pinned too ("
            + "; ".join(pins)
            + "): without an object of their own the default NVIDIADriver would take them"
        )
    in_place = (
        f"; a pinned node (its driver stays) is re-owned without a cordon or drain: GPU "
        f"Operator {op.version}'s driver pod keeps a loaded driver of the same version and "
        "configuration when it restarts"
        if op.restart_in_place and any(o.pin for o in objects)
        else ""
    )
    notes.append(
        "rollout: `cudasched plan-drivers -o script` writes a runbook that, wave by wave, "
        "cordons, drains GPU pods (PodDisruptionBudgets hold), labels, creates or touches the "
        "NVIDIADriver, waits for it to be ready, for the driver pod and the GPUs "
        "(nvidia.com/gpu, or NVIDIA's DRA ResourceSlices) on every node, then uncordons "
        f"(docs/guide/drivers.md){in_place}"
    )
    notes.append(
        f"the pool label ({L.DRIVER_POOL}) is set with kubectl label: nodes a node group or "
        "autoscaler creates later do not have it; declare it where the nodes come from "
        "(cudasched node-template --driver-pool NAME, the Karpenter NodePool's "
        "spec.template.metadata.labels or the kubelet's --node-labels): "
        + "; ".join(
            f"{L.DRIVER_POOL}={o.name} on {homes.get(o.name, 'its nodes')}" for o in objects
        )
    )
    return notes


def label_homes(
    objects: tuple[DriverObject, ...], nodes: Iterable[Mapping[str, Any]], kb: KnowledgeBase
) -> dict[str, str]:
    """Per object, where new nodes like its nodes come from, as far as their labels tell: a
    Karpenter NodePool (``karpenter.sh/nodepool``), a cloud-managed node group (the EKS, GKE and
    AKS labels of ``gpu-operator.yaml``); else the nodes themselves, named (the node group,
    NodePool or kubelet flags that make them are not in the snapshot)."""
    labels = {name_of(n): labels_of(n) for n in nodes}
    groups = kb.operator.driver_manager.node_groups
    out: dict[str, str] = {}
    for obj in objects:
        found: dict[str, None] = {}
        unknown: list[str] = []
        for node in obj.nodes:
            mine = labels.get(node, {})
            if mine.get(KARPENTER_NODEPOOL_LABEL):
                found[f"Karpenter NodePool {mine[KARPENTER_NODEPOOL_LABEL]}"] = None
                continue
            group = next((g for g in groups if mine.get(g.label)), None)
            if group is not None:
                found[f"{group.provider} {group_noun(group.provider)} {mine[group.label]}"] = None
            else:
                unknown.append(node)
        if unknown:
            shown = ", ".join(unknown[:3]) + (
                f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
            )
            found[f"the node group or template of {shown} (their labels name none)"] = None
        out[obj.name] = " and ".join(found) or "its nodes"
    return out
