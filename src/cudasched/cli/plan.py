"""``cudasched plan-drivers``: which driver branch each GPU pool should run so every workload
has a home, and the GPU Operator objects that install it.

A thin shell over :func:`cudasched.operations.drivers.planning.plan_drivers`. ``-o json`` is a
stable contract (keys are only ever added): ``{"pools": [{"name", "nodes", "gpu", "arch", "os",
"kernel", "currentDriver", "targetBranch", "targetVersion", "kernelModuleType",
"usePrecompiled", "change", "gains", "loses", "why"}], "nvidiaDrivers": [...], "nodeLabels":
{node: {key: value}}, "waves": [[node, ...]], "unservable": [{"workload", "why"}], "notes",
"warnings", ...}``. ``-o yaml`` prints the NVIDIADriver objects, ready for ``kubectl apply -f``,
with the ``kubectl label`` commands of each wave as comments; ``-o table`` the impact per pool.
Exit codes: 0 a plan was made (whether or not every workload has a home: see ``unservable``),
2 bad input.
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from cudasched.cli.app import EXIT_OK, app, fail
from cudasched.cli.inputs import (
    ClusterSource,
    cluster_source,
    load_cluster,
    load_images,
    load_knowledge,
    load_settings,
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
    from cudasched.operations.drivers.planning import DriverPlan

__all__ = ["plan_cmd", "render_yaml"]

TABLE_WIDTH = 120


class PlanFormat(StrEnum):
    TABLE = "table"
    JSON = "json"
    YAML = "yaml"


def render_yaml(plan: DriverPlan, source: str) -> str:
    """The NVIDIADriver objects as a YAML stream, preceded by the notes and each wave's
    ``kubectl label`` commands as comments (so ``kubectl apply -f`` takes the file as is)."""
    from cudasched.cluster.snapshot import to_yaml
    from cudasched.operations.drivers.nvidiadriver import label_commands

    target = f", target CUDA {plan.target_cuda}" if plan.target_cuda else ""
    lines = [
        f"# cudasched plan-drivers: {source} (policy {plan.policy.value}{target}, "
        f"as of {plan.today.isoformat()})"
    ]
    for note in plan.notes:
        lines.append(f"# NOTE: {note}")
    for warning in plan.warnings:
        lines.append(f"# WARNING: {warning}")
    for workload, why in plan.unservable:
        lines.append(f"# UNSERVABLE: {workload}: {why}")
    pool_of = {node: labels[next(iter(labels))] for node, labels in plan.node_labels.items()}
    wave = 0
    for number, command in label_commands(plan.waves, pool_of):
        if number != wave:
            wave = number
            lines.append(
                f"# wave {number} ({len(plan.waves[number - 1])} node(s), at most "
                f"{plan.wave_capacity}):"
            )
        lines.append(f"#   {command}")
    if not plan.drivers:
        lines.append("# no pool changes: nothing to apply")
    out = "\n".join(lines) + "\n"
    for driver in plan.drivers:
        out += "---\n" + to_yaml(driver)
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
_SHOWN = ("warning", "keeps R", "takes R", "only through forward", "not planned", "usePrecompiled")


def _table(plan: DriverPlan, source: str) -> Table:
    changes = sum(1 for d in plan.decisions if d.changes)
    caption = (
        f"{len(plan.decisions)} pools, {plan.gpu_nodes} GPU nodes, {plan.demand.workloads} "
        f"workloads; {changes} pool(s) change in {len(plan.waves)} wave(s) of at most "
        f"{plan.wave_capacity} node(s); {len(plan.unservable)} workload(s) without a home. "
        "Every reason: -o json"
    )
    table = Table(
        title=Text(f"cudasched plan-drivers: {source}", style="bold"),
        caption=caption,
        caption_justify="left",
        show_lines=True,
        expand=False,
    )
    table.add_column("pool", overflow="fold", max_width=30)
    table.add_column("nodes", justify="right")
    table.add_column("driver", no_wrap=True)
    table.add_column("change", no_wrap=True)
    table.add_column("impact", overflow="fold", max_width=36)
    table.add_column("why", overflow="fold")
    style = {"upgrade": "green", "downgrade": "yellow", "keep": "dim"}
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
        table.add_row(
            Text(f"{d.pool.name}\n{d.pool.gpu or 'unknown GPU'}"),
            Text(str(len(d.pool.nodes))),
            Text(driver),
            Text(d.change, style=style.get(d.change, "")),
            impact,
            Text("\n".join(why)),
        )
    return table


def _console() -> Console:
    console = Console(soft_wrap=False)
    if not console.is_terminal:
        console = Console(width=TABLE_WIDTH, soft_wrap=False)
    return console


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
    as_of: AsOfOption = None,
    output: Annotated[PlanFormat, typer.Option("-o", "--output", help="Output format.")] = (
        PlanFormat.TABLE
    ),
) -> None:
    """Plan the driver branch of every GPU pool so each workload of the cluster has a home, and
    write the GPU Operator NVIDIADriver objects that install it.

    Pools are GPU nodes with one GPU product, OS, kernel and driver. Each pool gets the branch
    that runs the most workloads (InferenceServices, LLMInferenceServices, GPU pods, serving
    runtimes) within its architecture's range and kernel, preferring no change, then long-term
    branches; no workload that runs today is left without a node. --config takes the webhook's
    configuration (image overrides, mirrors, policy), so workloads are judged as admission
    judges them. Example: cudasched plan-drivers -o yaml > plan.yaml
    """
    from cudasched.cluster.fleet import Fleet
    from cudasched.operations.drivers.planning import plan_drivers
    from cudasched.operations.drivers.waves import parse_max_unavailable

    try:
        settings = load_settings(config)
        pol = effective_policy(policy, settings)
        today = parse_as_of(as_of)
        target = parse_cuda(target_cuda).release if target_cuda is not None else None
        unavailable = parse_max_unavailable(max_unavailable)
        snapshot = load_cluster(source)
        kb = load_knowledge()
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
        )
    except InputError as exc:
        fail(str(exc))
    name = snapshot.source or "cluster"
    if output is PlanFormat.JSON:
        sys.stdout.write(json.dumps(plan.to_dict(), indent=2) + "\n")
    elif output is PlanFormat.YAML:
        sys.stdout.write(render_yaml(plan, name))
    else:
        console = _console()
        console.print(_table(plan, name))
        for note in plan.notes:
            console.print(Text(f"note: {note}"))
        for warning in plan.warnings:
            console.print(Text(f"warning: {warning}", style="yellow"))
        for workload, why in plan.unservable:
            console.print(Text(f"no home: {workload}: {why}", style="red"))
    raise typer.Exit(EXIT_OK)
