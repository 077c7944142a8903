"""``cudasched kueue``: Kueue ResourceFlavors by CUDA class for the cluster's GPU nodes, a
ClusterQueue fragment that orders them, and which workloads each flavor can serve.

A thin shell over :mod:`cudasched.operations.kueueflavors`. ``-o yaml`` is a stream ``kubectl
apply -f`` takes (the flavors, then the ClusterQueue), each flavor preceded by the workloads it
serves as comments; ``-o json`` is ``{"flavors": [{"name", "nodeLabels", "nodes", "gpus",
"serves", "partly", "object"}], "clusterQueue": {...}, "unlabelled": [node, ...], "cluster":
{...}, "cudaschedVersion"}`` (``cluster``: what was judged). Exit codes: 0 printed, 2 bad input."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer
import yaml

from cudasched.cli.app import EXIT_OK, app, fail, note, versioned
from cudasched.cli.inputs import (
    ClusterSource,
    cluster_source,
    judged,
    load_cluster,
    load_images,
    load_knowledge,
    load_settings,
    require_nodes,
)
from cudasched.cli.options import ConfigOption, DefaultPolicyOption, effective_policy
from cudasched.vocab.errors import InputError
from cudasched.vocab.labelsyntax import dns_subdomain_ok

if TYPE_CHECKING:
    from cudasched.operations.kueueflavors import FlavorPlan

__all__ = ["kueue_cmd"]


class KueueFormat(StrEnum):
    YAML = "yaml"
    JSON = "json"


def _dump(obj: Any) -> str:
    return yaml.safe_dump(obj, sort_keys=False, width=1_000_000)


def _render_yaml(plan: FlavorPlan, source: str) -> str:
    out = f"# cudasched kueue: {source}\n"
    if not plan.flavors:
        out += "# no GPU node with the agent's labels: no flavor to apply\n"
    for flavor in plan.flavors:
        out += "---\n"
        out += f"# {len(flavor.nodes)} node(s), {flavor.gpus} GPU(s): {' '.join(flavor.nodes)}\n"
        out += "".join(f"# serves: {ref}\n" for ref in flavor.serves)
        out += "".join(f"# some nodes only: {ref}\n" for ref in flavor.partly)
        if not flavor.serves and not flavor.partly:
            out += "# serves: no workload of the cluster\n"
        out += _dump(flavor.resource_flavor())
    if plan.flavors:
        out += "---\n# merge into your ClusterQueue: flavors in the order Kueue tries them\n"
        out += _dump(plan.cluster_queue())
    return out


def _to_json(plan: FlavorPlan) -> dict[str, Any]:
    return {
        "flavors": [
            {
                "name": f.name,
                "nodeLabels": dict(f.node_labels),
                "nodes": list(f.nodes),
                "gpus": f.gpus,
                "serves": list(f.serves),
                "partly": list(f.partly),
                "object": f.resource_flavor(),
            }
            for f in plan.flavors
        ],
        "clusterQueue": plan.cluster_queue(),
        "unlabelled": list(plan.unlabelled),
    }


@app.command("kueue")
@cluster_source
def kueue_cmd(
    source: ClusterSource = ClusterSource(),
    config: ConfigOption = None,
    policy: DefaultPolicyOption = None,
    queue: Annotated[
        str, typer.Option("--queue", help="The ClusterQueue fragment's name.")
    ] = "gpu",
    output: Annotated[KueueFormat, typer.Option("-o", "--output", help="Output format.")] = (
        KueueFormat.YAML
    ),
) -> None:
    """Print Kueue ResourceFlavors by CUDA class, a ClusterQueue fragment ordering them, and
    which workloads each flavor can serve.

    One flavor per CUDA class (the agent's cudasched.io/cuda.code) and GPU of the GPU nodes;
    its nodeLabels declare the class, the compute capability, the product and (where the agent
    wrote it) the data-center flag, so Kueue can
    match those parts of a workload's node affinity (it ignores keys a flavor does not
    declare). Example: cudasched kueue --live > flavors.yaml
    """
    from dataclasses import replace

    from cudasched.cluster.fleet import Fleet
    from cudasched.operations.drivers.demand import cluster_demand
    from cudasched.operations.kueueflavors import kueue_flavors

    try:
        if not dns_subdomain_ok(queue):
            raise InputError(f"invalid --queue {queue!r}: expected a DNS subdomain")
        settings = load_settings(config)
        pol = effective_policy(policy, settings)
        # -n/-l: only the workloads in scope make demand; every node stays
        snapshot = source.scope.workloads(require_nodes(load_cluster(source)))
        kb = load_knowledge()
        fleet = Fleet.from_snapshot(snapshot, kb)
        demand = cluster_demand(snapshot, fleet, load_images(kb, settings), pol)
        plan = replace(kueue_flavors(snapshot, fleet, demand, pol), queue_name=queue)
    except InputError as exc:
        fail(str(exc))
    if plan.unlabelled:
        note(
            f"{len(plan.unlabelled)} GPU node(s) without the agent's labels are in no flavor "
            f"(run `cudasched agent` on them): {', '.join(plan.unlabelled)}"
        )
    if output is KueueFormat.JSON:
        doc = {**_to_json(plan), "cluster": judged(source, snapshot)}
        sys.stdout.write(json.dumps(versioned(doc), indent=2) + "\n")
    else:
        sys.stdout.write(_render_yaml(plan, snapshot.source or "cluster"))
    raise typer.Exit(EXIT_OK)
