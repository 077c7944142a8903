"""``cudasched node-template``: the labels the agent will publish for a GPU and a driver, and how
to declare them on a node group so an autoscaler can scale it up from zero.

A thin shell over :mod:`cudasched.nodes.autoscaling`. A GPU and driver that cannot go together
(a driver older than the GPU's first, or past its architecture's last branch:
:func:`cudasched.compat.branches.drive_problem`) is refused unless ``--force``. Exit codes: 0
printed, 2 bad input (a refused pair included).
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated

import typer
import yaml

from cudasched.cli.app import app, fail, versioned
from cudasched.cli.inputs import load_knowledge
from cudasched.nodes.autoscaling import NodeClassRef, Provider, node_template
from cudasched.vocab.errors import InputError

__all__ = ["node_template_cmd"]


class TemplateFormat(StrEnum):
    YAML = "yaml"
    JSON = "json"


@app.command("node-template")
def node_template_cmd(
    gpu: Annotated[
        str,
        typer.Option(
            "--gpu",
            help="The GPU as nvidia-smi names it ('NVIDIA H100 80GB HBM3'), its GFD product "
            "label, or a short name for products with one board (B200, L40S).",
        ),
    ],
    driver: Annotated[
        str, typer.Option("--driver", help="Driver version of the node image (570.124.06).")
    ],
    provider: Annotated[
        Provider,
        typer.Option("--provider", help="Where the node group is declared (all: every one)."),
    ] = Provider.ALL,
    gpus: Annotated[
        int, typer.Option("--gpus", min=1, help="GPUs per node (GFD's gpu.count).")
    ] = 1,
    gfd_compatible: Annotated[
        bool,
        typer.Option(
            "--gfd-compatible",
            help="Also declare GPU Feature Discovery's keys, as `cudasched agent "
            "--gfd-compatible` writes them (for affinity over GFD labels).",
        ),
    ] = False,
    name: Annotated[
        str | None,
        typer.Option("--name", help="Karpenter NodePool name (default: GPU and driver)."),
    ] = None,
    node_class: Annotated[
        str | None,
        typer.Option(
            "--node-class",
            help="Karpenter nodeClassRef as GROUP/KIND/NAME (default: "
            "karpenter.k8s.aws/EC2NodeClass/<NodePool name>); it must select an image with "
            "exactly this driver.",
        ),
    ] = None,
    instance_types: Annotated[
        list[str] | None,
        typer.Option(
            "--instance-type",
            help="Instance type carrying this GPU (repeatable): the NodePool's only requirement.",
        ),
    ] = None,
    driver_pool: Annotated[
        str | None,
        typer.Option(
            "--driver-pool",
            help="Also declare the driver plan's pool label (cudasched.io/driver-pool=NAME, "
            "the NVIDIADriver that plan-drivers writes for the group), so new nodes carry it.",
        ),
    ] = None,
    cpu: Annotated[
        str | None,
        typer.Option("--cpu", help="Cluster API: the nodes' CPU capacity (16), to scale from 0."),
    ] = None,
    memory: Annotated[
        str | None,
        typer.Option("--memory", help="Cluster API: the nodes' memory (128G), to scale from 0."),
    ] = None,
    force: Annotated[
        bool,
        typer.Option("--force", help="Print the template even for a GPU the driver cannot run."),
    ] = False,
    output: Annotated[TemplateFormat, typer.Option("-o", "--output", help="Output format.")] = (
        TemplateFormat.YAML
    ),
) -> None:
    """Print the labels the agent will publish on a node with this GPU and driver, and how to
    declare them on a node group so an autoscaler can scale it up from zero.

    Declarations: AWS Auto Scaling group tags, Azure VMSS tags, GKE and AKS node-pool labels, the
    Cluster API capacity.cluster-autoscaler.kubernetes.io/ annotations (labels, GPUs, CPU and
    memory), a Karpenter NodePool with the values fixed under spec.template.metadata.labels, and
    kubelet --node-labels. A driver that cannot drive the GPU is refused (exit 2) unless --force.
    Example: cudasched node-template --gpu H100 --driver 570.124.06 --provider aws
    """
    from cudasched.compat.branches import drive_problem, gpu_target
    from cudasched.nodes.facts import facts_from_parts
    from cudasched.vocab.versions import parse_driver

    try:
        kb = load_knowledge()
        target = gpu_target(kb, facts_from_parts("template", gpu=gpu, driver=None, kb=kb))
        problem = drive_problem(target, parse_driver(driver)) if target is not None else None
        if problem is not None and not force:
            raise InputError(
                f"driver {driver} cannot drive {gpu}: {problem} (--force prints it anyway)"
            )
        doc = node_template(
            gpu,
            driver,
            kb,
            providers=(provider,),
            gpus=gpus,
            gfd_compatible=gfd_compatible,
            nodepool_name=name,
            node_class=NodeClassRef.parse(node_class) if node_class is not None else None,
            instance_types=tuple(instance_types or ()),
            driver_pool=driver_pool,
            cpu=cpu,
            memory=memory,
        )
    except InputError as exc:
        fail(str(exc))
    if "capi" in doc["declarations"] and (cpu is None or memory is None):
        typer.echo(
            "cudasched: warning: the Cluster API autoscaler scales a group up from zero only "
            "with its capacity annotations: give --cpu and --memory (the nodes' capacity)",
            err=True,
        )
    if "karpenter" in doc["declarations"] and not instance_types:
        typer.echo(
            "cudasched: warning: the NodePool does not restrict instance types: give "
            "--instance-type so Karpenter launches only machines with this GPU (a machine with "
            "another GPU would carry these labels until the agent corrects them)",
            err=True,
        )
    if output is TemplateFormat.JSON:
        typer.echo(json.dumps(versioned(doc), indent=2))
    else:
        typer.echo(yaml.safe_dump(doc, sort_keys=False, width=1000).rstrip("\n"))
