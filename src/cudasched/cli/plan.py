"""``cudasched plan-drivers``: which driver branch each GPU pool should run so every workload
has a home, and how to get it there: GPU Operator objects for the pools the operator drives, an
action for pools whose driver comes with the host or a node image.

A thin shell over :func:`cudasched.operations.drivers.planning.plan_drivers`. ``-o json`` is a
stable contract (keys are only ever added): ``{"pools": [{"name", "nodes", "gpu", "arch",
"cpuArch", "os", "kernel", "currentDriver", "driverManager", "driverManagerEvidence",
"nodeGroup", "targetBranch", "targetVersion", "targetFloor", "kernelModuleType",
"usePrecompiled", "lifecycle", "eol", "change", "action", "nvidiaDriver", "driverImage",
"reOwn", "blocked", "gains", "loses", "why"}], "nvidiaDrivers": [...], "hostActions": [{"pool",
"nodes", "action"}], "nodeLabels": {node: {key: value}}, "waves": [[node, ...]], "replaced":
[{"name", "by", "why"}], "defaultDriver", "gpuOperatorVersion", "unservable": [{"workload",
"why"}], "notes", "warnings", ...}``. ``-o yaml`` prints the NVIDIADriver objects with
the plan as comments; ``-o script`` the runbook that rolls them out wave by wave
(:mod:`cudasched.operations.drivers.runbook`); ``-o table`` the impact per pool. Exit codes: 0 a
plan was made (whether or not every workload has a home: see ``unservable``), 2 bad input.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from cudasched.cli import terminal
from cudasched.cli.app import EXIT_OK, app, fail
from cudasched.cli.inputs import (
    ClusterSource,
    cluster_source,
    judged,
    load_cluster,
    load_gpu_operator,
    load_images,
    load_knowledge,
    load_settings,
    require_nodes,
)
from cudasched.cli.options import (
    AsOfOption,
    ConfigOption,
    DefaultPolicyOption,
    effective_policy,
    parse_as_of,
)
from cudasched.vocab.errors import InputError
from cudasched.vocab.versions import parse_cuda

if TYPE_CHECKING:
    from rich.console import Console

    from cudasched.cluster.snapshot import ClusterSnapshot
    from cudasched.knowledge import KnowledgeBase
    from cudasched.knowledge.operator import OperatorVersion
    from cudasched.operations.drivers.plan import DriverPlan

__all__ = ["plan_cmd", "render_yaml"]

TABLE_WIDTH = 120

PreferLtsOption = Annotated[
    bool,
    typer.Option(
        "--prefer-lts",
        help="Take a supported long-term branch where one can be installed, even when a "
        "short-lived branch would serve more workloads (none that runs today loses its home).",
    ),
]


class PlanFormat(StrEnum):
    TABLE = "table"
    JSON = "json"
    YAML = "yaml"
    SCRIPT = "script"


def render_yaml(plan: DriverPlan, source: str) -> str:
    """The NVIDIADriver objects as a YAML stream, preceded by the notes, the pools whose driver
    comes with the host or a node image and each wave's nodes as comments (``kubectl apply -f``
    takes the file as is; ``-o script`` rolls it out)."""
    from cudasched.cluster.snapshot import to_yaml

    target = f", target CUDA {plan.target_cuda}" if plan.target_cuda else ""
    lines = [
        f"# cudasched plan-drivers: {source} (policy {plan.policy.value}{target}, "
        f"as of {plan.today.isoformat()}, GPU Operator {plan.operator.version})"
    ]
    for note in plan.notes:
        lines.append(f"# NOTE: {note}")
    for warning in plan.warnings:
        lines.append(f"# WARNING: {warning}")
    for workload, why in plan.unservable:
        lines.append(f"# UNSERVABLE: {workload}: {why}")
    for d in plan.host_actions:
        lines.append(f"# HOST: pool {d.pool.name} ({len(d.pool.nodes)} node(s)): {d.action}")
    for d in plan.decisions:
        if d.blocked is not None:
            lines.append(f"# BLOCKED: pool {d.pool.name}: {d.blocked}")
    for number, wave in enumerate(plan.waves, start=1):
        lines.append(
            f"# wave {number} ({len(wave)} node(s), at most {plan.wave_capacity}): "
            + " ".join(wave)
        )
    if not plan.objects:
        lines.append("# no pool the GPU Operator drives: no NVIDIADriver to apply")
    out = "\n".join(lines) + "\n"
    for driver in plan.drivers:
        out += "---\n" + to_yaml(dict(driver))
    return out


def _short(ref: str) -> str:
    """``InferenceService/team-nlp/qwen2-7b`` -> ``isvc team-nlp/qwen2-7b``."""
    kind, _, rest = ref.partition("/")
    return f"{_KINDS.get(kind, kind)} {rest}"


_KINDS = {
    "InferenceService": "isvc",
    "LLMInferenceService": "llmisvc",
    "ServingRuntime": "sr",
    "ClusterServingRuntime": "csr",
    "Pod": "pod",
}

# The why lines a table row shows besides the first: what needs attention.
_SHOWN = (
    "warning",
    "keeps R",
    "takes R",
    "only through forward",
    "not planned",
    "usePrecompiled",
    "blocked",
)
_MANAGERS = {"operator": "(GPU Operator)", "host": "(host)", "node-image": "(node image)"}


_COLUMNS = (
    terminal.Column("pool", joiner=", "),
    terminal.Column("nodes", justify="right"),
    terminal.Column("driver", joiner=" "),
    terminal.Column("change"),
    terminal.Column("impact", joiner="; "),
    terminal.Column("why", joiner="; "),
)


def _print_table(plan: DriverPlan, source: str, out: Console) -> None:
    """The impact per pool, as wide as the terminal; one record per pool where a table that
    cuts no pool or workload name does not fit."""
    changes = sum(1 for d in plan.decisions if d.changes)
    caption = (
        f"{len(plan.decisions)} pools, {plan.gpu_nodes} GPU nodes, {plan.demand.workloads} "
        f"workloads; {changes} pool(s) change; {len(plan.objects)} NVIDIADriver object(s) in "
        f"{len(plan.waves)} wave(s) of at most {plan.wave_capacity} node(s); "
        f"{len(plan.host_actions)} host or node-image action(s); {len(plan.unservable)} "
        "workload(s) without a home. Every reason: -o json"
    )
    style = {"upgrade": "green", "downgrade": "yellow", "keep": "dim"}
    rows: list[list[str | Text]] = []
    for d in plan.decisions:
        row = d.to_dict()
        current = str(row["currentDriver"] or "none")
        if d.changes:
            version = row["targetVersion"] or f"R{row['targetBranch']}"
            driver = f"{current}\n-> {version}\n{row['kernelModuleType']} modules"
            if row["usePrecompiled"]:
                driver += "\nprecompiled"
        else:
            driver = current
        driver += "\n" + _MANAGERS[d.pool.manager.kind.value]
        impact = Text()
        if d.gains:
            impact.append(f"+{len(d.gains)} ", style="green")
            impact.append(", ".join(_short(w) for w in d.gains[:3]))
            impact.append(" ..." if len(d.gains) > 3 else "")
        if d.loses:
            impact.append(("\n" if d.gains else "") + f"-{len(d.loses)} ", style="red")
            impact.append(", ".join(_short(w) for w in d.loses[:3]))
            impact.append(" ..." if len(d.loses) > 3 else "")
        why = [d.why[0], *(w for w in d.why[1:] if w.startswith(_SHOWN) or "so that" in w)]
        if d.action:
            why.append(f"action: {d.action}")
        rows.append(
            [
                f"{d.pool.name}\n{d.pool.gpu or 'unknown GPU'}",
                str(len(d.pool.nodes)),
                driver,
                Text(d.change, style=style.get(d.change, "")),
                impact,
                "\n".join(why),
            ]
        )
    terminal.print_table(
        out,
        _COLUMNS,
        rows,
        title=Text(f"cudasched plan-drivers: {source}", style="bold"),
        caption=caption,
        show_lines=True,
    )


@app.command("plan-drivers")
@cluster_source
def plan_cmd(
    source: ClusterSource = ClusterSource(),
    config: ConfigOption = None,
    policy: DefaultPolicyOption = None,
    target_cuda: Annotated[
        str | None,
        typer.Option(
            "--target-cuda",
            help="Every pool that can run this CUDA version natively is planned to (12.8).",
        ),
    ] = None,
    max_unavailable: Annotated[
        str,
        typer.Option(
            "--max-unavailable",
            help="The most GPU nodes one wave may take down: a percentage (25%) or a count.",
        ),
    ] = "25%",
    precompiled: Annotated[
        bool,
        typer.Option(
            "--precompiled", help="Use precompiled driver containers where NVIDIA builds them."
        ),
    ] = False,
    gpu_operator_version: Annotated[
        str | None,
        typer.Option(
            "--gpu-operator-version",
            help="The GPU Operator release the objects are for (26.7, v25.10.1). Default: read "
            "from the cluster (its ClusterPolicy's release label, else its NVIDIADriver CRD, "
            "else its NVIDIADriver objects), else the newest cudasched knows.",
        ),
    ] = None,
    min_support_months: Annotated[
        int,
        typer.Option(
            "--min-support-months",
            help="Warn when a pool's driver branch ends within this many months.",
        ),
    ] = 12,
    prefer_lts: PreferLtsOption = False,
    as_of: AsOfOption = None,
    output: Annotated[PlanFormat, typer.Option("-o", "--output", help="Output format.")] = (
        PlanFormat.TABLE
    ),
) -> None:
    """Plan the driver branch of every GPU pool so each workload of the cluster has a home, and
    write the GPU Operator NVIDIADriver objects that install it.

    Pools are GPU nodes with one GPU product, driver, OS, kernel and driver manager. Each pool
    gets the branch that runs the most workloads (InferenceServices, LLMInferenceServices, GPU
    pods, serving runtimes) within its architecture's range and kernel and that can be installed
    the way the pool gets its driver (a driver container NVIDIA publishes for its OS, or the
    host's or node image's driver), preferring no change, then long-term branches; no workload
    that runs today is left without a node. --config takes the webhook's configuration (image
    overrides, mirrors, policy), so workloads are judged as admission judges them.
    Example: cudasched plan-drivers -o script > rollout.sh
    """
    from cudasched.cluster.fleet import Fleet
    from cudasched.operations.drivers.planning import plan_drivers
    from cudasched.operations.drivers.runbook import render_script
    from cudasched.operations.drivers.waves import parse_max_unavailable

    try:
        settings = load_settings(config)
        pol = effective_policy(policy, settings)
        today = parse_as_of(as_of)
        target = parse_cuda(target_cuda).release if target_cuda is not None else None
        unavailable = parse_max_unavailable(max_unavailable)
        if not 0 <= min_support_months <= 120:
            raise InputError(
                f"invalid --min-support-months {min_support_months}: expected 0 to 120 months"
            )
        scope = source.scope  # -n/-l: only the workloads in scope make demand
        snapshot = scope.workloads(require_nodes(load_cluster(source)))
        kb = load_knowledge()
        crd = kb.operator.cluster_release.crd if kb.operator.cluster_release else ""
        operator_objects = load_gpu_operator(source, snapshot, crd)
        op, op_source, op_notes = _operator_release(
            kb, operator_objects, snapshot, gpu_operator_version
        )
        if target is not None and kb.toolkit(target) is None:
            raise InputError(
                f"invalid --target-cuda {target_cuda!r}: CUDA {target} is not a toolkit release "
                "the knowledge base knows"
            )
        fleet = Fleet.from_snapshot(snapshot, kb)
        plan = plan_drivers(
            snapshot,
            fleet,
            load_images(kb, settings),
            today=today,
            policy=pol,
            target_cuda=target,
            max_unavailable=unavailable,
            precompiled=precompiled,
            operator=op,
            operator_source=op_source,
            operator_notes=op_notes,
            min_support_months=min_support_months,
            operator_objects=operator_objects,
            prefer_lts=prefer_lts,
        )
    except InputError as exc:
        fail(str(exc))
    name = snapshot.source or "cluster"
    if output is PlanFormat.JSON:
        doc = {**plan.to_dict(), "cluster": judged(source, snapshot)}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    elif output is PlanFormat.YAML:
        sys.stdout.write(render_yaml(plan, name))
    elif output is PlanFormat.SCRIPT:
        sys.stdout.write(render_script(plan, name))
    else:
        console = terminal.console(TABLE_WIDTH)
        _print_table(plan, name, console)
        for note in plan.notes:
            console.print(Text(f"note: {note}"))
        for warning in plan.warnings:
            console.print(Text(f"warning: {warning}", style="yellow"))
        for workload, why in plan.unservable:
            console.print(Text(f"no home: {workload}: {why}", style="red"))
    raise typer.Exit(EXIT_OK)


def _operator_release(
    kb: KnowledgeBase,
    objects: Sequence[Mapping[str, Any]],
    snapshot: ClusterSnapshot,
    asked: str | None,
) -> tuple[OperatorVersion, str, tuple[str, ...]]:
    """The GPU Operator release the objects are written for, how it was found and the notes of
    reading it: ``--gpu-operator-version``, else the release the cluster shows, else the newest
    cudasched knows (said so)."""
    from cudasched.compat.containers import operator_version
    from cudasched.compat.operatorrelease import operator_of_cluster

    if asked is not None:
        return operator_version(kb, asked), "--gpu-operator-version", ()
    read = operator_of_cluster(kb, objects, snapshot.nvidia_drivers)
    if read is not None:
        return read.version, read.source, read.notes
    return (
        operator_version(kb, None),
        "the newest release cudasched knows: the cluster shows no ClusterPolicy release label, "
        "NVIDIADriver CRD or object; set --gpu-operator-version",
        (),
    )
