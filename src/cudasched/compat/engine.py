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
* **The container toolkit's gate** (``require-cuda-unmet``, every policy, legacy toolkit mode
  only: in CDI mode the hook that checks it does not run): an image's
  ``NVIDIA_REQUIRE_CUDA`` (or the container's own) must hold on the host or the container never
  starts (:mod:`cudasched.vocab.requirecuda`). Its ``cuda>=`` is strict, so under minor-version
  compatibility an older driver passes only through a ``brand=...,driver...`` alternative;
  under forward compatibility those alternatives also name the data-center branches the
  image's compat libraries are meant for, beyond NVIDIA's matrix.
* **The image's compat libraries** (``no-forward-compat-on-geforce``: error 804,
  ``compat-branch-unsupported``: error 803, every policy): where the toolkit puts them in front
  of the host's driver (a rule per toolkit mode), CUDA runs through forward compatibility on
  a data-center GPU whose branch the compat driver supports, and fails elsewhere
  (:mod:`cudasched.compat.compatlibs`). A verdict the policy accepted then says it runs
  through forward compatibility.
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

from typing import TYPE_CHECKING

from cudasched.compat.compatlibs import compat_outcome
from cudasched.compat.coverage import Coverage, arch_window_reason, framework_coverage
from cudasched.compat.drivermode import driver_mode
from cudasched.compat.gate import gate_reason, with_gate_note
from cudasched.compat.verdict import (
    COMPUTE_CAPABILITY_OK,
    COMPUTE_CAPABILITY_TOO_LOW,
    DRIVER_BRANCH_UNSUPPORTED_GPU,
    FRAMEWORK_ARCH_UNSUPPORTED,
    NATIVE,
    NO_GPU_FACTS,
    NO_REQUIREMENT,
    UNKNOWN_ARCH,
    UNKNOWN_COMPUTE_CAPABILITY,
    UNKNOWN_DRIVER,
    UNKNOWN_TOOLKIT,
    Reason,
    Verdict,
    VerdictStatus,
    gpu_name,
)
from cudasched.nodes.facts import NodeFacts
from cudasched.vocab.errors import InputError
from cudasched.vocab.requirements import Policy, Requirement, ToolkitMode
from cudasched.vocab.versions import ComputeCapability, CudaVersion

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.knowledge.records import ToolkitRelease

__all__ = [
    "check",
    "effective_cuda",
    "resolve_policy",
]


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
    cuda = effective_cuda(req)
    toolkit = kb.toolkit(cuda) if cuda is not None else None
    blocking = _toolkit_reasons(req, cuda, toolkit)
    coverage = Coverage.UNKNOWN
    if facts.compute is None:
        blocking.append(
            Reason(
                UNKNOWN_COMPUTE_CAPABILITY,
                f"node {facts.name!r} reports no compute capability and its product is unknown",
            )
        )
    else:
        coverage = _gpu_reasons(facts, facts.compute, req, cuda, kb, blocking)
    first = _first_driver_reason(facts)
    if first is not None:
        blocking.append(first)
    # The container toolkit's gate is reported when it is what stops the container: a node
    # already refused for its driver or its GPU is not refused twice for the same fact. Only
    # the legacy toolkit checks it.
    gate = gate_reason(facts, req) if req.toolkit is ToolkitMode.LEGACY else None
    if cuda is None:
        return _floor_only(facts, req, kb, blocking, gate)
    mode, driver_reasons = driver_mode(facts, req, pol, cuda, toolkit, coverage, kb)
    return _started(facts, req, kb, mode, driver_reasons, blocking, gate)


def _started(
    facts: NodeFacts,
    req: Requirement,
    kb: KnowledgeBase,
    mode: str | None,
    driver_reasons: list[Reason],
    blocking: list[Reason],
    gate: Reason | None,
) -> Verdict:
    """The verdict once the driver's mode is known: the gate where it is what stops the
    container, else the compat libraries, which decide what CUDA sees once it starts."""
    if not blocking and mode is not None and gate is not None:
        blocking.append(gate)
    compat = compat_outcome(facts, req, kb) if gate is None else None
    if compat is not None and compat.failure is not None:
        blocking.append(compat.failure)
    if blocking or mode is None:
        return Verdict(VerdictStatus.INCOMPATIBLE, tuple(blocking + driver_reasons))
    if compat is not None and compat.runs is not None:
        return Verdict(VerdictStatus.COMPATIBLE_WITH_CAVEATS, (compat.runs,))
    if req.gate is not None and mode != NATIVE and req.toolkit is ToolkitMode.LEGACY:
        driver_reasons = [with_gate_note(r, facts, req) for r in driver_reasons]
    status = VerdictStatus.COMPATIBLE if mode == NATIVE else VerdictStatus.COMPATIBLE_WITH_CAVEATS
    return Verdict(status, tuple(driver_reasons))


def _toolkit_reasons(
    req: Requirement, cuda: CudaVersion | None, toolkit: ToolkitRelease | None
) -> list[Reason]:
    """Toolkit must exist: a framework build that names no CUDA, a CUDA NVIDIA does not list."""
    blocking: list[Reason] = []
    if req.framework is not None and cuda is None:
        blocking.append(
            Reason(
                UNKNOWN_TOOLKIT,
                f"{req.framework.name} {req.framework.version} does not say which CUDA it was "
                "built with; give the CUDA version explicitly",
            )
        )
    if cuda is not None and toolkit is None:
        blocking.append(
            Reason(
                UNKNOWN_TOOLKIT,
                f"CUDA {cuda} is not a toolkit release in the knowledge base (NVIDIA Table 3); "
                "no node is judged able to run it",
            )
        )
    return blocking


def _gpu_reasons(
    facts: NodeFacts,
    cc: ComputeCapability,
    req: Requirement,
    cuda: CudaVersion | None,
    kb: KnowledgeBase,
    blocking: list[Reason],
) -> Coverage:
    """What the GPU itself refuses, appended to ``blocking``: a compute capability below the
    floor asked, the toolkit's architecture window and the arch's last driver branch, framework
    kernels that miss it. Returns how the framework build covers it."""
    if req.min_compute is not None and cc < req.min_compute:
        blocking.append(
            Reason(
                COMPUTE_CAPABILITY_TOO_LOW,
                f"{gpu_name(facts)} has compute capability {cc}; the workload needs >= "
                f"{req.min_compute}",
            )
        )
    if cuda is not None:
        blocking.extend(_arch_reasons(facts, cc, req, cuda, kb))
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
    return coverage


def _arch_reasons(
    facts: NodeFacts, cc: ComputeCapability, req: Requirement, cuda: CudaVersion, kb: KnowledgeBase
) -> list[Reason]:
    """Binary compatibility (the toolkit's architecture window) and the arch's last driver
    branch."""
    arch = kb.arch(cc)
    if arch is None:
        return [
            Reason(
                UNKNOWN_ARCH,
                f"compute capability {cc} is not an architecture the knowledge base "
                f"knows, so CUDA {cuda} support cannot be confirmed",
            )
        ]
    out: list[Reason] = []
    window = arch_window_reason(kb, arch, cc, cuda, req.framework)
    if window is not None:
        out.append(window)
    cap = arch.last_driver_branch
    if cap is None:
        return out
    if facts.driver is None:
        out.append(
            Reason(
                UNKNOWN_DRIVER,
                f"{arch.name} GPUs are supported only up to driver branch R{cap} "
                "and the node reports no driver version",
            )
        )
    elif facts.driver.branch > cap:
        out.append(
            Reason(
                DRIVER_BRANCH_UNSUPPORTED_GPU,
                f"driver {facts.driver} (R{facts.driver.branch}) does not support "
                f"{arch.name} GPUs; their last driver branch is R{cap}",
            )
        )
    return out


def _first_driver_reason(facts: NodeFacts) -> Reason | None:
    """A driver older than the first one that drives the node's GPU product."""
    first = facts.first_driver
    if first is None or facts.driver is None or not facts.driver < first:
        return None
    return Reason(
        DRIVER_BRANCH_UNSUPPORTED_GPU,
        f"driver {facts.driver} cannot drive {facts.first_driver_product}: the first "
        f"driver that supports it is {first} (no policy helps: forward compatibility "
        "replaces only the user-mode driver)",
    )


def _floor_only(
    facts: NodeFacts,
    req: Requirement,
    kb: KnowledgeBase,
    blocking: list[Reason],
    gate: Reason | None,
) -> Verdict:
    """The verdict when only a compute-capability floor was asked for (no CUDA)."""
    if not blocking and gate is not None:
        blocking.append(gate)
    failure = compat_outcome(facts, req, kb).failure if gate is None else None
    if failure is not None:
        blocking.append(failure)
    if blocking:
        return Verdict(VerdictStatus.INCOMPATIBLE, tuple(blocking))
    return Verdict(
        VerdictStatus.COMPATIBLE,
        (
            Reason(
                COMPUTE_CAPABILITY_OK,
                f"{gpu_name(facts)} has compute capability {facts.compute} >= {req.min_compute}",
            ),
        ),
    )
