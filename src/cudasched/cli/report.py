"""``cudasched report``: the compatibility matrix (serving runtimes × node pools), each pool's
CUDA ceiling and the audit findings, as one self-contained HTML page (``-o html``, the default)
or as JSON (``-o json``: ``{"cluster", "matrix", "pools", "findings", "summary"}``), on stdout
or into ``--output-file``.

Exit codes: 0 written, 2 bad input or the file cannot be written (one line on stderr).
"""

from __future__ import annotations

import json
import sys
from datetime import date
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from cudasched.cli.app import EXIT_OK, app, as_run, fail, versioned
from cudasched.cli.inputs import (
    ClusterSource,
    cluster_source,
    judged,
    load_cluster_inputs,
    load_settings,
    with_image_sources,
)
from cudasched.cli.options import (
    AsOfOption,
    ConfigOption,
    DefaultPolicyOption,
    MinSupportMonthsOption,
    PlainHttpOption,
    RegistryConfigOption,
    ResolveImagesOption,
    check_support_months,
    effective_policy,
    generated_now,
    parse_as_of,
    progress_bar,
)
from cudasched.operations.audit import audit
from cudasched.operations.pools import node_pools
from cudasched.operations.report.html import render_report
from cudasched.operations.report.matrix import compatibility_matrix
from cudasched.operations.runtimes import runtime_rows
from cudasched.vocab.errors import InputError

__all__ = ["report_cmd"]


class ReportFormat(StrEnum):
    HTML = "html"
    JSON = "json"


def _write(path: Path | None, text: str) -> None:
    if path is None or str(path) == "-":
        sys.stdout.write(text)
        return
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None


def _pools(pools: Any) -> list[dict[str, Any]]:
    return [
        {
            "name": p.name,
            "gpu": p.gpu,
            "driver": str(p.driver) if p.driver else None,
            "os": p.os_text,
            "nodes": list(p.nodes),
            "ceiling": p.ceiling.describe(),
        }
        for p in pools
    ]


def _rendered(
    output: ReportFormat,
    what: dict[str, Any],
    kb: Any,
    matrix: Any,
    pools: Any,
    findings: Any,
    today: date,
) -> str:
    """The report as ``output`` asks: JSON, or the HTML page (which says the knowledge that
    judged it, with its age)."""
    if output is ReportFormat.JSON:
        doc = {
            "cluster": what,
            "knowledge": kb.provenance.to_dict(today),
            "matrix": matrix.to_dict(),
            "pools": _pools(pools),
            **findings.to_dict(),
        }
        return json.dumps(versioned(doc), indent=2) + "\n"
    label = what["source"] + (f" ({what['scope']})" if "scope" in what else "")
    knowledge = kb.provenance.describe(today)
    return render_report(
        matrix, findings, source=label, generated=generated_now(), knowledge=knowledge
    )


@app.command("report")
@cluster_source
def report_cmd(
    source: ClusterSource = ClusterSource(),
    config: ConfigOption = None,
    policy: DefaultPolicyOption = None,
    resolve_images: ResolveImagesOption = False,
    registry_config: RegistryConfigOption = None,
    plain_http: PlainHttpOption = None,
    output: Annotated[
        ReportFormat,
        typer.Option("-o", "--output", help="Format: html (one self-contained page) or json."),
    ] = ReportFormat.HTML,
    output_file: Annotated[
        Path | None,
        typer.Option("--output-file", help="Write to this file instead of stdout."),
    ] = None,
    as_of: AsOfOption = None,
    min_support_months: MinSupportMonthsOption = 12,
) -> None:
    """Write an HTML report of the cluster: which serving runtime can run on which node pool
    (hover a cell for its reason codes), each pool's CUDA ceiling, and the audit findings.

    One page, no external fonts, scripts or images: it opens on an air-gapped machine.
    -n/-l narrow the runtimes and findings to a namespace or a selector. --config takes the
    webhook's configuration, so runtimes and workloads are judged as admission judges them.
    Example: cudasched report --live --output-file report.html
    """
    try:
        settings = load_settings(config)
        pol = effective_policy(policy, settings)
        scope = source.scope
        today, months = parse_as_of(as_of), check_support_months(min_support_months)
        snapshot, fleet, images = load_cluster_inputs(source, settings)
        images = with_image_sources(
            images, source, resolve_images, registry_config, plain_http, snapshot
        )
        with progress_bar("building the report") as progress:
            pools = node_pools(snapshot, fleet)
            rows = tuple(r for r in runtime_rows(fleet, images) if not r.obj or scope.admits(r.obj))
            matrix = compatibility_matrix(rows, pools, pol, fleet.kb)
            findings = audit(
                snapshot,
                fleet,
                images,
                pol,
                progress=progress,
                today=today,
                min_support_months=months,
                max_knowledge_age_days=settings.knowledge.max_age_days,
            )
            findings = findings.within(scope, snapshot.objects()).reworded(as_run)
        what = judged(source, snapshot)
        _write(output_file, _rendered(output, what, fleet.kb, matrix, pools, findings, today))
    except InputError as exc:
        fail(str(exc))
    if output_file is not None and str(output_file) != "-":
        summary = findings.summary()
        sys.stderr.write(
            f"cudasched: wrote {output_file}: {len(matrix.rows)} serving runtimes × "
            f"{len(pools)} node pools, {summary['error']} error, {summary['warning']} warning, "
            f"{summary['info']} info findings\n"
        )
    raise typer.Exit(EXIT_OK)
