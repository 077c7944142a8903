"""What a workload or its serving runtime declares about its CUDA requirement: the first two
sources of :mod:`cudasched.workloads.sources`.

* The object's own annotations (``cudasched.io/cuda-version``, ``min-compute-capability``,
  ``policy``, ``ships-cuda-compat``): :func:`requirement_from_annotations`.
* The serving runtime's ``metadata`` annotations and labels: ``cudasched.io/*``, then Alauda's
  ``cpaas.io/accelerator-type`` + ``cpaas.io/cuda-version`` (:func:`from_runtime`). A runtime
  whose accelerator type is not NVIDIA yields no NVIDIA requirement.

Accepted values of the ``cudasched.io/*`` keys, wherever they are read (object annotations,
runtime annotations and labels; the webhook, ``cudasched explain`` and ``cudasched check`` all
go through :func:`read_cudasched`, so there is one rule):

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

import difflib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.vocab.objects import as_mapping
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.vocab.versions import (
    ComputeCapability,
    CudaVersion,
    parse_compute_capability,
    parse_cuda,
)
from cudasched.workloads.kserve import RuntimeChoice

__all__ = [
    "ALAUDA_ACCELERATOR_TYPE",
    "ALAUDA_CUDA_VERSION",
    "WORKLOAD_KEYS",
    "Found",
    "RuntimeAnswer",
    "annotation_source",
    "declared_by_annotation",
    "from_runtime",
    "merge_modifiers",
    "misspelt_keys",
    "read_cudasched",
    "requirement_from_annotations",
    "runtime_identity",
]

ALAUDA_ACCELERATOR_TYPE = "cpaas.io/accelerator-type"
ALAUDA_CUDA_VERSION = "cpaas.io/cuda-version"
_ANNOTATION_SOURCE = "annotation"  # every object-annotation source starts with this word

#: Every ``cudasched.io/*`` annotation key a workload may carry: the four that state a need,
#: the skip switch and the record admission writes.
WORKLOAD_KEYS = (
    L.ANN_CUDA_VERSION,
    L.ANN_MIN_COMPUTE,
    L.ANN_POLICY,
    L.ANN_SHIPS_CUDA_COMPAT,
    L.ANN_SKIP,
    L.ANN_REQUIREMENT,
)
_KNOWN_KEYS = frozenset(WORKLOAD_KEYS)
_KEY_NAMES = [key[len(L.PREFIX) :] for key in WORKLOAD_KEYS]


def misspelt_keys(annotations: Mapping[str, Any]) -> Iterator[tuple[str, str | None]]:
    """The ``cudasched.io/*`` keys of ``annotations`` that cudasched does not read, each with
    the key it most likely meant (``None`` when none is close): a misspelt key is otherwise
    ignored without a word, and the workload runs unconstrained (``cuda-verison``)."""
    for key in annotations:
        if isinstance(key, str) and key.startswith(L.PREFIX) and key not in _KNOWN_KEYS:
            # Compared without the prefix they share, which would make any key look close.
            name = key[len(L.PREFIX) :]
            close = difflib.get_close_matches(name, _KEY_NAMES, n=1, cutoff=0.6)
            yield key, L.PREFIX + close[0] if close else None


@dataclass(frozen=True, slots=True)
class Found:
    """What one place says: the requirement fields and the keys they came from."""

    cuda: CudaVersion | None = None
    min_compute: ComputeCapability | None = None
    policy: Policy | None = None
    ships_cuda_compat: bool | None = None
    keys: tuple[str, ...] = ()

    @property
    def names_requirement(self) -> bool:
        return self.cuda is not None or self.min_compute is not None


def _scalar_text(value: object, key: str, where: str) -> str:
    """A declared value (a string, or a number YAML read as one) as stripped text; anything
    else is an :class:`InputError` naming ``key`` and ``where``."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise InputError(f"invalid {key} {value!r} on {where}: expected a string")
    return str(value).strip()


def _parse_bool(value: object, key: str, where: str) -> bool:
    if isinstance(value, bool):
        return value
    text = _scalar_text(value, key, where).lower()
    if text in ("true", "false"):
        return text == "true"
    raise InputError(f"invalid {key} {value!r} on {where}: expected true or false")


#: What a map without any of our four keys says (most maps: read without building anything).
_NOTHING = Found()


def read_cudasched(values: Mapping[str, Any], where: str) -> Found:
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
            cuda = parse_cuda(_scalar_text(raw, L.ANN_CUDA_VERSION, where))
        except InputError as exc:
            raise fail(L.ANN_CUDA_VERSION, exc) from None
        keys.append(L.ANN_CUDA_VERSION)
    if (raw := values.get(L.ANN_MIN_COMPUTE)) is not None:
        try:
            min_cc = parse_compute_capability(_scalar_text(raw, L.ANN_MIN_COMPUTE, where))
        except InputError as exc:
            raise fail(L.ANN_MIN_COMPUTE, exc) from None
        keys.append(L.ANN_MIN_COMPUTE)
    if (raw := values.get(L.ANN_POLICY)) is not None:
        try:
            policy = Policy.parse(_scalar_text(raw, L.ANN_POLICY, where))
        except InputError as exc:
            raise fail(L.ANN_POLICY, exc) from None
    if (raw := values.get(L.ANN_SHIPS_CUDA_COMPAT)) is not None:
        ships = _parse_bool(raw, L.ANN_SHIPS_CUDA_COMPAT, where)
    return Found(cuda, min_cc, policy, ships, tuple(keys))


def merge_modifiers(first: Found, second: Found) -> Found:
    """``first``'s policy/compat flag win; requirement fields are not merged."""
    if (second.policy is None and second.ships_cuda_compat is None) or (
        first.policy is not None and first.ships_cuda_compat is not None
    ):
        return first  # nothing of ``second`` can show through
    return Found(
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


def _requirement(found: Found, modifiers: Found, source: str) -> Requirement:
    return Requirement(
        cuda=found.cuda,
        min_compute=found.min_compute,
        policy=modifiers.policy,
        ships_cuda_compat=bool(modifiers.ships_cuda_compat),
        source=source,
    )


def annotation_source(keys: tuple[str, ...]) -> str:
    return f"{_ANNOTATION_SOURCE} {', '.join(keys)}"


def requirement_from_annotations(annotations: Mapping[str, Any], where: str) -> Requirement | None:
    """The requirement an object declares with its own ``cudasched.io/*`` annotations, exactly
    as the webhook reads them (values and ``source`` included), or ``None`` when they name
    neither a CUDA version nor a minimum compute capability (a policy alone constrains nothing).

    ``where`` names the object in error messages. This is the first step of
    :func:`cudasched.workloads.sources.resolve_pod` with no runtime; ``cudasched explain``
    reads workloads with it so that both always agree.
    """
    own = read_cudasched(annotations, where)
    if not own.names_requirement:
        return None
    return _requirement(own, own, annotation_source(own.keys))


def declared_by_annotation(requirement: Requirement) -> bool:
    """True when the requirement came from the workload's own annotations."""
    return requirement.source.startswith(_ANNOTATION_SOURCE)


@dataclass(frozen=True, slots=True)
class RuntimeAnswer:
    found: Found  # cudasched keys (modifiers always; requirement when names_requirement)
    requirement: Requirement | None  # a decided answer (requirement or "not NVIDIA")


def runtime_identity(
    runtime: Mapping[str, Any] | RuntimeChoice,
) -> tuple[str, Mapping[str, Any]]:
    if isinstance(runtime, RuntimeChoice):
        return runtime.describe(), runtime.obj
    if not isinstance(runtime, Mapping):
        raise InputError(f"invalid runtime {runtime!r}: expected a ServingRuntime object")
    meta = as_mapping(runtime.get("metadata"), "runtime metadata")
    kind = str(runtime.get("kind") or "ServingRuntime")
    return f"{kind} {meta.get('name') or '?'}", runtime


def from_runtime(runtime: Mapping[str, Any] | RuntimeChoice | None) -> RuntimeAnswer:
    if runtime is None:
        return RuntimeAnswer(_NOTHING, None)
    if isinstance(runtime, RuntimeChoice):
        # The same answer for every pod of the service: read once per choice.
        found = runtime.derived.get("resolution")
        if found is None:
            found = runtime.derived["resolution"] = _read_runtime(runtime)
        return cast(RuntimeAnswer, found)
    return _read_runtime(runtime)


def _read_runtime(runtime: Mapping[str, Any] | RuntimeChoice) -> RuntimeAnswer:
    who, obj = runtime_identity(runtime)
    meta = as_mapping(obj.get("metadata"), f"{who} metadata")
    annotations = as_mapping(meta.get("annotations"), f"{who} annotations")
    labels = as_mapping(meta.get("labels"), f"{who} labels")
    by_annotation = read_cudasched(annotations, f"{who} (annotation)")
    by_label = read_cudasched(labels, f"{who} (label)")
    modifiers = merge_modifiers(by_annotation, by_label)
    for found, kind in ((by_annotation, "annotation"), (by_label, "label")):
        if found.names_requirement:
            source = f"{who}, {kind} {', '.join(found.keys)}"
            return RuntimeAnswer(modifiers, _requirement(found, modifiers, source))
    accelerator = labels.get(ALAUDA_ACCELERATOR_TYPE, annotations.get(ALAUDA_ACCELERATOR_TYPE))
    if accelerator is not None:
        kind_text = _scalar_text(accelerator, ALAUDA_ACCELERATOR_TYPE, who)
        if kind_text.lower() != "nvidia":
            source = f"{who}, label {ALAUDA_ACCELERATOR_TYPE}={kind_text}: not an NVIDIA runtime"
            return RuntimeAnswer(modifiers, Requirement(source=source))
    raw = labels.get(ALAUDA_CUDA_VERSION)
    where = "label"
    if raw is None:
        raw, where = annotations.get(ALAUDA_CUDA_VERSION), "annotation"
    if raw is not None:
        try:
            cuda = parse_cuda(_scalar_text(raw, ALAUDA_CUDA_VERSION, who))
        except InputError as exc:
            raise InputError(f"invalid {ALAUDA_CUDA_VERSION} on {who}: {exc}") from None
        found = Found(cuda=cuda, keys=(ALAUDA_CUDA_VERSION,))
        source = f"{who}, {where} {ALAUDA_CUDA_VERSION}"
        return RuntimeAnswer(modifiers, _requirement(found, modifiers, source))
    return RuntimeAnswer(modifiers, None)
