"""Which ServingRuntime or ClusterServingRuntime serves an InferenceService, by KServe's rules.

KServe never writes the chosen runtime into the InferenceService spec and puts no runtime name on
pods, so a requirement that lives on a runtime can only be found by repeating KServe's selection:
what the controller recorded in ``status`` (KServe >= 0.16), else the explicit
``model.runtime``, else auto-selection (``GetSupportingRuntimes``: namespace runtimes before
cluster runtimes, model format and version, protocol, ``autoSelect``, priority, the sort order
of ``sortServingRuntimeList``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cudasched.vocab.errors import InputError
from cudasched.vocab.objects import (
    as_flag,
    as_list,
    as_mapping,
    checked_metadata,
    checked_name,
    metadata_of,
    namespace_of,
    optional_str,
)
from cudasched.workloads.kserve.model import ModelRequest, effective_model
from cudasched.workloads.kserve.pods import is_predictor_pod, isvc_name_of

__all__ = [
    "CLUSTER_SERVING_RUNTIME",
    "DEPLOYMENT_MODE_ANNOTATION",
    "SERVING_RUNTIME",
    "ParsedRuntimes",
    "RuntimeChoice",
    "RuntimeRef",
    "explain_runtime_selection",
    "recorded_runtime",
    "runtime_of_pod",
    "runtime_refused",
    "select_runtime",
    "supporting_runtimes",
]

SERVING_RUNTIME = "ServingRuntime"
CLUSTER_SERVING_RUNTIME = "ClusterServingRuntime"
DEPLOYMENT_MODE_ANNOTATION = "serving.kserve.io/deploymentMode"

# Protocol order used to sort runtime lists: V1=1, V2=2, GRPCV1=3, GRPCV2=4, Unknown=5
# (constants.go `ProtocolVersion` iota and `GetProtocolVersionInt`).
_PROTOCOL_RANK = {"v1": 1, "v2": 2, "grpc-v1": 3, "grpc-v2": 4}
_PROTOCOL_UNKNOWN = 5


@dataclass(frozen=True, slots=True)
class RuntimeRef:
    """A runtime by kind and name, as KServe records it in the InferenceService status."""

    kind: str
    name: str


@dataclass(frozen=True, slots=True)
class RuntimeChoice:
    """The runtime KServe uses (or would use) for a predictor, and why we think so."""

    kind: str  # SERVING_RUNTIME | CLUSTER_SERVING_RUNTIME
    name: str
    obj: Mapping[str, Any] = field(hash=False)
    reason: str
    #: What readers derived from ``obj``, by reader, computed once per choice: a snapshot's
    #: objects are never changed, and every pod of a service is resolved with its choice.
    derived: dict[str, Any] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    @property
    def ref(self) -> RuntimeRef:
        return RuntimeRef(self.kind, self.name)

    def describe(self) -> str:
        """``ClusterServingRuntime kserve-tritonserver``: the prefix of requirement sources."""
        return f"{self.kind} {self.name}"


# --------------------------------------------------------------------------- recorded


def recorded_runtime(isvc: Mapping[str, Any]) -> RuntimeRef | None:
    """The runtime KServe recorded in ``status`` (KServe >= 0.16), else ``None``."""
    status = as_mapping(isvc.get("status"), "InferenceService status")
    if name := status.get("servingRuntimeName"):
        return RuntimeRef(SERVING_RUNTIME, str(name))
    if name := status.get("clusterServingRuntimeName"):
        return RuntimeRef(CLUSTER_SERVING_RUNTIME, str(name))
    return None


def runtime_of_pod(pod: Mapping[str, Any], isvc: Mapping[str, Any]) -> RuntimeRef | None:
    """The runtime a predictor pod runs, as far as KServe records it.

    KServe puts no runtime name on pods (only the runtime's ``spec.labels`` and
    ``spec.annotations`` reach them), so the answer comes from the owning InferenceService's
    status. ``None`` when ``isvc`` does not own ``pod``, the pod is not a predictor, or the
    status does not name a runtime (KServe < 0.16: use :func:`select_runtime`).
    """
    if not is_predictor_pod(pod) or isvc_name_of(pod) != checked_name(isvc):
        return None
    if namespace_of(pod) != namespace_of(isvc):
        return None
    return recorded_runtime(isvc)


# --------------------------------------------------------------------------- runtime facts


@dataclass(frozen=True, slots=True)
class _Runtime:
    kind: str
    name: str
    obj: Mapping[str, Any] = field(hash=False)
    formats: tuple[tuple[str, str | None, bool, int | None], ...]  # name, version, auto, prio
    protocols: tuple[str, ...]
    disabled: bool
    multi_model: bool
    multi_node: bool
    created: float  # POSIX seconds; -inf when absent (Go's zero time sorts oldest)

    @property
    def protocol_rank(self) -> int:
        """``GetProtocolVersionPriority``: the best (smallest) rank among the protocols."""
        if not self.protocols:
            return _PROTOCOL_UNKNOWN
        return min(_PROTOCOL_RANK.get(p, _PROTOCOL_UNKNOWN) for p in self.protocols)

    def supports_protocol(self, protocol: str) -> bool:
        """``IsProtocolVersionSupported``: an empty protocol or an empty list accepts all."""
        return not protocol or not self.protocols or protocol in self.protocols

    def priority(self, format_name: str) -> int | None:
        """``GetPriority``: the priority of the FIRST entry with exactly this name."""
        for name, _version, _auto, prio in self.formats:
            if name == format_name:
                return prio
        return None

    def supports_model(self, model: ModelRequest) -> bool:
        """``RuntimeSupportsModel``: the model's ``mt:`` label must be in the runtime's set.

        The set holds ``mt:name`` and ``mt:name:version`` of every entry, but only entries
        with ``autoSelect: true`` unless the model names a runtime explicitly. Names and
        versions compare as exact strings (a Go map lookup): ``1.0`` does not match ``1``,
        and ``Sklearn`` does not match ``sklearn``.
        """
        labels: set[str] = set()
        for name, version, auto, _prio in self.formats:
            if model.runtime is not None or auto:
                labels.add(f"mt:{name}")
                if version is not None:
                    labels.add(f"mt:{name}:{version}")
        return model.format_label in labels


def _parse_time(value: object, what: str) -> float:
    if value is None or value == "":
        return float("-inf")
    if not isinstance(value, str):
        raise InputError(f"invalid {what} {value!r}: expected an RFC 3339 timestamp")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise InputError(
            f"invalid {what} {value!r}: expected an RFC 3339 timestamp such as 2024-05-01T12:00:00Z"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def _runtime(obj: Mapping[str, Any], kind: str) -> _Runtime:
    if not isinstance(obj, Mapping):
        raise InputError(f"invalid {kind}: expected a mapping, got {type(obj).__name__}")
    name = checked_name(obj)
    if not name:
        raise InputError(f"invalid {kind}: expected metadata.name")
    what = f"{kind} {name}"
    spec = as_mapping(obj.get("spec"), what + " spec")
    formats = []
    for i, entry in enumerate(as_list(spec.get("supportedModelFormats"), f"{what} formats")):
        entry = as_mapping(entry, f"{what} supportedModelFormats[{i}]")
        fmt_name = optional_str(entry.get("name"), f"{what} supportedModelFormats[{i}].name")
        prio = entry.get("priority")
        if prio is not None and (isinstance(prio, bool) or not isinstance(prio, int)):
            raise InputError(
                f"invalid {what} supportedModelFormats[{i}].priority {prio!r}: expected an integer"
            )
        formats.append(
            (
                fmt_name or "",
                optional_str(entry.get("version"), f"{what} supportedModelFormats[{i}].version"),
                as_flag(entry.get("autoSelect"), f"{what} supportedModelFormats[{i}].autoSelect"),
                prio,
            )
        )
    protocols = tuple(
        str(p) for p in as_list(spec.get("protocolVersions"), f"{what} protocolVersions")
    )
    return _Runtime(
        kind=kind,
        name=name,
        obj=obj,
        formats=tuple(formats),
        protocols=protocols,
        disabled=as_flag(spec.get("disabled"), f"{what} spec.disabled"),
        multi_model=as_flag(spec.get("multiModel"), f"{what} spec.multiModel"),
        multi_node=spec.get("workerSpec") is not None,
        created=_parse_time(
            checked_metadata(obj).get("creationTimestamp"), f"{what} creationTimestamp"
        ),
    )


def _in_namespace(objs: Iterable[Mapping[str, Any]], namespace: str) -> list[Any]:
    """Namespace runtimes the controller would list for this InferenceService: callers may
    pass runtimes of every namespace (a cluster snapshot), so keep those of ``namespace``
    (an object written without one is in ``default``, see :func:`namespace_of`)."""
    return [obj for obj in objs if isinstance(obj, Mapping) and namespace_of(obj) == namespace]


def _sorted_list(runtimes: list[_Runtime]) -> list[_Runtime]:
    """``sortServingRuntimeList``: best protocol rank, then newest, then name ascending."""
    return sorted(runtimes, key=lambda r: (r.protocol_rank, -r.created, r.name))


def _by_priority(runtimes: list[_Runtime], format_name: str) -> list[_Runtime]:
    """``sortSupportedRuntimeByPriority``: runtimes with a priority for the format first,
    higher first; ties keep the list order (KServe HEAD sorts stably; 0.14-0.20 used the
    unstable ``sort.Slice``, whose tie order is not defined, so ties are a cluster smell the
    runtime validating webhook rejects for runtimes of one kind)."""

    def key(r: _Runtime) -> tuple[int, int]:
        prio = r.priority(format_name)
        return (1, 0) if prio is None else (0, -prio)

    return sorted(runtimes, key=key)


#: Parsed runtimes of one selection run, keyed by the identity of the runtime object and its
#: kind. Only valid while the caller holds those objects: it lives for one call, such as
#: indexing every InferenceService of a cluster snapshot (see ``select_runtime``).
ParsedRuntimes = dict[tuple[int, str], "_Runtime"]


def _parse(obj: Any, kind: str, parsed: ParsedRuntimes | None) -> _Runtime:
    if parsed is None:
        return _runtime(obj, kind)
    key = (id(obj), kind)
    found = parsed.get(key)
    if found is None:
        found = _runtime(obj, kind)  # a malformed runtime raises every time, never cached
        parsed[key] = found
    return found


def _find(
    objs: Iterable[Any], name: str, kind: str, parsed: ParsedRuntimes | None = None
) -> _Runtime | None:
    for obj in objs:
        if isinstance(obj, Mapping) and checked_name(obj) == name:
            return _parse(obj, kind, parsed)
    return None


def _choice(rt: _Runtime, reason: str) -> RuntimeChoice:
    return RuntimeChoice(kind=rt.kind, name=rt.name, obj=rt.obj, reason=reason)


# --------------------------------------------------------------------------- selection


def explain_runtime_selection(
    isvc: Mapping[str, Any],
    runtimes: Sequence[Mapping[str, Any]],
    cluster_runtimes: Sequence[Mapping[str, Any]],
    *,
    parsed: ParsedRuntimes | None = None,
) -> tuple[RuntimeChoice | None, str]:
    """:func:`select_runtime` plus, when no runtime applies, the reason why (for warnings)."""
    if not isinstance(isvc, Mapping):
        raise InputError(f"invalid InferenceService: expected a mapping, got {type(isvc)}")
    namespace = namespace_of(isvc)
    ns_objs = _in_namespace(runtimes, namespace)
    notes: list[str] = []

    annotations = as_mapping(checked_metadata(isvc).get("annotations"), "metadata.annotations")
    if annotations.get(DEPLOYMENT_MODE_ANNOTATION) == "ModelMesh":
        return None, "ModelMesh InferenceServices are placed by the ModelMesh controller"

    # 1. What the controller recorded (inference_service_status.go, KServe >= 0.16).
    recorded_choice: RuntimeChoice | None = None
    recorded = recorded_runtime(isvc)
    if recorded is not None:
        pool = ns_objs if recorded.kind == SERVING_RUNTIME else cluster_runtimes
        found = _find(pool, recorded.name, recorded.kind, parsed)
        field_name = (
            "servingRuntimeName"
            if recorded.kind == SERVING_RUNTIME
            else "clusterServingRuntimeName"
        )
        if found is not None:
            recorded_choice = _choice(found, f"status.{field_name}")
        else:
            notes.append(f"status.{field_name} names {recorded.name}, which was not found")

    model = effective_model(isvc)
    explicit = model.runtime if model is not None else None
    if recorded_choice is not None and explicit in (None, recorded_choice.name):
        return recorded_choice, ""
    if model is None:
        return None, "the predictor has custom containers and uses no ServingRuntime"

    # 2. An explicit runtime: utils.GetServingRuntime looks in the namespace first. The status
    # lags a spec edit by one reconcile, so a runtime named in the spec that KServe accepts
    # wins over a different recorded one; one KServe refuses leaves the recorded one serving.
    if explicit is not None:
        rt, why = _explicit_runtime(model, explicit, ns_objs, cluster_runtimes, parsed)
        if rt is not None:
            reason = f"{model.origin}.runtime"
            if recorded_choice is not None:
                reason += f" (status still names {recorded_choice.name})"
            return _choice(rt, reason), ""
        if recorded_choice is not None:
            return recorded_choice, ""
        return None, why

    # 3. Auto-selection (GetSupportingRuntimes; the caller takes the first element).
    protocol = model.effective_protocol
    ordered = _supporting(model, ns_objs, cluster_runtimes, multi_model=False, parsed=parsed)
    if not ordered:
        notes.append(
            f"no enabled autoSelect runtime supports {model.format_label} over protocol "
            f"{protocol}" + (" with a workerSpec" if model.multi_node else "")
        )
        return None, "; ".join(notes)
    first = ordered[0]
    prio = first.priority(model.format_name)
    detail = f"priority {prio}" if prio is not None else "no priority"
    scope = (
        "namespace runtimes before cluster runtimes"
        if first.kind == SERVING_RUNTIME
        else "cluster runtimes"
    )
    reason = (
        f"auto-selected for {model.format_label} over {protocol}: first of {len(ordered)} "
        f"candidate(s), {scope}, {detail}"
    )
    return _choice(first, reason), ""


def _explicit_runtime(
    model: ModelRequest,
    name: str,
    ns_objs: Iterable[Any],
    cluster_objs: Iterable[Any],
    parsed: ParsedRuntimes | None = None,
) -> tuple[_Runtime | None, str]:
    """``reconcileModel`` with a named runtime: found (namespace first), enabled, speaking
    the model's explicit protocol (only checked when set) and supporting its format."""
    rt = _find(ns_objs, name, SERVING_RUNTIME, parsed) or _find(
        cluster_objs, name, CLUSTER_SERVING_RUNTIME, parsed
    )
    if rt is None:
        return None, (
            f"no ServingRuntime or ClusterServingRuntime {name} (named by "
            f"{model.origin}.runtime) exists"
        )
    # reconcileModel refuses these; KServe then creates no predictor pods.
    if rt.disabled:
        return None, f"{rt.kind} {rt.name} is disabled"
    if model.protocol is not None and not rt.supports_protocol(model.protocol):
        return None, f"{rt.kind} {rt.name} does not support protocol {model.protocol}"
    if not rt.supports_model(model):
        return None, f"{rt.kind} {rt.name} does not support model format {model.format_label}"
    return rt, ""


def _supporting(
    model: ModelRequest,
    ns_objs: Iterable[Any],
    cluster_objs: Iterable[Any],
    *,
    multi_model: bool,
    parsed: ParsedRuntimes | None = None,
) -> list[_Runtime]:
    protocol = model.effective_protocol

    def candidates(objs: Iterable[Any], kind: str) -> list[_Runtime]:
        ordered = _sorted_list([_parse(o, kind, parsed) for o in objs])
        kept = [
            r
            for r in ordered
            if not r.disabled
            and r.multi_model == multi_model  # IsMultiModelRuntime() == isMMS
            and r.supports_model(model)
            and r.supports_protocol(protocol)
            and r.multi_node == model.multi_node  # KServe >= 0.15 multi-node filter
        ]
        return _by_priority(kept, model.format_name)

    return candidates(ns_objs, SERVING_RUNTIME) + candidates(cluster_objs, CLUSTER_SERVING_RUNTIME)


def supporting_runtimes(
    isvc: Mapping[str, Any],
    runtimes: Sequence[Mapping[str, Any]],
    cluster_runtimes: Sequence[Mapping[str, Any]],
    *,
    multi_model: bool = False,
) -> tuple[RuntimeChoice, ...]:
    """Every runtime auto-selection would accept, best first: KServe's
    ``GetSupportingRuntimes`` result for the predictor's (defaulted) model, ignoring any
    explicit or recorded runtime. The InferenceService controller passes ``isMMS=false``;
    ``multi_model=True`` gives the ModelMesh view. Empty for custom-container predictors."""
    model = effective_model(isvc)
    if model is None:
        return ()
    ns_objs = _in_namespace(runtimes, namespace_of(isvc))
    ordered = _supporting(model, ns_objs, cluster_runtimes, multi_model=multi_model)
    return tuple(
        _choice(r, f"supports {model.format_label} over {model.effective_protocol}")
        for r in ordered
    )


def runtime_refused(
    isvc: Mapping[str, Any],
    runtimes: Sequence[Mapping[str, Any]],
    cluster_runtimes: Sequence[Mapping[str, Any]],
) -> str | None:
    """Why KServe runs no predictor for ``isvc`` among these runtimes: the runtime it names
    does not exist, is disabled or does not serve its model, or no runtime supports its model
    (KServe then creates no pods, so no node can run it). ``None`` when KServe runs it with one
    of them, or it needs none (custom containers, ModelMesh)."""
    choice, why = explain_runtime_selection(isvc, runtimes, cluster_runtimes)
    if choice is not None or effective_model(isvc) is None:
        return None
    annotations = metadata_of(isvc).get("annotations")
    if isinstance(annotations, Mapping) and (
        annotations.get(DEPLOYMENT_MODE_ANNOTATION) == "ModelMesh"
    ):
        return None
    return why or "KServe selects no runtime for it"


def select_runtime(
    isvc: Mapping[str, Any],
    runtimes: Sequence[Mapping[str, Any]],
    cluster_runtimes: Sequence[Mapping[str, Any]],
    *,
    parsed: ParsedRuntimes | None = None,
) -> RuntimeChoice | None:
    """The runtime KServe uses for ``isvc``'s predictor, or ``None`` when it uses none.

    Order: the runtime recorded in ``status`` (if it is in the given lists), unless
    ``spec.predictor.model.runtime`` names another one that KServe would accept (the status
    is one reconcile behind such an edit); then ``spec.predictor.model.runtime`` (namespace
    runtime first, then cluster runtime; rejected like KServe rejects it when disabled, on an
    unsupported explicit protocol, or when the format does not match); then auto-selection:
    namespace runtimes always before cluster runtimes; disabled, multi-model and (for KServe
    >= 0.15) multi-node-mismatched runtimes skipped; ``autoSelect`` entries only; exact
    ``name[:version]`` match; protocol default ``v1``; lists sorted by protocol, newest
    first, name; then by priority, higher first.

    ``parsed`` (an empty dict the caller keeps for one run over many InferenceServices, while
    it holds the runtime objects) lets each runtime be parsed once instead of once per call.
    """
    return explain_runtime_selection(isvc, runtimes, cluster_runtimes, parsed=parsed)[0]
