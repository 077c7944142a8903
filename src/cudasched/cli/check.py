"""``cudasched check``: can this node run a workload built for this CUDA version, and why.

A thin shell over the pure core (``nodes``, ``engine``); ``-o json`` is a stable contract (keys
are only ever added). Exit codes: 0 compatible (with or without caveats), 1 incompatible, 2 bad
input.
"""

from __future__ import annotations

import json
from dataclasses import replace
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from cudasched.cli.app import EXIT_INCOMPATIBLE, EXIT_OK, app, fail
from cudasched.cli.inputs import load_knowledge, load_node_labels
from cudasched.cli.options import (
    CompatBranchesOption,
    CompatCudaOption,
    CompatDriverOption,
    FrameworkOption,
    MinComputeOption,
    PolicyOption,
    ShipsCudaCompatOption,
    ToolkitModeOption,
    compat_from_options,
    requirement_from_options,
)
from cudasched.cli.terminal import width, wrapped
from cudasched.compat.engine import check, resolve_policy
from cudasched.compat.fixes import with_fixes
from cudasched.nodes.facts import NodeFacts, facts_from_labels, facts_from_parts
from cudasched.vocab.errors import InputError
from cudasched.vocab.requirements import Policy, Requirement, ToolkitMode

__all__ = ["check_cmd"]

TEXT_WIDTH = 100


class CheckFormat(StrEnum):
    TEXT = "text"
    JSON = "json"


def _render_check(
    facts: NodeFacts, req: Requirement, policy: Policy, verdict: Any, width: int
) -> str:
    """The verdict first, then the node and each reason with its fix, wrapped at spaces."""
    head = f"{verdict.status.value}: {req.describe()} [{policy.value}] on {facts.name}"
    lines = wrapped(head, width)
    lines += wrapped(f"node: {facts.describe()}", width, "  ", "    ")
    for reason in verdict.reasons:
        lines += wrapped(f"- {reason.code}: {reason.message}", width, "  ", "      ")
        if reason.fix:
            lines += wrapped(f"fix: {reason.fix}", width, "    ", "      ")
    return "\n".join(lines)


def _started_under(
    req: Requirement,
    mode: ToolkitMode | None,
    driver: str | None,
    cuda: str | None,
    branches: str | None,
) -> Requirement:
    """``req`` with the compat library the options describe and the toolkit's mode."""
    compat = compat_from_options(driver, cuda, branches)
    mode = mode if mode is not None else ToolkitMode.LEGACY
    if compat is None and mode is req.toolkit:
        return req
    ships = req.ships_cuda_compat or compat is not None
    return replace(req, compat=compat, toolkit=mode, ships_cuda_compat=ships)


@app.command("check")
def check_cmd(
    gpu: Annotated[
        str | None,
        typer.Option(
            "--gpu",
            help="GPU product (A100, 'NVIDIA H100 80GB HBM3', Tesla-T4) or compute capability "
            "(8.6, sm_90).",
        ),
    ] = None,
    driver: Annotated[
        str | None, typer.Option("--driver", help="Node driver version, e.g. 535.104.05.")
    ] = None,
    cuda: Annotated[
        str | None,
        typer.Option(
            "--cuda",
            help="CUDA version the workload was built with (12.4, cu124); optional "
            "with --framework.",
        ),
    ] = None,
    policy: PolicyOption = Policy.STRICT.value,
    min_compute_capability: MinComputeOption = None,
    framework: FrameworkOption = None,
    ships_cuda_compat: ShipsCudaCompatOption = False,
    toolkit_mode: ToolkitModeOption = None,
    compat_driver: CompatDriverOption = None,
    compat_cuda: CompatCudaOption = None,
    compat_branches: CompatBranchesOption = None,
    node_labels: Annotated[
        Path | None,
        typer.Option(
            "--node-labels",
            help="YAML/JSON file with a node's labels or a Node object; replaces --gpu/--driver.",
        ),
    ] = None,
    output: Annotated[CheckFormat, typer.Option("-o", "--output", help="Output format.")] = (
        CheckFormat.TEXT
    ),
) -> None:
    """Say whether a node can run a workload built with a CUDA version, and why.

    Describe the node with --gpu and --driver, or --node-labels (GFD or cudasched.io labels);
    the image's compat library (--compat-driver ...) and --toolkit-mode tell a refusal by
    NVIDIA_REQUIRE_CUDA from CUDA errors 804/803. Exit 0: compatible (possibly with caveats); 1:
    incompatible; 2: bad input. Example: cudasched check --gpu A100 --driver 535.104.05 --cuda 12.4
    """
    try:
        pol = Policy.parse(policy)
        if node_labels is not None and (gpu is not None or driver is not None):
            raise InputError("--node-labels replaces --gpu and --driver: give one or the other")
        if node_labels is None and (gpu is None or driver is None):
            raise InputError("describe the node with --gpu and --driver, or with --node-labels")
        kb = load_knowledge()
        req = requirement_from_options(
            kb, cuda, framework, min_compute_capability, ships_cuda_compat, purpose="check"
        )
        req = _started_under(req, toolkit_mode, compat_driver, compat_cuda, compat_branches)
        if node_labels is not None:
            name, labels = load_node_labels(node_labels)
            facts = facts_from_labels(name, labels, kb)
        else:
            facts = facts_from_parts("node", gpu=gpu, driver=driver, kb=kb)
        verdict = check(facts, req, pol, kb)
        verdict = replace(verdict, reasons=with_fixes(verdict.reasons, facts, req, pol, kb))
    except InputError as exc:
        fail(str(exc))
    effective = resolve_policy(req, pol)
    if output is CheckFormat.JSON:
        doc = {
            **verdict.to_dict(),
            "policy": effective.value,
            "requirement": req.describe(),
            "toolkitMode": req.toolkit.value,
            "compatLibrary": req.compat.describe() if req.compat is not None else None,
            "node": facts.to_dict(),
        }
        typer.echo(json.dumps(doc, indent=2))
    else:
        typer.echo(_render_check(facts, req, effective, verdict, width(TEXT_WIDTH)))
    raise typer.Exit(EXIT_OK if verdict.compatible else EXIT_INCOMPATIBLE)
