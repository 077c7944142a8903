"""Binary compatibility: how code built with a CUDA toolkit, or a framework build's kernels,
reaches a GPU (SASS of the same major and a lower-or-equal minor, or only by JIT-compiling
PTX), and the ``arch-too-new`` / ``arch-dropped`` reasons when it does not. The rules and their
sources are in :mod:`cudasched.compat.engine`'s docstring.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

from cudasched.compat.verdict import ARCH_DROPPED, ARCH_TOO_NEW, Reason
from cudasched.vocab.requirements import FrameworkBuild
from cudasched.vocab.versions import ComputeCapability, CudaVersion

if TYPE_CHECKING:
    from cudasched.knowledge import ArchInfo, KnowledgeBase

__all__ = [
    "Coverage",
    "arch_window_reason",
    "framework_coverage",
    "toolkit_coverage",
]


class Coverage(StrEnum):
    """How a framework build's kernels reach a GPU."""

    SASS = "sass"  # a cubin of the same major, minor <= the GPU's
    PTX = "ptx"  # only by JIT-compiling the highest arch's PTX
    NONE = "none"  # not at all
    UNKNOWN = "unknown"  # the build's arch list is not known: no framework constraint


def framework_coverage(fw: FrameworkBuild | None, cc: ComputeCapability) -> Coverage:
    """Whether the build ships code that runs on ``cc`` (see the module docstring)."""
    if fw is None or fw.arch_list is None:
        return Coverage.UNKNOWN
    if not fw.arch_list:
        return Coverage.NONE
    if any(a.major == cc.major and a.minor <= cc.minor for a in fw.arch_list):
        return Coverage.SASS
    if fw.ptx and cc >= max(fw.arch_list):
        return Coverage.PTX
    return Coverage.NONE


def toolkit_coverage(kb: KnowledgeBase, cc: ComputeCapability, cuda: CudaVersion) -> Coverage:
    """How code built by toolkit ``cuda`` reaches a GPU of capability ``cc``: SASS when the
    toolkit targets a capability of the same major and a lower-or-equal minor (binary
    compatibility), PTX when ``cc``'s major is newer than every target (JIT only), else
    NONE."""
    targets = kb.toolkit_targets(cuda)
    if any(t.major == cc.major and t.minor <= cc.minor for t in targets):
        return Coverage.SASS
    if targets and cc.major > max(t.major for t in targets):
        return Coverage.PTX
    return Coverage.NONE


def arch_window_reason(
    kb: KnowledgeBase,
    arch: ArchInfo,
    cc: ComputeCapability,
    cuda: CudaVersion,
    framework: FrameworkBuild | None = None,
) -> Reason | None:
    """``arch-too-new`` / ``arch-dropped`` when code built with ``cuda`` cannot run on this GPU
    (see the module docstring). A GPU reached only by PTX is left to the framework's kernel
    list when there is one (:func:`framework_coverage` decides), else refused: whether an
    image carries PTX is not known."""
    if arch.last_cuda is not None and cuda > arch.last_cuda:
        return Reason(
            ARCH_DROPPED,
            f"CUDA {cuda} no longer supports {arch.name} (compute capability {cc}); "
            f"the last CUDA for it is {arch.last_cuda.release}",
        )
    coverage = toolkit_coverage(kb, cc, cuda)
    if coverage is Coverage.SASS:
        return None
    if coverage is Coverage.PTX:
        if framework is not None and framework.arch_list is not None:
            return None
        newest = max(t.major for t in kb.toolkit_targets(cuda))
        return Reason(
            ARCH_TOO_NEW,
            f"CUDA {cuda} builds code for GPU generations up to compute capability "
            f"{newest}.x; {arch.name} (compute capability {cc}) runs it only by JIT-compiling "
            "PTX, which the image may not carry (cudasched cannot see it)"
            + (f"; CUDA >= {arch.first_cuda.release} builds for it" if arch.first_cuda else ""),
        )
    if arch.first_cuda is not None and cuda < arch.first_cuda:
        return Reason(
            ARCH_TOO_NEW,
            f"{arch.name} (compute capability {cc}) needs CUDA >= {arch.first_cuda.release}; "
            f"the workload is built with CUDA {cuda}",
        )
    lowest = min(kb.toolkit_targets(cuda), default=None)
    return Reason(
        ARCH_DROPPED,
        f"CUDA {cuda} builds no code that runs on {arch.name} (compute capability {cc})"
        + (f"; its lowest target is {lowest}" if lowest is not None else ""),
    )
