"""An image's compat libraries on one node: whether NVIDIA's container toolkit puts them in
front of the host's driver, and what CUDA then does there (runs through forward
compatibility, or fails with error 804 or 803). The rules and their sources:

* **Whether they are used** (:func:`loads_compat`), per toolkit mode
  (:class:`~cudasched.vocab.requirements.ToolkitMode`):
  - ``legacy``: libnvidia-container keeps a compat library only when its driver major is
    newer than the host's ("Filter out any library that has a lower or equal major version
    than RM", NVIDIA/libnvidia-container ``src/cli/compat_mode.c`` ``filter_by_major_version``,
    under ``--cuda-compat-mode=ldconfig``, the toolkit's default: nvidia-container-toolkit
    ``api/config/v1/runtime.go``);
  - ``cdi``: the CDI spec's ``enable-cuda-compat`` hook reads the library's
    ``.note.cuda.fwd_compatibility``; with a note it uses the library when the host's branch
    is in the note's ``driver`` list and the compat driver is newer than the host's
    (``compatElfHeader.UseCompat``), without one when the host's major is older than the
    compat driver's (nvidia-container-toolkit ``cmd/nvidia-cdi-hook/cudacompat``, at d34b304).
* **What happens then** (:func:`compat_outcome`): forward compatibility runs only on
  data-center GPUs (and select NGC-ready RTX SKUs): elsewhere CUDA fails with
  ``CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE`` (804), whatever the policy, since it is not
  a choice the workload makes. On a data-center GPU the compat driver must support the host's
  kernel-mode branch (its note's list, else NVIDIA's forward-compatibility matrix for its
  CUDA), or CUDA fails with ``CUDA_ERROR_SYSTEM_DRIVER_MISMATCH`` (803); otherwise the
  workload runs through the compat libraries (``forward-compat``).

The library is used or not whatever the policy says, so a failure is a blocking reason under
every policy; a use that works changes only how a verdict that the policy accepted says it
runs. Which branches forward compatibility may target under policy ``forward-compat``
(:func:`forward_compat_targets`) also counts the note's own list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cudasched.compat.gate import gate_forward_compat_branches
from cudasched.compat.verdict import (
    COMPAT_BRANCH_UNSUPPORTED,
    FORWARD_COMPAT,
    NO_FORWARD_COMPAT_ON_GEFORCE,
    UNKNOWN_DATACENTER,
    UNKNOWN_DRIVER,
    Reason,
    gpu_name,
)
from cudasched.nodes.facts import NodeFacts
from cudasched.vocab.requirements import CompatLibrary, Requirement, ToolkitMode
from cudasched.vocab.versions import CudaVersion, DriverVersion

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase

__all__ = [
    "CompatOutcome",
    "compat_outcome",
    "forward_compat_targets",
    "loads_compat",
    "supported_branches",
]


def loads_compat(lib: CompatLibrary, mode: ToolkitMode, driver: DriverVersion) -> bool:
    """Whether the toolkit in ``mode`` puts ``lib`` in front of host driver ``driver``."""
    if mode is ToolkitMode.CDI and lib.branches is not None:
        return driver.branch in lib.branches and lib.driver > driver
    return lib.driver.major > driver.major


def supported_branches(lib: CompatLibrary, kb: KnowledgeBase) -> frozenset[int]:
    """The host branches ``lib`` runs on (on a data-center GPU): its note's list, else
    NVIDIA's matrix for its CUDA (empty when neither is known)."""
    if lib.branches is not None:
        return frozenset(lib.branches)
    return kb.forward_compat_branches(lib.cuda) if lib.cuda is not None else frozenset()


def forward_compat_targets(
    req: Requirement, cuda: CudaVersion, kb: KnowledgeBase
) -> frozenset[int]:
    """Branches forward compatibility may run ``cuda`` on for this image: NVIDIA's matrix,
    the branches its gate names for its compat libraries, and those its compat library's note
    lists when that library provides ``cuda`` or newer. When the image's compat library is
    known, only the branches the toolkit uses it on count (below its driver's branch; in CDI
    mode with a note, those the note lists): elsewhere the host's driver answers alone."""
    out = kb.forward_compat_branches(cuda) | gate_forward_compat_branches(req)
    lib = req.compat
    if lib is None:
        return out
    noted = lib.branches is not None and req.toolkit is ToolkitMode.CDI
    if lib.branches is not None and lib.cuda is not None and lib.cuda >= cuda:
        out |= frozenset(lib.branches)
    return frozenset(
        b for b in out if b < lib.driver.major and (not noted or b in (lib.branches or ()))
    )


@dataclass(frozen=True, slots=True)
class CompatOutcome:
    """What the compat library does on one node: ``failure`` (a blocking reason) when CUDA
    cannot start there through it, ``runs`` (a ``forward-compat`` reason) when it works."""

    failure: Reason | None = None
    runs: Reason | None = None


def _mode_words(mode: ToolkitMode) -> str:
    if mode is ToolkitMode.CDI:
        return "the CDI spec's enable-cuda-compat hook"
    return "libnvidia-container (legacy mode)"


def compat_outcome(facts: NodeFacts, req: Requirement, kb: KnowledgeBase) -> CompatOutcome:
    """The image's compat library on this node (see the module's docstring); nothing when the
    image ships none or the toolkit leaves it unused, ``unknown-driver`` when the node does
    not say which driver decides that."""
    lib = req.compat
    driver = facts.driver
    if lib is None:
        return CompatOutcome()
    if driver is None:
        return CompatOutcome(
            Reason(
                UNKNOWN_DRIVER,
                f"the image ships the compat {lib.describe()}, and whether the container "
                "toolkit uses it depends on the node's driver version, which it does not report",
            )
        )
    if not loads_compat(lib, req.toolkit, driver):
        return CompatOutcome()
    used = (
        f"{_mode_words(req.toolkit)} puts the image's compat {lib.describe()} in front of "
        f"driver {driver}"
    )
    if facts.datacenter is False:
        return CompatOutcome(
            Reason(
                NO_FORWARD_COMPAT_ON_GEFORCE,
                f"{used}, and {gpu_name(facts)} is not a data-center GPU: CUDA fails with "
                "error 804 (CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE)",
            )
        )
    if facts.datacenter is None:
        return CompatOutcome(
            Reason(
                UNKNOWN_DATACENTER,
                f"{used}, which works only on a data-center GPU, and the node does not say "
                f"whether {gpu_name(facts)} is one (else CUDA fails with error 804)",
            )
        )
    branches = supported_branches(lib, kb)
    if driver.branch not in branches:
        listed = ", ".join(f"R{b}" for b in sorted(branches)) or "no branch known"
        return CompatOutcome(
            Reason(
                COMPAT_BRANCH_UNSUPPORTED,
                f"{used}, which supports host branches {listed}, not R{driver.branch}: CUDA "
                "fails with error 803 (CUDA_ERROR_SYSTEM_DRIVER_MISMATCH)",
            )
        )
    return CompatOutcome(
        runs=Reason(
            FORWARD_COMPAT,
            f"{used}: the compat driver runs on R{driver.branch} through forward "
            "compatibility (data-center GPU; no OpenGL/Vulkan interop)",
        )
    )
