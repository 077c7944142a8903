"""``cudasched explain``: node by node, where a workload may land and why.

The requirement of each workload is found the way the admission webhook finds it (annotations,
then the KServe runtime of a predictor pod, then the GPU container's ``NVIDIA_REQUIRE_CUDA`` or
image), and only workloads the webhook would constrain get one; the per-node answer then comes
from :func:`cudasched.explain.eligibility.explain`. An InferenceService is explained through the
predictor pod KServe would build for it (runtime selection, merged scheduling fields and container).
Without ``--workload`` every Pod and controller of the cluster is explained, plus the
InferenceServices that have no predictor pod yet: with the bundled sample cluster that is the
project's demo.

Where the cluster publishes ResourceSlices of NVIDIA's DRA driver, each workload with a
requirement is also judged device by device (:mod:`cudasched.explain.devices`): which GPUs its
CUDA-aware DeviceClass admits and why the others are refused. Without them the output is what
it always was.

A workload can also be named by reference, as kubectl names it (``isvc/llama3-8b -n team-nlp``,
``pod/NAME``, ``deploy/NAME``, ``llmisvc/NAME``): it is looked up in the cluster, which may be
the live one (``--live``).

``-o json`` is a stable contract (keys are only ever added): one workload gives
``{"nodes": [...], "summary": {...}}``, several give ``{"workloads": [{"workload": ID, "nodes":
[...], "summary": {...}}]}``; ``-o yaml`` is the same document in YAML and ``-o wide`` the table
without shortened names. Exit codes: 0 explained, 2 bad input (one line on stderr).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from cudasched.cli import terminal
from cudasched.cli.app import EXIT_OK, app, as_run, fail, note
from cudasched.cli.explainview import (
    TABLE_WIDTH,
    WIDE_WIDTH,
    Explained,
    Placement,
    compact_lines,
    device_lines,
    overview_lines,
    pool_names,
    print_node_table,
    print_overview_table,
    render_json,
    render_yaml,
    unknown_warnings,
)
from cudasched.cli.inputs import (
    ClusterSource,
    cluster_source,
    judged,
    load_cluster,
    load_images,
    load_knowledge,
    load_settings,
    load_toolkit_mode,
    require_nodes,
    with_image_sources,
)
from cudasched.cli.options import (
    ConfigOption,
    DefaultPolicyOption,
    PlainHttpOption,
    RegistryConfigOption,
    ResolveImagesOption,
    SchemeOption,
    ToolkitModeOption,
    effective_policy,
    effective_scheme,
)
from cudasched.cli.reference import Reference, parse_reference
from cudasched.cluster.fleet import Fleet
from cudasched.cluster.scope import Scope
from cudasched.cluster.snapshot import ClusterSnapshot, load_snapshot
from cudasched.explain.devices import explain_devices, nvidia_slices
from cudasched.explain.eligibility import explain_many
from cudasched.operations.refs import Owners
from cudasched.vocab.errors import InputError
from cudasched.vocab.kinds import POD
from cudasched.vocab.labels import LabelScheme
from cudasched.vocab.objects import DEFAULT_NAMESPACE
from cudasched.vocab.requirements import Policy
from cudasched.workloads.kserve.llm import is_llmisvc
from cudasched.workloads.pods import is_inference_service, pod_spec_of, workload_id, workloads_of
from cudasched.workloads.resolution import WorkloadNeed, workload_need

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.knowledge.images import ImageTable

__all__ = ["explain_cmd", "explain_snapshot"]


class ExplainFormat(StrEnum):
    TABLE = "table"
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"


# --------------------------------------------------------------------------- requirement


@contextlib.contextmanager
def _inputs_frozen() -> Iterator[None]:
    """The objects alive now (the cluster and workloads read, the fleet) moved out of the
    garbage collector's sight while the block runs: they live as long as the command, and a
    full collection walking millions of them again and again was a third of explaining 20,000
    workloads on 5,000 nodes (issue 22). New garbage is still collected; the objects are handed
    back afterwards."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def explain_snapshot(
    workloads: Sequence[Mapping[str, Any]],
    fleet: Fleet,
    policy: Policy,
    scheme: LabelScheme,
    images: ImageTable,
    slices: Sequence[Mapping[str, Any]] = (),
    left_out: list[dict[str, str]] | None = None,
    class_bound: bool = False,
) -> list[Explained]:
    """Resolve each workload's requirement against ``fleet`` and explain it there; where
    ``slices`` (NVIDIA's DRA ResourceSlices) are given, also device by device for each
    workload with a requirement. A pod's owner is the workload its controller stands for (the
    pods of a controller the cluster read holds are explained through it, so only pods remain
    whose ReplicaSet it does not hold).

    A workload whose requirement cannot be read (an invalid ``cudasched.io/*`` value) is bad
    input, unless ``left_out`` is given (a whole cluster explained): then it is left out and
    listed there (``{"workload", "error"}``), as admission leaves it unconstrained with a
    warning and the audit reports it; one such pod must not hide every other answer."""
    owners = Owners()
    kept: list[Mapping[str, Any]] = []
    targets: list[Mapping[str, Any]] = []
    needs: list[WorkloadNeed] = []
    for obj in workloads:
        try:
            target, need = workload_need(obj, fleet, images)
        except InputError as exc:
            if left_out is None:
                raise
            left_out.append({"workload": workload_id(obj), "error": str(exc)})
            continue
        kept.append(obj)
        targets.append(target)
        needs.append(need)
    workloads = kept
    with _inputs_frozen():
        explanations = explain_many(
            targets,
            fleet,
            policy,
            fleet.kb,
            scheme,
            requirements=[n.requirement for n in needs],
            unknowns=[n.unknown for n in needs],
            no_pods=[n.no_pods for n in needs],
            class_bound=class_bound,
        )
    out = []
    for obj, exp, need in zip(workloads, explanations, needs, strict=True):
        if is_inference_service(obj) or is_llmisvc(obj):  # the service, not the pod we built
            exp = dataclasses.replace(exp, workload=workload_id(obj))
        pod = obj.get("kind") == POD.kind
        placement = Placement.of(obj) if pod else None
        notes = (_NO_MODEL_SERVER,) if is_llmisvc(obj) else ()
        owner = owners.of(obj) if pod else None
        devices = None
        if slices and need.requirement is not None:
            devices = explain_devices(need.requirement, policy, fleet.kb, slices)
        out.append(Explained(exp, need.runtime, placement, notes, owner, devices))
    return out


#: Said of an LLMInferenceService explained as an object (KServe has created no pod for it).
_NO_MODEL_SERVER = (
    "no model-server pod yet: judged by the service's own spec, as admission and the audit "
    "judge it (an image its LLMInferenceServiceConfigs give is judged on its pods)"
)


# --------------------------------------------------------------------------- command


def _explained_objects(
    snapshot: ClusterSnapshot, label: str, scope: Scope | None = None
) -> list[Mapping[str, Any]]:
    objs = workloads_of(snapshot)
    where = ""
    if scope is not None and not scope.is_everything:
        objs = [o for o in objs if scope.admits(o)]
        where = f" in scope ({scope.describe()})"
    if not objs:
        raise InputError(
            f"{label}: no Pod, workload (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, "
            f"CronJob), InferenceService or LLMInferenceService to explain{where}"
        )
    for obj in objs:
        if not is_inference_service(obj) and not is_llmisvc(obj):
            pod_spec_of(obj)  # a controller without a pod template is bad input, said up front
    return objs


def _merge_context(base: ClusterSnapshot, extra: ClusterSnapshot) -> ClusterSnapshot:
    """KServe objects shipped next to a workload join the cluster's (the file's win); the
    cluster's other objects (its GPU Operator ClusterPolicy) stay."""
    return ClusterSnapshot(
        nodes=base.nodes,
        other=base.other,
        inference_services=extra.inference_services + base.inference_services,
        serving_runtimes=extra.serving_runtimes + base.serving_runtimes,
        cluster_serving_runtimes=extra.cluster_serving_runtimes + base.cluster_serving_runtimes,
        source=base.source,
    )


def _default_namespace(source: ClusterSource) -> str:
    """kubectl's namespace when ``-n`` is not given: the live context's, else ``default``."""
    if not source.is_live:
        return DEFAULT_NAMESPACE
    from cudasched.kube.client import load_config

    config = load_config(kubeconfig=source.kubeconfig, context=source.context)
    return config.settings.namespace or DEFAULT_NAMESPACE


def _images(
    kb: KnowledgeBase,
    settings: Any,
    read: tuple[Any, ClusterSource, ClusterSnapshot],
    resolving: tuple[bool, Path | None, list[str] | None],
) -> ImageTable:
    """The image table explain judges by: the settings' rows under the toolkit mode (the
    ``--toolkit-mode`` given, else what the cluster ``reads`` says), then the registries
    (``--resolve-images``) and the facts the cluster read keeps (listed live, or held by the
    dump ``context``)."""
    given, reads, context = read
    mode = load_toolkit_mode(given, settings, reads, context, kb).mode
    table = load_images(kb, settings).with_toolkit(mode)
    return with_image_sources(table, reads, *resolving, snapshot=context)


def _left_out(single: bool) -> list[dict[str, str]] | None:
    """Where the workloads left out are listed when several are explained (see
    :func:`explain_snapshot`); one workload asked for is explained or refused as bad input."""
    return None if single else []


def _judged(cluster: dict[str, Any], left_out: list[dict[str, str]] | None) -> dict[str, Any]:
    """What was judged, with the workloads left out because their requirement could not be
    read (``leftOut``, only when there are some), each also said on stderr."""
    for entry in left_out or ():
        note(f"{entry['workload']} left out: {entry['error']}")
    return {**cluster, "leftOut": left_out} if left_out else cluster


def _show(
    items: Sequence[Explained],
    output: ExplainFormat,
    single: bool,
    cluster: Mapping[str, Any],
    pools: Callable[[], Mapping[str, str]],
    *,
    per_node: bool,
    only_failing: bool,
) -> None:
    """Print the answers in the chosen format (the device view after each workload's nodes,
    where the cluster has DRA devices)."""
    if only_failing and not single and (per_node or output is not ExplainFormat.TABLE):
        items = [i for i in items if i.failing]  # the text overview filters its own lines
    if output is ExplainFormat.JSON:
        sys.stdout.write(render_json(items, single, cluster) + "\n")
    elif output is ExplainFormat.YAML:
        sys.stdout.write(render_yaml(items, single, cluster))
    elif output is ExplainFormat.WIDE:
        console = terminal.console(WIDE_WIDTH)
        for number, item in enumerate(items):
            if number:
                console.print()
            print_node_table(item, console)
            for warning in unknown_warnings(item):
                console.print(Text(warning, style="yellow"))
            if item.devices is not None:
                console.print(Text("\n".join(device_lines(item.devices, WIDE_WIDTH))))
        if len(items) > 1:
            console.print()
            print_overview_table(items, console)
    else:  # the pools are read only where the text shows them
        text = _text(items, pools(), single or per_node, per_node, only_failing)
        sys.stdout.write(as_run(text) + "\n")


def _text(
    items: Sequence[Explained],
    names: Mapping[str, str],
    each: bool,
    per_node: bool,
    only_failing: bool,
) -> str:
    """The text answer: each workload by pool (or node) with its device view (``each``), or
    the overview of several, one line per workload."""
    width = terminal.width(TABLE_WIDTH)
    if not each:
        return "\n".join(overview_lines(items, names, width, only_failing))
    blocks = [
        compact_lines(item, names, width, per_node=per_node, only_failing=only_failing)
        + (device_lines(item.devices, width) if item.devices is not None else [])
        for item in items
        if not (only_failing and item.explanation.eligible_count == item.explanation.total)
    ]
    return "\n\n".join("\n".join(b) for b in blocks)


@app.command("explain")
@cluster_source
def explain_cmd(
    reference: Annotated[
        str | None,
        typer.Argument(
            metavar="[TYPE/NAME]",
            help="A workload of the cluster, named as kubectl names it: isvc/NAME, "
            "llmisvc/NAME, pod/NAME, deploy/NAME (also sts, ds, rs, job, cj and the long "
            "names), or as explain and audit print it (NAMESPACE/Kind/NAME, "
            "Kind/NAMESPACE/NAME). Default: every workload of the cluster (in scope of -n/-l).",
            show_default=False,
        ),
    ] = None,
    workload: Annotated[
        Path | None,
        typer.Option(
            "--workload",
            help="YAML/JSON file with a Pod, Deployment, StatefulSet, DaemonSet, Job, CronJob or "
            "InferenceService (several allowed). Default: every workload of the cluster.",
        ),
    ] = None,
    nodes_file: Annotated[
        Path | None,
        typer.Option(
            "--nodes-file",
            help="Nodes to explain against (kubectl get nodes -o yaml). Default: the cluster's.",
        ),
    ] = None,
    per_node: Annotated[
        bool,
        typer.Option("--nodes", help="One entry per node instead of per node pool."),
    ] = False,
    only_failing: Annotated[
        bool,
        typer.Option(
            "--only-failing",
            help="Only the pools (or nodes) that cannot run it; of several workloads, in every "
            "output, only those no node can run or with pods on nodes that cannot run them.",
        ),
    ] = False,
    source: ClusterSource = ClusterSource(),
    config: ConfigOption = None,
    policy: DefaultPolicyOption = None,
    scheme: SchemeOption = None,
    resolve_images: ResolveImagesOption = False,
    registry_config: RegistryConfigOption = None,
    plain_http: PlainHttpOption = None,
    toolkit_mode: ToolkitModeOption = None,
    output: Annotated[
        ExplainFormat,
        typer.Option(
            "-o",
            "--output",
            help="table: by node pool, summary first; wide: a row per node with every detail; "
            "json, yaml: the same for scripts.",
        ),
    ] = ExplainFormat.TABLE,
) -> None:
    """Say, node by node, whether a workload can land there and why.

    The answer is grouped by node pool (GPU, driver and OS), summary first: how many pools and
    nodes can run it, and what keeps it off the others with the fix. Eligibility is
    Kubernetes' own required node-affinity and nodeSelector match of the pod spec with the
    workload's CUDA requirement ANDed in, as the webhook would admit it; reasons come from the
    compatibility engine and from the workload's own constraints. Examples: cudasched explain
    isvc/llama3-8b -n team-nlp --live; cudasched explain --workload deploy.yaml --nodes-file
    n.yaml
    """
    namespace = source.namespace
    try:
        settings = load_settings(config)
        pol = effective_policy(policy, settings)
        scope = source.scope
        ref: Reference | None = None
        if reference is not None:
            if workload is not None:
                raise InputError(
                    f"{reference!r} and --workload both name what to explain: give one"
                )
            if source.all_namespaces:
                raise InputError(
                    f"-A/--all-namespaces and {reference!r} do not go together: a TYPE/NAME is "
                    "in one namespace (-n)"
                )
            ref = parse_reference(reference, namespace, lambda: _default_namespace(source))
        elif (namespace is not None or source.selector) and workload is not None:
            raise InputError(
                "-n/--namespace and -l/--selector pick the cluster's workloads, not --workload's"
            )
        fetch = [f for f in (ref.to_fetch(),) if f is not None] if ref is not None else []
        context = load_cluster(source, nodes_file, fetch=fetch)
        require_nodes(context)
        if ref is not None:
            objs: Sequence[Mapping[str, Any]] = ref.workloads(context)
            single = len(objs) == 1
        elif workload is not None:
            given = load_snapshot(workload)
            objs = _explained_objects(given, str(workload))
            context = _merge_context(context, given)
            single = len(objs) == 1
        else:
            objs = _explained_objects(context, context.source or "cluster", scope)
            single = False
        fleet = Fleet.from_snapshot(context, kb := load_knowledge())
        alone = nodes_file is not None and not source.named  # files alone read no cluster
        reads = dataclasses.replace(source, sample=True) if alone else source
        resolving = (resolve_images, registry_config, plain_http)
        images = _images(kb, settings, (toolkit_mode, reads, context), resolving)
        left_out, bound = _left_out(single), settings.placement.bound_cuda_class
        labels, slices = effective_scheme(scheme, settings), nvidia_slices(context.other)
        items = explain_snapshot(objs, fleet, pol, labels, images, slices, left_out, bound)
    except InputError as exc:
        fail(str(exc))
    _show(
        items,
        output,
        single,
        _judged(judged(source, context), left_out),
        lambda: pool_names(context, fleet),
        per_node=per_node,
        only_failing=only_failing,
    )
    raise typer.Exit(EXIT_OK)
