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
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cudasched.cli import terminal
from cudasched.cli.app import EXIT_INCOMPATIBLE, EXIT_OK, app, as_run, fail, versioned
from cudasched.cli.inputs import (
    ClusterSource,
    cluster_source,
    judged,
    load_cluster_inputs,
    load_node_templates,
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
from cudasched.cli.terminal import wrapped
from cudasched.operations.audit import AuditReport, Finding, Severity, audit
from cudasched.operations.audit.admission import scoped
from cudasched.operations.report.html import render_findings
from cudasched.vocab.errors import InputError

if TYPE_CHECKING:
    from cudasched.cluster.snapshot import ClusterSnapshot

__all__ = ["audit_cmd"]

TABLE_WIDTH = 100


class AuditFormat(StrEnum):
    TABLE = "table"
    JSON = "json"
    HTML = "html"
    POLICYREPORT = "policyreport"


def _folded(report: AuditReport) -> list[tuple[Finding, list[str]]]:
    """Findings that say the same thing (severity, code, message, fix) about several objects,
    as one entry listing them: four nodes with GFD's old keys are one line, not four."""
    groups: dict[tuple[str, ...], tuple[Finding, list[str]]] = {}
    for finding in report.findings:
        key = (finding.severity.value, finding.code, finding.message, finding.fix or "")
        groups.setdefault(key, (finding, []))[1].append(finding.object)
    return list(groups.values())


def _objects(refs: list[str]) -> str:
    """``Node/a, b, c``: the kind said once when every object has it."""
    kinds = {ref.split("/", 1)[0] for ref in refs}
    if len(refs) > 1 and len(kinds) == 1:
        kind = kinds.pop()
        return f"{kind}/" + ", ".join(ref.split("/", 1)[1] for ref in refs)
    return ", ".join(refs)


def _text_report(report: AuditReport, source: str, width: int) -> str:
    """Summary first, then one entry per folded finding: severity, code and objects, the
    message and the fix, wrapped at spaces only (a code or a name is never cut)."""
    summary = report.summary()
    counts = ", ".join(f"{summary[s.value]} {s.value}" for s in Severity)
    lines = [f"cudasched audit: {source}: {counts}"]
    for finding, refs in _folded(report):
        head = f"{finding.severity.value}  {finding.code}  {_objects(refs)}"
        lines.append("")
        lines += wrapped(head, width, "", "      ")
        lines += wrapped(finding.message, width, "  ")
        if finding.fix:
            lines += wrapped(f"fix: {finding.fix}", width, "  ")
    return "\n".join(lines) + "\n"


def _write(
    output: AuditFormat,
    report: AuditReport,
    snapshot: ClusterSnapshot,
    what: dict[str, Any],
    policy: str,
) -> None:
    """The findings to stdout in the format asked for; ``what``: the cluster judged (its
    source and scope, as every JSON answer names it)."""
    label = what["source"] + (f" ({what['scope']})" if "scope" in what else "")
    if output is AuditFormat.JSON:
        doc = {**report.to_dict(), "cluster": what}
        sys.stdout.write(json.dumps(versioned(doc), indent=2) + "\n")
    elif output is AuditFormat.POLICYREPORT:
        from datetime import UTC, datetime

        from cudasched.cluster.snapshot import to_yaml
        from cudasched.operations.audit.policyreport import policy_reports

        reports = policy_reports(report, snapshot.objects(), datetime.now(UTC))
        sys.stdout.write("".join("---\n" + to_yaml(r) for r in reports))
    elif output is AuditFormat.HTML:
        sys.stdout.write(
            render_findings(report, source=label, generated=generated_now(), policy=policy)
        )
    elif report.findings:
        sys.stdout.write(_text_report(report, label, terminal.width(TABLE_WIDTH)))
    else:
        sys.stdout.write(f"cudasched audit: {label}: no findings\n")


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
        AuditFormat,
        typer.Option(
            "-o",
            "--output",
            help="table; json; html (one page); policyreport: wgpolicyk8s.io/v1alpha2 "
            "PolicyReports (one per namespace) and a ClusterPolicyReport, as YAML to "
            "kubectl apply -f -.",
        ),
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
    cluster_scoped: Annotated[
        bool,
        typer.Option(
            "--cluster-scoped",
            help="With -n: also the findings about cluster-scoped objects (nodes, node pools, "
            "ClusterServingRuntimes), which -n leaves out; -A reports them always.",
        ),
    ] = False,
) -> None:
    """Find what is wrong in the cluster: pods on nodes that cannot run them, workloads and
    runtimes no node can run, GPU nodes with missing, old or conflicting labels, driver
    upgrades in flight, stale and unknown requirements, and pools on a driver branch that has
    ended, is legacy or ends within --min-support-months (judged --as-of, default today).

    --config takes the webhook's configuration, so workloads are judged as admission judges
    them (its image overrides, mirrors and policy). Exit 1 when any finding is an error, so
    the command can gate CI. The cluster is the one kubectl would use; where none is
    configured the bundled sample is audited, said first on stderr, and the exit code is 2
    (nothing of yours was audited) unless --sample asked for the sample. Example: cudasched
    audit --config webhook.yaml -o json
    """
    try:
        settings = load_settings(config)
        pol = effective_policy(policy, settings)
        today, months = parse_as_of(as_of), check_support_months(min_support_months)
        groups = load_node_templates(node_templates)
        snapshot, fleet, images = load_cluster_inputs(source, settings, admission=True)
        images = with_image_sources(
            images, source, resolve_images, registry_config, plain_http, snapshot
        )
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
                max_knowledge_age_days=settings.knowledge.max_age_days,
            )
        # -n NS: that namespace's objects, and the webhook its misplaced pods lack
        namespaced = source.namespace is not None and not (cluster_scoped or source.all_namespaces)
        report = scoped(report, source.scope, list(snapshot.objects()), namespaced).reworded(as_run)
    except InputError as exc:
        fail(str(exc))
    _write(output, report, snapshot, judged(source, snapshot), pol.value)
    if source.is_fallback:  # a cron job on a machine without a cluster must not pass or fail
        fail(  # on the sample's findings: it audited nothing of its own
            "no cluster configured: these are the bundled sample cluster's findings, not "
            "yours (--sample audits the sample on purpose and exits 1 on its errors)"
        )
    raise typer.Exit(EXIT_INCOMPATIBLE if report.has_errors else EXIT_OK)
