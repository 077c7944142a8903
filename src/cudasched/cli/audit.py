"""``cudasched audit``: what is wrong in the cluster right now, as findings with a fix.

A thin shell over :func:`cudasched.operations.audit.auditor`. ``-o json`` is a stable contract (keys
are only ever added): ``{"findings": [{"severity", "code", "object", "node", "message",
"fix"}], "summary": {"error": N, "warning": N, "info": N}}``. ``-o html`` writes the findings
as one self-contained HTML page to stdout. Exit codes: 0 no error finding, 1 at least one
error finding (a CI gate), 2 bad input (one line on stderr).

:func:`load_cluster_inputs` is the one place ``audit`` and ``report`` load what they read, so
the live-cluster options plug in there.
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from cudasched.cli.app import EXIT_INCOMPATIBLE, EXIT_OK, app, fail
from cudasched.cli.inputs import (
    ClusterSource,
    cluster_source,
    load_cluster_inputs,
    load_node_templates,
    load_settings,
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
    registry_source,
)
from cudasched.operations.audit import AuditReport, Severity, audit
from cudasched.operations.report.html import render_findings
from cudasched.vocab.errors import InputError

if TYPE_CHECKING:
    pass

__all__ = ["audit_cmd"]

TABLE_WIDTH = 120


class AuditFormat(StrEnum):
    TABLE = "table"
    JSON = "json"
    HTML = "html"


def _console() -> Console:
    console = Console(soft_wrap=False)
    if not console.is_terminal:
        console = Console(width=TABLE_WIDTH, soft_wrap=False)
    return console


_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


def _table(report: AuditReport, source: str) -> Table:
    summary = report.summary()
    counts = ", ".join(f"{summary[s.value]} {s.value}" for s in Severity)
    table = Table(
        title=Text(f"cudasched audit: {source}", style="bold"),
        caption=counts,
        caption_justify="left",
        expand=False,
        show_lines=True,
    )
    table.add_column("severity", no_wrap=True)
    table.add_column("code", overflow="fold", max_width=24)
    table.add_column("object", overflow="fold", max_width=34)
    table.add_column("message / fix", overflow="fold")
    for finding in report.findings:
        text = Text(finding.message)
        if finding.fix:
            text.append("\nfix: ", style="bold")
            text.append(finding.fix)
        table.add_row(
            Text(finding.severity.value, style=_STYLE[finding.severity]),
            finding.code,
            finding.object,
            text,
        )
    return table


@app.command("audit")
@cluster_source
def audit_cmd(
    source: ClusterSource = ClusterSource(),
    config: ConfigOption = None,
    policy: DefaultPolicyOption = None,
    resolve_images: ResolveImagesOption = False,
    registry_config: RegistryConfigOption = None,
    plain_http: PlainHttpOption = None,
    output: Annotated[
        AuditFormat, typer.Option("-o", "--output", help="Output format (html: to stdout).")
    ] = AuditFormat.TABLE,
    node_templates: Annotated[
        Path | None,
        typer.Option(
            "--node-templates",
            help="`cudasched node-template` output (JSON/YAML, one or more) for node groups "
            "declared outside the cluster (AWS, Azure): a pending workload that one of them "
            "can run gets a scale-up hint. Karpenter NodePools and Cluster API groups in the "
            "snapshot count without it.",
        ),
    ] = None,
    as_of: AsOfOption = None,
    min_support_months: MinSupportMonthsOption = 12,
) -> None:
    """Find what is wrong in the cluster: pods on nodes that cannot run them, workloads and
    runtimes no node can run, GPU nodes with missing, old or conflicting labels, driver
    upgrades in flight, stale and unknown requirements, and pools on a driver branch that has
    ended, is legacy or ends within --min-support-months (judged --as-of, default today).

    --config takes the webhook's configuration, so workloads are judged as admission judges
    them (its image overrides, mirrors and policy). Exit 1 when any finding is an error, so
    the command can gate CI. Example: cudasched audit --config webhook.yaml -o json
    """
    try:
        settings = load_settings(config)
        pol = effective_policy(policy, settings)
        today = parse_as_of(as_of)
        months = check_support_months(min_support_months)
        groups = load_node_templates(node_templates)
        snapshot, fleet, images = load_cluster_inputs(source, settings)
        images = images.with_configs(registry_source(resolve_images, registry_config, plain_http))
        with progress_bar("auditing") as progress:
            report = audit(
                snapshot,
                fleet,
                images,
                pol,
                progress=progress,
                node_groups=groups,
                today=today,
                min_support_months=months,
            )
    except InputError as exc:
        fail(str(exc))
    source = snapshot.source or "cluster"
    if output is AuditFormat.JSON:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
    elif output is AuditFormat.HTML:
        sys.stdout.write(
            render_findings(report, source=source, generated=generated_now(), policy=pol.value)
        )
    elif report.findings:
        _console().print(_table(report, source))
    else:
        _console().print(f"cudasched audit: {source}: no findings")
    raise typer.Exit(EXIT_INCOMPATIBLE if report.has_errors else EXIT_OK)
