"""Which compatibility mode lets a node's driver run a CUDA release: native, forward
compatibility (the image's cuda-compat package on a listed data-center branch) or minor-version
compatibility (the major's driver floor), each under the policy that allows it, or why none
does (``driver-too-old`` and what each mode would need). The rules and their sources are in
:mod:`cudasched.compat.engine`'s docstring.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cudasched.compat.compatlibs import forward_compat_targets
from cudasched.compat.coverage import Coverage
from cudasched.compat.gate import gate_forward_compat_branches
from cudasched.compat.verdict import (
    DRIVER_TOO_OLD,
    FORWARD_COMPAT,
    FRAMEWORK_ARCH_UNSUPPORTED,
    MINOR_VERSION_COMPAT,
    NATIVE,
    NO_FORWARD_COMPAT_ON_GEFORCE,
    UNKNOWN_DATACENTER,
    UNKNOWN_DRIVER,
    UNKNOWN_TOOLKIT,
    Reason,
    gpu_name,
    node_cuda_text,
)
from cudasched.nodes.facts import NodeFacts
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.vocab.versions import CudaVersion

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase

__all__ = [
    "driver_mode",
]


def _fmt_list(values: Iterable[int]) -> str:
    return ", ".join(f"R{v}" for v in sorted(values))


def driver_mode(
    facts: NodeFacts,
    req: Requirement,
    pol: Policy,
    cuda: CudaVersion,
    toolkit: object | None,
    coverage: Coverage,
    kb: KnowledgeBase,
) -> tuple[str | None, list[Reason]]:
    """Which compatibility mode lets this driver run ``cuda`` (None: none) and why. The modes
    are tried in order, native, forward, minor-version; each one that does not apply adds what
    it would need to the refusal."""
    min_driver = kb.min_driver(cuda) if toolkit is not None else None
    need = f"CUDA {cuda}" + (f" (driver >= {min_driver})" if min_driver is not None else "")
    if facts.cuda is None and facts.driver is None:
        return None, [
            Reason(
                UNKNOWN_DRIVER, f"node {facts.name!r} reports neither a driver nor a CUDA version"
            )
        ]
    native = _native(facts, cuda, min_driver is not None, need)
    if native.code == NATIVE:
        return NATIVE, [native]
    refusal = _Refusal(native)
    if pol is Policy.FORWARD_COMPAT:
        passed = _forward_compat(facts, req, cuda, kb, refusal)
        if passed is not None:
            return FORWARD_COMPAT, [passed]
    if pol in (Policy.MINOR_COMPAT, Policy.FORWARD_COMPAT):
        passed = _minor_compat(facts, cuda, coverage, need, kb, refusal)
        if passed is not None:
            return MINOR_VERSION_COMPAT, [passed]
    return None, [refusal.main, *refusal.notes]


@dataclass(slots=True)
class _Refusal:
    """Why no mode lets the driver run the toolkit: the main reason, to which each mode that
    does not apply adds what it would need, and notes on facts a mode needs but lacks."""

    main: Reason
    notes: list[Reason] = field(default_factory=list)

    def add(self, text: str) -> None:
        self.main = Reason(self.main.code, f"{self.main.message}; {text}")


def _native(facts: NodeFacts, cuda: CudaVersion, known_minimum: bool, need: str) -> Reason:
    """The ``native`` reason when the node's CUDA version covers ``cuda``, else why not."""
    if not known_minimum:
        # NVIDIA's minimum for this release is not known (13.5): native support is never
        # assumed, whatever the node's CUDA label says; the compatibility modes may still apply.
        return Reason(
            UNKNOWN_TOOLKIT,
            f"NVIDIA's minimum driver for CUDA {cuda} is not in the knowledge base, so no driver "
            f"is judged to run it natively ({node_cuda_text(facts)})",
        )
    if facts.cuda is not None and facts.cuda >= cuda:
        return Reason(NATIVE, f"{node_cuda_text(facts)}; the workload needs {need}")
    return Reason(DRIVER_TOO_OLD, f"{node_cuda_text(facts)}; the workload needs {need}")


def _forward_compat(
    facts: NodeFacts, req: Requirement, cuda: CudaVersion, kb: KnowledgeBase, refusal: _Refusal
) -> Reason | None:
    """Forward compatibility (cuda-compat package): data-center GPUs, listed branches only (the
    matrix's, or those the image's own NVIDIA_REQUIRE_CUDA or its compat library's note names
    for its compat libraries)."""
    if not req.ships_cuda_compat:
        refusal.add("forward compatibility needs an image that ships cuda-compat")
        return None
    matrix = kb.forward_compat_branches(cuda)
    branches = forward_compat_targets(req, cuda, kb)
    if facts.datacenter is False:
        # Never possible on this GPU, whatever the branch: say so first.
        refusal.notes.append(
            Reason(
                NO_FORWARD_COMPAT_ON_GEFORCE,
                f"forward compatibility needs a data-center GPU; {gpu_name(facts)} is "
                "not one (CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE)",
            )
        )
    if facts.driver is None:
        refusal.notes.append(
            Reason(UNKNOWN_DRIVER, "forward compatibility needs the driver branch, not reported")
        )
    elif facts.driver.branch not in branches:
        names = _fmt_list(branches) if branches else "no branch"
        refusal.add(
            f"forward compatibility for CUDA {cuda} is listed only on "
            f"{names}, not R{facts.driver.branch}"
        )
    elif facts.datacenter is True:
        by_image = (
            ""
            if facts.driver.branch in matrix
            else (
                f"; R{facts.driver.branch} is not in NVIDIA's forward-compatibility matrix but "
                + (
                    "the image's NVIDIA_REQUIRE_CUDA names it for its compat libraries"
                    if facts.driver.branch in gate_forward_compat_branches(req)
                    else "the note of the image's compat library lists it"
                )
            )
        )
        return Reason(
            FORWARD_COMPAT,
            f"driver {facts.driver} supports CUDA {facts.cuda or 'unknown'}; CUDA "
            f"{cuda} runs through the image's cuda-compat-{cuda.major}-{cuda.minor} "
            f"libraries on R{facts.driver.branch} (forward compatibility, data-center "
            f"GPU; no OpenGL/Vulkan interop){by_image}",
        )
    elif facts.datacenter is None:
        refusal.notes.append(
            Reason(
                UNKNOWN_DATACENTER,
                "forward compatibility needs a data-center GPU and the node does not say "
                f"whether {gpu_name(facts)} is one",
            )
        )
    return None


def _minor_compat(
    facts: NodeFacts,
    cuda: CudaVersion,
    coverage: Coverage,
    need: str,
    kb: KnowledgeBase,
    refusal: _Refusal,
) -> Reason | None:
    """Minor-version compatibility: any driver at or above the CUDA major's floor, for a GPU
    reached without PTX JIT."""
    floor = kb.minor_compat_floor(cuda.major)
    if floor is None:
        refusal.add(f"CUDA {cuda.major}.x has no minor-version compatibility")
    elif facts.driver is None:
        refusal.notes.append(
            Reason(
                UNKNOWN_DRIVER,
                f"minor-version compatibility needs driver >= {floor}; the node reports no "
                "driver version",
            )
        )
    elif not facts.driver >= floor:
        refusal.add(f"minor-version compatibility needs driver >= {floor}")
    elif coverage is Coverage.PTX:
        refusal.notes.append(
            Reason(
                FRAMEWORK_ARCH_UNSUPPORTED,
                f"{gpu_name(facts)} is reached only through PTX JIT, which "
                f"minor-version compatibility does not allow (driver {facts.driver} is "
                f"older than {need})",
            )
        )
    else:
        return Reason(
            MINOR_VERSION_COMPAT,
            f"{node_cuda_text(facts)}; CUDA {cuda} runs under minor-version "
            f"compatibility (CUDA {cuda.major}.x needs driver >= {floor}): no PTX "
            "JIT, and APIs newer than the driver return "
            "cudaErrorCallRequiresNewerDriver",
        )
    return None
