"""Where a workload's CUDA requirement comes from, in a fixed order of trust.

1. The object's own annotations (``cudasched.io/cuda-version``, ``min-compute-capability``,
   ``policy``, ``ships-cuda-compat``): the user said so.
2. The serving runtime's ``metadata`` annotations and labels: ``cudasched.io/*``, then Alauda's
   ``cpaas.io/accelerator-type`` + ``cpaas.io/cuda-version``. These never reach pods (KServe
   copies only the runtime's ``spec.labels``/``spec.annotations``), so the runtime object must
   be passed in. A runtime whose accelerator type is not NVIDIA yields no NVIDIA requirement.
3. The GPU container: its ``NVIDIA_REQUIRE_CUDA`` env, then its image in the image table.
   The env comes first because a pod-level value replaces the image's own and is exactly what
   the NVIDIA container toolkit enforces when the container starts.
4. Nothing: an empty requirement. For a workload that uses a GPU this is an *unknown*
   requirement (:func:`unknown_pod_requirement` and its siblings say why, with a closed reason
   code, the image judged and the fix), which the webhook reports rather than guesses.

The first source that names a CUDA version or a compute capability wins as a whole, so every
answer has one ``source``. ``policy`` and ``ships-cuda-compat`` are modifiers: the object's
annotations win over the runtime's, whichever source gave the CUDA version.

Accepted values of the ``cudasched.io/*`` keys, wherever they are read (object annotations,
runtime annotations and labels; the webhook, ``cudasched explain`` and ``cudasched check`` all
go through :func:`_read_cudasched`, so there is one rule):

* ``cuda-version``: any form :func:`cudasched.vocab.versions.parse_cuda` takes (``12.4``,
  ``12.4.1``, ``cu124``, ``12040``); ``min-compute-capability``: any form of
  :func:`cudasched.vocab.versions.parse_compute_capability` (``8.6``, ``sm_86``, ``86``);
  ``policy``: ``strict``, ``minor-compat`` or ``forward-compat``.
* ``ships-cuda-compat``: ``true`` or ``false`` in any letter case and nothing else: the words
  Kubernetes' own boolean annotations are written with (``safe-to-evict: "true"``). ``yes``,
  ``1`` or a typo such as ``ture`` is an error, never a silent ``false`` (which would change
  which nodes the workload may use).
* Surrounding whitespace is ignored; an empty value is an error like any other bad value (an
  annotation that is present says something; removing it is how to say nothing).
* The API server only stores strings. An object read from a YAML file written without quotes
  may carry numbers or booleans instead: an int or float is read as its decimal text (so
  ``12.4`` is CUDA 12.4, but ``12.10`` would already have become ``12.1`` in the YAML parser:
  quote versions), a boolean is accepted for ``ships-cuda-compat`` only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, cast

from cudasched.knowledge.imageconfig import config_cuda, gate_env
from cudasched.knowledge.images import ImageTable, ReleaseFacts, parse_require_cuda
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.vocab.kserve import PREDICTOR_CONTAINER
from cudasched.vocab.objects import as_mapping, namespace_of
from cudasched.vocab.requirecuda import REQUIRE_ENV, Gate
from cudasched.vocab.requirements import FrameworkBuild, Policy, Requirement
from cudasched.vocab.versions import (
    ComputeCapability,
    CudaVersion,
    parse_compute_capability,
    parse_cuda,
)
from cudasched.workloads.gpu import gpu_container, uses_gpu
from cudasched.workloads.kserve import (
    RuntimeChoice,
    isvc_uses_gpu,
    predictor_container,
    runtime_containers,
)
from cudasched.workloads.kserve.llm import (
    MAIN_CONTAINER,
    NAME_LABEL,
    is_llmisvc,
    llmisvc_main_container,
    llmisvc_pod,
)
from cudasched.workloads.pods import is_inference_service, pod_of
from cudasched.workloads.view import PodView, Role, view_pod

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase


class RuntimeIndex(Protocol):
    """The lookups :func:`resolve_workload` makes in a cluster, as admission makes them
    (``cluster.fleet.Fleet`` provides them): declared here so resolution does not depend on
    the stage above it."""

    @property
    def kb(self) -> KnowledgeBase: ...
    def select_runtime(self, isvc: Mapping[str, Any]) -> RuntimeChoice | None: ...
    def inference_service(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...
    def llm_inference_service(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...


__all__ = [
    "ALAUDA_ACCELERATOR_TYPE",
    "ALAUDA_CUDA_VERSION",
    "NO_IMAGE",
    "REGISTRY_FAILED",
    "REGISTRY_NO_CUDA",
    "TAG_NOT_RECORDED",
    "UNKNOWN_IMAGE",
    "NeedStatus",
    "UnknownRequirement",
    "WorkloadNeed",
    "declared_by_annotation",
    "isvc_need",
    "isvc_wants_constraint",
    "llmisvc_need",
    "pod_need",
    "requirement_from_annotations",
    "resolve_container",
    "resolve_isvc",
    "resolve_llmisvc",
    "resolve_llmisvc_pod",
    "resolve_pod",
    "resolve_runtime",
    "resolve_workload",
    "runs_gpu_workload",
    "runtime_need",
    "unknown_isvc_requirement",
    "unknown_llmisvc_requirement",
    "unknown_pod_requirement",
    "wants_constraint",
    "workload_need",
]

ALAUDA_ACCELERATOR_TYPE = "cpaas.io/accelerator-type"
ALAUDA_CUDA_VERSION = "cpaas.io/cuda-version"
_ANNOTATION_SOURCE = "annotation"  # every object-annotation source starts with this word


@dataclass(frozen=True, slots=True)
class _Found:
    """What one place says: the requirement fields and the keys they came from."""

    cuda: CudaVersion | None = None
    min_compute: ComputeCapability | None = None
    policy: Policy | None = None
    ships_cuda_compat: bool | None = None
    keys: tuple[str, ...] = ()

    @property
    def names_requirement(self) -> bool:
        return self.cuda is not None or self.min_compute is not None


def _text(value: object, key: str, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise InputError(f"invalid {key} {value!r} on {where}: expected a string")
    return str(value).strip()


def _parse_bool(value: object, key: str, where: str) -> bool:
    if isinstance(value, bool):
        return value
    text = _text(value, key, where).lower()
    if text in ("true", "false"):
        return text == "true"
    raise InputError(f"invalid {key} {value!r} on {where}: expected true or false")


#: What a map without any of our four keys says (most maps: read without building anything).
_NOTHING = _Found()


def _read_cudasched(values: Mapping[str, Any], where: str) -> _Found:
    """Our four keys from one annotation (or label) map; bad values name the key."""
    get = values.get
    if (
        get(L.ANN_CUDA_VERSION) is None
        and get(L.ANN_MIN_COMPUTE) is None
        and get(L.ANN_POLICY) is None
        and get(L.ANN_SHIPS_CUDA_COMPAT) is None
    ):
        return _NOTHING
    cuda = min_cc = policy = ships = None
    keys: list[str] = []

    def fail(key: str, exc: InputError) -> InputError:
        return InputError(f"invalid {key} on {where}: {exc}")

    if (raw := values.get(L.ANN_CUDA_VERSION)) is not None:
        try:
            cuda = parse_cuda(_text(raw, L.ANN_CUDA_VERSION, where))
        except InputError as exc:
            raise fail(L.ANN_CUDA_VERSION, exc) from None
        keys.append(L.ANN_CUDA_VERSION)
    if (raw := values.get(L.ANN_MIN_COMPUTE)) is not None:
        try:
            min_cc = parse_compute_capability(_text(raw, L.ANN_MIN_COMPUTE, where))
        except InputError as exc:
            raise fail(L.ANN_MIN_COMPUTE, exc) from None
        keys.append(L.ANN_MIN_COMPUTE)
    if (raw := values.get(L.ANN_POLICY)) is not None:
        try:
            policy = Policy.parse(_text(raw, L.ANN_POLICY, where))
        except InputError as exc:
            raise fail(L.ANN_POLICY, exc) from None
    if (raw := values.get(L.ANN_SHIPS_CUDA_COMPAT)) is not None:
        ships = _parse_bool(raw, L.ANN_SHIPS_CUDA_COMPAT, where)
    return _Found(cuda, min_cc, policy, ships, tuple(keys))


def _merge_modifiers(first: _Found, second: _Found) -> _Found:
    """``first``'s policy/compat flag win; requirement fields are not merged."""
    if (second.policy is None and second.ships_cuda_compat is None) or (
        first.policy is not None and first.ships_cuda_compat is not None
    ):
        return first  # nothing of ``second`` can show through
    return _Found(
        first.cuda,
        first.min_compute,
        first.policy if first.policy is not None else second.policy,
        (
            first.ships_cuda_compat
            if first.ships_cuda_compat is not None
            else second.ships_cuda_compat
        ),
        first.keys,
    )


def _requirement(found: _Found, modifiers: _Found, source: str) -> Requirement:
    return Requirement(
        cuda=found.cuda,
        min_compute=found.min_compute,
        policy=modifiers.policy,
        ships_cuda_compat=bool(modifiers.ships_cuda_compat),
        source=source,
    )


def _annotation_source(keys: tuple[str, ...]) -> str:
    return f"{_ANNOTATION_SOURCE} {', '.join(keys)}"


def requirement_from_annotations(annotations: Mapping[str, Any], where: str) -> Requirement | None:
    """The requirement an object declares with its own ``cudasched.io/*`` annotations, exactly
    as the webhook reads them (values and ``source`` included), or ``None`` when they name
    neither a CUDA version nor a minimum compute capability (a policy alone constrains nothing).

    ``where`` names the object in error messages. This is the first step of
    :func:`resolve_pod` with no runtime; ``cudasched explain`` reads workloads with it so that
    both always agree.
    """
    own = _read_cudasched(annotations, where)
    if not own.names_requirement:
        return None
    return _requirement(own, own, _annotation_source(own.keys))


def declared_by_annotation(requirement: Requirement) -> bool:
    """True when the requirement came from the workload's own annotations."""
    return requirement.source.startswith(_ANNOTATION_SOURCE)


# --------------------------------------------------------------------------- runtime step


@dataclass(frozen=True, slots=True)
class _RuntimeAnswer:
    found: _Found  # cudasched keys (modifiers always; requirement when names_requirement)
    requirement: Requirement | None  # a decided answer (requirement or "not NVIDIA")


def _runtime_identity(runtime: Mapping[str, Any] | RuntimeChoice) -> tuple[str, Mapping]:
    if isinstance(runtime, RuntimeChoice):
        return runtime.describe(), runtime.obj
    if not isinstance(runtime, Mapping):
        raise InputError(f"invalid runtime {runtime!r}: expected a ServingRuntime object")
    meta = as_mapping(runtime.get("metadata"), "runtime metadata")
    kind = str(runtime.get("kind") or "ServingRuntime")
    return f"{kind} {meta.get('name') or '?'}", runtime


def _from_runtime(runtime: Mapping[str, Any] | RuntimeChoice | None) -> _RuntimeAnswer:
    if runtime is None:
        return _RuntimeAnswer(_NOTHING, None)
    if isinstance(runtime, RuntimeChoice):
        # The same answer for every pod of the service: read once per choice.
        found = runtime.derived.get("resolution")
        if found is None:
            found = runtime.derived["resolution"] = _read_runtime(runtime)
        return cast(_RuntimeAnswer, found)
    return _read_runtime(runtime)


def _read_runtime(runtime: Mapping[str, Any] | RuntimeChoice) -> _RuntimeAnswer:
    who, obj = _runtime_identity(runtime)
    meta = as_mapping(obj.get("metadata"), f"{who} metadata")
    annotations = as_mapping(meta.get("annotations"), f"{who} annotations")
    labels = as_mapping(meta.get("labels"), f"{who} labels")
    by_annotation = _read_cudasched(annotations, f"{who} (annotation)")
    by_label = _read_cudasched(labels, f"{who} (label)")
    modifiers = _merge_modifiers(by_annotation, by_label)
    for found, kind in ((by_annotation, "annotation"), (by_label, "label")):
        if found.names_requirement:
            source = f"{who}, {kind} {', '.join(found.keys)}"
            return _RuntimeAnswer(modifiers, _requirement(found, modifiers, source))
    accelerator = labels.get(ALAUDA_ACCELERATOR_TYPE, annotations.get(ALAUDA_ACCELERATOR_TYPE))
    if accelerator is not None:
        kind_text = _text(accelerator, ALAUDA_ACCELERATOR_TYPE, who)
        if kind_text.lower() != "nvidia":
            source = f"{who}, label {ALAUDA_ACCELERATOR_TYPE}={kind_text}: not an NVIDIA runtime"
            return _RuntimeAnswer(modifiers, Requirement(source=source))
    raw = labels.get(ALAUDA_CUDA_VERSION)
    where = "label"
    if raw is None:
        raw, where = annotations.get(ALAUDA_CUDA_VERSION), "annotation"
    if raw is not None:
        try:
            cuda = parse_cuda(_text(raw, ALAUDA_CUDA_VERSION, who))
        except InputError as exc:
            raise InputError(f"invalid {ALAUDA_CUDA_VERSION} on {who}: {exc}") from None
        found = _Found(cuda=cuda, keys=(ALAUDA_CUDA_VERSION,))
        source = f"{who}, {where} {ALAUDA_CUDA_VERSION}"
        return _RuntimeAnswer(modifiers, _requirement(found, modifiers, source))
    return _RuntimeAnswer(modifiers, None)


# --------------------------------------------------------------------------- containers


@dataclass(frozen=True, slots=True)
class _ContainerFacts:
    """What the GPU container says: a CUDA (from its ``NVIDIA_REQUIRE_CUDA`` env or its image),
    the container toolkit's gate it starts under, and why there is no CUDA when there is none."""

    cuda: CudaVersion | None = None
    min_compute: ComputeCapability | None = None
    framework: FrameworkBuild | None = None
    source: str = ""
    gate: Gate | None = None
    ships_cuda_compat: bool | None = None
    lower_bound: bool = False
    why_unknown: str = ""


def _literal_env(container: Mapping[str, Any], name: str) -> dict[str, str]:
    """The container's env given as literal values (``valueFrom`` is not knowable here)."""
    env = container.get("env") or []
    if not isinstance(env, list):
        raise InputError(f"invalid env of container {name}: expected a list")
    out: dict[str, str] = {}
    for var in env:
        if (type(var) is dict or isinstance(var, Mapping)) and isinstance(var.get("name"), str):
            value = var.get("value")
            if value is not None:
                out[var["name"]] = str(value)
    return out


def _from_container(
    container: Mapping[str, Any] | None, images: ImageTable, kb: ReleaseFacts | None
) -> _ContainerFacts:
    if container is None:
        return _ContainerFacts()
    name = str(container.get("name") or "?")
    env = _literal_env(container, name)
    lookup = None
    image = container.get("image")
    if isinstance(image, str) and image.strip():
        try:
            lookup = images.lookup(image, kb=kb)
        except InputError:
            # The API server does not validate image references; one we cannot parse is
            # simply not a well-known image (the kubelet will report it at pull time).
            lookup = None
    match = lookup.match if lookup is not None else None
    config = images.config_for(image) if lookup is not None else None
    if config is not None and not config.ok:
        config = None  # not read: the table decides (and an unknown says why)
    # The container's env replaces the image's variable of the same name (Kubernetes env
    # over image ENV), which is what the toolkit reads when the container starts. The image's
    # own config, when read from its registry, is the image's env; the table's value is what
    # the table knows of it.
    if config is not None:
        image_env = gate_env(config)
    else:
        image_env = {REQUIRE_ENV: match.require_cuda} if match and match.require_cuda else {}
    where = f"container {name}"
    try:
        gate = images.gate_for({**image_env, **env}, _gate_source(env, image_env, where, image))
    except InputError as exc:
        raise InputError(f"invalid env of container {name}: {exc}") from None
    ships = match.ships_cuda_compat if match is not None else None
    floor = parse_require_cuda(env[REQUIRE_ENV]) if env.get(REQUIRE_ENV) else None
    if floor is not None:
        return _ContainerFacts(
            floor, source=f"env {REQUIRE_ENV} of {where}", gate=gate, ships_cuda_compat=ships
        )
    if config is not None:
        cuda, said = config_cuda(config)
        if cuda is not None:
            return _ContainerFacts(
                cuda,
                match.min_compute if match is not None and match.cuda == cuda else None,
                source=f"image config of {str(image).strip()} ({said}"
                + (f", read from mirror {config.mirror})" if config.mirror else ")"),
                gate=gate,
                ships_cuda_compat=ships,
            )
    if match is not None:
        return _ContainerFacts(
            match.cuda.release,
            match.min_compute,
            match.framework,
            f"image {str(image).strip()}"
            + (
                " (at least this CUDA; its exact version is not recorded)"
                if match.lower_bound
                else ""
            ),
            gate=gate,
            ships_cuda_compat=ships,
            lower_bound=match.lower_bound,
        )
    why = lookup.why if lookup is not None else f"{where} names no image cudasched can read"
    if config is not None:
        why = f"the config of image {str(image).strip()} names no CUDA ({config.digest})"
    return _ContainerFacts(gate=gate, why_unknown=why)


def _gate_source(
    env: Mapping[str, str], image_env: Mapping[str, str], where: str, image: object
) -> str:
    if REQUIRE_ENV in env:
        return f"env of {where}"
    if image_env:
        return f"image {str(image).strip()}"
    return f"env of {where}"


# --------------------------------------------------------------------------- entry points


def _stricter(declared: Requirement, facts: _ContainerFacts, who: str) -> tuple[Requirement, str]:
    """A runtime's declared requirement against what its image says: the stricter of each
    field, and the disagreement in words ("" when they agree, or when the image's CUDA is only
    a floor the declaration respects)."""
    if facts.cuda is None:
        return declared, ""
    cuda = declared.cuda
    if cuda is None or facts.cuda > cuda:
        cuda = facts.cuda
    low = declared.min_compute
    if facts.min_compute is not None and (low is None or facts.min_compute > low):
        low = facts.min_compute
    differs = declared.cuda is not None and (
        declared.cuda < facts.cuda or (declared.cuda > facts.cuda and not facts.lower_bound)
    )
    differs = differs or (facts.min_compute is not None and low != declared.min_compute)
    # The image's framework build (its kernel list) comes along when the image's CUDA is used.
    raised = declared.cuda is None or facts.cuda > declared.cuda
    framework = facts.framework if raised else declared.framework
    if not differs:
        return _with_found(declared, cuda, low, framework, declared.source), ""
    # The webhook's warning (at most 120 characters): what is used first, then who said
    # what; the image's name is in the requirement's source, recorded on the object.
    said = declared.describe()
    image = Requirement(cuda=facts.cuda, min_compute=facts.min_compute).describe()
    kept = Requirement(cuda=cuda, min_compute=low).describe()
    if kept == image:
        text = f"using {kept}, what its image needs: {who} says {said}"
    else:
        text = f"using {kept}: {who} says {said}, its image {image}"
    raised = raised or low != declared.min_compute
    source = f"{declared.source}; stricter {facts.source}" if raised else declared.source
    return _with_found(declared, cuda, low, framework, source), text


def _with_found(
    declared: Requirement,
    cuda: CudaVersion | None,
    low: ComputeCapability | None,
    framework: FrameworkBuild | None,
    source: str,
) -> Requirement:
    """``declared`` with what was found in place of its own fields (built directly: a
    ``dataclasses.replace`` costs microseconds, and every first-seen pod resolves)."""
    return Requirement(
        cuda=cuda,
        min_compute=low,
        policy=declared.policy,
        ships_cuda_compat=declared.ships_cuda_compat,
        framework=framework,
        source=source,
        gate=declared.gate,
        unknown_reason=declared.unknown_reason,
        disagreement=declared.disagreement,
    )


def _resolve(
    annotations: Mapping[str, Any],
    where: str,
    runtime: Mapping[str, Any] | RuntimeChoice | None,
    container: Mapping[str, Any] | None,
    images: ImageTable,
    kb: ReleaseFacts | None,
) -> Requirement:
    own = _read_cudasched(annotations, where)
    answer = _from_runtime(runtime)
    modifiers = _merge_modifiers(own, answer.found)
    if answer.requirement is not None and answer.requirement.is_empty and not own.names_requirement:
        return answer.requirement  # a non-NVIDIA runtime: decided, no requirement
    facts = _from_container(container, images, kb)
    ships = (
        modifiers.ships_cuda_compat
        if modifiers.ships_cuda_compat is not None
        else bool(facts.ships_cuda_compat)
    )
    # Each answer is built in one go (no ``dataclasses.replace`` chains: every first-seen pod
    # resolves, and each replace costs microseconds).
    if own.names_requirement:
        return Requirement(
            cuda=own.cuda,
            min_compute=own.min_compute,
            policy=modifiers.policy,
            ships_cuda_compat=ships,
            source=_annotation_source(own.keys),
            gate=facts.gate,
        )
    said = answer.requirement
    if said is not None:
        # What the runtime said (its CUDA and compute capability, never a framework build)
        # with the pod's modifiers and its container's gate.
        declared = Requirement(
            cuda=said.cuda,
            min_compute=said.min_compute,
            policy=modifiers.policy,
            ships_cuda_compat=ships,
            framework=said.framework,
            source=said.source,
            gate=facts.gate,
            unknown_reason=said.unknown_reason,
        )
        who = _runtime_identity(runtime)[0] if runtime is not None else "the runtime"
        stricter, disagreement = _stricter(declared, facts, who)
        return replace(stricter, disagreement=disagreement) if disagreement else stricter
    if facts.cuda is not None:
        return Requirement(
            cuda=facts.cuda,
            min_compute=facts.min_compute,
            policy=modifiers.policy,
            ships_cuda_compat=ships,
            framework=facts.framework,
            source=facts.source,
            gate=facts.gate,
        )
    return Requirement(
        policy=modifiers.policy,
        ships_cuda_compat=bool(modifiers.ships_cuda_compat),
        unknown_reason=facts.why_unknown,
    )


def resolve_pod(
    pod: Mapping[str, Any],
    runtime: Mapping[str, Any] | RuntimeChoice | None,
    images: ImageTable,
    kb: ReleaseFacts | None,
    *,
    view: PodView | None = None,
) -> Requirement:
    """The requirement of a pod (a KServe predictor or any GPU pod), first hit wins.
    ``view``: the pod's view when the caller has it (its GPU container is not looked for
    again)."""
    if not (type(pod) is dict or isinstance(pod, Mapping)):
        raise InputError(f"invalid pod: expected a mapping, got {type(pod).__name__}")
    meta = as_mapping(pod.get("metadata"), "pod metadata")
    annotations = as_mapping(meta.get("annotations"), "pod annotations")
    where = f"pod {meta.get('name') or meta.get('generateName') or '?'}"
    spec = as_mapping(pod.get("spec"), "pod spec")
    if view is not None and view.error is None and view.role is not Role.MODEL_SERVER:
        container = view.cuda_container  # the view found it with gpu_container
    else:
        container = gpu_container(spec)
    return _resolve(annotations, where, runtime, container, images, kb)


def resolve_isvc(
    isvc: Mapping[str, Any],
    runtime: Mapping[str, Any] | RuntimeChoice | None,
    images: ImageTable,
    kb: ReleaseFacts | None,
) -> Requirement:
    """The requirement of an InferenceService's predictor, from the same sources its pods
    will show: the annotation set is KServe's union for predictor pods (runtime
    ``spec.annotations`` < InferenceService annotations < ``spec.predictor.annotations``),
    and the container is the predictor container KServe would build."""
    if not isinstance(isvc, Mapping):
        raise InputError(f"invalid InferenceService: expected a mapping, got {type(isvc)}")
    meta = as_mapping(isvc.get("metadata"), "InferenceService metadata")
    spec = as_mapping(isvc.get("spec"), "InferenceService spec")
    predictor = as_mapping(spec.get("predictor"), "spec.predictor")
    runtime_obj = runtime.obj if isinstance(runtime, RuntimeChoice) else runtime
    runtime_spec = as_mapping((runtime_obj or {}).get("spec"), "runtime spec")
    annotations = {
        **as_mapping(runtime_spec.get("annotations"), "runtime spec.annotations"),
        **as_mapping(meta.get("annotations"), "InferenceService annotations"),
        **as_mapping(predictor.get("annotations"), "spec.predictor.annotations"),
    }
    where = f"InferenceService {meta.get('name') or '?'}"
    container = predictor_container(isvc, runtime_obj)
    return _resolve(annotations, where, runtime, container, images, kb)


def resolve_runtime(
    runtime: Mapping[str, Any] | RuntimeChoice, images: ImageTable, kb: ReleaseFacts | None
) -> Requirement:
    """The requirement a ServingRuntime or ClusterServingRuntime gives a predictor that adds
    nothing of its own: the annotations the runtime passes to its pods (``spec.annotations``),
    then the runtime's own labels and annotations, then its ``kserve-container`` (first
    container otherwise). This is :func:`resolve_isvc` for an InferenceService that only names
    the runtime, so ``audit`` and ``report`` judge runtimes by the webhook's rules."""
    who, obj = _runtime_identity(runtime)
    spec = as_mapping(obj.get("spec"), f"{who} spec")
    annotations = as_mapping(spec.get("annotations"), f"{who} spec.annotations")
    containers = runtime_containers(obj)
    container = next(
        (c for c in containers if c.get("name") == PREDICTOR_CONTAINER),
        containers[0] if containers else None,
    )
    return _resolve(annotations, who, runtime, container, images, kb)


def resolve_container(
    annotations: Mapping[str, Any],
    where: str,
    container: Mapping[str, Any] | None,
    images: ImageTable,
    kb: ReleaseFacts | None,
) -> Requirement:
    """The requirement of an object whose pods cudasched does not build itself (a KServe
    LLMInferenceService, say): its own ``cudasched.io/*`` annotations, then ``container``'s
    ``NVIDIA_REQUIRE_CUDA`` env or image. The same steps as :func:`resolve_pod`, without a
    runtime; ``where`` names the object in error messages."""
    return _resolve(annotations, where, None, container, images, kb)


def _llmisvc_annotations(llmisvc: Mapping[str, Any] | None) -> dict[str, Any]:
    """The annotations an LLMInferenceService declares for its model server: its own, then
    those of its workload spec (which reach the pods)."""
    if llmisvc is None:
        return {}
    meta = as_mapping(llmisvc.get("metadata"), "LLMInferenceService metadata")
    spec = as_mapping(llmisvc.get("spec"), "LLMInferenceService spec")
    return {
        **as_mapping(meta.get("annotations"), "LLMInferenceService annotations"),
        **as_mapping(spec.get("annotations"), "LLMInferenceService spec.annotations"),
    }


def resolve_llmisvc(
    llmisvc: Mapping[str, Any],
    images: ImageTable,
    kb: ReleaseFacts | None,
    config_image: str | None = None,
) -> Requirement:
    """The requirement of an LLMInferenceService's model server: its ``cudasched.io/*``
    annotations, then the image of its ``main`` container (the ``template``'s, else
    ``config_image``, the image the caller resolved from the LLMInferenceServiceConfigs). With
    neither, the requirement is empty and ``unknown_reason`` says where the image lives."""
    if not isinstance(llmisvc, Mapping) or not is_llmisvc(llmisvc):
        raise InputError(f"invalid LLMInferenceService: expected one, got {type(llmisvc)}")
    pod = llmisvc_pod(llmisvc)
    main = dict(llmisvc_main_container(pod["spec"]) or {"name": MAIN_CONTAINER})
    if not main.get("image") and config_image:
        main["image"] = config_image
    where = f"LLMInferenceService {pod['metadata']['labels'][NAME_LABEL] or '?'}"
    req = _resolve(_llmisvc_annotations(llmisvc), where, None, main, images, kb)
    if req.is_empty and not main.get("image"):
        return replace(
            req,
            unknown_reason=(
                f"{where} names no image in spec.template: its pods take it from the "
                "LLMInferenceServiceConfigs (kserve-config-llm-template, baseRefs); set "
                "cudasched.io/cuda-version on it or let its pods be judged by their image"
            ),
        )
    return req


def resolve_llmisvc_pod(
    pod: Mapping[str, Any],
    llmisvc: Mapping[str, Any] | None,
    images: ImageTable,
    kb: ReleaseFacts | None,
) -> Requirement:
    """The requirement of an LLMInferenceService's model-server pod: the service's
    ``cudasched.io/*`` annotations (when the object is at hand) under the pod's own, then the
    image of the pod's model server (:func:`_model_server`), the one the configs resolved."""
    meta = as_mapping(pod.get("metadata"), "pod metadata")
    annotations = {
        **_llmisvc_annotations(llmisvc),
        **as_mapping(meta.get("annotations"), "pod annotations"),
    }
    where = f"pod {meta.get('name') or meta.get('generateName') or '?'}"
    main = _model_server(as_mapping(pod.get("spec"), "pod spec"))
    return _resolve(annotations, where, None, main, images, kb)


def _model_server(pod_spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The container an LLMInferenceService pod runs its model server in: ``main`` (what
    KServe's config templates name it), else the GPU container of a pod built otherwise."""
    main = llmisvc_main_container(pod_spec)
    return main if main is not None else gpu_container(pod_spec)


def wants_constraint(
    pod: Mapping[str, Any], requirement: Requirement, *, view: PodView | None = None
) -> bool:
    """Should the webhook constrain this pod's placement?

    Only when there is something to constrain, and then: a pod that declares its requirement
    by annotation always; any other pod only when it runs a GPU workload
    (:func:`runs_gpu_workload`), so a CPU-only predictor of a GPU-capable runtime is left alone.
    """
    if requirement.is_empty:
        return False
    if declared_by_annotation(requirement):
        return True
    return runs_gpu_workload(pod, view=view)


def runs_gpu_workload(pod: Mapping[str, Any], *, view: PodView | None = None) -> bool:
    """Whether a pod is constrained by what its runtime or image needs: it uses a GPU and is
    not a transformer or explainer (they do not run the serving runtime). An
    LLMInferenceService's model server counts when its ``main`` container names no resources:
    it takes them from the LLMInferenceServiceConfigs, and llm-d's model servers are GPU
    servers. ``view``: the pod's view when the caller has it already."""
    view = view if view is not None else view_pod(pod)
    if view.role is Role.AUXILIARY:
        return False
    as_mapping(pod.get("spec"), "pod spec")
    return view.checked().runs_gpu_workload


# --------------------------------------------------------------------------- unknown

#: Why a GPU workload's requirement is unknown (closed vocabulary: the webhook's metric label).
UNKNOWN_IMAGE = "image_not_in_table"
TAG_NOT_RECORDED = "tag_not_recorded"
NO_IMAGE = "no_image"
#: The image's config was read from its registry and names no CUDA (no gate env, no
#: ``CUDA_VERSION``): a CUDA image without the NVIDIA base, or not a CUDA image at all.
REGISTRY_NO_CUDA = "config_without_cuda"
#: The image's config was asked of its registry and could not be read (the error says why).
REGISTRY_FAILED = "registry_error"


@dataclass(frozen=True, slots=True)
class UnknownRequirement:
    """A GPU workload whose CUDA requirement cannot be found, so nothing constrains it:
    ``reason`` (:data:`UNKNOWN_IMAGE`, :data:`TAG_NOT_RECORDED` or :data:`NO_IMAGE`), the
    image that was judged, and ``fix``, what to write where (``label ClusterServingRuntime
    kserve-huggingfaceserver with cudasched.io/cuda-version``)."""

    reason: str
    image: str | None
    fix: str
    detail: str = ""  # what went wrong reading the image's config (REGISTRY_FAILED)

    def describe(self) -> str:
        """Why, naming the image: the reason first, so a clipped warning still says it."""
        if self.reason == UNKNOWN_IMAGE:
            return f"image not in the image table: {self.image}"
        if self.reason == TAG_NOT_RECORDED:
            return f"tag's CUDA not recorded: {self.image}"
        if self.reason == REGISTRY_NO_CUDA:
            return f"image config names no CUDA: {self.image}"
        if self.reason == REGISTRY_FAILED:
            return f"image config not read: {self.image}: {self.detail}"
        return "no container names an image cudasched can read"

    def warnings(self) -> tuple[str, str]:
        """The two sentences every command says about it, as admission warns: what is
        unknown, then what to write where (the webhook clips each to 120 characters)."""
        return (
            f"cudasched: not constrained, CUDA unknown: {self.describe()}",
            f"cudasched: to constrain it, {self.fix}",
        )


def _unknown(
    container: Mapping[str, Any] | None, images: ImageTable, fix: str
) -> UnknownRequirement:
    """Why ``container`` (the one the requirement was looked for in) gave no requirement."""
    image = container.get("image") if container is not None else None
    if not isinstance(image, str) or not image.strip():
        return UnknownRequirement(NO_IMAGE, None, fix)
    text = image.strip()
    try:
        recognised = images.rule_for(text) is not None
    except InputError:  # not an image reference at all
        return UnknownRequirement(NO_IMAGE, None, fix)
    config = images.config_for(text)
    if config is not None and config.ok:
        return UnknownRequirement(REGISTRY_NO_CUDA, text, fix)
    if config is not None and not recognised:
        return UnknownRequirement(REGISTRY_FAILED, text, fix, config.error)
    return UnknownRequirement(TAG_NOT_RECORDED if recognised else UNKNOWN_IMAGE, text, fix)


def unknown_image_reason(image: str | None, images: ImageTable) -> str:
    """Why ``image`` gives no requirement, in the words the webhook warns with (``image not in
    the image table: IMAGE``, ``tag's CUDA not recorded: IMAGE``, no image)."""
    return _unknown({"image": image} if image else None, images, "").describe()


def _undecided(requirement: Requirement) -> bool:
    """An empty requirement that no source decided (a non-NVIDIA runtime is decided)."""
    return requirement.is_empty and not requirement.source


def _or_override(fix: str) -> str:
    return f"{fix} or add an imageOverrides entry"


def unknown_fix(subject: str, *, runtime: bool = False) -> str:
    """The one wording of what makes an unknown requirement known, for every command and the
    webhook: a serving runtime is labelled (every service that picks it then knows), anything
    else annotated, or the image given an ``imageOverrides`` entry. ``subject`` names it
    (``ServingRuntime vllm``, ``the pod``, ``InferenceService x``)."""
    if runtime:
        return f"label {subject} with {L.ANN_CUDA_VERSION}"
    return _or_override(f"annotate {subject} with {L.ANN_CUDA_VERSION}")


def unknown_pod_requirement(
    pod: Mapping[str, Any],
    requirement: Requirement,
    images: ImageTable,
    runtime: RuntimeChoice | None = None,
    *,
    view: PodView | None = None,
) -> UnknownRequirement | None:
    """Why a pod that runs a GPU workload got no requirement (``requirement`` is what
    :func:`resolve_pod` or :func:`resolve_llmisvc_pod` found, ``runtime`` the runtime a
    predictor pod was resolved with), or ``None`` when it got one, when a source decided it
    needs none, or when it would not be constrained anyway."""
    view = view if view is not None else view_pod(pod)
    if not _undecided(requirement) or not runs_gpu_workload(pod, view=view):
        return None
    view = view.checked()
    key = L.ANN_CUDA_VERSION
    container = view.cuda_container
    if view.role is Role.MODEL_SERVER:
        fix = f"annotate LLMInferenceService {view.owner or '?'} with {key}"  # no override:
        # the image is KServe's config's, the service is where users write
    else:
        if runtime is not None:
            fix = unknown_fix(runtime.describe(), runtime=True)
        elif view.role is Role.PREDICTOR:
            fix = unknown_fix(f"InferenceService {view.owner}")
        else:
            fix = unknown_fix("the pod")
    return _unknown(container, images, fix)


def unknown_isvc_requirement(
    isvc: Mapping[str, Any],
    runtime: RuntimeChoice | None,
    requirement: Requirement,
    images: ImageTable,
) -> UnknownRequirement | None:
    """Why an InferenceService whose predictor uses a GPU got no requirement from
    :func:`resolve_isvc`, or ``None`` (see :func:`unknown_pod_requirement`)."""
    runtime_obj = runtime.obj if runtime is not None else None
    if not _undecided(requirement) or not isvc_uses_gpu(isvc, runtime_obj):
        return None
    if runtime is not None:
        fix = unknown_fix(runtime.describe(), runtime=True)
    else:
        fix = unknown_fix("the InferenceService")
    return _unknown(predictor_container(isvc, runtime_obj), images, fix)


def unknown_llmisvc_requirement(
    llmisvc: Mapping[str, Any], requirement: Requirement, images: ImageTable
) -> UnknownRequirement | None:
    """Why an LLMInferenceService that names its model server's image got no requirement from
    :func:`resolve_llmisvc`, or ``None``. A service that leaves the image to its
    LLMInferenceServiceConfigs (the usual case) is not unknown: its pods carry the image and
    are judged by it when they are created."""
    pod = llmisvc_pod(llmisvc)
    main = llmisvc_main_container(pod["spec"])
    if main is None or not main.get("image") or not _undecided(requirement):
        return None
    if not runs_gpu_workload(pod):
        return None
    return _unknown(main, images, unknown_fix("it"))


def isvc_wants_constraint(
    isvc: Mapping[str, Any], runtime: RuntimeChoice | None, requirement: Requirement
) -> bool:
    """Should the webhook record (and enforce on its pods) ``requirement`` for an
    InferenceService? When there is one, and the service declares it by annotation or any pod
    of its predictor (head or multi-node worker, runtime containers included) requests a GPU."""
    if requirement.is_empty:
        return False
    if declared_by_annotation(requirement):
        return True
    return isvc_uses_gpu(isvc, runtime.obj if runtime is not None else None)


class NeedStatus(StrEnum):
    """The three answers about what a workload needs, said the same way by every command."""

    KNOWN = "known"  # a requirement to enforce
    UNKNOWN = "unknown"  # a GPU workload whose CUDA cannot be found (see ``unknown``)
    NONE = "none"  # nothing to enforce: no GPU, or a source decided it needs none


@dataclass(frozen=True, slots=True)
class WorkloadNeed:
    """What admission enforces for one workload, and why when it cannot.

    ``requirement`` is what the webhook enforces (empty unless :attr:`status` is ``known``);
    ``resolved`` is what the sources said before the "is it constrained at all" step (its
    ``source`` says "not an NVIDIA runtime", its ``unknown_reason`` why nothing was found);
    ``unknown`` is set exactly when the status is ``unknown``: the reason code, the image and
    the fix, with the two warnings admission gives (:meth:`UnknownRequirement.warnings`).
    Every command (``mutate``, ``explain``, ``audit``, ``report``, ``demo``, the webhook)
    takes its answer from :func:`pod_need`, :func:`isvc_need`, :func:`llmisvc_need` or
    :func:`workload_need`, so none can call "unknown" "no requirement"."""

    requirement: Requirement
    resolved: Requirement
    runtime: RuntimeChoice | None = None
    unknown: UnknownRequirement | None = None

    @property
    def status(self) -> NeedStatus:
        if self.unknown is not None:
            return NeedStatus.UNKNOWN
        return NeedStatus.NONE if self.requirement.is_empty else NeedStatus.KNOWN


def pod_need(
    pod: Mapping[str, Any],
    runtime: RuntimeChoice | None,
    images: ImageTable,
    kb: ReleaseFacts | None,
    *,
    service: Mapping[str, Any] | None = None,
    view: PodView | None = None,
) -> WorkloadNeed:
    """A pod's need: an LLMInferenceService model-server pod with its ``service`` (when at
    hand), any other pod with ``runtime``, the runtime of a KServe predictor. ``pod`` should
    carry its namespace. ``view``: the pod's view when the caller has it (it is read once)."""
    view = view if view is not None else view_pod(pod)
    if view.role is Role.MODEL_SERVER:
        req = resolve_llmisvc_pod(pod, service, images, kb)
        runtime = None
    else:
        req = resolve_pod(pod, runtime, images, kb, view=view)
    if wants_constraint(pod, req, view=view):
        return WorkloadNeed(req, req, runtime)
    unknown = unknown_pod_requirement(pod, req, images, runtime, view=view)
    return WorkloadNeed(Requirement(), req, runtime, unknown)


def isvc_need(
    isvc: Mapping[str, Any],
    runtime: RuntimeChoice | None,
    images: ImageTable,
    kb: ReleaseFacts | None,
) -> WorkloadNeed:
    """An InferenceService's need (its predictor's, under the runtime KServe chose)."""
    req = resolve_isvc(isvc, runtime, images, kb)
    if isvc_wants_constraint(isvc, runtime, req):
        return WorkloadNeed(req, req, runtime)
    unknown = unknown_isvc_requirement(isvc, runtime, req, images)
    return WorkloadNeed(Requirement(), req, runtime, unknown)


def llmisvc_need(
    llmisvc: Mapping[str, Any], images: ImageTable, kb: ReleaseFacts | None
) -> WorkloadNeed:
    """An LLMInferenceService's need (its model server's)."""
    req = resolve_llmisvc(llmisvc, images, kb)
    if wants_constraint(llmisvc_pod(llmisvc), req):
        return WorkloadNeed(req, req)
    unknown = unknown_llmisvc_requirement(llmisvc, req, images)
    return WorkloadNeed(Requirement(), req, None, unknown)


def runtime_need(
    runtime: Mapping[str, Any] | RuntimeChoice, images: ImageTable, kb: ReleaseFacts | None
) -> WorkloadNeed:
    """A ServingRuntime's or ClusterServingRuntime's need (:func:`resolve_runtime`: what an
    InferenceService that only names it needs). Unknown when nothing names its CUDA and it is
    a GPU runtime: its containers request a GPU, or the image table knows its image family."""
    req = resolve_runtime(runtime, images, kb)
    if not req.is_empty or not _undecided(req):
        return WorkloadNeed(req, req)
    who, obj = _runtime_identity(runtime)
    containers = runtime_containers(obj)
    container = next(
        (c for c in containers if c.get("name") == PREDICTOR_CONTAINER),
        containers[0] if containers else None,
    )
    unknown = _unknown(container, images, f"label {who} with {L.ANN_CUDA_VERSION}")
    gpu = uses_gpu({"containers": list(containers)})
    if not gpu and unknown.reason != TAG_NOT_RECORDED:
        return WorkloadNeed(req, req)  # nothing says it is a GPU runtime
    return WorkloadNeed(Requirement(), req, None, unknown)


def workload_need(
    obj: Mapping[str, Any], fleet: RuntimeIndex, images: ImageTable
) -> tuple[Mapping[str, Any], WorkloadNeed]:
    """What the webhook would enforce for a workload of ``fleet``'s cluster: the object to
    place (the workload itself, or for an InferenceService the predictor pod KServe builds)
    and its :class:`WorkloadNeed`. Runtimes are looked up the way admission does, through the
    fleet; unreadable objects raise :class:`InputError`."""
    kb = fleet.kb
    if is_llmisvc(obj):
        return llmisvc_pod(obj), llmisvc_need(obj, images, kb)
    if is_inference_service(obj):
        choice = fleet.select_runtime(obj)
        return pod_of(obj, choice), isvc_need(obj, choice, images, kb)
    pod = pod_of(obj)
    view = view_pod(pod)
    if view.role is Role.MODEL_SERVER:
        service = fleet.llm_inference_service(namespace_of(pod), view.owner or "")
        return obj, pod_need(pod, None, images, kb, service=service)
    choice = None
    if view.role is Role.PREDICTOR:
        isvc = fleet.inference_service(namespace_of(pod), view.owner or "")
        choice = fleet.select_runtime(isvc) if isvc is not None else None
    return obj, pod_need(pod, choice, images, kb)


def resolve_workload(
    obj: Mapping[str, Any], fleet: RuntimeIndex, images: ImageTable
) -> tuple[Mapping[str, Any], Requirement, RuntimeChoice | None]:
    """:func:`workload_need` as (object to place, enforced requirement, runtime)."""
    target, need = workload_need(obj, fleet, images)
    return target, need.requirement, need.runtime
