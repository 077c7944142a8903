"""The typed records the knowledge base is made of: one frozen dataclass per kind of fact.

Each record keeps the ``source`` it was read from, a ``status`` where sources can be silent or
disagree, and the small derived answers that belong to the fact itself (a toolkit's effective
minimum driver, whether an architecture is still supported by a toolkit or a driver branch).
Loading and indexing live in :mod:`cudasched.knowledge.loading` and :mod:`.base`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from cudasched.vocab.versions import ComputeCapability, CudaVersion, DriverVersion

__all__ = [
    "ArchInfo",
    "ContainerRelease",
    "DriverBranch",
    "FcCell",
    "ForwardCompatPackage",
    "FrameworkRelease",
    "GpuInfo",
    "MinorCompat",
    "ReleaseKind",
    "Status",
    "ToolkitRelease",
    "TorchRelease",
    "TorchVariant",
]


class Status(StrEnum):
    """How sure the knowledge base is of an entry."""

    KNOWN = "known"
    UNKNOWN = "unknown"  # not found in any source; the value is None
    DISPUTED = "disputed"  # sources disagree; `alternatives` holds every candidate
    DERIVED = "derived"  # not in NVIDIA's list; inferred from the silicon by a cited source


class ReleaseKind(StrEnum):
    """Which row of Table 3 a toolkit release is."""

    GA = "ga"
    UPDATE = "update"
    RC = "rc"


class FcCell(StrEnum):
    """A cell of NVIDIA's forward-compatibility matrix."""

    COMPATIBLE = "C"
    OWN_BRANCH = "N/A"  # the package was built from this branch: not needed there
    NO_PACKAGE = "X"  # NVIDIA ships no package for the pair


@dataclass(frozen=True, slots=True)
class ToolkitRelease:
    """One row of Table 3: a toolkit release and the Linux driver its full feature set needs.

    ``cuda`` keeps the patch level (12.4.1 is "12.4 Update 1"); CudaVersion ordering ignores it,
    so sort with :attr:`sort_key` when updates matter.
    """

    cuda: CudaVersion
    min_driver: DriverVersion | None
    status: Status
    source: str
    kind: ReleaseKind = ReleaseKind.GA
    release: str = ""
    alternatives: tuple[DriverVersion, ...] = ()
    note: str = ""

    @property
    def sort_key(self) -> tuple[int, int, int]:
        return (self.cuda.major, self.cuda.minor, self.cuda.patch or 0)

    @property
    def effective_min_driver(self) -> DriverVersion | None:
        """The minimum to judge by: the value, or for a disputed row the *highest* alternative,
        so that a node accepted under it is accepted under every reading of the sources."""
        if self.min_driver is not None:
            return self.min_driver
        return max(self.alternatives) if self.alternatives else None


@dataclass(frozen=True, slots=True)
class MinorCompat:
    """Minor-version compatibility of one CUDA major: ``floor`` None means it has none."""

    cuda_major: int
    floor: DriverVersion | None
    source: str
    note: str = ""


@dataclass(frozen=True, slots=True)
class ForwardCompatPackage:
    """One row of the forward-compatibility matrix: ``cuda-compat-X-Y`` across host branches."""

    cuda: CudaVersion
    built_from_branch: int
    cells: tuple[tuple[int, FcCell], ...]
    source: str

    @property
    def package(self) -> str:
        return f"cuda-compat-{self.cuda.major}-{self.cuda.minor}"

    @property
    def compatible_branches(self) -> frozenset[int]:
        return frozenset(b for b, cell in self.cells if cell is FcCell.COMPATIBLE)

    def cell(self, branch: int) -> FcCell | None:
        return dict(self.cells).get(branch)


@dataclass(frozen=True, slots=True)
class DriverBranch:
    """A data-center driver branch: lifecycle type (LTSB, PB, NFB) and end of life (YYYY-MM,
    ``past`` when only listed as ended, None when unknown)."""

    branch: int
    type: str | None
    eol: str | None
    status: Status
    source: str
    alternatives: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True, slots=True)
class ArchInfo:
    """What a compute capability is and which toolkits and driver branches support it.

    ``family`` is the architecture's word in GFD's ``gpu.family`` vocabulary (``hopper``), the one
    cudasched publishes and reads; ``gfd_family`` is the word GFD itself prints for these
    capabilities (the same unless the data says otherwise, citing ``gfd_family_source``).
    ``last_cuda`` / ``last_driver_branch`` None mean *still supported* unless the field name is
    in ``unknown`` (then the fact was not found). ``first_cuda`` None is always unknown.
    """

    name: str
    family: str
    gfd_family: str
    first_cuda: CudaVersion | None
    last_cuda: CudaVersion | None
    last_driver_branch: int | None
    source: str
    compute: tuple[ComputeCapability, ...] = ()
    platform: str = "discrete"
    status: Status = Status.KNOWN
    unknown: tuple[str, ...] = ()
    alternatives: tuple[str, ...] = ()
    note: str = ""
    gfd_family_source: str = ""

    @property
    def jetson(self) -> bool:
        return self.platform == "jetson"

    def toolkit_supports(self, cuda: CudaVersion) -> bool | None:
        """Whether toolkit ``cuda`` compiles for this architecture (None: cannot tell)."""
        if self.last_cuda is not None and cuda > self.last_cuda:
            return False
        if self.first_cuda is None:
            return None
        return cuda >= self.first_cuda

    def driver_supports(self, driver: DriverVersion) -> bool | None:
        """Whether the driver's branch still supports this architecture (None: unknown)."""
        if self.last_driver_branch is None:
            return None if "last_driver_branch" in self.unknown else True
        return driver.branch <= self.last_driver_branch


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """A GPU product. ``variant`` is the exact NVML name a lookup matched (None when it matched
    the product by a short name); ``datacenter`` is True only for data-center products.

    ``first_driver`` is the first driver that drives the product (the first release whose
    supported-GPU list names it): of the matched board when ``first_drivers`` gives one, else
    the lowest of the product's boards. None means not known, never "any driver" by
    evidence: a listing that only marks when a list started is not a minimum.
    """

    product: str
    compute: ComputeCapability
    arch: str
    datacenter: bool
    source: str
    family: str = ""
    variant: str | None = None
    names: tuple[str, ...] = ()
    status: Status = Status.KNOWN
    open_kernel_only: bool = False
    first_driver: DriverVersion | None = None
    first_driver_source: str = ""
    first_drivers: tuple[tuple[str, DriverVersion], ...] = ()
    note: str = ""
    host_arch: str | None = None  # the CPU architecture of every server with this GPU (arm64)
    host_arch_source: str = ""

    def first_driver_of(self, name: str | None) -> DriverVersion | None:
        """The first driver of board ``name`` (an NVML name of this product), else of the
        product."""
        for board, version in self.first_drivers:
            if board == name:
                return version
        return self.first_driver


@dataclass(frozen=True, slots=True)
class ContainerRelease:
    """An NGC container release and the CUDA it is built on (as its release notes print it)."""

    product: str
    release: str
    cuda: CudaVersion
    cuda_text: str
    source: str
    printed_min_driver: DriverVersion | None = None
    fc_branches: tuple[DriverVersion, ...] | None = None
    min_compute: ComputeCapability | None = None
    framework: str | None = None
    note: str = ""


# Framework releases (read by cudasched.knowledge.frameworks; not part of the package API)


@dataclass(frozen=True, slots=True)
class TorchVariant:
    """One published wheel variant of a PyTorch release (``cu124``): its CUDA and, when a
    source gives it, the compute capabilities its kernels were built for."""

    tag: str
    cuda: CudaVersion
    channel: str
    arch_list: tuple[ComputeCapability, ...] | None
    ptx: bool
    arch_source: str


@dataclass(frozen=True, slots=True)
class TorchRelease:
    """A PyTorch release series (``2.5``): its CUDA variants and the one PyPI installs."""

    release: str
    variants: Mapping[str, TorchVariant]
    pypi_default: str | None
    pypi_default_source: str
    source: str


@dataclass(frozen=True, slots=True)
class FrameworkRelease:
    """A TensorFlow or vLLM release: one default CUDA, optional alternates."""

    release: str
    cuda: CudaVersion | None
    source: str
    alternates: tuple[CudaVersion, ...] = ()
    arch_list: tuple[ComputeCapability, ...] | None = None
    ptx: bool = False
    status: Status = Status.KNOWN
    note: str = ""
