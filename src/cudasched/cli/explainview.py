"""How ``cudasched explain`` shows its answers: the text by node pool, summary first (one
entry per pool or, with ``--nodes``, per node), the overview of several workloads, the table of
``-o wide`` (a row per node) and the ``-o json`` / ``-o yaml`` document, whose keys are a stable
contract (only ever added); the device view of a DRA cluster after a workload's nodes; and the
width each is laid out for when piped. The terminal's own
width, the wrapping at spaces and the tables that never cut a word are
:mod:`cudasched.cli.terminal`'s.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.text import Text

from cudasched.cli import terminal
from cudasched.cli.terminal import wrapped
from cudasched.cluster.fleet import Fleet
from cudasched.cluster.snapshot import ClusterSnapshot, to_yaml
from cudasched.explain.devices import DeviceExplanation
from cudasched.explain.explanation import Explanation, NodeExplanation
from cudasched.explain.grouping import NodeGroup, PoolSummary, by_pool, summarise
from cudasched.operations.pools import node_pools
from cudasched.workloads.kserve import RuntimeChoice

if TYPE_CHECKING:
    from rich.console import Console


__all__ = [
    "TABLE_WIDTH",
    "WIDE_WIDTH",
    "Explained",
    "compact_lines",
    "device_lines",
    "overview_lines",
    "pool_names",
    "print_node_table",
    "print_overview_table",
    "render_json",
    "render_yaml",
    "unknown_warnings",
]

TABLE_WIDTH = 100
_VERDICT_STYLE = {"yes": "green", "no": "red", "unknown": "yellow"}
WIDE_WIDTH = 200


@dataclass(frozen=True, slots=True)
class Explained:
    """One workload's explanation plus where its requirement came from (for the output)."""

    explanation: Explanation
    runtime: RuntimeChoice | None
    #: Device by device, where the cluster publishes NVIDIA's DRA ResourceSlices.
    devices: DeviceExplanation | None = None

    def to_dict(self) -> dict[str, Any]:
        doc = self.explanation.to_dict()
        doc["summary"]["runtime"] = self.runtime.describe() if self.runtime else None
        if self.devices is not None:
            doc["devices"] = self.devices.to_dict()
        return doc


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


def print_node_table(item: Explained, out: Console) -> None:
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
    rows = [_node_row(exp, node) for node in exp.nodes]
    title = Text(f"{exp.workload}", style="bold")
    terminal.print_table(out, _WIDE_COLUMNS, rows, title=title, caption=caption)


def _node_row(exp: Explanation, node: NodeExplanation) -> list[str | Text]:
    """One node's row of the wide table."""
    facts = node.facts
    blocking = [r for r in node.reasons if r.blocking]
    modes = ", ".join(dict.fromkeys(r.code for r in node.reasons if not r.blocking)) or "-"
    why = "; ".join(dict.fromkeys(f"{r.code}: {r.fix}" if r.fix else r.code for r in blocking))
    if not why and exp.unknown is not None and node.eligible:
        why = "CUDA unknown"
    verdict = exp.verdict(node)
    return [
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


def _needs(item: Explained, *, short: bool = False) -> str:
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


def compact_lines(
    item: Explained,
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
            lines += _group_lines(group, eligible, suffix, width, per_node)
    lines += wrapped("; ".join(_notes(item, suffix)), width, "")
    for warning in unknown_warnings(item):
        lines += wrapped(warning, width, "")
    return lines


def device_lines(devices: DeviceExplanation, width: int) -> list[str]:
    """The devices of NVIDIA's DRA driver the workload's class admits, then each refused one
    with what keeps it out (a fix where one is known), each named node/pool/device."""
    head = (
        f"DRA devices: {devices.admitted_count} of {len(devices.devices)} admitted by class "
        f"{devices.device_class}, policy {devices.policy.value}"
        if devices.device_class is not None
        else f"DRA devices: none admitted, no class: {devices.error}"
    )
    lines = wrapped(head, width, "")
    if devices.dropped_forward_compat:
        lines += wrapped(
            "(forward compatibility left out: no DRA attribute says data-center GPU)", width, ""
        )
    for admitted, title in ((True, "admitted"), (False, "refused")):
        chosen = [d for d in devices.devices if d.admitted is admitted]
        if not chosen:
            continue
        lines.append(f"  {title}")
        for device in chosen:
            if admitted:
                modes = ", ".join(r.code for r in device.reasons if not r.blocking)
                lines += wrapped(f"{device.where}: {device.facts}; {modes}", width, "    ")
                continue
            lines += wrapped(f"{device.where}: {device.facts}", width, "    ")
            for r in device.reasons:
                if r.blocking:
                    lines += wrapped(f"{r.code}: {r.fix or r.message}", width, "      ")
    return lines


def _group_lines(
    group: NodeGroup, eligible: bool, suffix: str, width: int, per_node: bool
) -> list[str]:
    """One pool's entry (one per node with ``per_node``): its nodes, how it runs, or each
    blocking code with its fix."""
    entries = (
        [(n.node.removesuffix(suffix) if suffix else n.node, [n]) for n in group.nodes]
        if per_node
        else [(group.pool, list(group.nodes))]
    )
    lines: list[str] = []
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
    return lines


def _notes(item: Explained, suffix: str) -> list[str]:
    """The closing line's parts: the label scheme, the runtime, the names' common suffix, a
    selector or preferred terms that could not be made."""
    exp = item.explanation
    notes = [f"label scheme {_scheme(exp)}"]
    if item.runtime:
        notes.append(f"runtime {item.runtime.describe()}")
    if suffix:
        notes.append(f"node names end in {suffix}")
    if exp.requirement_error:
        notes.append(f"no selector: {exp.requirement_error}")
    if exp.score_error:
        notes.append(f"preferred terms invalid: {exp.score_error}")
    return notes


def unknown_warnings(item: Explained) -> list[str]:
    """What kubectl prints for the webhook's admission warnings when the workload's CUDA is
    unknown, word for word."""
    unknown = item.explanation.unknown
    return [f"Warning: {w}" for w in (unknown.warnings() if unknown is not None else ())]


def _scheme(exp: Explanation) -> str:
    return exp.scheme.value + (f"/{exp.gfd_keys.value} keys" if exp.gfd_keys else "")


def overview_lines(
    items: Sequence[Explained], pools: Mapping[str, str], width: int, only_failing: bool
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
        if item.devices is not None:
            text += f"; {item.devices.admitted_count}/{len(item.devices.devices)} DRA devices"
        lines += wrapped(text, width, "  ")
    lines += wrapped(
        "explain NAMESPACE/Kind/NAME (a name above) for one workload by pool; --nodes for one "
        "line per node; -o wide or "
        "-o json for every detail",
        width,
        "",
    )
    return lines


def print_overview_table(items: Sequence[Explained], out: Console) -> None:
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
    items: Sequence[Explained], single: bool, cluster: Mapping[str, Any]
) -> dict[str, Any]:
    if single:
        return {**items[0].to_dict(), "cluster": dict(cluster)}
    return {
        "workloads": [{"workload": i.explanation.workload, **i.to_dict()} for i in items],
        "cluster": dict(cluster),
    }


def render_json(items: Sequence[Explained], single: bool, cluster: Mapping[str, Any]) -> str:
    return json.dumps(_document(items, single, cluster), indent=2)


def render_yaml(items: Sequence[Explained], single: bool, cluster: Mapping[str, Any]) -> str:
    return to_yaml(_document(items, single, cluster))


def pool_names(snapshot: ClusterSnapshot, fleet: Fleet) -> dict[str, str]:
    """Node name -> pool name. The one place explain learns what a pool is (the report's
    pools), so a new notion of pool changes it here only."""
    return {node: pool.name for pool in node_pools(snapshot, fleet) for node in pool.nodes}
