"""``cudasched demo``: the real HTTPS webhook, started on 127.0.0.1 with the bundled sample
cluster, admits every sample pod; the table shows the whole chain (runtime -> requirement ->
affinity -> eligible nodes) in a second or two, without a cluster. Nothing is left running.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import typer

from cudasched.cli import terminal
from cudasched.cli.app import EXIT_BAD_INPUT, EXIT_OK, app, fail
from cudasched.cli.inputs import ClusterSource, cluster_source, cluster_state, load_cluster
from cudasched.cli.options import ConfigOption
from cudasched.vocab.errors import InputError
from cudasched.webhook.admission.review import creation_review, decode_patch

__all__ = ["DemoRow", "demo", "run_demo"]

POD_PATH = "/mutate/pods"
_MAX_NAMES = 3


@dataclass(frozen=True, slots=True)
class DemoRow:
    """One admitted pod as the demo reports it."""

    workload: str
    runtime: str
    requirement: str
    source: str
    eligible: tuple[str, ...]
    warnings: tuple[str, ...]
    allowed: bool


def _split_record(record: str) -> tuple[str, str]:
    """``cuda>=12.4 (ClusterServingRuntime x, image y)`` -> requirement and source."""
    head, sep, tail = record.partition(" (")
    return (head, tail[:-1] if sep and tail.endswith(")") else tail)


def run_demo(snapshot: Any, *, config: Any = None) -> tuple[list[DemoRow], str, float]:
    """Serve the real webhook over HTTPS on 127.0.0.1, send it every pod of ``snapshot`` as a
    CREATE review, apply the returned patches and evaluate node affinity on the result.
    Returns the rows, the server URL and the elapsed seconds of the admission round trips."""
    import jsonpatch

    from cudasched.explain.eligibility import explain as explain_nodes
    from cudasched.kube.admissionclient import AdmissionClient
    from cudasched.settings.config import WebhookConfig
    from cudasched.vocab.labels import ANN_REQUIREMENT
    from cudasched.vocab.requirements import Requirement
    from cudasched.webhook.admission.admitter import Admitter
    from cudasched.webhook.server.serving import serve_in_thread
    from cudasched.workloads.view import Role, view_pod

    cfg = config if config is not None else WebhookConfig()
    admitter = Admitter.from_config(cfg)
    state = cluster_state(snapshot, admitter.kb)
    rows: list[DemoRow] = []
    with serve_in_thread(state, config=cfg, admission=admitter) as server:
        with AdmissionClient(server.url, server.ca_pem, timeout=10.0) as client:
            started = time.perf_counter()
            for pod in snapshot.pods:
                review = creation_review(pod)
                answer = client.review(POD_PATH, review)
                response = answer.get("response") or {}
                obj = review["request"]["object"]
                patched = jsonpatch.apply_patch(obj, decode_patch(answer))
                # Counted as explain counts (one rule for every count): the pod as admitted,
                # its own selector and affinity, and the GPU resources each node offers.
                judged = explain_nodes(
                    patched, state.fleet, cfg.policy, admitter.kb, requirement=Requirement()
                )
                eligible = tuple(n.node for n in judged.nodes if n.eligible)
                meta = patched.get("metadata") or {}
                ns = str(meta.get("namespace") or "")
                view = view_pod(patched)
                isvc = view.owner if view.role is Role.PREDICTOR else None
                choice = state.runtime_of(ns, isvc) if isvc else None
                record = str((meta.get("annotations") or {}).get(ANN_REQUIREMENT) or "")
                if record:
                    requirement, source = _split_record(record)
                else:  # nothing recorded: none, or unknown (the answer admission gave)
                    llm = view.owner if view.role is Role.MODEL_SERVER else None
                    service = state.llm_inference_service(ns, llm) if llm else None
                    requirement, source = _unrecorded(obj, choice, admitter, service)
                rows.append(
                    DemoRow(
                        workload=f"{ns}/{isvc or meta.get('name') or meta.get('generateName')}",
                        runtime=choice.describe() if choice is not None else "-",
                        requirement=requirement,
                        source=source,
                        eligible=eligible,
                        warnings=tuple(response.get("warnings") or ()),
                        allowed=bool(response.get("allowed")),
                    )
                )
        elapsed = time.perf_counter() - started
        url = server.url
    return rows, url, elapsed


def _unrecorded(
    pod: Mapping[str, Any], choice: Any, admitter: Any, service: Any
) -> tuple[str, str]:
    """The requirement column of a pod admission recorded nothing on: none (``-``), unknown
    and why, or unreadable and why (admitted unconstrained with a warning)."""
    from cudasched.workloads.resolution import pod_need
    from cudasched.workloads.view import view_pod

    try:
        need = pod_need(view_pod(pod), choice, admitter.images, admitter.kb, service=service)
    except InputError as exc:
        return "unreadable", str(exc)
    if need.unknown is not None:
        return "unknown", need.unknown.describe()
    return "-", ""


def _names(names: Sequence[str]) -> str:
    """``11 nodes: a, b, c, +8 more`` (the count always, a few names for orientation)."""
    if not names:
        return "none"
    # EC2-style node names repeat the region domain; the host label is enough to tell apart.
    shown = ", ".join(n.split(".", 1)[0] for n in names[:_MAX_NAMES])
    more = len(names) - _MAX_NAMES
    count = f"{len(names)} node{'s' if len(names) != 1 else ''}"
    return f"{count}: {shown}" + (f", +{more} more" if more > 0 else "")


@app.command("demo")
@cluster_source
def demo(
    source: ClusterSource = ClusterSource(),
    config: ConfigOption = None,
) -> None:
    """Start the real webhook over HTTPS on 127.0.0.1 with the sample cluster, admit every
    sample pod through it and show where each may now run."""
    from rich.text import Text

    from cudasched.settings.config import load_config

    if not source.named:  # the demo's cluster is the sample unless another is named
        source = dataclasses.replace(source, sample=True)
    try:
        cfg = load_config(config)
        scope = source.scope
        snapshot = load_cluster(source)
        # -n/-l choose the pods admitted; every other object stays, as the webhook sees it
        snapshot = dataclasses.replace(
            snapshot, pods=tuple(p for p in snapshot.pods if scope.admits(p))
        )
        if not snapshot.pods:
            where = f" in scope ({scope.describe()})" if not scope.is_everything else ""
            raise InputError(f"the cluster snapshot has no pods to admit{where}")
        rows, url, elapsed = run_demo(snapshot, config=cfg)
    except InputError as exc:
        fail(str(exc))
    except Exception as exc:  # a demo must explain itself, not dump a traceback
        fail(f"demo failed: {type(exc).__name__}: {exc}", EXIT_BAD_INPUT)

    # Outside a terminal the table reads better a little wider than rich's 80 columns.
    console = terminal.console(150)
    columns = (
        terminal.Column("Workload / runtime"),
        terminal.Column("Requirement / source"),
        terminal.Column("Eligible nodes"),
        terminal.Column("Warnings"),
    )
    cells: list[list[str | Text]] = []
    for row in rows:
        workload = Text(row.workload, style="bold")
        workload.append(f"\n{row.runtime}", style="dim")
        requirement = Text(row.requirement)
        if row.source:
            requirement.append(f"\n{row.source}", style="dim")
        eligible = Text(_names(row.eligible), style="" if row.eligible else "red")
        warnings = Text("" if row.allowed else "DENIED ", style="red")
        warnings.append("\n".join(w.removeprefix("cudasched: ") for w in row.warnings) or "-")
        cells.append([workload, requirement, eligible, warnings])
    terminal.print_table(
        console,
        columns,
        cells,
        title=f"cudasched webhook at {url}: {len(rows)} pod CREATE reviews",
        show_lines=True,
    )
    console.print(
        f"{len(rows)} reviews over HTTPS in {elapsed * 1000:.0f} ms; server stopped, nothing "
        "left running."
    )
    raise typer.Exit(EXIT_OK)
