"""The compatibility engine's answer, as words every stage shares: the verdict's statuses, its
stable reason codes (part of the ``check -o json`` contract; which rule gives which code is in
:mod:`cudasched.compat.engine`), :class:`Reason` and :class:`Verdict`, and how reasons name a
node's GPU and driver.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from cudasched.nodes.facts import NodeFacts

if TYPE_CHECKING:
    pass


__all__ = [
    "ARCH_DROPPED",
    "ARCH_TOO_NEW",
    "COMPAT_BRANCH_UNSUPPORTED",
    "COMPUTE_CAPABILITY_OK",
    "COMPUTE_CAPABILITY_TOO_LOW",
    "DRIVER_BRANCH_UNSUPPORTED_GPU",
    "DRIVER_TOO_OLD",
    "FORWARD_COMPAT",
    "FRAMEWORK_ARCH_UNSUPPORTED",
    "INFORMATIONAL_CODES",
    "MINOR_VERSION_COMPAT",
    "NATIVE",
    "NO_FORWARD_COMPAT_ON_GEFORCE",
    "NO_GPU_FACTS",
    "NO_REQUIREMENT",
    "REASON_CODES",
    "REQUIRE_CUDA_UNMET",
    "UNKNOWN_ARCH",
    "UNKNOWN_COMPUTE_CAPABILITY",
    "UNKNOWN_DATACENTER",
    "UNKNOWN_DRIVER",
    "UNKNOWN_TOOLKIT",
    "Reason",
    "Verdict",
    "VerdictStatus",
    "gpu_name",
    "node_cuda_text",
]

# Stable reason codes (part of the `check -o json` contract).
NATIVE = "native"
MINOR_VERSION_COMPAT = "minor-version-compat"
FORWARD_COMPAT = "forward-compat"
DRIVER_TOO_OLD = "driver-too-old"
ARCH_DROPPED = "arch-dropped"
ARCH_TOO_NEW = "arch-too-new"
DRIVER_BRANCH_UNSUPPORTED_GPU = "driver-branch-unsupported-gpu"
REQUIRE_CUDA_UNMET = "require-cuda-unmet"
NO_FORWARD_COMPAT_ON_GEFORCE = "no-forward-compat-on-geforce"
COMPAT_BRANCH_UNSUPPORTED = "compat-branch-unsupported"
FRAMEWORK_ARCH_UNSUPPORTED = "framework-arch-unsupported"
COMPUTE_CAPABILITY_TOO_LOW = "compute-capability-too-low"
NO_GPU_FACTS = "no-gpu-facts"
NO_REQUIREMENT = "no-requirement"
UNKNOWN_DRIVER = "unknown-driver"
UNKNOWN_COMPUTE_CAPABILITY = "unknown-compute-capability"
UNKNOWN_ARCH = "unknown-arch"
UNKNOWN_TOOLKIT = "unknown-toolkit"
UNKNOWN_DATACENTER = "unknown-datacenter"
COMPUTE_CAPABILITY_OK = "compute-capability-ok"

REASON_CODES = frozenset(
    {
        NATIVE,
        MINOR_VERSION_COMPAT,
        FORWARD_COMPAT,
        DRIVER_TOO_OLD,
        ARCH_DROPPED,
        ARCH_TOO_NEW,
        DRIVER_BRANCH_UNSUPPORTED_GPU,
        REQUIRE_CUDA_UNMET,
        NO_FORWARD_COMPAT_ON_GEFORCE,
        COMPAT_BRANCH_UNSUPPORTED,
        FRAMEWORK_ARCH_UNSUPPORTED,
        COMPUTE_CAPABILITY_TOO_LOW,
        NO_GPU_FACTS,
        NO_REQUIREMENT,
        UNKNOWN_DRIVER,
        UNKNOWN_COMPUTE_CAPABILITY,
        UNKNOWN_ARCH,
        UNKNOWN_TOOLKIT,
        UNKNOWN_DATACENTER,
        COMPUTE_CAPABILITY_OK,
    }
)


#: Codes that say how a workload runs on a node rather than why it cannot.
INFORMATIONAL_CODES = frozenset(
    {NATIVE, MINOR_VERSION_COMPAT, FORWARD_COMPAT, COMPUTE_CAPABILITY_OK, NO_REQUIREMENT}
)


class VerdictStatus(StrEnum):
    COMPATIBLE = "compatible"
    COMPATIBLE_WITH_CAVEATS = "compatible-with-caveats"
    INCOMPATIBLE = "incompatible"


@dataclass(frozen=True, slots=True)
class Reason:
    """One finding: a stable machine ``code``, a sentence that names the numbers and, for a
    blocking reason when one is known, what would fix it (:mod:`cudasched.compat.fixes`)."""

    code: str
    message: str
    fix: str = ""

    @property
    def blocking(self) -> bool:
        """Whether this reason keeps the workload off the node (else it says how it runs)."""
        return self.code not in INFORMATIONAL_CODES

    def to_dict(self) -> dict[str, str]:
        doc = {"code": self.code, "message": self.message}
        if self.fix:
            doc["fix"] = self.fix
        return doc


@dataclass(frozen=True, slots=True)
class Verdict:
    """The answer for one node. A compatible verdict carries exactly one reason, the mode that
    makes it work (``native``, ``minor-version-compat``, ``forward-compat``, or
    ``compute-capability-ok`` for a capability-only requirement). An incompatible verdict lists
    every blocking reason first, then what was found about the driver, which may be positive
    (``native``): "the driver is fine, the GPU is not" is exactly what ``explain`` must say."""

    status: VerdictStatus
    reasons: tuple[Reason, ...]

    @property
    def compatible(self) -> bool:
        """True for ``compatible`` and ``compatible-with-caveats``."""
        return self.status is not VerdictStatus.INCOMPATIBLE

    @property
    def codes(self) -> tuple[str, ...]:
        return tuple(r.code for r in self.reasons)

    def to_dict(self) -> dict[str, object]:
        return {"verdict": self.status.value, "reasons": [r.to_dict() for r in self.reasons]}


def gpu_name(facts: NodeFacts) -> str:
    if facts.products:
        return "/".join(facts.products)
    if facts.compute is not None:
        return f"the GPU (compute capability {facts.compute})"
    return "the GPU"


def node_cuda_text(facts: NodeFacts) -> str:
    if facts.driver is not None and facts.cuda is not None:
        return f"driver {facts.driver} supports CUDA {facts.cuda}"
    if facts.driver is not None:
        return f"driver {facts.driver} supports no CUDA release the knowledge base knows"
    return f"the node supports CUDA {facts.cuda} (driver version not reported)"
