"""Device by device, for a cluster that runs NVIDIA's DRA driver: which GPUs its ResourceSlices
publish that a workload's CUDA-aware DeviceClass admits, and why each other one is refused.

The class is the one ``cudasched device-classes`` writes for the workload's requirement
(:func:`cudasched.placement.deviceclass.device_class`), and a device is judged by the same
tests its selectors are written from (:meth:`cudasched.placement.dra.CompiledSelectors.admits`),
so "admitted" is what the scheduler's allocator would decide, without a CEL evaluator. The
refusals, in the order the class's selectors meet them:

* ``dra-device-vfio``, ``dra-device-mig``, ``dra-device-not-a-gpu``: the class's first
  selector admits full GPUs (``type == "gpu"``) only; a passthrough GPU publishes no CUDA
  attributes at all, and a MIG slice is asked through NVIDIA's ``mig.nvidia.com`` class;
* ``dra-device-without-cuda-attributes``: a full GPU lacking a version attribute the
  selectors read (their ``has()`` guards refuse it);
* the compatibility engine's reasons (``driver-too-old``, ``compute-capability-too-low``,
  ``arch-dropped`` ...) with their fixes, on the device's versions read as the node labels
  the agent would write for them (:func:`cudasched.nodes.facts.facts_from_labels`);
* ``dra-class-stricter``: the engine accepts the device by a mode no DRA attribute can express
  (forward compatibility needs "data-center GPU"), so the class leaves it out.

Devices of other drivers are not judged: a CUDA-aware class names NVIDIA's driver first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cudasched.compat.engine import check, resolve_policy
from cudasched.compat.fixes import with_fixes
from cudasched.compat.verdict import Reason, VerdictStatus
from cudasched.nodes.facts import facts_from_labels
from cudasched.nodes.labelers import sanitise_product
from cudasched.placement.deviceclass import device_class
from cudasched.placement.dra import (
    DRIVER_DOMAIN,
    VERSION_ATTRIBUTES,
    CompiledSelectors,
    compiled_selectors,
    semver_parts,
)
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.vocab.versions import ComputeCapability, CudaVersion, DriverVersion

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.nodes.facts import NodeFacts
    from cudasched.vocab.requirements import Policy, Requirement

__all__ = [
    "DRA_CLASS_STRICTER",
    "DRA_DEVICE_MIG",
    "DRA_DEVICE_NOT_A_GPU",
    "DRA_DEVICE_VFIO",
    "DRA_DEVICE_WITHOUT_CUDA",
    "DeviceAnswer",
    "DeviceExplanation",
    "explain_devices",
    "nvidia_slices",
]

DRA_DEVICE_VFIO = "dra-device-vfio"
DRA_DEVICE_MIG = "dra-device-mig"
DRA_DEVICE_NOT_A_GPU = "dra-device-not-a-gpu"
DRA_DEVICE_WITHOUT_CUDA = "dra-device-without-cuda-attributes"
DRA_CLASS_STRICTER = "dra-class-stricter"

_FULL_GPU_ONLY = "a CUDA-aware class admits full GPUs (type gpu) only"
_TYPE_REASONS = {
    "vfio": Reason(
        DRA_DEVICE_VFIO,
        f"a passthrough (vfio) GPU: it publishes no CUDA attributes, and {_FULL_GPU_ONLY}",
        "passthrough GPUs serve virtual machines, through NVIDIA's vfio class",
    ),
    "mig": Reason(
        DRA_DEVICE_MIG,
        f"a MIG slice: {_FULL_GPU_ONLY}",
        "ask for MIG slices through NVIDIA's mig.nvidia.com class with their profile",
    ),
}


@dataclass(frozen=True, slots=True)
class DeviceAnswer:
    """One device: where it is (node, pool, name), whether the class admits it, what it
    publishes, and the reasons (how it runs the workload, or what keeps it out)."""

    node: str
    pool: str
    device: str
    admitted: bool
    facts: str
    reasons: tuple[Reason, ...]

    @property
    def where(self) -> str:
        return f"{self.node or '-'}/{self.pool}/{self.device}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "pool": self.pool,
            "device": self.device,
            "admitted": self.admitted,
            "facts": self.facts,
            "reasons": [r.to_dict() for r in self.reasons],
        }


@dataclass(frozen=True, slots=True)
class DeviceExplanation:
    """The workload's class (``None`` with ``error`` when no GPU can meet its requirement)
    and every device of NVIDIA's driver, as the ResourceSlices list them."""

    device_class: str | None
    extended_resource: str | None
    policy: Policy
    dropped_forward_compat: bool
    devices: tuple[DeviceAnswer, ...]
    error: str | None = None

    @property
    def admitted_count(self) -> int:
        return sum(1 for d in self.devices if d.admitted)

    def to_dict(self) -> dict[str, Any]:
        return {
            "deviceClass": self.device_class,
            "extendedResource": self.extended_resource,
            "policy": self.policy.value,
            "forwardCompatLeftOut": self.dropped_forward_compat,
            "admitted": self.admitted_count,
            "total": len(self.devices),
            "error": self.error,
            "devices": [d.to_dict() for d in self.devices],
        }


def nvidia_slices(objects: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The ResourceSlices of NVIDIA's DRA driver among ``objects`` (a snapshot's ``other``)."""
    return [
        o
        for o in objects
        if str(o.get("apiVersion", "")).startswith("resource.k8s.io/")
        and o.get("kind") == "ResourceSlice"
        and (o.get("spec") or {}).get("driver") == DRIVER_DOMAIN
    ]


def explain_devices(
    requirement: Requirement,
    policy: Policy | str,
    kb: KnowledgeBase,
    slices: Iterable[Mapping[str, Any]],
) -> DeviceExplanation:
    """Judge every device of ``slices`` (NVIDIA's) for the class of ``requirement``."""
    pol = resolve_policy(requirement, policy)
    located = [
        (str(spec.get("nodeName") or ""), str((spec.get("pool") or {}).get("name") or ""), dev)
        for spec in ((s.get("spec") or {}) for s in nvidia_slices(slices))
        for dev in spec.get("devices") or []
        if isinstance(dev, Mapping)
    ]
    try:
        draft = device_class(requirement, pol, kb)
        compiled = compiled_selectors(requirement, pol, kb)
    except InputError as exc:
        refused = Reason("dra-no-class", str(exc))
        answers = tuple(
            DeviceAnswer(node, pool, str(d.get("name", "?")), False, "", (refused,))
            for node, pool, d in located
        )
        return DeviceExplanation(None, None, pol, False, answers, str(exc))
    judge = _Judge(requirement, pol, kb, compiled)
    answers = tuple(judge.answer(node, pool, dev) for node, pool, dev in located)
    return DeviceExplanation(
        draft.name, draft.extended_resource, pol, draft.dropped_forward_compat, answers
    )


def _versions(attributes: Mapping[str, Any]) -> dict[str, tuple[int, int, int]]:
    """The version attributes a device publishes readably (typed ``version``, semver)."""
    out: dict[str, tuple[int, int, int]] = {}
    for name in VERSION_ATTRIBUTES:
        value = attributes.get(name)
        text = value.get("version") if isinstance(value, Mapping) else None
        if isinstance(text, str):
            try:
                out[name] = semver_parts(text)
            except ValueError:
                continue
    return out


def _labels(versions: Mapping[str, tuple[int, int, int]], product: str) -> dict[str, str]:
    """The agent's labels of a node whose one GPU publishes ``versions``: the engine reads a
    device as it reads such a node."""
    labels: dict[str, str] = {}
    if "driverVersion" in versions:
        driver = DriverVersion(*versions["driverVersion"])
        labels[L.DRIVER_CODE] = str(driver.code)
        labels[L.DRIVER_VERSION] = str(driver)
    if "cudaDriverVersion" in versions:
        major, minor, _ = versions["cudaDriverVersion"]
        labels[L.CUDA_CODE] = str(CudaVersion(major, minor).code)
        labels[L.CUDA_VERSION] = f"{major}.{minor}"
    if "cudaComputeCapability" in versions:
        major, minor, _ = versions["cudaComputeCapability"]
        labels[L.COMPUTE_CODE] = str(ComputeCapability(major, minor).code)
    if product:
        labels[L.GPU_PRODUCT] = sanitise_product(product)
    return labels


@dataclass(frozen=True, slots=True)
class _Judge:
    requirement: Requirement
    policy: Policy
    kb: KnowledgeBase
    compiled: CompiledSelectors

    def answer(self, node: str, pool: str, dev: Mapping[str, Any]) -> DeviceAnswer:
        name = str(dev.get("name", "?"))
        attributes = dev.get("attributes") or {}
        kind = (attributes.get("type") or {}).get("string")
        if kind != "gpu":
            reason = _TYPE_REASONS.get(str(kind)) or Reason(
                DRA_DEVICE_NOT_A_GPU, f"type {kind or 'not published'}: {_FULL_GPU_ONLY}"
            )
            return DeviceAnswer(node, pool, name, False, f"type {kind or '-'}", (reason,))
        versions = _versions(attributes)
        product = (attributes.get("productName") or {}).get("string") or ""
        facts = facts_from_labels(name, _labels(versions, str(product)), self.kb)
        admitted = self.compiled.admits(versions)
        missing = [a for a in VERSION_ATTRIBUTES if a not in versions]
        if not admitted and missing:
            reason = Reason(
                DRA_DEVICE_WITHOUT_CUDA,
                f"publishes no {', '.join(missing)}: the class's has() guards refuse it",
                "upgrade NVIDIA's DRA driver on the node to a release that publishes them, "
                "and check that it can read the driver (NVML)",
            )
            return DeviceAnswer(node, pool, name, False, facts.describe(), (reason,))
        return DeviceAnswer(
            node, pool, name, admitted, facts.describe(), self._reasons(facts, admitted)
        )

    def _reasons(self, facts: NodeFacts, admitted: bool) -> tuple[Reason, ...]:
        verdict = check(facts, self.requirement, self.policy, self.kb)
        reasons = with_fixes(verdict.reasons, facts, self.requirement, self.policy, self.kb)
        if admitted or verdict.status is VerdictStatus.INCOMPATIBLE:
            return reasons
        modes = ", ".join(r.code for r in reasons) or "compatible"
        return (
            Reason(
                DRA_CLASS_STRICTER,
                f"the engine accepts it ({modes}), by what no DRA attribute can say (forward "
                "compatibility needs a data-center GPU), so the class leaves it out",
                "give this workload node affinity instead (cudasched affinity), or a policy "
                "the class can express (minor-compat)",
            ),
        )
