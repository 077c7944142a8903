"""``cudasched explain``: node by node, where a workload may land and why.

The requirement of each workload is found the way the admission webhook finds it (annotations,
then the KServe runtime of a predictor pod, then the GPU container's ``NVIDIA_REQUIRE_CUDA`` or
image), and only workloads the webhook would constrain get one; the per-node answer then comes
from :func:`cudasched.explain.explain`. An InferenceService is explained through the predictor
pod KServe would build for it (runtime selection, merged scheduling fields and container).
Without ``--workload`` every Pod and controller of the cluster is explained, plus the
InferenceServices that have no predictor pod yet: with the bundled sample cluster that is the
project's demo.

``-o json`` is a stable contract (keys are only ever added): one workload gives
``{"nodes": [...], "summary": {...}}``, several give ``{"workloads": [{"workload": ID, "nodes":
[...], "summary": {...}}]}``. Exit codes: 0 explained, 2 bad input (one line on stderr).
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from cudasched.cli.app import EXIT_OK, app, fail
from cudasched.cluster import ClusterSnapshot, bundled_snapshot, load_nodes, load_snapshot
from cudasched.errors import InputError
from cudasched.explain import (
    Explanation,
    Fleet,
    explain_many,
    pod_spec_of,
    pod_template_metadata_of,
)
from cudasched.kserve import (
    COMPONENT_LABEL,
    INFERENCESERVICE_LABEL,
    RuntimeChoice,
    is_predictor_pod,
    isvc_name_of,
    predictor_container,
    select_runtime,
)
from cudasched.labels import LabelScheme
from cudasched.requirements import Policy, Requirement
from cudasched.resolution import resolve_isvc, resolve_pod, wants_constraint

if TYPE_CHECKING:
    from cudasched.images import ImageTable
    from cudasched.knowledge import KnowledgeBase

__all__ = ["explain_cmd", "explain_snapshot", "workloads_of"]

TABLE_WIDTH = 100


class ExplainFormat(StrEnum):
    TABLE = "table"
    JSON = "json"


class SchemeOption(StrEnum):
    AUTO = "auto"
    CUDASCHED = "cudasched"
    GFD = "gfd"


@dataclass(frozen=True, slots=True)
class _Explained:
    """One workload's explanation plus where its requirement came from (for the output)."""

    explanation: Explanation
    runtime: RuntimeChoice | None

    def to_dict(self) -> dict[str, Any]:
        doc = self.explanation.to_dict()
        doc["summary"]["runtime"] = self.runtime.describe() if self.runtime else None
        return doc


# --------------------------------------------------------------------------- requirement


class _Context:
    """The KServe objects and tables a requirement may be resolved from."""

    def __init__(self, snapshot: ClusterSnapshot, kb: KnowledgeBase, images: ImageTable) -> None:
        self.kb = kb
        self.images = images
        self.isvcs = {
            (_meta(i).get("namespace") or "default", _meta(i).get("name")): i
            for i in snapshot.inference_services
        }
        self.snapshot = snapshot

    def runtime_for(self, pod: Mapping[str, Any]) -> RuntimeChoice | None:
        if not is_predictor_pod(pod):
            return None
        namespace = _meta(pod).get("namespace") or "default"
        isvc = self.isvcs.get((namespace, isvc_name_of(pod)))
        if isvc is None:
            return None
        return self.runtime_of_isvc(isvc)

    def runtime_of_isvc(self, isvc: Mapping[str, Any]) -> RuntimeChoice | None:
        namespace = _meta(isvc).get("namespace") or "default"
        return select_runtime(
            isvc,
            self.snapshot.serving_runtimes_in(namespace),
            self.snapshot.cluster_serving_runtimes,
        )


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _as_pod(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The pod a workload creates: its template metadata (with the object's annotations
    underneath, as :mod:`cudasched.explain` reads them) and its pod spec."""
    if obj.get("kind") == "Pod":
        return dict(obj)
    meta = _meta(obj)
    template = pod_template_metadata_of(obj)
    annotations = {**(meta.get("annotations") or {}), **(template.get("annotations") or {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **template,
            "name": meta.get("name"),
            "namespace": meta.get("namespace") or "default",
            "annotations": annotations,
        },
        "spec": pod_spec_of(obj),
    }


# Pod-spec fields KServe takes from the runtime and the predictor (``MergePodSpec``).
_MERGED_FIELDS = ("nodeSelector", "affinity", "tolerations", "schedulerName")


def _smp(runtime: Any, isvc: Any) -> Any:
    """KServe's strategic merge of runtime and predictor scheduling fields: mappings merge key
    by key, lists and scalars from the InferenceService replace the runtime's (no list in
    these fields carries a merge key)."""
    if isinstance(runtime, Mapping) and isinstance(isvc, Mapping):
        out = {k: copy.deepcopy(v) for k, v in runtime.items()}
        for key, value in isvc.items():
            out[key] = _smp(runtime.get(key), value) if key in runtime else copy.deepcopy(value)
        return out
    return copy.deepcopy(isvc if isvc is not None else runtime)


def _predictor_pod(isvc: Mapping[str, Any], choice: RuntimeChoice | None) -> dict[str, Any]:
    """The predictor pod KServe would create for ``isvc`` (the parts placement depends on):
    the runtime's scheduling fields under the predictor's, the merged predictor container,
    and the labels and annotations KServe puts on predictor pods."""
    meta = _meta(isvc)
    spec = isvc.get("spec") if isinstance(isvc.get("spec"), Mapping) else {}
    predictor = spec.get("predictor") if isinstance(spec.get("predictor"), Mapping) else {}
    runtime_spec = (choice.obj.get("spec") or {}) if choice is not None else {}
    pod_spec: dict[str, Any] = {}
    for key in _MERGED_FIELDS:
        merged = _smp(runtime_spec.get(key), predictor.get(key))
        if merged is not None:
            pod_spec[key] = merged
    container = predictor_container(isvc, choice.obj if choice is not None else None)
    pod_spec["containers"] = [container] if container is not None else []
    name = str(meta.get("name") or "")
    annotations = {
        **(runtime_spec.get("annotations") or {}),
        **(meta.get("annotations") or {}),
        **(predictor.get("annotations") or {}),
    }
    labels = {
        **(runtime_spec.get("labels") or {}),
        **(meta.get("labels") or {}),
        **(predictor.get("labels") or {}),
        INFERENCESERVICE_LABEL: name,
        COMPONENT_LABEL: "predictor",
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-predictor",
            "namespace": meta.get("namespace") or "default",
            "labels": labels,
            "annotations": annotations,
        },
        "spec": pod_spec,
    }


def _isvc_requirement(
    isvc: Mapping[str, Any], ctx: _Context
) -> tuple[dict[str, Any], Requirement, RuntimeChoice | None]:
    """The predictor pod of an InferenceService and the requirement the webhook would put on
    it (only when the predictor uses a GPU or the service declares a requirement)."""
    choice = ctx.runtime_of_isvc(isvc)
    pod = _predictor_pod(isvc, choice)
    req = resolve_isvc(isvc, choice, ctx.images, ctx.kb)
    if not wants_constraint(pod, req):
        return pod, Requirement(), choice
    return pod, req, choice


def _requirement(obj: Mapping[str, Any], ctx: _Context) -> tuple[Requirement, RuntimeChoice | None]:
    """What the webhook would enforce for ``obj`` (empty when it would leave it alone)."""
    pod = _as_pod(obj)
    choice = ctx.runtime_for(pod)
    req = resolve_pod(pod, choice, ctx.images, ctx.kb)
    if not wants_constraint(pod, req):
        return Requirement(), choice
    return req, choice


# --------------------------------------------------------------------------- selection


def _controller_key(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = _meta(obj)
    return (str(obj.get("kind")), meta.get("namespace") or "default", str(meta.get("name")))


def _owned_by_listed(obj: Mapping[str, Any], listed: set[tuple[str, str, str]]) -> bool:
    """Whether a controller of ``obj`` is itself explained (its pods would repeat it)."""
    namespace = _meta(obj).get("namespace") or "default"
    return any(
        isinstance(ref, Mapping)
        and ref.get("controller")
        and (str(ref.get("kind")), namespace, str(ref.get("name"))) in listed
        for ref in _meta(obj).get("ownerReferences") or ()
    )


def workloads_of(snapshot: ClusterSnapshot) -> list[dict[str, Any]]:
    """Controllers, pods (minus those whose controller is listed too), then InferenceServices
    that have no predictor pod in the snapshot (not created yet, or scaled to zero)."""
    candidates = [*snapshot.workloads, *snapshot.pods]
    listed = {_controller_key(o) for o in snapshot.workloads}
    chosen = [o for o in candidates if not _owned_by_listed(o, listed)]
    with_pods = {
        (_meta(p).get("namespace") or "default", isvc_name_of(p))
        for p in snapshot.pods
        if is_predictor_pod(p)
    }
    for isvc in snapshot.inference_services:
        key = (_meta(isvc).get("namespace") or "default", _meta(isvc).get("name"))
        if key not in with_pods:
            chosen.append(isvc)
    return chosen


def explain_snapshot(
    workloads: Sequence[Mapping[str, Any]],
    nodes: Sequence[Mapping[str, Any]],
    context: ClusterSnapshot,
    policy: Policy,
    scheme: LabelScheme,
    kb: KnowledgeBase,
    images: ImageTable,
) -> list[_Explained]:
    """Resolve each workload's requirement against ``context`` and explain it on ``nodes``."""
    ctx = _Context(context, kb, images)
    targets: list[Mapping[str, Any]] = []
    resolved: list[tuple[Requirement, RuntimeChoice | None]] = []
    for obj in workloads:
        if _is_isvc(obj):
            pod, req, choice = _isvc_requirement(obj, ctx)
            targets.append(pod)
            resolved.append((req, choice))
        else:
            targets.append(obj)
            resolved.append(_requirement(obj, ctx))
    fleet = Fleet(nodes, kb)
    explanations = explain_many(
        targets, fleet, policy, kb, scheme, requirements=[r for r, _ in resolved]
    )
    out = []
    for obj, exp, (_, choice) in zip(workloads, explanations, resolved, strict=True):
        if _is_isvc(obj):  # name the service, not the pod we built for it
            meta = _meta(obj)
            exp = exp.replaced(
                workload=f"{meta.get('namespace') or 'default'}/InferenceService/"
                f"{meta.get('name')}",
            )
        out.append(_Explained(exp, choice))
    return out


def _is_isvc(obj: Mapping[str, Any]) -> bool:
    return obj.get("kind") == "InferenceService" and str(obj.get("apiVersion", "")).startswith(
        "serving.kserve.io/"
    )


# --------------------------------------------------------------------------- rendering


def _common_suffix(names: Sequence[str]) -> str:
    """A shared DNS suffix (``.us-west-2.compute.internal``) worth hiding in a narrow table."""
    dotted = [n for n in names if "." in n]
    if len(dotted) < 2:
        return ""
    suffix = "." + dotted[0].split(".", 1)[1]
    while suffix and not all(n.endswith(suffix) for n in dotted):
        parts = suffix.split(".", 2)
        suffix = "." + parts[2] if len(parts) > 2 else ""
    return suffix if len(suffix) > 8 else ""


def _short_gpu(products: Sequence[str]) -> str:
    if not products:
        return "-"
    return "+".join(p.removeprefix("NVIDIA-").removeprefix("Tesla-") for p in products)


def _table(item: _Explained) -> Table:
    exp = item.explanation
    summary = exp.summary()
    suffix = _common_suffix([n.node for n in exp.nodes])
    req = exp.requirement
    if req is not None:
        wants = f"{req.describe()} ({req.source or 'unknown source'}), policy {exp.policy.value}"
    else:
        wants = "no CUDA requirement (not constrained)"
    scheme = exp.scheme.value + (f"/{exp.gfd_keys.value} keys" if exp.gfd_keys else "")
    table = Table(
        title=Text(f"{exp.workload}", style="bold"),
        caption=(
            f"{summary['eligible']}/{summary['total']} eligible; {wants}; scheme {scheme}"
            + (f"; runtime {item.runtime.describe()}" if item.runtime else "")
            + (f"; node names end in {suffix}" if suffix else "")
            + (f"; no selector: {exp.requirement_error}" if exp.requirement_error else "")
            + (f"; preferred terms invalid: {exp.score_error}" if exp.score_error else "")
        ),
        caption_justify="left",
        expand=False,
    )
    table.add_column("node", overflow="fold", max_width=32)
    table.add_column("GPU", overflow="fold", max_width=16)
    table.add_column("driver", no_wrap=True)
    table.add_column("CUDA", no_wrap=True)
    table.add_column("ok", no_wrap=True, justify="center")
    table.add_column("score", justify="right", no_wrap=True)
    table.add_column("reasons", overflow="fold")
    for node in exp.nodes:
        facts = node.facts
        name = node.node.removesuffix(suffix) if suffix else node.node
        codes = ", ".join(dict.fromkeys(r.code for r in node.reasons)) or "-"
        table.add_row(
            name,
            _short_gpu(facts.products),
            str(facts.driver) if facts.driver else "-",
            str(facts.cuda) if facts.cuda else "-",
            Text("yes", style="green") if node.eligible else Text("no", style="red"),
            str(node.score),
            codes,
        )
    return table


def _overview(items: Sequence[_Explained]) -> Table:
    """One line per workload, after the per-workload tables: the demo's punch line."""
    table = Table(title=Text("summary", style="bold"), expand=False)
    table.add_column("workload", overflow="fold", max_width=46)
    table.add_column("needs", overflow="fold", max_width=20)
    table.add_column("runtime / source", overflow="fold", max_width=18)
    table.add_column("eligible", justify="right", no_wrap=True)
    for item in items:
        exp = item.explanation
        req = exp.requirement
        where = item.runtime.name if item.runtime else (req.source.split(" ")[0] if req else "")
        # Counted per group of alike nodes: the overview builds no per-node answer.
        count = exp.eligible_count
        table.add_row(
            exp.workload,
            req.describe() if req is not None else "-",
            where or "-",
            Text(f"{count}/{exp.total}", style="red" if count == 0 else ""),
        )
    return table


def _render_json(items: Sequence[_Explained], single: bool) -> str:
    if single:
        return json.dumps(items[0].to_dict(), indent=2)
    return json.dumps(
        {"workloads": [{"workload": i.explanation.workload, **i.to_dict()} for i in items]},
        indent=2,
    )


def _console() -> Console:
    console = Console(soft_wrap=False)
    if not console.is_terminal:
        console = Console(width=TABLE_WIDTH, soft_wrap=False)
    return console


# --------------------------------------------------------------------------- command


def _load_kb() -> KnowledgeBase:
    from cudasched.knowledge import KnowledgeBase

    return KnowledgeBase.load()


def _load_images(kb: KnowledgeBase) -> ImageTable:
    from cudasched.images import ImageTable

    return ImageTable.builtin(kb)


def _explained_objects(snapshot: ClusterSnapshot, label: str) -> list[dict[str, Any]]:
    objs = workloads_of(snapshot)
    if not objs:
        raise InputError(
            f"{label}: no Pod, workload (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, "
            "CronJob) or InferenceService to explain"
        )
    for obj in objs:
        if not _is_isvc(obj):
            pod_spec_of(obj)  # a controller without a pod template is bad input, said up front
    return objs


def _merge_context(base: ClusterSnapshot, extra: ClusterSnapshot) -> ClusterSnapshot:
    """KServe objects shipped next to a workload join the cluster's (the file's win)."""
    return ClusterSnapshot(
        nodes=base.nodes,
        inference_services=extra.inference_services + base.inference_services,
        serving_runtimes=extra.serving_runtimes + base.serving_runtimes,
        cluster_serving_runtimes=extra.cluster_serving_runtimes + base.cluster_serving_runtimes,
        source=base.source,
    )


@app.command("explain")
def explain_cmd(
    workload: Annotated[
        Path | None,
        typer.Option(
            "--workload",
            help="YAML/JSON file with a Pod, Deployment, StatefulSet, DaemonSet, Job, CronJob or "
            "InferenceService (several allowed). Default: every workload of the cluster.",
        ),
    ] = None,
    nodes: Annotated[
        Path | None,
        typer.Option(
            "--nodes",
            help="Nodes to explain against (kubectl get nodes -o yaml). Default: the cluster's.",
        ),
    ] = None,
    cluster: Annotated[
        Path | None,
        typer.Option(
            "--cluster",
            help="Cluster dump (kubectl get nodes,inferenceservices,servingruntimes,"
            "clusterservingruntimes,pods -A -o yaml). Default: the bundled sample cluster, "
            "unless --nodes is given.",
        ),
    ] = None,
    policy: Annotated[
        str,
        typer.Option(
            "--policy",
            help="Default policy (strict, minor-compat, forward-compat); a workload's "
            "cudasched.io/policy annotation wins.",
        ),
    ] = Policy.STRICT.value,
    scheme: Annotated[
        SchemeOption,
        typer.Option(
            "--scheme",
            help="Node labels the requirement is compiled to: auto (what every GPU node "
            "carries), cudasched or gfd.",
        ),
    ] = SchemeOption.AUTO,
    output: Annotated[ExplainFormat, typer.Option("-o", "--output", help="Output format.")] = (
        ExplainFormat.TABLE
    ),
) -> None:
    """Say, node by node, whether a workload can land there and why.

    Eligibility is Kubernetes' own required node-affinity and nodeSelector match of the pod
    spec with the workload's CUDA requirement ANDed in, as the webhook would admit it; score is
    the raw preferred-affinity sum; reasons come from the compatibility engine and from the
    workload's own constraints. Example: cudasched explain --workload deploy.yaml --nodes n.yaml
    """
    try:
        pol = Policy.parse(policy)
        if cluster is not None:
            context = load_snapshot(cluster)
        elif nodes is None:
            context = bundled_snapshot()
        else:
            context = ClusterSnapshot(source="")
        node_objs = load_nodes(nodes) if nodes is not None else context.nodes
        if not node_objs:
            raise InputError(f"{context.source or 'cluster'}: no Node objects to explain against")
        if workload is not None:
            given = load_snapshot(workload)
            objs = _explained_objects(given, str(workload))
            context = _merge_context(context, given)
            single = len(objs) == 1
        else:
            objs = _explained_objects(context, context.source or "cluster")
            single = False
        kb = _load_kb()
        items = explain_snapshot(
            objs, node_objs, context, pol, LabelScheme(scheme.value), kb, _load_images(kb)
        )
    except InputError as exc:
        fail(str(exc))
    if output is ExplainFormat.JSON:
        sys.stdout.write(_render_json(items, single) + "\n")
    else:
        console = _console()
        for number, item in enumerate(items):
            if number:
                console.print()
            console.print(_table(item))
        if len(items) > 1:
            console.print()
            console.print(_overview(items))
    raise typer.Exit(EXIT_OK)
