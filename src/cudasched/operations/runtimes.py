"""The serving runtimes of a cluster with the CUDA requirement each gives its predictors, read
once for the audit and the report (:func:`cudasched.workloads.resolution.runtime_need`: the
webhook's rules for an InferenceService that only names the runtime, unknown included)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cudasched.vocab.errors import InputError
from cudasched.vocab.objects import as_flag, as_mapping, name_of, namespace_of
from cudasched.workloads.kserve import CLUSTER_SERVING_RUNTIME, SERVING_RUNTIME
from cudasched.workloads.resolution import UnknownRequirement, runtime_need

if TYPE_CHECKING:
    from cudasched.cluster.fleet import Fleet
    from cudasched.knowledge.images import ImageTable
    from cudasched.vocab.requirements import Requirement

__all__ = ["RuntimeRow", "runtime_rows"]


@dataclass(frozen=True, slots=True)
class RuntimeRow:
    """One runtime: ``requirement`` is ``None`` when its CUDA keys cannot be read (``error``
    says why); an empty requirement with a ``source`` is a runtime that is not NVIDIA's."""

    kind: str
    namespace: str | None  # None for a ClusterServingRuntime
    name: str
    requirement: Requirement | None
    error: str | None = None
    disabled: bool = False
    obj: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # A GPU runtime whose CUDA no source names (WorkloadNeed.unknown): never "no requirement".
    unknown: UnknownRequirement | None = None

    @property
    def ref(self) -> str:
        """``ServingRuntime/ns/name`` or ``ClusterServingRuntime/name`` (finding objects)."""
        if self.namespace is None:
            return f"{self.kind}/{self.name}"
        return f"{self.kind}/{self.namespace}/{self.name}"

    @property
    def not_nvidia(self) -> bool:
        """A runtime whose labels say it is for another accelerator."""
        req = self.requirement
        return req is not None and req.is_empty and bool(req.source)


def _row(obj: Mapping[str, Any], kind: str, images: ImageTable, fleet: Fleet) -> RuntimeRow:
    namespace = namespace_of(obj) if kind == SERVING_RUNTIME else None
    name = name_of(obj)
    try:
        spec = as_mapping(obj.get("spec"), f"{kind} {name} spec")
        disabled = as_flag(spec.get("disabled"), f"{kind} {name} spec.disabled")
        need = runtime_need(obj, images, fleet.kb)
    except InputError as exc:
        return RuntimeRow(kind, namespace, name, None, str(exc), obj=obj)
    return RuntimeRow(
        kind, namespace, name, need.resolved, disabled=disabled, obj=obj, unknown=need.unknown
    )


def runtime_rows(fleet: Fleet, images: ImageTable) -> tuple[RuntimeRow, ...]:
    """Every ServingRuntime (by namespace, then name), then every ClusterServingRuntime."""
    namespaced = sorted(fleet.all_serving_runtimes(), key=lambda o: (namespace_of(o), name_of(o)))
    rows = [_row(o, SERVING_RUNTIME, images, fleet) for o in namespaced]
    cluster = fleet.cluster_serving_runtimes
    rows += [_row(o, CLUSTER_SERVING_RUNTIME, images, fleet) for o in cluster]
    return tuple(rows)
