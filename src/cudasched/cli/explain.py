"""``cudasched explain``: node by node, where a workload may land and why.

The requirement of each workload is found the way the admission webhook finds it (annotations,
then the KServe runtime of a predictor pod, then the GPU container's ``NVIDIA_REQUIRE_CUDA`` or
image), and only workloads the webhook would constrain get one; the per-node answer then comes
from :func:`cudasched.explain.eligibility.explain`. An InferenceService is explained through the
predictor pod KServe would build for it (runtime selection, merged scheduling fields and container).
Without ``--workload`` every Pod and controller of the cluster is explained, plus the
InferenceServices that have no predictor pod yet: with the bundled sample cluster that is the
project's demo.

A workload can also be named by reference, as kubectl names it (``isvc/llama3-8b -n team-nlp``,
``pod/NAME``, ``deploy/NAME``, ``llmisvc/NAME``): it is looked up in the cluster, which may be
the live one (``--live``).

``-o json`` is a stable contract (keys are only ever added): one workload gives
``{"nodes": [...], "summary": {...}}``, several give ``{"workloads": [{"workload": ID, "nodes":
[...], "summary": {...}}]}``; ``-o yaml`` is the same document in YAML and ``-o wide`` the table
without shortened names. Exit codes: 0 explained, 2 bad input (one line on stderr).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
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
    load_images,
    load_knowledge,
    load_settings,
    require_nodes,
)
from cudasched.cli.options import (
    ConfigOption,
    DefaultPolicyOption,
    PlainHttpOption,
    RegistryConfigOption,
    ResolveImagesOption,
    SchemeOption,
    effective_policy,
    effective_scheme,
    registry_source,
)
from cudasched.cli.reference import Reference, parse_reference
from cudasched.cli.terminal import wrapped
from cudasched.cluster.fleet import Fleet
from cudasched.cluster.scope import Scope
from cudasched.cluster.snapshot import ClusterSnapshot, load_snapshot, to_yaml
from cudasched.explain.eligibility import explain_many
from cudasched.explain.explanation import Explanation
from cudasched.explain.grouping import PoolSummary, by_pool, summarise
from cudasched.operations.pools import node_pools
from cudasched.vocab.errors import InputError
from cudasched.vocab.labels import LabelScheme
from cudasched.vocab.objects import DEFAULT_NAMESPACE
from cudasched.vocab.requirements import Policy
from cudasched.workloads.kserve import RuntimeChoice
from cudasched.workloads.pods import (
    is_inference_service,
    pod_spec_of,
    workload_id,
    workloads_of,
)
from cudasched.workloads.resolution import WorkloadNeed, workload_need

if TYPE_CHECKING:
    from rich.console import Console

    from cudasched.knowledge.images import ImageTable

__all__ = ["explain_cmd", "explain_snapshot"]

TABLE_WIDTH = 100
_VERDICT_STYLE = {"yes": "green", "no": "red", "unknown": "yellow"}
WIDE_WIDTH = 200


class ExplainFormat(StrEnum):
    TABLE = "table"
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"


@dataclass(frozen=True, slots=True)
class _Explained:
    """One workload's explanation plus where its requirement came from (for the output)."""

    explanation: Explanation
    runtime: RuntimeChoice | None

    def to_dict(self) -> dict[str, Any]:
        doc = self.explanation.to_dict()
        doc["summary"]["runtime"] = self.runtime.describe() if self.runtime else None
        return doc


# --------------------------------------------------------------------------- requirement


@contextlib.contextmanager
def _inputs_frozen() -> Iterator[None]:
    """The objects alive now (the cluster and workloads read, the fleet) moved out of the
    garbage collector's sight while the block runs: they live as long as the command, and a
    full collection walking millions of them again and again was a third of explaining 20,000
    workloads on 5,000 nodes (issue 22). New garbage is still collected; the objects are handed
    back afterwards."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def explain_snapshot(
    workloads: Sequence[Mapping[str, Any]],
    fleet: Fleet,
    policy: Policy,
    scheme: LabelScheme,
    images: ImageTable,
) -> list[_Explained]:
    """Resolve each workload's requirement against ``fleet`` and explain it there."""
    targets: list[Mapping[str, Any]] = []
    needs: list[WorkloadNeed] = []
    for obj in workloads:
        target, need = workload_need(obj, fleet, images)
        targets.append(target)
        needs.append(need)
    with _inputs_frozen():
        explanations = explain_many(
            targets,
            fleet,
            policy,
            fleet.kb,
            scheme,
            requirements=[n.requirement for n in needs],
            unknowns=[n.unknown for n in needs],
        )
    out = []
    for obj, exp, need in zip(workloads, explanations, needs, strict=True):
        if is_inference_service(obj):  # name the service, not the pod we built for it
            exp = dataclasses.replace(exp, workload=workload_id(obj))
        out.append(_Explained(exp, need.runtime))
    return out


# --------------------------------------------------------------------------- rendering


def _common_suffix(names: Sequence[str]) -> str:
    """A shared DNS suffix (``.us-west-2.compute.internal``) worth hiding in a narrow table."""
    dotted = [n for n in names if "." in n]
    if len(dotted) < 2:
        return ""
    suffix = "." + dotted[0].split(".", 1)[1]
    while suffix and not all(n.endswith(suffix) for n in dotted):
        parts = suffix.split(".", 2)
        suffix = "." + parts[2] if len(parts) > 2 else ""
    return suffix if len(suffix) > 8 else ""


def _short_gpu(products: Sequence[str]) -> str:
    if not products:
        return "-"
    return "+".join(p.removeprefix("NVIDIA-").removeprefix("Tesla-") for p in products)


_WIDE_COLUMNS = (
    terminal.Column("node"),
    terminal.Column("GPU"),
    terminal.Column("driver"),
    terminal.Column("CUDA"),
    terminal.Column("cc"),
    terminal.Column("ok", justify="center"),
    terminal.Column("runs as"),
    terminal.Column("why not, and the fix"),
    terminal.Column("score", justify="right"),
    terminal.Column("details"),
)


def _print_wide(item: _Explained, out: Console) -> None:
    """``-o wide``: a row per node with every detail, as wide as the terminal (one record per
    node where such a table would cut a word)."""
    exp = item.explanation
    summary = exp.summary()
    caption = (
        f"{summary['eligible']}/{summary['total']} "
        + ("schedulable, none known to run it" if exp.unknown is not None else "eligible")
        + f"; {_needs(item).removeprefix('needs ')}; scheme {_scheme(exp)}"
        + (f"; runtime {item.runtime.describe()}" if item.runtime else "")
        + (f"; no selector: {exp.requirement_error}" if exp.requirement_error else "")
        + (f"; preferred terms invalid: {exp.score_error}" if exp.score_error else "")
    )
    rows: list[list[str | Text]] = []
    for node in exp.nodes:
        facts = node.facts
        blocking = [r for r in node.reasons if r.blocking]
        modes = ", ".join(dict.fromkeys(r.code for r in node.reasons if not r.blocking)) or "-"
        why = "; ".join(dict.fromkeys(f"{r.code}: {r.fix}" if r.fix else r.code for r in blocking))
        if not why and exp.unknown is not None and node.eligible:
            why = "CUDA unknown"
        verdict = exp.verdict(node)
        rows.append(
            [
                node.node,
                "+".join(facts.products) or "-",
                str(facts.driver) if facts.driver else "-",
                str(facts.cuda) if facts.cuda else "-",
                str(facts.compute) if facts.compute else "-",
                Text(verdict, style=_VERDICT_STYLE[verdict]),
                modes,
                why or "-",
                str(node.score),
                "; ".join(r.message for r in node.reasons) or "-",
            ]
        )
    title = Text(f"{exp.workload}", style="bold")
    terminal.print_table(out, _WIDE_COLUMNS, rows, title=title, caption=caption)


def _needs(item: _Explained, *, short: bool = False) -> str:
    """What the workload needs, in the one wording every view uses: its requirement, or that
    its CUDA is unknown (a GPU workload no table knows), or that it has none. ``short``: the
    words alone, for a line per workload."""
    exp = item.explanation
    req = exp.requirement
    if req is None and exp.unknown is not None:
        said = "CUDA unknown, not constrained"
        return said if short else f"needs {said} ({exp.unknown.describe()})"
    if req is None:
        return "no CUDA requirement" if short else "no CUDA requirement (not constrained)"
    if short:
        return req.describe()
    return f"needs {req.describe()} ({req.source or 'unknown source'}), policy {exp.policy.value}"


def _node_names(nodes: Sequence[str], suffix: str, shown: int = 3) -> str:
    names = [n.removesuffix(suffix) if suffix else n for n in nodes]
    more = len(names) - shown
    listed = ", ".join(names[:shown]) + (f", +{more} more" if more > 0 else "")
    return f"{len(names)} node{'s' if len(names) != 1 else ''}: {listed}"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'s' if count != 1 else ''}"


def _summary_line(summary: PoolSummary, can: str = "can run it") -> str:
    """``21 nodes in 13 pools: 7 pools (11 nodes) can run it, 6 (9 nodes) cannot, because of
    ...; 1 node in no GPU pool cannot (no-gpu-facts)``."""
    line = (
        f"{_plural(summary.nodes, 'node')} in {_plural(summary.pools, 'GPU pool')}: "
        f"{_plural(summary.eligible_pools, 'pool')} ({_plural(summary.eligible_nodes, 'node')}) "
        f"{can}, {summary.blocked_pools} ({_plural(summary.blocked_nodes, 'node')}) cannot"
    )
    if summary.because:
        line += ", because of " + ", ".join(
            f"{code} ({_plural(n, 'pool')})" for code, n in summary.because
        )
    if summary.mixed_pools:
        line += f"; in {_plural(summary.mixed_pools, 'pool')} only some nodes can"
    if summary.unpooled_nodes:
        blocked = summary.unpooled_nodes - summary.unpooled_eligible
        line += f"; {_plural(summary.unpooled_nodes, 'node')} in no GPU pool"
        if blocked:
            line += f", {blocked} cannot ({', '.join(summary.unpooled_because)})"
    return line


def _compact(
    item: _Explained,
    pools: Mapping[str, str],
    width: int,
    *,
    per_node: bool = False,
    only_failing: bool = False,
) -> list[str]:
    """One workload, summary first: what it needs, how many pools and nodes can run it and
    why the others cannot, then one entry per pool (per node with ``per_node``) whose
    answer is the same: its nodes, how it runs, or each blocking code with its fix."""
    exp = item.explanation
    groups = by_pool(exp, pools)
    summary = summarise(groups)
    suffix = _common_suffix([n.node for n in exp.nodes])
    lines = [*wrapped(f"{exp.workload} {_needs(item)}", width, "")]
    # Of an unknown CUDA, a node the pod may be scheduled on is not known to run it.
    can = "can run it" if exp.unknown is None else "would take it, none known to run it"
    lines += wrapped(_summary_line(summary, can), width, "")
    for eligible, title in (
        (False, "cannot run it" if exp.unknown is None else "cannot take it"),
        (True, can),
    ):
        chosen = [g for g in groups if g.eligible is eligible]
        if not chosen or (eligible and only_failing):
            continue
        lines.append(title)
        for group in chosen:
            entries = (
                [(n.node.removesuffix(suffix) if suffix else n.node, [n]) for n in group.nodes]
                if per_node
                else [(group.pool, list(group.nodes))]
            )
            for label, nodes in entries:
                facts = nodes[0].facts
                if per_node:
                    head = (
                        f"{label}  {_short_gpu(facts.products)}, driver "
                        f"{facts.driver or '-'}, CUDA {facts.cuda or '-'}"
                    )
                else:
                    head = f"{label}  ({_node_names([n.node for n in nodes], suffix)})"
                if eligible:
                    head += f": {', '.join(group.modes) or 'eligible'}"
                lines += wrapped(head, width, "  ")
                for code, fix in group.blocking:
                    lines += wrapped(f"{code}: {fix}" if fix else code, width, "    ")
    notes = [f"label scheme {_scheme(exp)}"]
    if item.runtime:
        notes.append(f"runtime {item.runtime.describe()}")
    if suffix:
        notes.append(f"node names end in {suffix}")
    if exp.requirement_error:
        notes.append(f"no selector: {exp.requirement_error}")
    if exp.score_error:
        notes.append(f"preferred terms invalid: {exp.score_error}")
    lines += wrapped("; ".join(notes), width, "")
    for warning in _unknown_warnings(item):
        lines += wrapped(warning, width, "")
    return lines


def _unknown_warnings(item: _Explained) -> list[str]:
    """What kubectl prints for the webhook's admission warnings when the workload's CUDA is
    unknown, word for word."""
    unknown = item.explanation.unknown
    return [f"Warning: {w}" for w in (unknown.warnings() if unknown is not None else ())]


def _scheme(exp: Explanation) -> str:
    return exp.scheme.value + (f"/{exp.gfd_keys.value} keys" if exp.gfd_keys else "")


def _overview_lines(
    items: Sequence[_Explained], pools: Mapping[str, str], width: int, only_failing: bool
) -> list[str]:
    """Several workloads: one line each, summary first (how many can run anywhere), then per
    workload what it needs and how many pools can run it."""
    # A workload of unknown CUDA may be scheduled, but no node is known to run it.
    unknown = sum(1 for i in items if i.explanation.unknown is not None)
    runnable = sum(1 for i in items if i.explanation.eligible_count and not i.explanation.unknown)
    headline = (
        f"{len(items)} workload{'s' if len(items) != 1 else ''}: {runnable} can run on some "
        f"node, {len(items) - runnable - unknown} on none"
    )
    lines = wrapped(headline + (f", {unknown} of unknown CUDA" if unknown else ""), width, "")
    for item in items:
        exp = item.explanation
        if only_failing and exp.eligible_count == exp.total:
            continue
        summary = summarise(by_pool(exp, pools))
        text = (
            f"{exp.workload}: {_needs(item, short=True)}; "
            f"{summary.eligible_nodes + summary.unpooled_eligible}/{summary.nodes} nodes, "
            f"{summary.eligible_pools}/{summary.pools} pools"
        )
        if summary.because:
            text += "; " + ", ".join(code for code, _ in summary.because[:3])
        lines += wrapped(text, width, "  ")
    lines += wrapped(
        "explain NAMESPACE/Kind/NAME (a name above) for one workload by pool; --nodes for one "
        "line per node; -o wide or "
        "-o json for every detail",
        width,
        "",
    )
    return lines


def _print_overview(items: Sequence[_Explained], out: Console) -> None:
    """One line per workload, after the per-workload tables: the demo's punch line."""
    rows: list[list[str | Text]] = []
    for item in items:
        exp = item.explanation
        req = exp.requirement
        where = item.runtime.name if item.runtime else (req.source.split(" ")[0] if req else "")
        if exp.unknown is not None:
            where = exp.unknown.reason
        # Counted per group of alike nodes: the overview builds no per-node answer.
        count = exp.eligible_count
        rows.append(
            [
                exp.workload,
                _needs(item, short=True),
                where or "-",
                Text(f"{count}/{exp.total}", style="red" if count == 0 else ""),
            ]
        )
    columns = (
        terminal.Column("workload"),
        terminal.Column("needs"),
        terminal.Column("runtime / source"),
        terminal.Column("eligible", justify="right"),
    )
    terminal.print_table(out, columns, rows, title=Text("summary", style="bold"))


def _document(
    items: Sequence[_Explained], single: bool, cluster: Mapping[str, Any]
) -> dict[str, Any]:
    if single:
        return {**items[0].to_dict(), "cluster": dict(cluster)}
    return {
        "workloads": [{"workload": i.explanation.workload, **i.to_dict()} for i in items],
        "cluster": dict(cluster),
    }


def _render_json(items: Sequence[_Explained], single: bool, cluster: Mapping[str, Any]) -> str:
    return json.dumps(_document(items, single, cluster), indent=2)


def _render_yaml(items: Sequence[_Explained], single: bool, cluster: Mapping[str, Any]) -> str:
    return to_yaml(_document(items, single, cluster))


def _pool_names(snapshot: ClusterSnapshot, fleet: Fleet) -> dict[str, str]:
    """Node name -> pool name. The one place explain learns what a pool is (the report's
    pools), so a new notion of pool changes it here only."""
    return {node: pool.name for pool in node_pools(snapshot, fleet) for node in pool.nodes}


# --------------------------------------------------------------------------- command


def _explained_objects(
    snapshot: ClusterSnapshot, label: str, scope: Scope | None = None
) -> list[dict[str, Any]]:
    objs = workloads_of(snapshot)
    where = ""
    if scope is not None and not scope.is_everything:
        objs = [o for o in objs if scope.admits(o)]
        where = f" in scope ({scope.describe()})"
    if not objs:
        raise InputError(
            f"{label}: no Pod, workload (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, "
            f"CronJob) or InferenceService to explain{where}"
        )
    for obj in objs:
        if not is_inference_service(obj):
            pod_spec_of(obj)  # a controller without a pod template is bad input, said up front
    return objs


def _merge_context(base: ClusterSnapshot, extra: ClusterSnapshot) -> ClusterSnapshot:
    """KServe objects shipped next to a workload join the cluster's (the file's win)."""
    return ClusterSnapshot(
        nodes=base.nodes,
        inference_services=extra.inference_services + base.inference_services,
        serving_runtimes=extra.serving_runtimes + base.serving_runtimes,
        cluster_serving_runtimes=extra.cluster_serving_runtimes + base.cluster_serving_runtimes,
        source=base.source,
    )


def _default_namespace(source: ClusterSource) -> str:
    """kubectl's namespace when ``-n`` is not given: the live context's, else ``default``."""
    if not source.is_live:
        return DEFAULT_NAMESPACE
    from cudasched.kube.client import load_config

    config = load_config(kubeconfig=source.kubeconfig, context=source.context)
    return config.settings.namespace or DEFAULT_NAMESPACE


@app.command("explain")
@cluster_source
def explain_cmd(
    reference: Annotated[
        str | None,
        typer.Argument(
            metavar="[TYPE/NAME]",
            help="A workload of the cluster, named as kubectl names it: isvc/NAME, "
            "llmisvc/NAME, pod/NAME, deploy/NAME (also sts, ds, rs, job, cj and the long "
            "names), or as explain and audit print it (NAMESPACE/Kind/NAME, "
            "Kind/NAMESPACE/NAME). Default: every workload of the cluster (in scope of -n/-l).",
            show_default=False,
        ),
    ] = None,
    workload: Annotated[
        Path | None,
        typer.Option(
            "--workload",
            help="YAML/JSON file with a Pod, Deployment, StatefulSet, DaemonSet, Job, CronJob or "
            "InferenceService (several allowed). Default: every workload of the cluster.",
        ),
    ] = None,
    nodes_file: Annotated[
        Path | None,
        typer.Option(
            "--nodes-file",
            help="Nodes to explain against (kubectl get nodes -o yaml). Default: the cluster's.",
        ),
    ] = None,
    per_node: Annotated[
        bool,
        typer.Option("--nodes", help="One entry per node instead of per node pool."),
    ] = False,
    only_failing: Annotated[
        bool,
        typer.Option(
            "--only-failing", help="Only the pools (or nodes, workloads) that cannot run it."
        ),
    ] = False,
    source: ClusterSource = ClusterSource(),
    config: ConfigOption = None,
    policy: DefaultPolicyOption = None,
    scheme: SchemeOption = None,
    resolve_images: ResolveImagesOption = False,
    registry_config: RegistryConfigOption = None,
    plain_http: PlainHttpOption = None,
    output: Annotated[
        ExplainFormat,
        typer.Option(
            "-o",
            "--output",
            help="table: by node pool, summary first; wide: a row per node with every detail; "
            "json, yaml: the same for scripts.",
        ),
    ] = ExplainFormat.TABLE,
) -> None:
    """Say, node by node, whether a workload can land there and why.

    The answer is grouped by node pool (GPU, driver and OS), summary first: how many pools and
    nodes can run it, and what keeps it off the others with the fix. Eligibility is
    Kubernetes' own required node-affinity and nodeSelector match of the pod spec with the
    workload's CUDA requirement ANDed in, as the webhook would admit it; reasons come from the
    compatibility engine and from the workload's own constraints. Examples: cudasched explain
    isvc/llama3-8b -n team-nlp --live; cudasched explain --workload deploy.yaml --nodes-file
    n.yaml
    """
    namespace = source.namespace
    try:
        settings = load_settings(config)
        pol = effective_policy(policy, settings)
        scope = source.scope
        ref: Reference | None = None
        if reference is not None:
            if workload is not None:
                raise InputError(
                    f"{reference!r} and --workload both name what to explain: give one"
                )
            if source.all_namespaces:
                raise InputError(
                    f"-A/--all-namespaces and {reference!r} do not go together: a TYPE/NAME is "
                    "in one namespace (-n)"
                )
            ref = parse_reference(reference, namespace, lambda: _default_namespace(source))
        elif (namespace is not None or source.selector) and workload is not None:
            raise InputError(
                "-n/--namespace and -l/--selector pick the cluster's workloads, not --workload's"
            )
        fetch = [f for f in (ref.to_fetch(),) if f is not None] if ref is not None else []
        context = load_cluster(source, nodes_file, fetch=fetch)
        require_nodes(context)
        if ref is not None:
            objs = ref.workloads(context)
            single = len(objs) == 1
        elif workload is not None:
            given = load_snapshot(workload)
            objs = _explained_objects(given, str(workload))
            context = _merge_context(context, given)
            single = len(objs) == 1
        else:
            objs = _explained_objects(context, context.source or "cluster", scope)
            single = False
        kb = load_knowledge()
        fleet = Fleet.from_snapshot(context, kb)
        labels = effective_scheme(scheme, settings)
        images = load_images(kb, settings)
        images = images.with_configs(
            registry_source(resolve_images, registry_config, plain_http, mirrors=images.mirrors)
        )
        items = explain_snapshot(objs, fleet, pol, labels, images)
    except InputError as exc:
        fail(str(exc))
    if output is ExplainFormat.JSON:
        sys.stdout.write(_render_json(items, single, judged(source, context)) + "\n")
    elif output is ExplainFormat.YAML:
        sys.stdout.write(_render_yaml(items, single, judged(source, context)))
    elif output is ExplainFormat.WIDE:
        console = terminal.console(WIDE_WIDTH)
        for number, item in enumerate(items):
            if number:
                console.print()
            _print_wide(item, console)
            for warning in _unknown_warnings(item):
                console.print(Text(warning, style="yellow"))
        if len(items) > 1:
            console.print()
            _print_overview(items, console)
    else:
        width = terminal.width(TABLE_WIDTH)
        pools = _pool_names(context, fleet)
        if single or per_node:
            blocks = [
                _compact(item, pools, width, per_node=per_node, only_failing=only_failing)
                for item in items
                if not (only_failing and item.explanation.eligible_count == item.explanation.total)
            ]
            text = "\n\n".join("\n".join(b) for b in blocks)
        else:
            text = "\n".join(_overview_lines(items, pools, width, only_failing))
        sys.stdout.write(text + "\n")
    raise typer.Exit(EXIT_OK)
