"""The compatibility engine: can this node run this workload, and if so on what terms?

Pure function of (node facts, requirement, policy, knowledge base). Every rule below is one link
of the chain in the design brief and cites the fact it rests on (facts and sources:
``reference/cuda-compat.md``; the bundled knowledge base carries a source per entry):

* **Toolkit must exist** (``unknown-toolkit``): the requirement's CUDA must be a release NVIDIA's
  Table 3 lists, otherwise nothing is known about it and no node is judged able to run it.
* **Binary compatibility** (``arch-too-new``, ``arch-dropped``): a toolkit compiles SASS for
  the compute capabilities from each arch's first CUDA to its last (NVIDIA architecture
  matrix; LLVM ``clang/lib/Basic/Cuda.cpp`` Min/MaxVersion), and a cubin for X.y runs on every
  GPU X.z with z >= y (the Ampere/Ada/Hopper/Blackwell compatibility guides). So CUDA 11.0
  runs on an A10G (8.6) through its sm_80 code and CUDA 12.8 on a B300 (10.3) or GB10 (12.1)
  through sm_100/sm_120. A GPU whose *major* is newer than every architecture the toolkit
  targets (Hopper for CUDA <= 11.7, Blackwell for <= 12.7) runs it only by JIT-compiling PTX,
  which an image may or may not carry: unknown, so refused unless a framework build says it
  ships PTX (then as for framework kernels below). A GPU below every target (Volta for CUDA
  13) is ``arch-dropped``.
* **Driver branch supports the GPU** (``driver-branch-unsupported-gpu``, every policy): Kepler
  ends at R470, Maxwell/Pascal/Volta at R580 (NVIDIA architecture matrix), and each product
  has a first driver that drives it (B200: 570.86.15; ``gpus.yaml``). Forward compatibility
  does not help: the compat package replaces only the user-mode driver, and the kernel driver
  must know the GPU.
* **Driver runs the toolkit**, the first that holds of:
  - *native* (``native``): the driver's CUDA version (``nvidia-smi`` "CUDA Version", GFD
    ``cuda.runtime-version``) is >= the required major.minor, which is the same as the driver
    meeting Table 3's minimum for that release (backward compatibility, release notes §2.2);
  - *forward compatibility* (``forward-compat``, policy ``forward-compat`` only): the image ships
    ``cuda-compat-X-Y``, the GPU is a data-center part and the driver branch is listed as ``C``
    for that package in NVIDIA's forward-compatibility matrix; refused on other GPUs
    (``no-forward-compat-on-geforce``: ``CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE``, 804);
  - *minor-version compatibility* (``minor-version-compat``, policies ``minor-compat`` and
    ``forward-compat``): the driver is at or above the CUDA major's floor (11.x: 450.80.02,
    12.x: 525.60.13, 13.x: R580); the workload runs without PTX JIT and APIs newer than the
    driver return ``cudaErrorCallRequiresNewerDriver`` (minor-version-compatibility page), so
    the verdict carries caveats.
  Otherwise ``driver-too-old``; when NVIDIA's minimum driver for the toolkit is unknown (13.5)
  native support is never assumed and the reason is ``unknown-toolkit``.
* **The container toolkit's gate** (``require-cuda-unmet``, every policy): an image's
  ``NVIDIA_REQUIRE_CUDA`` (or the container's own) must hold on the host or the container never
  starts (:mod:`cudasched.vocab.requirecuda`). Its ``cuda>=`` is strict, so under minor-version
  compatibility an older driver passes only through a ``brand=...,driver...`` alternative;
  under forward compatibility those alternatives also name the data-center branches the
  image's compat libraries are meant for, beyond NVIDIA's matrix.
* **Framework kernels** (``framework-arch-unsupported``): the GPU must be covered by the build's
  arch list, either by SASS of the same major and a lower-or-equal minor (a cubin for X.y runs on
  X.z, z >= y: CUDA C++ Programming Guide, binary compatibility) or, with ``+PTX``, by JIT of the
  highest listed arch's PTX on a newer GPU. PTX JIT is exactly what minor-version compatibility
  forbids, so a PTX-only GPU is not accepted under that mode.
* **Requested minimum compute capability** (``compute-capability-too-low``).

A fact the node does not report becomes an ``unknown-*`` reason (``unknown-driver``,
``unknown-compute-capability``, ``unknown-arch``, ``unknown-toolkit``, ``unknown-datacenter``)
and the verdict is ``incompatible``: a hard requirement is never passed on a guess.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from cudasched.nodes.facts import NodeFacts
from cudasched.vocab.errors import InputError
from cudasched.vocab.requirecuda import DATACENTER_BRANDS, OTHER_BRANDS, brands_for
from cudasched.vocab.requirements import FrameworkBuild, Policy, Requirement
from cudasched.vocab.versions import ComputeCapability, CudaVersion

if TYPE_CHECKING:
    from cudasched.knowledge import ArchInfo, KnowledgeBase

__all__ = [
    "Coverage",
    "Reason",
    "Verdict",
    "VerdictStatus",
    "arch_window_reason",
    "check",
    "effective_cuda",
    "framework_coverage",
    "gate_forward_compat_branches",
    "resolve_policy",
    "toolkit_coverage",
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


class Coverage(StrEnum):
    """How a framework build's kernels reach a GPU."""

    SASS = "sass"  # a cubin of the same major, minor <= the GPU's
    PTX = "ptx"  # only by JIT-compiling the highest arch's PTX
    NONE = "none"  # not at all
    UNKNOWN = "unknown"  # the build's arch list is not known: no framework constraint


def resolve_policy(req: Requirement, policy: Policy | str) -> Policy:
    """The requirement's own policy (annotation) wins over the caller's default."""
    if req.policy is not None:
        return req.policy
    if isinstance(policy, Policy):
        return policy
    if isinstance(policy, str):
        return Policy.parse(policy)
    raise InputError(f"invalid policy {policy!r}: expected one of strict, minor-compat, ...")


def effective_cuda(req: Requirement) -> CudaVersion | None:
    """The toolkit the workload needs: the explicit one, else the framework build's."""
    if req.cuda is not None:
        return req.cuda.release
    if req.framework is not None and req.framework.cuda is not None:
        return req.framework.cuda.release
    return None


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


def gate_forward_compat_branches(req: Requirement) -> frozenset[int]:
    """Data-center driver branches an image's own ``NVIDIA_REQUIRE_CUDA`` names for its compat
    libraries (``brand=tesla,driver>=550,driver<551``): forward-compatibility targets by the
    image's claim, on top of NVIDIA's matrix. Empty without a gate or without cuda-compat."""
    if req.gate is None or not req.ships_cuda_compat:
        return frozenset()
    return req.gate.branches(DATACENTER_BRANDS)


def _fmt_list(values: Iterable[int]) -> str:
    return ", ".join(f"R{v}" for v in sorted(values))


def _gpu_name(facts: NodeFacts) -> str:
    if facts.products:
        return "/".join(facts.products)
    if facts.compute is not None:
        return f"the GPU (compute capability {facts.compute})"
    return "the GPU"


def _node_cuda_text(facts: NodeFacts) -> str:
    if facts.driver is not None and facts.cuda is not None:
        return f"driver {facts.driver} supports CUDA {facts.cuda}"
    if facts.driver is not None:
        return f"driver {facts.driver} supports no CUDA release the knowledge base knows"
    return f"the node supports CUDA {facts.cuda} (driver version not reported)"


def check(facts: NodeFacts, req: Requirement, policy: Policy | str, kb: KnowledgeBase) -> Verdict:
    """Judge one node against one requirement. The requirement's ``policy`` overrides ``policy``.

    Returns ``compatible`` (native), ``compatible-with-caveats`` (minor-version or forward
    compatibility) or ``incompatible`` with every reason found, blocking ones first.
    """
    pol = resolve_policy(req, policy)
    if req.is_empty:
        return Verdict(
            VerdictStatus.COMPATIBLE,
            (Reason(NO_REQUIREMENT, "the workload declares no CUDA requirement"),),
        )
    if not facts.has_gpu:
        return Verdict(
            VerdictStatus.INCOMPATIBLE,
            (
                Reason(
                    NO_GPU_FACTS,
                    f"node {facts.name!r} reports no GPU facts (no cudasched.io/ or "
                    "nvidia.com/ GPU labels)",
                ),
            ),
        )

    blocking: list[Reason] = []
    cuda = effective_cuda(req)
    if req.framework is not None and cuda is None:
        blocking.append(
            Reason(
                UNKNOWN_TOOLKIT,
                f"{req.framework.name} {req.framework.version} does not say which CUDA it was "
                "built with; give the CUDA version explicitly",
            )
        )
    toolkit = kb.toolkit(cuda) if cuda is not None else None
    if cuda is not None and toolkit is None:
        blocking.append(
            Reason(
                UNKNOWN_TOOLKIT,
                f"CUDA {cuda} is not a toolkit release in the knowledge base (NVIDIA Table 3); "
                "no node is judged able to run it",
            )
        )

    cc = facts.compute
    coverage = Coverage.UNKNOWN
    if cc is None:
        blocking.append(
            Reason(
                UNKNOWN_COMPUTE_CAPABILITY,
                f"node {facts.name!r} reports no compute capability and its product is unknown",
            )
        )
    else:
        if req.min_compute is not None and cc < req.min_compute:
            blocking.append(
                Reason(
                    COMPUTE_CAPABILITY_TOO_LOW,
                    f"{_gpu_name(facts)} has compute capability {cc}; the workload needs >= "
                    f"{req.min_compute}",
                )
            )
        if cuda is not None:
            arch = kb.arch(cc)
            if arch is None:
                blocking.append(
                    Reason(
                        UNKNOWN_ARCH,
                        f"compute capability {cc} is not an architecture the knowledge base "
                        f"knows, so CUDA {cuda} support cannot be confirmed",
                    )
                )
            else:
                window = arch_window_reason(kb, arch, cc, cuda, req.framework)
                if window is not None:
                    blocking.append(window)
                cap = arch.last_driver_branch
                if cap is not None:
                    if facts.driver is None:
                        blocking.append(
                            Reason(
                                UNKNOWN_DRIVER,
                                f"{arch.name} GPUs are supported only up to driver branch R{cap} "
                                "and the node reports no driver version",
                            )
                        )
                    elif facts.driver.branch > cap:
                        blocking.append(
                            Reason(
                                DRIVER_BRANCH_UNSUPPORTED_GPU,
                                f"driver {facts.driver} (R{facts.driver.branch}) does not support "
                                f"{arch.name} GPUs; their last driver branch is R{cap}",
                            )
                        )
        coverage = framework_coverage(req.framework, cc)
        if coverage is Coverage.NONE and req.framework is not None:
            archs = ", ".join(str(a) for a in req.framework.arch_list or ())
            ptx = " (+PTX)" if req.framework.ptx else ""
            blocking.append(
                Reason(
                    FRAMEWORK_ARCH_UNSUPPORTED,
                    f"{req.framework.name} {req.framework.version} ships kernels for "
                    f"{archs}{ptx}, none of which runs on compute capability {cc}",
                )
            )

    first = facts.first_driver
    if first is not None and facts.driver is not None and facts.driver < first:
        blocking.append(
            Reason(
                DRIVER_BRANCH_UNSUPPORTED_GPU,
                f"driver {facts.driver} cannot drive {facts.first_driver_product}: the first "
                f"driver that supports it is {first} (no policy helps: forward compatibility "
                "replaces only the user-mode driver)",
            )
        )
    # The container toolkit's gate is reported when it is what stops the container: a node
    # already refused for its driver or its GPU is not refused twice for the same fact.
    gate = _gate_reason(facts, req)

    if cuda is None:
        # Only a compute-capability floor was asked for.
        if not blocking and gate is not None:
            blocking.append(gate)
        if blocking:
            return Verdict(VerdictStatus.INCOMPATIBLE, tuple(blocking))
        return Verdict(
            VerdictStatus.COMPATIBLE,
            (
                Reason(
                    COMPUTE_CAPABILITY_OK,
                    f"{_gpu_name(facts)} has compute capability {cc} >= {req.min_compute}",
                ),
            ),
        )

    mode, driver_reasons = _driver_mode(facts, req, pol, cuda, toolkit, coverage, kb)
    if not blocking and mode is not None and gate is not None:
        blocking.append(gate)
    if blocking or mode is None:
        return Verdict(VerdictStatus.INCOMPATIBLE, tuple(blocking + driver_reasons))
    if req.gate is not None and mode != NATIVE:
        driver_reasons = [_with_gate_note(r, facts, req) for r in driver_reasons]
    status = VerdictStatus.COMPATIBLE if mode == NATIVE else VerdictStatus.COMPATIBLE_WITH_CAVEATS
    return Verdict(status, tuple(driver_reasons))


def _driver_mode(
    facts: NodeFacts,
    req: Requirement,
    pol: Policy,
    cuda: CudaVersion,
    toolkit: object | None,
    coverage: Coverage,
    kb: KnowledgeBase,
) -> tuple[str | None, list[Reason]]:
    """Which compatibility mode lets this driver run ``cuda`` (None: none) and why."""
    min_driver = kb.min_driver(cuda) if toolkit is not None else None
    need = f"CUDA {cuda}" + (f" (driver >= {min_driver})" if min_driver is not None else "")

    if facts.cuda is None and facts.driver is None:
        return None, [
            Reason(
                UNKNOWN_DRIVER, f"node {facts.name!r} reports neither a driver nor a CUDA version"
            )
        ]
    if min_driver is None:
        # NVIDIA's minimum for this release is not known (13.5): native support is never
        # assumed, whatever the node's CUDA label says; the compatibility modes may still apply.
        too_old = Reason(
            UNKNOWN_TOOLKIT,
            f"NVIDIA's minimum driver for CUDA {cuda} is not in the knowledge base, so no driver "
            f"is judged to run it natively ({_node_cuda_text(facts)})",
        )
    elif facts.cuda is not None and facts.cuda >= cuda:
        return NATIVE, [Reason(NATIVE, f"{_node_cuda_text(facts)}; the workload needs {need}")]
    else:
        too_old = Reason(DRIVER_TOO_OLD, f"{_node_cuda_text(facts)}; the workload needs {need}")
    notes: list[Reason] = []

    # Forward compatibility (cuda-compat package): data-center GPUs, listed branches only (the
    # matrix's, or those the image's own NVIDIA_REQUIRE_CUDA names for its compat libraries).
    if pol is Policy.FORWARD_COMPAT and req.ships_cuda_compat:
        matrix = kb.forward_compat_branches(cuda)
        branches = matrix | gate_forward_compat_branches(req)
        listed = facts.driver is not None and facts.driver.branch in branches
        if facts.datacenter is False:
            # Never possible on this GPU, whatever the branch: say so first.
            notes.append(
                Reason(
                    NO_FORWARD_COMPAT_ON_GEFORCE,
                    f"forward compatibility needs a data-center GPU; {_gpu_name(facts)} is "
                    "not one (CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE)",
                )
            )
        if facts.driver is None:
            notes.append(
                Reason(
                    UNKNOWN_DRIVER, "forward compatibility needs the driver branch, not reported"
                )
            )
        elif not listed:
            names = _fmt_list(branches) if branches else "no branch"
            too_old = Reason(
                too_old.code,
                f"{too_old.message}; forward compatibility for CUDA {cuda} is listed only on "
                f"{names}, not R{facts.driver.branch}",
            )
        elif facts.datacenter is True:
            by_image = (
                ""
                if facts.driver.branch in matrix
                else (
                    f"; R{facts.driver.branch} is not in NVIDIA's forward-compatibility matrix but "
                    "the image's NVIDIA_REQUIRE_CUDA names it for its compat libraries"
                )
            )
            return FORWARD_COMPAT, [
                Reason(
                    FORWARD_COMPAT,
                    f"driver {facts.driver} supports CUDA {facts.cuda or 'unknown'}; CUDA "
                    f"{cuda} runs through the image's cuda-compat-{cuda.major}-{cuda.minor} "
                    f"libraries on R{facts.driver.branch} (forward compatibility, data-center "
                    f"GPU; no OpenGL/Vulkan interop){by_image}",
                )
            ]
        elif facts.datacenter is None:
            notes.append(
                Reason(
                    UNKNOWN_DATACENTER,
                    "forward compatibility needs a data-center GPU and the node does not say "
                    f"whether {_gpu_name(facts)} is one",
                )
            )
    elif pol is Policy.FORWARD_COMPAT:
        too_old = Reason(
            too_old.code,
            f"{too_old.message}; forward compatibility needs an image that ships cuda-compat",
        )

    # Minor-version compatibility: any driver at or above the CUDA major's floor.
    if pol in (Policy.MINOR_COMPAT, Policy.FORWARD_COMPAT):
        floor = kb.minor_compat_floor(cuda.major)
        if floor is None:
            too_old = Reason(
                too_old.code,
                f"{too_old.message}; CUDA {cuda.major}.x has no minor-version compatibility",
            )
        elif facts.driver is None:
            notes.append(
                Reason(
                    UNKNOWN_DRIVER,
                    f"minor-version compatibility needs driver >= {floor}; the node reports no "
                    "driver version",
                )
            )
        elif facts.driver >= floor:
            if coverage is Coverage.PTX:
                notes.append(
                    Reason(
                        FRAMEWORK_ARCH_UNSUPPORTED,
                        f"{_gpu_name(facts)} is reached only through PTX JIT, which "
                        f"minor-version compatibility does not allow (driver {facts.driver} is "
                        f"older than {need})",
                    )
                )
            else:
                return MINOR_VERSION_COMPAT, [
                    Reason(
                        MINOR_VERSION_COMPAT,
                        f"{_node_cuda_text(facts)}; CUDA {cuda} runs under minor-version "
                        f"compatibility (CUDA {cuda.major}.x needs driver >= {floor}): no PTX "
                        "JIT, and APIs newer than the driver return "
                        "cudaErrorCallRequiresNewerDriver",
                    )
                ]
        else:
            too_old = Reason(
                too_old.code,
                f"{too_old.message}; minor-version compatibility needs driver >= {floor}",
            )
    return None, [too_old, *notes]


# --------------------------------------------------------------------------- the toolkit gate


def _fmt_branches(branches: frozenset[int]) -> str:
    return ", ".join(f"R{b}" for b in sorted(branches))


def _gate_needs(req: Requirement) -> str:
    """What the gate asks for, in words: its CUDA floor and the branches its brand
    alternatives admit."""
    assert req.gate is not None
    parts = []
    floor = req.gate.cuda_floor()
    if floor is not None:
        parts.append(f"a driver that supports CUDA >= {floor}")
    dc = req.gate.branches(DATACENTER_BRANDS)
    other = req.gate.branches(OTHER_BRANDS)
    if dc:
        parts.append(f"driver branch {_fmt_branches(dc)} on a data-center GPU")
    if other:
        parts.append(f"driver branch {_fmt_branches(other)} on other GPUs")
    return " or ".join(parts) or f"'{req.gate.text}'"


def _gate_reason(facts: NodeFacts, req: Requirement) -> Reason | None:
    """``require-cuda-unmet`` when the container toolkit would not start the container here
    (or it cannot be told: a fact the gate reads is unknown)."""
    gate = req.gate
    if gate is None:
        return None
    holds = gate.holds(
        facts.cuda,
        facts.driver.code if facts.driver is not None else None,
        facts.compute.code if facts.compute is not None else None,
        brands_for(facts.datacenter),
    )
    if holds is True:
        return None
    where = f"NVIDIA_REQUIRE_CUDA ({gate.source})" if gate.source else "NVIDIA_REQUIRE_CUDA"
    host = _node_cuda_text(facts) if facts.driver is not None or facts.cuda else "node facts"
    if holds is False:
        return Reason(
            REQUIRE_CUDA_UNMET,
            f"the NVIDIA container toolkit would refuse to start the container: {where} needs "
            f"{_gate_needs(req)}, and {host}"
            + ("" if facts.datacenter is not None else " (GPU class not reported)")
            + "; NVIDIA_DISABLE_REQUIRE=true on the container turns the check off",
        )
    return Reason(
        REQUIRE_CUDA_UNMET,
        f"cannot confirm the NVIDIA container toolkit starts the container: {where} needs "
        f"{_gate_needs(req)}, and the node does not report every fact it reads ({host})",
    )


def _with_gate_note(reason: Reason, facts: NodeFacts, req: Requirement) -> Reason:
    """A compatibility-mode verdict says how the gate lets the container start."""
    assert req.gate is not None
    floor = req.gate.cuda_floor()
    if floor is None or facts.cuda is None or facts.cuda >= floor or facts.driver is None:
        return reason
    return Reason(
        reason.code,
        f"{reason.message}; the image's NVIDIA_REQUIRE_CUDA admits driver branch "
        f"R{facts.driver.branch} through its brand/driver alternative",
    )
