"""``cudasched affinity``: the node affinity that admits exactly the nodes able to run a CUDA
workload, correct for every version (no ``Gt "-1"``) and for newer CUDA majors.

A thin shell over the placement compiler; exit codes: 0 printed, 2 bad input.
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
from cudasched.errors import InputError
from cudasched.labels import LabelScheme
from cudasched.merge import AffinityMode
from cudasched.placement import GfdKeys, compile_requirement, forward_compat_compiled, node_affinity
from cudasched.requirements import Policy

__all__ = ["affinity_cmd"]


class AffinityFormat(StrEnum):
    YAML = "yaml"
    JSON = "json"


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
        req = requirement_from_options(
            kb, cuda, framework, min_compute_capability, ships_cuda_compat, purpose="constrain"
        )
        terms = compile_requirement(req, pol, scheme, kb, gfd_keys=gfd_keys)
        obj = {"nodeAffinity": node_affinity(terms, mode)}
    except InputError as exc:
        fail(str(exc))
    if pol is Policy.FORWARD_COMPAT and ships_cuda_compat and not forward_compat_compiled(scheme):
        typer.echo(
            "cudasched: warning: forward-compat alternatives are not expressible over GFD labels; "
            "this affinity admits native and minor-compat nodes only (use --scheme cudasched)",
            err=True,
        )
    if output is AffinityFormat.JSON:
        typer.echo(json.dumps(obj, indent=2))
    else:
        typer.echo(yaml.safe_dump(obj, sort_keys=False).rstrip("\n"))
