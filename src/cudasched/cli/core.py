"""Core commands: ``check`` (can this node run this workload?) and ``affinity`` (the node
affinity that keeps a workload on nodes that can).

Both are thin shells over the pure core (``nodes``, ``engine``, ``placement``); everything they
print comes from there. ``-o json`` output is a stable contract: keys are only ever added.
Exit codes: 0 compatible (with or without caveats), 1 incompatible, 2 bad input.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import yaml

from cudasched.cli.app import EXIT_INCOMPATIBLE, EXIT_OK, app, fail
from cudasched.cli.inputs import load_knowledge, load_node_labels
from cudasched.engine import check, resolve_policy
from cudasched.errors import InputError
from cudasched.labels import LabelScheme
from cudasched.nodes import NodeFacts, facts_from_labels, facts_from_parts
from cudasched.placement import GfdKeys, compile_requirement, forward_compat_compiled, node_affinity
from cudasched.requirements import Policy, Requirement
from cudasched.versions import parse_compute_capability, parse_cuda

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase

__all__ = ["affinity_cmd", "check_cmd"]


class CheckFormat(StrEnum):
    TEXT = "text"
    JSON = "json"


class AffinityFormat(StrEnum):
    YAML = "yaml"
    JSON = "json"


class SchemeChoice(StrEnum):
    CUDASCHED = "cudasched"
    GFD = "gfd"


class ModeChoice(StrEnum):
    REQUIRED = "required"
    PREFERRED = "preferred"


_POLICY_HELP = (
    "strict: the driver natively supports the CUDA version; minor-compat: also any driver at or "
    "above the CUDA major's floor (no PTX JIT); forward-compat: also listed older data-center "
    "driver branches when the image ships cuda-compat."
)


def _requirement(
    kb: KnowledgeBase,
    cuda: str | None,
    framework: str | None,
    min_cc: str | None,
    ships_cuda_compat: bool,
) -> Requirement:
    build = None
    if framework is not None:
        build = kb.framework(framework)
        if build is None:
            raise InputError(
                f"unknown framework build {framework!r}: the knowledge base does not know it "
                "(expected e.g. 'torch 2.5.1+cu124', 'tensorflow 2.15.0', 'vllm 0.9.0')"
            )
    return Requirement(
        cuda=parse_cuda(cuda) if cuda is not None else None,
        min_compute=parse_compute_capability(min_cc) if min_cc is not None else None,
        ships_cuda_compat=ships_cuda_compat,
        framework=build,
        source="command line",
    )


def _render_check(facts: NodeFacts, req: Requirement, policy: Policy, verdict: Any) -> str:
    lines = [f"{verdict.status.value}: {req.describe()} [{policy.value}] on {facts.name}"]
    lines.append(f"  node: {facts.describe()}")
    for reason in verdict.reasons:
        lines.append(f"  - {reason.code}: {reason.message}")
    return "\n".join(lines)


# Options shared by `check` and `affinity`, declared once.
MinComputeOption = Annotated[
    str | None,
    typer.Option("--min-compute-capability", help="Lowest acceptable compute capability."),
]
FrameworkOption = Annotated[
    str | None,
    typer.Option("--framework", help="Framework build, e.g. 'torch 2.5.1+cu124'."),
]
ShipsCudaCompatOption = Annotated[
    bool,
    typer.Option(
        "--ships-cuda-compat", help="The image carries cuda-compat (forward compatibility)."
    ),
]


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
    policy: Annotated[str, typer.Option("--policy", help=_POLICY_HELP)] = Policy.STRICT.value,
    min_compute_capability: MinComputeOption = None,
    framework: FrameworkOption = None,
    ships_cuda_compat: ShipsCudaCompatOption = False,
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

    Describe the node with --gpu and --driver, or pass its labels with --node-labels (GFD or
    cudasched.io labels). Exit 0: compatible (possibly with caveats); 1: incompatible; 2: bad
    input. Example: cudasched check --gpu A100 --driver 535.104.05 --cuda 12.4
    """
    try:
        pol = Policy.parse(policy)
        if node_labels is not None and (gpu is not None or driver is not None):
            raise InputError("--node-labels replaces --gpu and --driver: give one or the other")
        if node_labels is None and (gpu is None or driver is None):
            raise InputError("describe the node with --gpu and --driver, or with --node-labels")
        kb = load_knowledge()
        req = _requirement(kb, cuda, framework, min_compute_capability, ships_cuda_compat)
        if req.is_empty:
            raise InputError(
                "nothing to check: give --cuda, --framework or --min-compute-capability"
            )
        if node_labels is not None:
            name, labels = load_node_labels(node_labels)
            facts = facts_from_labels(name, labels, kb)
        else:
            facts = facts_from_parts("node", gpu=gpu, driver=driver, kb=kb)
        verdict = check(facts, req, pol, kb)
    except InputError as exc:
        fail(str(exc))
    effective = resolve_policy(req, pol)
    if output is CheckFormat.JSON:
        doc = {
            **verdict.to_dict(),
            "policy": effective.value,
            "requirement": req.describe(),
            "node": facts.to_dict(),
        }
        typer.echo(json.dumps(doc, indent=2))
    else:
        typer.echo(_render_check(facts, req, effective, verdict))
    raise typer.Exit(EXIT_OK if verdict.compatible else EXIT_INCOMPATIBLE)


@app.command("affinity")
def affinity_cmd(
    cuda: Annotated[
        str | None, typer.Option("--cuda", help="CUDA version the workload needs (12.4).")
    ] = None,
    policy: Annotated[str, typer.Option("--policy", help=_POLICY_HELP)] = Policy.STRICT.value,
    scheme: Annotated[
        SchemeChoice,
        typer.Option(
            "--scheme",
            help="Node labels to target: cudasched (our integer codes, published by "
            "`cudasched agent`) or gfd (NVIDIA GPU Feature Discovery).",
        ),
    ] = SchemeChoice.CUDASCHED,
    gfd_keys: Annotated[
        GfdKeys,
        typer.Option(
            "--gfd-keys",
            help="GFD label generation: new (cuda.runtime-version.*, GFD >= 0.15) or "
            "deprecated (cuda.runtime.*, set by every GFD; use it when GFD versions are mixed).",
        ),
    ] = GfdKeys.NEW,
    mode: Annotated[
        ModeChoice,
        typer.Option("--mode", help="required (hard constraint) or preferred (weight 100)."),
    ] = ModeChoice.REQUIRED,
    min_compute_capability: MinComputeOption = None,
    framework: FrameworkOption = None,
    ships_cuda_compat: ShipsCudaCompatOption = False,
    output: Annotated[AffinityFormat, typer.Option("-o", "--output", help="Output format.")] = (
        AffinityFormat.YAML
    ),
) -> None:
    """Print the node affinity that admits exactly the nodes able to run a CUDA workload.

    The output is a map with one key, nodeAffinity, ready to paste under a pod's
    spec.affinity. It is correct for every version, including X.0 (no `Gt "-1"`) and newer
    CUDA majors. Forward-compat alternatives need --scheme cudasched (GFD labels do not say
    which GPUs are data-center parts). Example: cudasched affinity --cuda 12.8 --scheme gfd
    """
    try:
        pol = Policy.parse(policy)
        kb = load_knowledge()
        req = _requirement(kb, cuda, framework, min_compute_capability, ships_cuda_compat)
        if req.is_empty:
            raise InputError(
                "nothing to constrain: give --cuda, --framework or --min-compute-capability"
            )
        target = LabelScheme(scheme.value)
        terms = compile_requirement(req, pol, target, kb, gfd_keys=gfd_keys)
        obj = {"nodeAffinity": node_affinity(terms, mode.value)}
    except InputError as exc:
        fail(str(exc))
    if pol is Policy.FORWARD_COMPAT and ships_cuda_compat and not forward_compat_compiled(target):
        typer.echo(
            "cudasched: warning: forward-compat alternatives are not expressible over GFD labels; "
            "this affinity admits native and minor-compat nodes only (use --scheme cudasched)",
            err=True,
        )
    if output is AffinityFormat.JSON:
        typer.echo(json.dumps(obj, indent=2))
    else:
        typer.echo(yaml.safe_dump(obj, sort_keys=False).rstrip("\n"))
