"""What a driver plan tells each pool to do: the action of a pool whose driver comes with the host
or a node image (:func:`host_action`), the line each pool adds to its NVIDIADriver's plan
annotation and the flavour a pin writes, the version the default NVIDIADriver should have
(:func:`default_driver`), and the :class:`~.nvidiadriver.DriverObject` summary of each object."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cudasched.compat.branches import (
    LifecycleState,
    ModuleType,
    module_type,
)
from cudasched.compat.containers import image_os_tag
from cudasched.compat.drivermanager import driver_change
from cudasched.operations.drivers.nvidiadriver import (
    DRIVER_IMAGE,
    DRIVER_REPOSITORY,
    DriverObject,
)
from cudasched.operations.drivers.plan import (
    PoolDecision,
)
from cudasched.operations.drivers.planoptions import (
    Option,
)
from cudasched.operations.pools import Pool
from cudasched.vocab import labels as L

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.knowledge.operator import OperatorVersion

__all__ = [
    "current_module",
    "default_driver",
    "driver_image",
    "driver_object",
    "host_action",
    "manifest_named",
    "plan_line",
]


def host_action(kb: KnowledgeBase, d: PoolDecision) -> str:
    """What a pool whose driver comes with the host or a node image is told to do: keep its
    driver, or move to the chosen branch the way its driver is installed."""
    pool, opt = d.pool, d.chosen
    if opt is None or opt.keep:
        return f"keep driver {pool.current}" if pool.current else "nothing to do"
    return driver_change(
        kb,
        pool.manager,
        opt.branch,
        d.floor or opt.release,
        opt.release,
        f"install {opt.version}",
        str(pool.os) if pool.os is not None else None,
    )


def default_driver(
    decisions: list[PoolDecision], operator: OperatorVersion, olm: bool = False
) -> tuple[str | None, str | None]:
    """(the version the default NVIDIADriver should have, the note that says so): the
    supported driver most operator-managed nodes get, else the chart's own. Before v26.7 there
    is no default (fallback) object: the note says what that means, and no version. ``olm``: an
    install without Helm values (OLM), whose knob is the object itself."""
    counts: Counter[tuple[int, str]] = Counter()
    operated = False
    for d in decisions:
        if not d.operator or d.pool.target is None:
            continue
        operated = True
        if d.chosen is not None and d.chosen.lifecycle.state is LifecycleState.SUPPORTED:
            counts[(d.chosen.branch, d.chosen.version)] += len(d.pool.nodes)
    if not operated:
        return None, None
    if not operator.accepts("default"):
        off = (
            "no NVIDIADriver without nodeSelector"
            if olm
            else "Helm driver.nvidiaDriverCRD.deployDefaultCR=false"
        )
        return None, (
            f"GPU Operator {operator.version} has no fallback NVIDIADriver (spec.default comes "
            f"with v26.7): with the pool objects alone ({off}), a GPU node that no NVIDIADriver "
            "selects gets no driver container, nodes that join later included: declare the pool "
            "label where they come from"
        )
    chart = str(operator.default_driver)
    if counts:
        (_, version), _ = max(counts.items(), key=lambda kv: (kv[1], kv[0][0]))
        why = "the supported driver most operator-managed nodes get"
    else:
        version = chart
        why = "every operator-managed pool is pinned to its own object; keep the chart's default"
    if olm:
        return version, (
            "the default NVIDIADriver (spec.default: true) drives every GPU node no other "
            f"NVIDIADriver selects, nodes that join later included: set its spec.version to "
            f"{version} ({why}; an OLM install has no Helm values)"
        )
    return version, (
        "the default NVIDIADriver (Helm driver.version; the GPU Operator "
        f"{operator.version} chart's is {chart}) drives every GPU node no other NVIDIADriver "
        f"selects, nodes that join later included: set driver.version={version} ({why})"
    )


def driver_object(
    manifest: dict[str, Any],
    decisions: list[PoolDecision],
    node_labels: Mapping[str, Mapping[str, str]],
) -> DriverObject:
    name = manifest["metadata"]["name"]
    spec = manifest["spec"]
    mine = [d for d in decisions if d.driver_object == name]
    return DriverObject(
        name=name,
        pools=tuple(d.pool.name for d in mine),
        nodes=tuple(n for n, labels in node_labels.items() if labels[L.DRIVER_POOL] == name),
        branch=int(str(spec["version"]).split(".")[0]),
        version=str(spec["version"]),
        module=spec.get("kernelModuleType"),
        precompiled=bool(spec["usePrecompiled"]),
        pin=all(d.chosen is not None and d.chosen.keep for d in mine),
        manifest=manifest,
    )


def manifest_named(manifests: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(m for m in manifests if m["metadata"]["name"] == name)


def plan_line(d: PoolDecision, opt: Option) -> str:
    """A pool's line in an object's ``cudasched.io/plan`` annotation."""
    if opt.keep:
        return f"{d.pool.name}: pins {d.pool.current}"
    before = f"R{d.pool.current.branch}" if d.pool.current is not None else "no driver"
    return f"{d.pool.name}: {before} -> R{opt.branch}"


def current_module(kb: KnowledgeBase, pool: Pool) -> ModuleType | None:
    """The flavour a pin writes: what the branch drives the GPU with (NVIDIA's choice)."""
    if pool.target is None or pool.current is None:
        return None
    found = module_type(kb, pool.target, pool.current.branch)
    return found if isinstance(found, ModuleType) else None


def driver_image(pool: Pool, opt: Option, operator: OperatorVersion) -> str | None:
    """The driver image GPU Operator ``operator`` pulls for the pool's nodes with ``opt``:
    ``<repository>/driver:<version>-<os tag>``, ``<branch>-<kernel>-<os tag>`` for a precompiled
    driver; the OS tag as that release forms it (RHEL 8 and 9 with the minor version before
    v26.7). ``None`` when the OS is not known."""
    if pool.os is None:
        return None
    tag = image_os_tag(pool.os, operator)
    if opt.precompiled and pool.kernel is not None:
        return f"{DRIVER_REPOSITORY}/{DRIVER_IMAGE}:{opt.branch}-{pool.kernel}-{tag}"
    return f"{DRIVER_REPOSITORY}/{DRIVER_IMAGE}:{opt.release}-{tag}"
