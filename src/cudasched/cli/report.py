"""``cudasched report``: one self-contained HTML file with the compatibility matrix (serving
runtimes × node pools), each pool's CUDA ceiling and the audit findings.

Exit codes: 0 written, 2 bad input or the file cannot be written (one line on stderr).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from cudasched.cli.app import EXIT_OK, app, fail
from cudasched.cli.inputs import ClusterSource, cluster_source, load_cluster_inputs, load_settings
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
from cudasched.operations.audit import audit
from cudasched.operations.pools import node_pools
from cudasched.operations.report.html import render_report
from cudasched.operations.report.matrix import compatibility_matrix
from cudasched.operations.runtimes import runtime_rows
from cudasched.vocab.errors import InputError

__all__ = ["report_cmd"]


def _write(path: Path, text: str) -> None:
    if str(path) == "-":
        sys.stdout.write(text)
        return
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None


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
        Path, typer.Option("-o", "--output", help="HTML file to write ('-': stdout).")
    ] = Path("report.html"),
    as_of: AsOfOption = None,
    min_support_months: MinSupportMonthsOption = 12,
) -> None:
    """Write an HTML report of the cluster: which serving runtime can run on which node pool
    (hover a cell for its reason codes), each pool's CUDA ceiling, and the audit findings.

    One file, no external fonts, scripts or images: it opens on an air-gapped machine.
    --config takes the webhook's configuration, so runtimes and workloads are judged as
    admission judges them. Example: cudasched report --cluster cluster.yaml -o report.html
    """
    try:
        settings = load_settings(config)
        pol = effective_policy(policy, settings)
        today = parse_as_of(as_of)
        months = check_support_months(min_support_months)
        snapshot, fleet, images = load_cluster_inputs(source, settings)
        images = images.with_configs(registry_source(resolve_images, registry_config, plain_http))
        with progress_bar("building the report") as progress:
            pools = node_pools(snapshot, fleet)
            matrix = compatibility_matrix(runtime_rows(fleet, images), pools, pol, fleet.kb)
            findings = audit(
                snapshot,
                fleet,
                images,
                pol,
                progress=progress,
                today=today,
                min_support_months=months,
            )
        html = render_report(
            matrix, findings, source=snapshot.source or "cluster", generated=generated_now()
        )
        _write(output, html)
    except InputError as exc:
        fail(str(exc))
    if str(output) != "-":
        summary = findings.summary()
        sys.stderr.write(
            f"cudasched: wrote {output}: {len(matrix.rows)} serving runtimes × "
            f"{len(pools)} node pools, {summary['error']} error, {summary['warning']} warning, "
            f"{summary['info']} info findings\n"
        )
    raise typer.Exit(EXIT_OK)
