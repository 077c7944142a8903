"""``cudasched affinity``: the node affinity that admits exactly the nodes able to run a CUDA
workload, correct for every version (no ``Gt "-1"``) and for newer CUDA majors; with ``--dra``,
the same requirement as a ``resource.k8s.io/v1`` ResourceClaimTemplate for the NVIDIA DRA driver.

A thin shell over the placement compiler (:mod:`cudasched.placement.dra` for ``--dra``); exit
codes: 0 printed, 2 bad input.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated

import typer
import yaml

from cudasched.cli.app import app, fail
from cudasched.cli.inputs import load_knowledge
from cudasched.cli.options import (
    FrameworkOption,
    MinComputeOption,
    PolicyOption,
    ShipsCudaCompatOption,
    TargetSchemeOption,
    requirement_from_options,
)
from cudasched.nodes.scheme import GfdKeys
from cudasched.placement.compile import compile_requirement, forward_compat_compiled
from cudasched.placement.merge import AffinityMode, node_affinity
from cudasched.vocab.errors import InputError
from cudasched.vocab.labels import LabelScheme
from cudasched.vocab.requirements import Policy

__all__ = ["affinity_cmd"]


class AffinityFormat(StrEnum):
    YAML = "yaml"
    JSON = "json"


BoundCudaClassOption = Annotated[
    bool,
    typer.Option(
        "--bound-cuda-class",
        help="Also bound cudasched.io/cuda.code wherever the affinity bounds the driver "
        "(the webhook's placement.boundCudaClass): the key Kueue flavors declare.",
    ),
]


def _echo(obj: object, output: AffinityFormat) -> None:
    if output is AffinityFormat.JSON:
        typer.echo(json.dumps(obj, indent=2))
    else:
        typer.echo(yaml.safe_dump(obj, sort_keys=False).rstrip("\n"))


@app.command("affinity")
def affinity_cmd(
    cuda: Annotated[
        str | None, typer.Option("--cuda", help="CUDA version the workload needs (12.4).")
    ] = None,
    policy: PolicyOption = Policy.STRICT.value,
    scheme: TargetSchemeOption = LabelScheme.CUDASCHED,
    gfd_keys: Annotated[
        GfdKeys,
        typer.Option(
            "--gfd-keys",
            help="GFD label generation: new (cuda.runtime-version.*, GFD >= 0.15) or "
            "deprecated (cuda.runtime.*, set by every GFD; use it when GFD versions are mixed).",
        ),
    ] = GfdKeys.NEW,
    mode: Annotated[
        AffinityMode,
        typer.Option("--mode", help="required (hard constraint) or preferred (weight 100)."),
    ] = AffinityMode.REQUIRED,
    min_compute_capability: MinComputeOption = None,
    framework: FrameworkOption = None,
    ships_cuda_compat: ShipsCudaCompatOption = False,
    dra: Annotated[
        bool,
        typer.Option(
            "--dra",
            help="Print a resource.k8s.io/v1 ResourceClaimTemplate whose request selects, with "
            "CEL on the NVIDIA DRA driver's attributes, the GPUs that can run the workload.",
        ),
    ] = False,
    name: Annotated[
        str | None,
        typer.Option("--name", help="With --dra: the template's name (default: gpu-cuda-X-Y)."),
    ] = None,
    output: Annotated[AffinityFormat, typer.Option("-o", "--output", help="Output format.")] = (
        AffinityFormat.YAML
    ),
    bound_cuda_class: BoundCudaClassOption = False,
) -> None:
    """Print the node affinity that admits exactly the nodes able to run a CUDA workload.

    The output is a map with one key, nodeAffinity, ready to paste under a pod's
    spec.affinity. It is correct for every version, including X.0 (no `Gt "-1"`) and newer
    CUDA majors. Forward-compat alternatives need --scheme cudasched (GFD labels do not say
    which GPUs are data-center parts). With --dra, a ResourceClaimTemplate for the NVIDIA DRA
    driver instead. Example: cudasched affinity --cuda 12.8 --scheme gfd
    """
    if dra:
        _dra(
            cuda,
            policy,
            scheme,
            mode,
            min_compute_capability,
            framework,
            ships_cuda_compat,
            name,
            output,
        )
        return
    if name is not None:
        fail("--name names a ResourceClaimTemplate: it needs --dra")
    try:
        pol = Policy.parse(policy)
        kb = load_knowledge()
        req = requirement_from_options(
            kb, cuda, framework, min_compute_capability, ships_cuda_compat, purpose="constrain"
        )
        terms = compile_requirement(req, pol, scheme, kb, gfd_keys, class_bound=bound_cuda_class)
        obj = {"nodeAffinity": node_affinity(terms, mode)}
    except InputError as exc:
        fail(str(exc))
    if pol is Policy.FORWARD_COMPAT and ships_cuda_compat and not forward_compat_compiled(scheme):
        typer.echo(
            "cudasched: warning: forward-compat alternatives are not expressible over GFD labels; "
            "this affinity admits native and minor-compat nodes only (use --scheme cudasched)",
            err=True,
        )
    _echo(obj, output)


def _dra(
    cuda: str | None,
    policy: str,
    scheme: LabelScheme,
    mode: AffinityMode,
    min_cc: str | None,
    framework: str | None,
    ships_cuda_compat: bool,
    name: str | None,
    output: AffinityFormat,
) -> None:
    """``affinity --dra``: the requirement as a ResourceClaimTemplate."""
    from cudasched.placement.dra import claim_template

    if scheme is not LabelScheme.CUDASCHED:
        fail("--dra selects on the DRA driver's device attributes, not node labels: drop --scheme")
    if mode is not AffinityMode.REQUIRED:
        fail("--dra selectors are always required (a claim has no preferences): drop --mode")
    try:
        pol = Policy.parse(policy)
        kb = load_knowledge()
        req = requirement_from_options(
            kb, cuda, framework, min_cc, ships_cuda_compat, purpose="constrain"
        )
        claim = claim_template(req, pol, kb, name=name)
    except InputError as exc:
        fail(str(exc))
    if claim.dropped_forward_compat:
        typer.echo(
            "cudasched: warning: forward-compat alternatives are not expressible over the DRA "
            "driver's attributes (none says data-center GPU); this claim selects native and "
            "minor-compat GPUs only",
            err=True,
        )
    if output is AffinityFormat.JSON:
        typer.echo(json.dumps(claim.obj, indent=2))
    else:
        typer.echo(yaml.safe_dump(claim.obj, sort_keys=False, width=1_000_000).rstrip("\n"))
