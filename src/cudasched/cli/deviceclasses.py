"""``cudasched device-classes``: CUDA-aware DRA DeviceClasses, one per requirement the cluster's
workloads ask (or one for ``--cuda``/``--framework``), each admitting exactly the NVIDIA GPUs that
run it, requestable as ``deviceclass.resource.kubernetes.io/<class>``.

A thin shell over :mod:`cudasched.operations.deviceclasses` and
:mod:`cudasched.placement.deviceclass`. ``-o yaml`` is a stream ``kubectl apply -f`` takes, each
class preceded by the workloads it serves as comments; ``-o json`` is ``{"deviceClasses":
[{"name", "extendedResource", "requirement", "policy", "workloads", "droppedForwardCompat",
"object"}], "unservable": [{"workloads", "why"}], "unreadable": [{"workload", "error"}],
"cluster", "cudaschedVersion"}`` (``cluster``, what was judged, only for the cluster's
classes; with ``--claim-templates`` each class also has ``claimTemplates``, the
ResourceClaimTemplates the webhook's ``dra.mode: claim`` refers to). Exit codes: 0 printed,
2 bad input."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
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
)
from cudasched.cli.options import (
    ConfigOption,
    DefaultPolicyOption,
    FrameworkOption,
    MinComputeOption,
    ShipsCudaCompatOption,
    effective_policy,
    requirement_from_options,
)
from cudasched.vocab.errors import InputError

if TYPE_CHECKING:
    from cudasched.operations.deviceclasses import ClassPlan

__all__ = ["device_classes_cmd"]


class ClassFormat(StrEnum):
    YAML = "yaml"
    JSON = "json"


def _render_yaml(plan: ClassPlan, source: str, counts: tuple[int, ...] = ()) -> str:
    lines = [f"# cudasched device-classes: {source}"]
    for workloads, why in plan.unservable:
        lines.append(f"# NO CLASS: {', '.join(workloads)}: {why}")
    for ref, error in plan.unreadable:
        lines.append(f"# UNREADABLE: {ref}: {error}")
    if not plan.classes:
        lines.append("# no workload with a CUDA requirement: no class to apply")
    out = "\n".join(lines) + "\n"
    for entry in plan.classes:
        out += "---\n"
        out += f"# requests: {entry.draft.extended_resource}\n"
        for ref in entry.workloads:
            out += f"# serves: {ref}\n"
        if entry.draft.dropped_forward_compat:
            out += "# WARNING: forward-compat GPUs left out (no attribute says data-center)\n"
        out += yaml.safe_dump(entry.draft.obj, sort_keys=False, width=1_000_000)
        for n, template in zip(counts, _templates(entry.draft.name, counts), strict=True):
            out += f"---\n# {n} of {entry.draft.name} (dra.mode: claim; apply in each namespace)\n"
            out += yaml.safe_dump(template, sort_keys=False, width=1_000_000)
    return out


def _templates(class_name: str, counts: tuple[int, ...]) -> list[dict[str, Any]]:
    from cudasched.placement.drarequest import class_claim_template

    return [class_claim_template(class_name, n) for n in counts]


def _counts(text: str | None) -> tuple[int, ...]:
    """``--claim-templates 1,2,4,8``: the device counts to print templates for."""
    if text is None:
        return ()
    try:
        counts = tuple(dict.fromkeys(int(part) for part in text.split(",")))
    except ValueError:
        counts = ()
    if not counts or any(not 1 <= n <= 64 for n in counts):
        raise InputError(
            f"invalid --claim-templates {text!r}: expected device counts such as 1,2,4,8 "
            "(each 1 to 64)"
        )
    return counts


def _to_json(plan: ClassPlan, counts: tuple[int, ...] = ()) -> dict[str, Any]:
    return {
        "deviceClasses": [
            {
                **({"claimTemplates": _templates(c.draft.name, counts)} if counts else {}),
                "name": c.draft.name,
                "extendedResource": c.draft.extended_resource,
                "requirement": c.requirement.describe(),
                "policy": c.policy.value,
                "workloads": list(c.workloads),
                "droppedForwardCompat": c.draft.dropped_forward_compat,
                "object": c.draft.obj,
            }
            for c in plan.classes
        ],
        "unservable": [{"workloads": list(w), "why": why} for w, why in plan.unservable],
        "unreadable": [{"workload": ref, "error": error} for ref, error in plan.unreadable],
    }


def _one_class(
    cuda: str | None,
    framework: str | None,
    min_cc: str | None,
    ships_cuda_compat: bool,
    policy: str | None,
    name: str | None,
    extended_resource_name: str | None,
) -> ClassPlan:
    from cudasched.compat.engine import resolve_policy
    from cudasched.operations.deviceclasses import ClassPlan, DemandClass
    from cudasched.placement.deviceclass import device_class
    from cudasched.vocab.requirements import Policy

    kb = load_knowledge()
    req = requirement_from_options(
        kb, cuda, framework, min_cc, ships_cuda_compat, purpose="constrain"
    )
    pol = resolve_policy(req, Policy.parse(policy) if policy else Policy.STRICT)
    draft = device_class(req, pol, kb, name=name, extended_resource_name=extended_resource_name)
    return ClassPlan((DemandClass(draft, req, pol, ()),))


@app.command("device-classes")
@cluster_source
def device_classes_cmd(
    source: ClusterSource = ClusterSource(),
    config: ConfigOption = None,
    policy: DefaultPolicyOption = None,
    cuda: Annotated[
        str | None,
        typer.Option("--cuda", help="One class for this CUDA version instead of the cluster's."),
    ] = None,
    framework: FrameworkOption = None,
    min_compute_capability: MinComputeOption = None,
    ships_cuda_compat: ShipsCudaCompatOption = False,
    name: Annotated[
        str | None,
        typer.Option("--name", help="With --cuda/--framework: the class's name."),
    ] = None,
    extended_resource_name: Annotated[
        str | None,
        typer.Option(
            "--extended-resource-name",
            help="With --cuda/--framework: spec.extendedResourceName (one name maps to one "
            "class, the newest: never nvidia.com/gpu while NVIDIA's chart owns it).",
        ),
    ] = None,
    claim_templates: Annotated[
        str | None,
        typer.Option(
            "--claim-templates",
            metavar="COUNTS",
            help="Also print, per class, a ResourceClaimTemplate for each of these device "
            "counts (1,2,4,8): what the webhook's dra.mode claim refers to; namespaced.",
        ),
    ] = None,
    output: Annotated[ClassFormat, typer.Option("-o", "--output", help="Output format.")] = (
        ClassFormat.YAML
    ),
) -> None:
    """Print CUDA-aware DRA DeviceClasses: one per CUDA requirement the cluster's workloads ask,
    each selecting exactly the NVIDIA GPUs that can run it. Only devices of NVIDIA's DRA driver
    of type gpu match.

    The selectors are the node affinity's rules on the driver's attributes (cudaDriverVersion,
    driverVersion, cudaComputeCapability). A pod asks for one with
    deviceclass.resource.kubernetes.io/<class>: N (Kubernetes 1.34+ with DRA extended
    resources) or a claim naming the class. Example: cudasched device-classes --live
    """
    one = cuda is not None or framework is not None or min_compute_capability is not None
    try:
        counts = _counts(claim_templates)
        if not one and (name is not None or extended_resource_name is not None):
            raise InputError(
                "--name and --extended-resource-name name one class: give --cuda or --framework"
            )
        cluster: dict[str, Any] | None = None
        if one:
            plan, label = (
                _one_class(
                    cuda,
                    framework,
                    min_compute_capability,
                    ships_cuda_compat,
                    policy,
                    name,
                    extended_resource_name,
                ),
                "command line",
            )
        else:
            plan, label, cluster = _cluster_classes(source, config, policy)
    except InputError as exc:
        fail(str(exc))
    _print(plan, label, cluster, counts, output)
    raise typer.Exit(EXIT_OK)


def _print(
    plan: ClassPlan,
    label: str,
    cluster: dict[str, Any] | None,
    counts: tuple[int, ...],
    output: ClassFormat,
) -> None:
    if any(c.draft.dropped_forward_compat for c in plan.classes):
        note(
            "forward-compat alternatives are not expressible over the DRA driver's attributes "
            "(none says data-center GPU): those classes select native and minor-compat GPUs only"
        )
    if output is ClassFormat.JSON:
        doc = _to_json(plan, counts)
        doc = doc if cluster is None else {**doc, "cluster": cluster}
        sys.stdout.write(json.dumps(versioned(doc), indent=2) + "\n")
    else:
        sys.stdout.write(_render_yaml(plan, label, counts))


def _cluster_classes(
    source: ClusterSource, config: Path | None, policy: str | None
) -> tuple[ClassPlan, str, dict[str, Any]]:
    """The classes the cluster's workloads ask, where they came from, and what the JSON
    answer says it judged."""
    from cudasched.cluster.fleet import Fleet
    from cudasched.operations.deviceclasses import classes_for_demand
    from cudasched.operations.drivers.demand import cluster_demand

    settings = load_settings(config)
    pol = effective_policy(policy, settings)
    snapshot = source.scope.workloads(load_cluster(source))
    kb = load_knowledge()
    fleet = Fleet.from_snapshot(snapshot, kb)
    demand = cluster_demand(snapshot, fleet, load_images(kb, settings), pol)
    plan = classes_for_demand(demand, kb)
    return plan, snapshot.source or "cluster", judged(source, snapshot)
