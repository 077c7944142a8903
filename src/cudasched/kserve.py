"""Which ServingRuntime a KServe InferenceService runs on, and which pods belong to it.

KServe never writes the chosen runtime into the InferenceService spec, and nothing on the pod
names it either, so a CUDA requirement that lives on a runtime (its image, its labels) can only
be found by repeating KServe's own selection. Every rule here mirrors KServe's Go code; the
files are cited next to each rule so a reader can check them against a KServe release:

* ``pkg/apis/serving/v1beta1/predictor_model.go``: ``GetSupportingRuntimes``,
  ``RuntimeSupportsModel``, the ``mt:name[:version]`` label sets, ``sortServingRuntimeList``,
  ``sortSupportedRuntimeByPriority``, ``GetProtocolVersionPriority``, ``GetProtocol``;
* ``pkg/apis/serving/v1alpha1/servingruntime_types.go``: ``IsDisabled``,
  ``IsMultiModelRuntime``, ``IsMultiNodeRuntime``, ``IsProtocolVersionSupported``,
  ``GetPriority``;
* ``pkg/apis/serving/v1beta1/inference_service_defaults.go``: ``setPredictorModelDefaults``
  (legacy ``spec.predictor.<framework>`` fields become ``spec.predictor.model``);
* ``pkg/controller/v1beta1/inferenceservice/components/predictor.go``: ``reconcileModel``
  (explicit runtime first, then the first auto-selected one; the status fields),
  ``buildObjectMeta`` / ``reconcileWorker`` (pod labels), ``buildPodSpec``;
* ``pkg/controller/v1beta1/inferenceservice/utils/utils.go``: ``GetServingRuntime`` (namespace
  runtime before cluster runtime), ``UpdateImageTag`` (``runtimeVersion`` and ``-gpu`` tags);
* ``pkg/utils/utils.go``: ``IsGPUEnabled`` (an ``nvidia.com/gpu`` limit);
* ``pkg/constants/constants.go``: label keys, container names, protocol order.

Where KServe versions differ we follow the newest behaviour (KServe >= 0.16) and say so.
Everything is pure: objects are plain dicts as the Kubernetes API returns them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cudasched.errors import InputError
from cudasched.objects import as_mapping as _mapping

__all__ = [
    "CLUSTER_SERVING_RUNTIME",
    "COMPONENT_LABEL",
    "INFERENCESERVICE_LABEL",
    "PREDICTOR_CONTAINER",
    "SERVING_RUNTIME",
    "WORKER_CONTAINER",
    "ModelRequest",
    "ParsedRuntimes",
    "RuntimeChoice",
    "RuntimeRef",
    "component_of",
    "effective_model",
    "explain_runtime_selection",
    "is_kserve_pod",
    "is_multinode_worker",
    "is_predictor_pod",
    "isvc_name_of",
    "predictor_container",
    "predictor_image",
    "recorded_runtime",
    "runtime_containers",
    "runtime_of_pod",
    "select_runtime",
    "supporting_runtimes",
]

# pkg/constants/constants.go
INFERENCESERVICE_LABEL = "serving.kserve.io/inferenceservice"  # InferenceServicePodLabelKey
COMPONENT_LABEL = "component"  # KServiceComponentLabel
APP_LABEL = "app"  # RawDeploymentAppLabel
DEPLOYMENT_MODE_ANNOTATION = "serving.kserve.io/deploymentMode"
PREDICTOR_CONTAINER = "kserve-container"  # InferenceServiceContainerName
WORKER_CONTAINER = "worker-container"  # WorkerContainerName
TRANSFORMER_CONTAINER = "transformer-container"  # TransformerContainerName
WORKER_SUFFIX = "-worker"  # "-" + WorkerNodeSuffix
COMPONENTS = frozenset({"predictor", "transformer", "explainer"})
NVIDIA_GPU = "nvidia.com/gpu"  # NvidiaGPUResourceType

SERVING_RUNTIME = "ServingRuntime"
CLUSTER_SERVING_RUNTIME = "ClusterServingRuntime"

# Protocol order used to sort runtime lists: V1=1, V2=2, GRPCV1=3, GRPCV2=4, Unknown=5
# (constants.go `ProtocolVersion` iota and `GetProtocolVersionInt`).
_PROTOCOL_RANK = {"v1": 1, "v2": 2, "grpc-v1": 3, "grpc-v2": 4}
_PROTOCOL_UNKNOWN = 5
_DEFAULT_PROTOCOL = "v1"  # ModelSpec.GetProtocol() when protocolVersion is unset

# setPredictorModelDefaults: the switch order decides which legacy field wins when several
# are (invalidly) set. The boolean says whether the legacy assigner defaults protocol to v2.
_LEGACY_FRAMEWORKS: tuple[tuple[str, str, bool], ...] = (
    ("sklearn", "sklearn", False),
    ("tensorflow", "tensorflow", False),
    ("xgboost", "xgboost", False),
    ("pytorch", "pytorch", False),
    ("triton", "triton", True),
    ("onnx", "onnx", True),
    ("huggingface", "huggingface", True),
    ("pmml", "pmml", False),
    ("lightgbm", "lightgbm", False),
    ("paddle", "paddle", False),
)
# After conversion the defaulter sets protocol v2 for these model formats (KServe >= 0.16 adds
# vLLM to the long-standing triton rule).
_V2_DEFAULT_FORMATS = frozenset({"triton", "vLLM"})

# UpdateImageTag appends "-gpu" only for these built-in runtimes (constants.TFServing,
# constants.TorchServe, constants.HuggingFaceServer).
_GPU_TAG_RUNTIMES = frozenset(
    {"kserve-tensorflow-serving", "kserve-torchserve", "kserve-huggingfaceserver"}
)
# PredictorExtensionSpec / ModelSpec fields that sit next to the inline container fields.
_NOT_CONTAINER_FIELDS = frozenset(
    {
        "name",
        "modelFormat",
        "runtime",
        "storageUri",
        "storage",
        "protocolVersion",
        "runtimeVersion",
        "confidential",
    }
)
_TAG_RE = re.compile(r"(:([\w.\-_]*))$")  # UpdateImageTag's tag pattern, verbatim semantics


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

    @property
    def ref(self) -> RuntimeRef:
        return RuntimeRef(self.kind, self.name)

    def describe(self) -> str:
        """``ClusterServingRuntime kserve-tritonserver``: the prefix of requirement sources."""
        return f"{self.kind} {self.name}"


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """``spec.predictor.model`` after KServe's defaulter: what runtime selection looks at.

    ``protocol`` is the value as stored (``None`` when unset); :attr:`effective_protocol`
    applies ``GetProtocol``'s ``v1`` default.
    """

    format_name: str
    format_version: str | None
    runtime: str | None
    protocol: str | None
    multi_node: bool
    origin: str  # "spec.predictor.model" or "spec.predictor.<framework>"
    container: Mapping[str, Any] = field(hash=False)

    @property
    def effective_protocol(self) -> str:
        return self.protocol if self.protocol is not None else _DEFAULT_PROTOCOL

    @property
    def format_label(self) -> str:
        """KServe's ``getModelFormatLabel``: ``mt:name`` or ``mt:name:version``."""
        if self.format_version is not None:
            return f"mt:{self.format_name}:{self.format_version}"
        return f"mt:{self.format_name}"


# --------------------------------------------------------------------------- small readers


def _list(value: object, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise InputError(f"invalid {what}: expected a list, got {type(value).__name__}")
    return list(value)


def _optional_str(value: object, what: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise InputError(f"invalid {what} {value!r}: expected a string")
    return str(value)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(obj.get("metadata"), "metadata")


def _name(obj: Mapping[str, Any]) -> str:
    return str(_meta(obj).get("name") or "")


def _namespace(obj: Mapping[str, Any]) -> str | None:
    ns = _meta(obj).get("namespace")
    return str(ns) if ns else None


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(_meta(obj).get("labels"), "metadata.labels")


def _spec(obj: Mapping[str, Any], what: str) -> Mapping[str, Any]:
    return _mapping(obj.get("spec"), f"{what} spec")


def _flag(value: object, what: str) -> bool:
    """A ``*bool`` field: absent or null is false, like the Go helpers' nil checks."""
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    raise InputError(f"invalid {what} {value!r}: expected true or false")


# --------------------------------------------------------------------------- pods


def is_kserve_pod(pod: Mapping[str, Any]) -> bool:
    """KServe labels every InferenceService pod with ``serving.kserve.io/inferenceservice``
    (predictor.go ``buildObjectMeta``); KServe's own pod mutator keys on the same label."""
    return bool(_labels(pod).get(INFERENCESERVICE_LABEL))


def isvc_name_of(pod: Mapping[str, Any]) -> str | None:
    """The owning InferenceService's name, from the pod label KServe sets."""
    value = _labels(pod).get(INFERENCESERVICE_LABEL)
    return str(value) if value else None


def component_of(pod: Mapping[str, Any]) -> str | None:
    """``predictor``, ``transformer`` or ``explainer`` from the ``component`` label.

    Multi-node worker pods carry ``component: predictor`` too (predictor.go
    ``reconcileWorker``); tell them apart with :func:`is_multinode_worker`.
    """
    if not is_kserve_pod(pod):
        return None
    value = _labels(pod).get(COMPONENT_LABEL)
    return str(value) if value in COMPONENTS else None


def is_predictor_pod(pod: Mapping[str, Any]) -> bool:
    """A predictor pod (head or multi-node worker): the one that runs the serving runtime."""
    return component_of(pod) == "predictor"


def is_multinode_worker(pod: Mapping[str, Any]) -> bool:
    """A worker pod of a multi-node predictor.

    KServe builds the worker Deployment with ``app: isvc.<predictor>-worker``
    (``createRawWorkerDeployment`` with ``constants.GetRawWorkerServiceLabel``) and names its
    container ``worker-container``; either marks a worker.
    """
    if not is_predictor_pod(pod):
        return False
    app = str(_labels(pod).get(APP_LABEL) or "")
    if app.startswith("isvc.") and app.endswith(WORKER_SUFFIX):
        return True
    containers = _list(_spec(pod, "pod").get("containers"), "pod spec.containers")
    return any(isinstance(c, Mapping) and c.get("name") == WORKER_CONTAINER for c in containers)


def recorded_runtime(isvc: Mapping[str, Any]) -> RuntimeRef | None:
    """The runtime KServe recorded in ``status`` (KServe >= 0.16), else ``None``."""
    status = _mapping(isvc.get("status"), "InferenceService status")
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
    if not is_predictor_pod(pod) or isvc_name_of(pod) != _name(isvc):
        return None
    pod_ns, isvc_ns = _namespace(pod), _namespace(isvc)
    if pod_ns and isvc_ns and pod_ns != isvc_ns:
        return None
    return recorded_runtime(isvc)


# --------------------------------------------------------------------------- defaulting


def effective_model(isvc: Mapping[str, Any]) -> ModelRequest | None:
    """``spec.predictor.model`` as KServe's defaulter leaves it, or ``None`` for a predictor
    made of custom containers (which uses no ServingRuntime).

    ``setPredictorModelDefaults`` turns a legacy ``spec.predictor.sklearn`` (etc.) into a model
    of that format, defaulting protocol ``v2`` for triton, onnx and huggingface; then any model
    of format ``triton`` or ``vLLM`` without a protocol gets ``v2``. Applying this to an object
    the defaulter already saw changes nothing, so stored and fresh objects both work.
    """
    spec = _spec(isvc, "InferenceService")
    predictor = _mapping(spec.get("predictor"), "spec.predictor")
    multi_node = predictor.get("workerSpec") is not None
    # The defaulter's switch looks at the legacy fields first and overwrites `model` with the
    # first one set, so a legacy field wins over a `model` written next to it.
    for key, fmt_name, v2_default in _LEGACY_FRAMEWORKS:
        legacy = predictor.get(key)
        if legacy is None:
            continue
        legacy = _mapping(legacy, f"spec.predictor.{key}")
        protocol = _optional_str(legacy.get("protocolVersion"), "protocolVersion")
        if protocol is None and (v2_default or fmt_name in _V2_DEFAULT_FORMATS):
            protocol = "v2"
        return ModelRequest(
            format_name=fmt_name,
            format_version=None,
            runtime=None,
            protocol=protocol,
            multi_node=multi_node,
            origin=f"spec.predictor.{key}",
            container=legacy,
        )
    model = predictor.get("model")
    if model is None:
        return None
    model = _mapping(model, "spec.predictor.model")
    fmt = _mapping(model.get("modelFormat"), "spec.predictor.model.modelFormat")
    name = _optional_str(fmt.get("name"), "spec.predictor.model.modelFormat.name")
    if not name:
        raise InputError(
            "invalid spec.predictor.model: expected modelFormat.name (KServe requires it)"
        )
    protocol = _optional_str(model.get("protocolVersion"), "protocolVersion")
    if protocol is None and name in _V2_DEFAULT_FORMATS:
        protocol = "v2"
    return ModelRequest(
        format_name=name,
        format_version=_optional_str(fmt.get("version"), "modelFormat.version"),
        runtime=_optional_str(model.get("runtime"), "spec.predictor.model.runtime") or None,
        protocol=protocol,
        multi_node=multi_node,
        origin="spec.predictor.model",
        container=model,
    )


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
    name = _name(obj)
    if not name:
        raise InputError(f"invalid {kind}: expected metadata.name")
    what = f"{kind} {name}"
    spec = _spec(obj, what)
    formats = []
    for i, entry in enumerate(_list(spec.get("supportedModelFormats"), f"{what} formats")):
        entry = _mapping(entry, f"{what} supportedModelFormats[{i}]")
        fmt_name = _optional_str(entry.get("name"), f"{what} supportedModelFormats[{i}].name")
        prio = entry.get("priority")
        if prio is not None and (isinstance(prio, bool) or not isinstance(prio, int)):
            raise InputError(
                f"invalid {what} supportedModelFormats[{i}].priority {prio!r}: expected an integer"
            )
        formats.append(
            (
                fmt_name or "",
                _optional_str(entry.get("version"), f"{what} supportedModelFormats[{i}].version"),
                _flag(entry.get("autoSelect"), f"{what} supportedModelFormats[{i}].autoSelect"),
                prio,
            )
        )
    protocols = tuple(
        str(p) for p in _list(spec.get("protocolVersions"), f"{what} protocolVersions")
    )
    return _Runtime(
        kind=kind,
        name=name,
        obj=obj,
        formats=tuple(formats),
        protocols=protocols,
        disabled=_flag(spec.get("disabled"), f"{what} spec.disabled"),
        multi_model=_flag(spec.get("multiModel"), f"{what} spec.multiModel"),
        multi_node=spec.get("workerSpec") is not None,
        created=_parse_time(_meta(obj).get("creationTimestamp"), f"{what} creationTimestamp"),
    )


def _in_namespace(objs: Iterable[Mapping[str, Any]], namespace: str | None) -> list[Any]:
    """Namespace runtimes the controller would list for this InferenceService: callers may
    pass runtimes of every namespace (a cluster snapshot), so keep those of ``namespace``."""
    kept = []
    for obj in objs:
        ns = _namespace(obj) if isinstance(obj, Mapping) else None
        if namespace is None or ns is None or ns == namespace:
            kept.append(obj)
    return kept


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
        if isinstance(obj, Mapping) and _name(obj) == name:
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
    namespace = _namespace(isvc)
    ns_objs = _in_namespace(runtimes, namespace)
    notes: list[str] = []

    annotations = _mapping(_meta(isvc).get("annotations"), "metadata.annotations")
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
        return None, f"runtime {name} named by {model.origin}.runtime not found"
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
    ns_objs = _in_namespace(runtimes, _namespace(isvc))
    ordered = _supporting(model, ns_objs, cluster_runtimes, multi_model=multi_model)
    return tuple(
        _choice(r, f"supports {model.format_label} over {model.effective_protocol}")
        for r in ordered
    )


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


# --------------------------------------------------------------------------- containers


def runtime_containers(
    runtime: Mapping[str, Any], *, worker: bool = False
) -> tuple[Mapping[str, Any], ...]:
    """The runtime's containers (``spec.containers``, or ``spec.workerSpec.containers``)."""
    what = f"{runtime.get('kind') or 'runtime'} {_name(runtime)}"
    spec = _spec(runtime, what)
    if worker:
        spec = _mapping(spec.get("workerSpec"), f"{what} spec.workerSpec")
    containers = _list(spec.get("containers"), f"{what} containers")
    return tuple(_mapping(c, f"{what} container") for c in containers)


def _merge_containers(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """The fields we read after ``MergeRuntimeContainers`` (a strategic merge of the
    InferenceService container onto the runtime's): scalars replace, ``resources`` maps merge
    per key, ``env`` merges by name."""
    merged = dict(base)
    for key, value in override.items():
        if key in _NOT_CONTAINER_FIELDS or value in (None, "", [], {}):
            continue
        if key == "resources":
            base_res = _mapping(base.get(key), "resources")
            res = {k: dict(_mapping(v, f"resources.{k}")) for k, v in base_res.items()}
            for part, values in _mapping(value, "resources").items():
                res.setdefault(part, {}).update(_mapping(values, f"resources.{part}"))
            merged[key] = res
        elif key == "env":
            env = {
                e.get("name"): e for e in _list(base.get("env"), "env") if isinstance(e, Mapping)
            }
            for e in _list(value, "env"):
                if isinstance(e, Mapping):
                    env[e.get("name")] = e
            merged[key] = list(env.values())
        else:
            merged[key] = value
    return merged


def predictor_container(
    isvc: Mapping[str, Any], runtime: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """The predictor's main container roughly as KServe builds it (``buildPodSpec``).

    With a runtime: its ``kserve-container`` merged with the model's container fields, with
    the image tag rewritten like ``UpdateImageTag`` does. Without one: the predictor's own
    ``kserve-container`` (or first container). ``None`` when there is nothing to read.
    """
    spec = _spec(isvc, "InferenceService")
    predictor = _mapping(spec.get("predictor"), "spec.predictor")
    if runtime is None:
        containers = [
            _mapping(c, "spec.predictor.containers[]")
            for c in _list(predictor.get("containers"), "spec.predictor.containers")
        ]
        for c in containers:
            if c.get("name") == PREDICTOR_CONTAINER:
                return dict(c)
        return dict(containers[0]) if containers else None
    base = next(
        (c for c in runtime_containers(runtime) if c.get("name") == PREDICTOR_CONTAINER), None
    )
    if base is None:
        return None  # KServe refuses such a runtime ("failed to find kserve-container")
    model = effective_model(isvc)
    merged = _merge_containers(base, model.container if model is not None else {})
    image = merged.get("image")
    if isinstance(image, str) and image:
        merged["image"] = _update_image_tag(
            image,
            runtime_version=_optional_str(
                model.container.get("runtimeVersion") if model else None, "runtimeVersion"
            ),
            gpu=NVIDIA_GPU in _mapping(merged.get("resources"), "resources").get("limits", {}),
            runtime_name=_name(runtime),
        )
    return merged


def _update_image_tag(
    image: str, *, runtime_version: str | None, gpu: bool, runtime_name: str
) -> str:
    """utils.go ``UpdateImageTag``: digests are left alone; ``runtimeVersion`` replaces (or
    adds) the tag; else a GPU container of the TF Serving, TorchServe or Hugging Face runtime
    gets ``-gpu`` appended to a tag that lacks it."""
    if "@sha256:" in image:
        return image
    if runtime_version is not None:
        if _TAG_RE.search(image) is None:
            return f"{image}:{runtime_version}"
        return _TAG_RE.sub(lambda _m: ":" + runtime_version, image)
    gpu_tagged = runtime_name in _GPU_TAG_RUNTIMES and _TAG_RE.search(image) is not None
    if gpu and gpu_tagged and not image.endswith("-gpu"):
        return image + "-gpu"
    return image


def predictor_image(isvc: Mapping[str, Any], runtime: Mapping[str, Any] | None) -> str | None:
    """The image KServe puts in the predictor's ``kserve-container`` (see
    :func:`predictor_container`); ``None`` when it cannot be known."""
    container = predictor_container(isvc, runtime)
    if container is None:
        return None
    image = container.get("image")
    return str(image) if image else None
