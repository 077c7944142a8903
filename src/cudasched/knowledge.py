"""The CUDA knowledge base: NVIDIA's published compatibility tables as typed, indexed facts.

Every answer cudasched gives rests on a fact in ``cudasched/data/*.yaml``, and every fact
there names its source, so an explanation can always say *who* said a driver is too old.
Unknown facts stay ``None`` with status ``unknown``; facts that sources disagree on carry
status ``disputed`` and every alternative, never a silent pick.

The files are read once by :meth:`KnowledgeBase.load` (through :mod:`importlib.resources`,
so it works from a wheel or a zip) and indexed into dictionaries; callers keep the object and
pass it around. Nothing is cached at module level and nothing is read at import time.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from importlib import resources
from types import MappingProxyType
from typing import Any

import yaml

from cudasched.errors import InputError, KnowledgeError, VersionError
from cudasched.requirements import FrameworkBuild
from cudasched.versions import (
    ComputeCapability,
    CudaVersion,
    DriverVersion,
    parse_compute_capability,
    parse_cuda,
    parse_driver,
)

__all__ = [
    "DATA_FILES",
    "ArchInfo",
    "ContainerRelease",
    "DriverBranch",
    "ForwardCompatPackage",
    "GpuInfo",
    "KnowledgeBase",
    "MinorCompat",
    "ReleaseKind",
    "Status",
    "ToolkitRelease",
    "gfd_family",
    "gfd_product_label",
]

DATA_FILES = (
    "toolkits.yaml",
    "compat.yaml",
    "architectures.yaml",
    "gpus.yaml",
    "frameworks.yaml",
    "containers.yaml",
)

NGC_PRODUCTS = ("tritonserver", "pytorch", "tensorflow")


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


# ---------------------------------------------------------------------------------------------
# Fact types
# ---------------------------------------------------------------------------------------------


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

    ``last_cuda`` / ``last_driver_branch`` None mean *still supported* unless the field name is
    in ``unknown`` (then the fact was not found). ``first_cuda`` None is always unknown.
    """

    name: str
    family: str
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
    the product by a short name); ``datacenter`` is True only for data-center products."""

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
    first_listed_driver: DriverVersion | None = None
    note: str = ""


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


@dataclass(frozen=True, slots=True)
class _TorchVariant:
    tag: str
    cuda: CudaVersion
    channel: str
    arch_list: tuple[ComputeCapability, ...] | None
    ptx: bool
    arch_source: str


@dataclass(frozen=True, slots=True)
class _TorchRelease:
    release: str
    variants: Mapping[str, _TorchVariant]
    pypi_default: str | None
    pypi_default_source: str
    source: str


@dataclass(frozen=True, slots=True)
class _SimpleRelease:
    """A TensorFlow or vLLM release: one default CUDA, optional alternates."""

    release: str
    cuda: CudaVersion | None
    source: str
    alternates: tuple[CudaVersion, ...] = ()
    arch_list: tuple[ComputeCapability, ...] | None = None
    ptx: bool = False
    status: Status = Status.KNOWN
    note: str = ""


# ---------------------------------------------------------------------------------------------
# Name normalisation (GPU products)
# ---------------------------------------------------------------------------------------------

_GFD_DROP_RE = re.compile(r"[^A-Za-z0-9\-_. ]")
_OPTIONAL_PREFIXES = ("nvidia-", "tesla-", "geforce-")
_MIG_RE = re.compile(r"-mig-.*$")
_DESCRIPTOR_RE = re.compile(r"^(?:\d+gb|\d+g|hbm\d*e?|pcie|sxm\d*|nvl\d*)$")


def gfd_product_label(nvml_name: str) -> str:
    """The ``nvidia.com/gpu.product`` value GFD publishes for an NVML name: characters outside
    ``[A-Za-z0-9-_. ]`` dropped, runs of whitespace joined with ``-``.

    >>> gfd_product_label("NVIDIA A100 80GB PCIe")
    'NVIDIA-A100-80GB-PCIe'
    """
    return "-".join(_GFD_DROP_RE.sub("", nvml_name).split())


def _product_key(name: str) -> str:
    """A lookup key equal for every spelling of one name: GFD-sanitised, lower case, with the
    optional brand prefixes (``NVIDIA``, ``Tesla``, ``GeForce``) removed."""
    # Any whitespace separates words here (GFD itself would delete a tab, not split on it).
    key = re.sub(r"-{2,}", "-", gfd_product_label(" ".join(name.split())).lower()).strip("-")
    changed = True
    while changed:
        changed = False
        for prefix in _OPTIONAL_PREFIXES:
            if key.startswith(prefix) and len(key) > len(prefix):
                key = key[len(prefix) :]
                changed = True
    return key


def gfd_family(cc: ComputeCapability) -> str:
    """The ``nvidia.com/gpu.family`` word GFD (v0.20) derives from a compute capability."""
    major, minor = cc.major, cc.minor
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ada-lovelace" if minor == 9 else "ampere"
    table = {
        1: "tesla",
        2: "fermi",
        3: "kepler",
        5: "maxwell",
        6: "pascal",
        9: "hopper",
        10: "blackwell",
        12: "blackwell",
        13: "rubin",
    }
    return table.get(major, "undefined")


# ---------------------------------------------------------------------------------------------
# Framework specs
# ---------------------------------------------------------------------------------------------

_FRAMEWORK_ALIASES = {
    "torch": "torch",
    "pytorch": "torch",
    "tensorflow": "tensorflow",
    "tensorflow-gpu": "tensorflow",
    "tensorflow-cuda": "tensorflow",
    "tf": "tensorflow",
    "vllm": "vllm",
}
_SPEC_RE = re.compile(
    r"^\s*(?P<name>[A-Za-z][A-Za-z0-9_-]*)\s*(?:==|=|@|\s)\s*v?"
    r"(?P<version>\d+(?:\.\d+){0,3}(?:(?:a|b|rc)\d+|\.dev\d+|\.post\d+)?)"
    r"(?:\+(?P<local>[A-Za-z0-9_.]+))?"
    r"(?:\s+(?P<tag>cu\d{2,4}|cpu))?\s*$"
)
_CU_TAG_RE = re.compile(r"^cu\d{2,4}$")
_SPEC_FORMS = "'torch 2.5.1+cu124', 'torch==2.5.1+cu124', 'tensorflow 2.15.0' or 'vllm 0.9.0'"


def _series(version: str) -> str:
    """``2.5.1`` -> ``2.5``; pre-release suffixes belong to the series (``2.10.0a0`` -> 2.10)."""
    parts = re.match(r"^(\d+)(?:\.(\d+))?", version)
    assert parts is not None  # the spec regex guarantees leading digits
    return f"{parts.group(1)}.{parts.group(2) or 0}"


# ---------------------------------------------------------------------------------------------
# Loading helpers
# ---------------------------------------------------------------------------------------------


class _Doc:
    """One data file: its entries and its ``sources`` map, with strict field readers that turn
    any malformed value into a :class:`KnowledgeError` naming the file and entry."""

    def __init__(self, name: str, data: object) -> None:
        if not isinstance(data, Mapping):
            raise KnowledgeError(f"{name}: expected a mapping at the top level")
        self.name = name
        self.data: Mapping[str, Any] = data
        sources = data.get("sources", {}) or {}
        if not isinstance(sources, Mapping):
            raise KnowledgeError(f"{name}: `sources` must map names to URLs or descriptions")
        self.sources = {str(k): " ".join(str(v).split()) for k, v in sources.items()}

    def entries(self, key: str) -> list[Mapping[str, Any]]:
        value = self.data.get(key)
        if not isinstance(value, list) or not all(isinstance(e, Mapping) for e in value):
            raise KnowledgeError(f"{self.name}: `{key}` must be a list of mappings")
        return value

    def source(self, entry: Mapping[str, Any], where: str, key: str = "source") -> str:
        """Resolve an entry's source: a named source of this file, or a URL."""
        raw = entry.get(key)
        if not isinstance(raw, str) or not raw.strip():
            raise KnowledgeError(f"{self.name}: {where} has no `{key}`")
        raw = raw.strip()
        if raw in self.sources:
            text = self.sources[raw]
            if not text:
                raise KnowledgeError(f"{self.name}: named source {raw!r} is empty")
            return text
        if raw.startswith(("https://", "http://")):
            return raw
        raise KnowledgeError(
            f"{self.name}: {where} cites {raw!r}, which is neither a URL nor a key of `sources`"
        )

    def parse(self, fn: Any, value: object, where: str) -> Any:
        try:
            return fn(value)
        except (VersionError, TypeError, ValueError) as exc:
            raise KnowledgeError(f"{self.name}: {where}: {exc}") from None

    def opt(self, fn: Any, value: object, where: str) -> Any:
        return None if value is None else self.parse(fn, str(value), where)

    def status(self, entry: Mapping[str, Any], where: str) -> Status:
        try:
            return Status(entry.get("status", "known"))
        except ValueError:
            allowed = ", ".join(s.value for s in Status)
            raise KnowledgeError(f"{self.name}: {where}: status must be one of {allowed}") from None


def _note(entry: Mapping[str, Any]) -> str:
    return " ".join(str(entry.get("note") or "").split())


def _read_data_files() -> dict[str, object]:
    root = resources.files("cudasched").joinpath("data")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    docs: dict[str, object] = {}
    for name in DATA_FILES:
        text = root.joinpath(name).read_text(encoding="utf-8")
        docs[name] = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    return docs


# ---------------------------------------------------------------------------------------------
# The knowledge base
# ---------------------------------------------------------------------------------------------


def _nearest_arch_rows(
    arch_by_cc: Mapping[ComputeCapability, ArchInfo],
) -> dict[ComputeCapability, ArchInfo]:
    """Each capability of a known major mapped to its own row, else to the row of the nearest
    lower minor of the same major."""
    out: dict[ComputeCapability, ArchInfo] = {}
    for major in sorted({cc.major for cc in arch_by_cc}):
        current: ArchInfo | None = None
        for minor in range(10):
            cc = ComputeCapability(major, minor)
            current = arch_by_cc.get(cc, current)
            if current is not None:
                out[cc] = current
    return out


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class KnowledgeBase:
    """Indexed facts. Build with :meth:`load` (bundled files) or :meth:`from_documents`.

    Immutable after construction, so one instance can be shared by every request handler.
    Two judgement calls are made here rather than left to each caller:

    * a *disputed* Table 3 minimum (13.4) is judged by its highest alternative, so a node the
      engine accepts is acceptable under every source (:meth:`min_driver`);
    * an *unknown* minimum (13.5) is never guessed: the toolkit exists but needs no driver we
      could name, and :meth:`max_cuda_for_driver` never answers it.
    """

    _toolkits: tuple[ToolkitRelease, ...]
    _ga: Mapping[tuple[int, int], ToolkitRelease]
    _by_version: Mapping[tuple[int, int, int], ToolkitRelease]
    _minor: Mapping[int, MinorCompat]
    _fc: Mapping[tuple[int, int], ForwardCompatPackage]
    _fc_columns: tuple[int, ...]
    _branches: Mapping[int, DriverBranch]
    _archs: tuple[ArchInfo, ...]
    _arch_by_cc: Mapping[ComputeCapability, ArchInfo]
    _gpus: tuple[GpuInfo, ...]
    _gpu_index: Mapping[str, tuple[GpuInfo, str | None]]
    _torch: Mapping[str, _TorchRelease]
    _tf: Mapping[str, _SimpleRelease]
    _vllm: Mapping[str, _SimpleRelease]
    _ngc: Mapping[tuple[str, str], ContainerRelease]
    _ga_desc: tuple[ToolkitRelease, ...] = field(default=(), repr=False)
    # Every capability X.0 .. X.9 of a major that has rows, resolved once (placement asks for
    # whole ranges of capabilities on every compile).
    _arch_nearest: Mapping[ComputeCapability, ArchInfo] = field(
        default_factory=lambda: MappingProxyType({}), repr=False
    )

    def __repr__(self) -> str:
        return (
            f"KnowledgeBase({len(self._toolkits)} toolkit releases, {len(self._archs)} "
            f"architectures, {len(self._gpus)} GPUs, {len(self._ngc)} NGC releases)"
        )

    # ---- construction --------------------------------------------------------------------

    @classmethod
    def load(cls) -> KnowledgeBase:
        """Read and index the YAML files bundled in ``cudasched/data``."""
        return cls.from_documents(_read_data_files())

    @classmethod
    def from_documents(cls, docs: Mapping[str, object]) -> KnowledgeBase:
        """Index already-parsed data files keyed by file name (see :data:`DATA_FILES`).

        Raises :class:`KnowledgeError` for a missing file, an entry without a resolvable
        source, a malformed value or a duplicate key: those are packaging bugs.
        """
        missing = [n for n in DATA_FILES if n not in docs]
        if missing:
            raise KnowledgeError(f"knowledge base is missing data files: {', '.join(missing)}")
        toolkits, ga, by_version = _load_toolkits(_Doc("toolkits.yaml", docs["toolkits.yaml"]))
        compat = _Doc("compat.yaml", docs["compat.yaml"])
        minor = _load_minor(compat)
        fc, columns = _load_forward_compat(compat)
        branches = _load_branches(compat)
        archs, arch_by_cc = _load_archs(_Doc("architectures.yaml", docs["architectures.yaml"]))
        gpus, gpu_index = _load_gpus(_Doc("gpus.yaml", docs["gpus.yaml"]), arch_by_cc)
        frameworks = _Doc("frameworks.yaml", docs["frameworks.yaml"])
        torch = _load_torch(frameworks)
        tf = _load_simple(frameworks, "tensorflow")
        vllm = _load_simple(frameworks, "vllm")
        ngc = _load_ngc(_Doc("containers.yaml", docs["containers.yaml"]))
        ga_desc = tuple(sorted(ga.values(), key=lambda t: t.sort_key, reverse=True))
        return cls(
            _toolkits=toolkits,
            _ga=MappingProxyType(ga),
            _by_version=MappingProxyType(by_version),
            _minor=MappingProxyType(minor),
            _fc=MappingProxyType(fc),
            _fc_columns=columns,
            _branches=MappingProxyType(branches),
            _archs=archs,
            _arch_by_cc=MappingProxyType(arch_by_cc),
            _gpus=gpus,
            _gpu_index=MappingProxyType(gpu_index),
            _torch=MappingProxyType(torch),
            _tf=MappingProxyType(tf),
            _vllm=MappingProxyType(vllm),
            _ngc=MappingProxyType(ngc),
            _ga_desc=ga_desc,
            _arch_nearest=MappingProxyType(_nearest_arch_rows(arch_by_cc)),
        )

    # ---- toolkits and drivers ------------------------------------------------------------

    def toolkit(self, cuda: CudaVersion) -> ToolkitRelease | None:
        """The GA row of ``cuda.major.minor`` (the patch level is ignored)."""
        return self._ga.get((cuda.major, cuda.minor))

    def toolkit_release(self, cuda: CudaVersion) -> ToolkitRelease | None:
        """The exact row of a full version: 12.4.1 is "12.4 Update 1" (patch None means .0)."""
        return self._by_version.get((cuda.major, cuda.minor, cuda.patch or 0))

    def toolkits(self) -> Iterator[ToolkitRelease]:
        """Every Table 3 row (GA, updates, RC), oldest first."""
        return iter(self._toolkits)

    def min_driver(self, cuda: CudaVersion) -> DriverVersion | None:
        """Table 3 minimum Linux driver of the GA release of ``cuda.major.minor``.

        None for an unknown toolkit or an unknown minimum. For a disputed minimum (13.4) this is
        the highest alternative, so "driver >= min_driver" holds under every source.
        """
        row = self.toolkit(cuda)
        return row.effective_min_driver if row is not None else None

    def max_cuda_for_driver(self, driver: DriverVersion) -> CudaVersion | None:
        """The newest CUDA release whose GA minimum driver is <= ``driver`` (what ``nvidia-smi``
        would print for it); None when the driver is older than every known toolkit."""
        for row in self._ga_desc:
            need = row.effective_min_driver
            if need is not None and need <= driver:
                return row.cuda.release
        return None

    def minor_compat_floor(self, cuda_major: int) -> DriverVersion | None:
        """The lowest driver on which any ``cuda_major``.x application runs under minor-version
        compatibility; None when that major has none (10 and older) or is not known (14+)."""
        row = self._minor.get(cuda_major)
        return row.floor if row is not None else None

    def minor_compat(self) -> Iterator[MinorCompat]:
        return iter(sorted(self._minor.values(), key=lambda m: m.cuda_major))

    def forward_compat_branches(self, cuda: CudaVersion) -> frozenset[int]:
        """Host driver branches on which ``cuda-compat-X-Y`` is listed compatible (``C``)."""
        package = self._fc.get((cuda.major, cuda.minor))
        return package.compatible_branches if package is not None else frozenset()

    def forward_compat_package(self, cuda: CudaVersion) -> ForwardCompatPackage | None:
        return self._fc.get((cuda.major, cuda.minor))

    def forward_compat_packages(self) -> Iterator[ForwardCompatPackage]:
        return iter(sorted(self._fc.values(), key=lambda p: p.cuda))

    def forward_compat_columns(self) -> tuple[int, ...]:
        """The host branches the forward-compatibility matrix lists (all others are EOL)."""
        return self._fc_columns

    def driver_branch(self, branch: int) -> DriverBranch | None:
        return self._branches.get(branch)

    def driver_branches(self) -> Iterator[DriverBranch]:
        return iter(sorted(self._branches.values(), key=lambda b: b.branch))

    # ---- hardware ------------------------------------------------------------------------

    def arch(self, cc: ComputeCapability) -> ArchInfo | None:
        """The architecture of ``cc``; a capability without its own row gets the row of the same
        major with the nearest lower minor (a new Jetson or Blackwell variant), else None."""
        return self._arch_nearest.get(cc)

    def architectures(self) -> Iterator[ArchInfo]:
        """Architecture rows, by lowest compute capability."""
        return iter(self._archs)

    def gpu(self, name: str) -> GpuInfo | None:
        """The product behind an NVML name (``NVIDIA A100-SXM4-80GB``, ``Tesla T4``), a GFD
        label (``NVIDIA-A100-SXM4-80GB``, ``Tesla-T4``, ``...-MIG-1g.5gb``, ``...-SHARED``) or a
        short name (``A100``, ``RTX 4090``); case-insensitive. Unknown names give None."""
        if not isinstance(name, str):
            raise InputError(f"invalid GPU product name {name!r}: expected a string")
        key = _product_key(name)
        if not key:
            return None
        for candidate, exact in _candidate_keys(key):
            hit = self._gpu_index.get(candidate)
            if hit is not None:
                info, variant = hit
                # A hit after dropping memory/form-factor words names the product, not a board.
                return info if variant is None or not exact else replace(info, variant=variant)
        return None

    def gpus(self) -> Iterator[GpuInfo]:
        return iter(self._gpus)

    # ---- software ------------------------------------------------------------------------

    def framework(self, spec: str) -> FrameworkBuild | None:
        """The build a framework spec names and the CUDA it was built with.

        ``torch 2.5.1+cu124`` / ``torch==2.5.1+cu124`` / ``pytorch 2.5.1 cu124``: the variant's
        CUDA (and kernel list when known); a variant the release never shipped raises
        :class:`InputError` naming those it did. ``torch 2.8.0``: the PyPI default variant when
        a source gives it, else ``cuda=None``. ``tensorflow 2.15.0``: the tested build.
        ``vllm 0.9.0``: the default build. An unknown release without a CUDA tag gives None.
        """
        if not isinstance(spec, str):
            raise InputError(
                f"invalid framework spec {spec!r}: expected text such as {_SPEC_FORMS}"
            )
        m = _SPEC_RE.match(spec)
        if m is None:
            raise InputError(f"invalid framework spec {spec!r}: expected {_SPEC_FORMS}")
        raw_name = m.group("name").lower()
        name = _FRAMEWORK_ALIASES.get(raw_name)
        if name is None:
            known = ", ".join(sorted(set(_FRAMEWORK_ALIASES.values())))
            raise InputError(
                f"invalid framework spec {spec!r}: unknown framework {raw_name!r}; "
                f"the knowledge base knows {known}"
            )
        local, tag = m.group("local"), m.group("tag")
        if local and tag:
            raise InputError(
                f"invalid framework spec {spec!r}: give the CUDA variant once, e.g. +{tag}"
            )
        local = (local or tag or "").lower() or None
        version = m.group("version")
        if name == "torch":
            return self._torch_build(spec, version, local)
        if name == "tensorflow":
            return self._tf_build(spec, version, local)
        return self._vllm_build(spec, version, local)

    def ngc_release(self, product: str, release: str) -> ContainerRelease | None:
        """The CUDA an NGC container release is built on: (``tritonserver``, ``24.05``).

        ``release`` may carry the plain ``-py3`` suffix; other image variants
        (``24.05-trtllm-python-py3``) can differ from the main image and give None.
        """
        prod = _ngc_product(product)
        if not isinstance(release, str):
            raise InputError(f"invalid NGC release {release!r}: expected YY.MM such as 24.05")
        m = re.match(r"^\s*(\d{2}\.\d{2}(?:\.\d+)?)(-[A-Za-z0-9._-]+)?\s*$", release)
        if m is None:
            raise InputError(f"invalid NGC release {release!r}: expected YY.MM such as 24.05")
        if m.group(2) not in (None, "-py3"):
            return None
        return self._ngc.get((prod, m.group(1)))

    def ngc_releases(self, product: str | None = None) -> Iterator[ContainerRelease]:
        """NGC releases, optionally of one product, in product then release order."""
        prod = _ngc_product(product) if product is not None else None
        rows = [r for r in self._ngc.values() if prod is None or r.product == prod]
        return iter(sorted(rows, key=lambda r: (r.product, _release_key(r.release))))

    # ---- framework internals -------------------------------------------------------------

    def _torch_build(self, spec: str, version: str, local: str | None) -> FrameworkBuild | None:
        series = _series(version)
        release = self._torch.get(series)
        shown = f"{version}+{local}" if local else version
        if local is not None and not _CU_TAG_RE.match(local):
            what = "a CPU build" if local == "cpu" else f"local version tag +{local}"
            if local == "cpu" or local.startswith("rocm"):
                return FrameworkBuild("torch", shown, None, source=f"{what}: no CUDA")
            return FrameworkBuild(
                "torch", shown, None, source=f"{what} is not a CUDA wheel tag (status unknown)"
            )
        if local is not None:
            cuda = parse_cuda(local)
            if release is None:
                return FrameworkBuild(
                    "torch",
                    shown,
                    cuda,
                    source=f"wheel local version tag +{local} (torch {series} is not in the "
                    "knowledge base)",
                )
            variant = release.variants.get(local)
            if variant is None:
                shipped = ", ".join(sorted(release.variants, key=lambda t: parse_cuda(t)))
                raise InputError(
                    f"invalid framework spec {spec!r}: torch {series} was not published as "
                    f"+{local}; its CUDA variants are {shipped}"
                )
            return _torch_framework_build(release, variant, shown, default=False)
        if release is None:
            return None
        if release.pypi_default is None:
            return FrameworkBuild(
                "torch",
                shown,
                None,
                source=f"{release.source} (no source gives the PyPI default variant of torch "
                f"{series}; status unknown)",
            )
        variant = release.variants[release.pypi_default]
        return _torch_framework_build(release, variant, shown, default=True)

    def _tf_build(self, spec: str, version: str, local: str | None) -> FrameworkBuild | None:
        if local is not None:
            raise InputError(
                f"invalid framework spec {spec!r}: TensorFlow wheels carry no CUDA variant "
                "tag; write e.g. 'tensorflow 2.15.0'"
            )
        row = self._tf.get(version)
        how = "tested build configuration"
        if row is None:
            series = _series(version)
            same = [r for r in self._tf.values() if _series(r.release) == series]
            if len(same) != 1:
                return None
            row = same[0]
            how = f"tested build configuration of {row.release} (same {series} series)"
        return FrameworkBuild("tensorflow", version, row.cuda, source=f"{row.source} ({how})")

    def _vllm_build(self, spec: str, version: str, local: str | None) -> FrameworkBuild | None:
        row = self._vllm.get(version)
        shown = f"{version}+{local}" if local else version
        if local is not None and not _CU_TAG_RE.match(local):
            raise InputError(
                f"invalid framework spec {spec!r}: vLLM variant tags are cuXYZ such as +cu118"
            )
        if local is not None:
            cuda = parse_cuda(local)
            if row is None:
                return FrameworkBuild(
                    "vllm",
                    shown,
                    cuda,
                    source=f"wheel local version tag +{local} (vllm {version} is not in the "
                    "knowledge base)",
                )
            builds = [c for c in (row.cuda, *row.alternates) if c is not None]
            if cuda not in builds:
                listed = ", ".join(f"cu{c.major}{c.minor}" for c in builds) or "none recorded"
                raise InputError(
                    f"invalid framework spec {spec!r}: vllm {version} builds are {listed}"
                )
            if cuda != row.cuda:
                return FrameworkBuild("vllm", shown, cuda, source=f"{row.source} (alternate build)")
        if row is None:
            return None
        source = row.source
        if row.status is Status.DISPUTED:
            source = f"{source} (disputed: {row.note})"
        return FrameworkBuild(
            "vllm", shown, row.cuda, arch_list=row.arch_list, ptx=row.ptx, source=source
        )


# ---------------------------------------------------------------------------------------------
# Loaders (one per data file section)
# ---------------------------------------------------------------------------------------------


def _torch_framework_build(
    release: _TorchRelease, variant: _TorchVariant, shown: str, *, default: bool
) -> FrameworkBuild:
    source = release.source
    if default:
        source = f"{source}; PyPI default {variant.tag}: {release.pypi_default_source}"
    if variant.arch_list is not None:
        source = f"{source}; arch list: {variant.arch_source}"
    return FrameworkBuild(
        "torch",
        shown,
        variant.cuda,
        arch_list=variant.arch_list,
        ptx=variant.ptx,
        source=source,
    )


def _candidate_keys(key: str) -> Iterator[tuple[str, bool]]:
    """Keys to try, most specific first, each with whether it still names one board: as given,
    without GFD's sharing/MIG suffixes, then without memory and form-factor words
    (``a100-sxm4-80gb`` -> ``a100``)."""
    yield key, True
    base = _MIG_RE.sub("", key.removesuffix("-shared"))
    if base != key and base:
        yield base, True
    stripped = "-".join(t for t in base.split("-") if not _DESCRIPTOR_RE.match(t))
    if stripped and stripped != base:
        yield stripped, False


def _ngc_product(product: object) -> str:
    if not isinstance(product, str):
        raise InputError(f"invalid NGC product {product!r}: expected one of {NGC_PRODUCTS}")
    key = product.strip().lower().rsplit("/", 1)[-1]
    aliases = {"triton": "tritonserver", "triton-inference-server": "tritonserver"}
    key = aliases.get(key, key)
    if key not in NGC_PRODUCTS:
        raise InputError(
            f"invalid NGC product {product!r}: expected one of {', '.join(NGC_PRODUCTS)}"
        )
    return key


def _release_key(release: str) -> tuple[int, ...]:
    return tuple(int(p) for p in release.split("."))


def _load_toolkits(
    doc: _Doc,
) -> tuple[
    tuple[ToolkitRelease, ...],
    dict[tuple[int, int], ToolkitRelease],
    dict[tuple[int, int, int], ToolkitRelease],
]:
    rows: list[ToolkitRelease] = []
    ga: dict[tuple[int, int], ToolkitRelease] = {}
    by_version: dict[tuple[int, int, int], ToolkitRelease] = {}
    for i, e in enumerate(doc.entries("releases")):
        where = f"release #{i} ({e.get('version')})"
        cuda = doc.parse(parse_cuda, str(e.get("version")), where)
        try:
            kind = ReleaseKind(e.get("kind"))
        except ValueError:
            raise KnowledgeError(f"toolkits.yaml: {where}: kind must be ga, update or rc") from None
        status = doc.status(e, where)
        min_driver = doc.opt(parse_driver, e.get("min_driver"), where)
        alternatives = tuple(
            doc.parse(parse_driver, str(a), where) for a in e.get("alternatives") or ()
        )
        if (min_driver is None) != (status in (Status.UNKNOWN, Status.DISPUTED)):
            raise KnowledgeError(
                f"toolkits.yaml: {where}: min_driver is null exactly when status is unknown or "
                "disputed"
            )
        if status is Status.DISPUTED and len(alternatives) < 2:
            raise KnowledgeError(f"toolkits.yaml: {where}: a disputed row lists its alternatives")
        row = ToolkitRelease(
            cuda=cuda,
            min_driver=min_driver,
            status=status,
            source=doc.source(e, where),
            kind=kind,
            release=str(e.get("release") or ""),
            alternatives=alternatives,
            note=_note(e),
        )
        if row.sort_key in by_version:
            raise KnowledgeError(f"toolkits.yaml: {where}: duplicate version {cuda}")
        by_version[row.sort_key] = row
        if kind is ReleaseKind.GA:
            if (cuda.major, cuda.minor) in ga:
                raise KnowledgeError(f"toolkits.yaml: {where}: second GA row for {cuda.release}")
            ga[(cuda.major, cuda.minor)] = row
        rows.append(row)
    for row in rows:
        if (row.cuda.major, row.cuda.minor) not in ga:
            raise KnowledgeError(f"toolkits.yaml: CUDA {row.cuda.release} has no GA row")
    return tuple(sorted(rows, key=lambda r: r.sort_key)), ga, by_version


def _load_minor(doc: _Doc) -> dict[int, MinorCompat]:
    out: dict[int, MinorCompat] = {}
    for i, e in enumerate(doc.entries("minor_version_compat")):
        where = f"minor_version_compat #{i}"
        major = e.get("cuda_major")
        if not isinstance(major, int) or major in out:
            raise KnowledgeError(f"compat.yaml: {where}: cuda_major must be a new integer")
        out[major] = MinorCompat(
            cuda_major=major,
            floor=doc.opt(parse_driver, e.get("floor"), where),
            source=doc.source(e, where),
            note=_note(e),
        )
    return out


def _load_forward_compat(
    doc: _Doc,
) -> tuple[dict[tuple[int, int], ForwardCompatPackage], tuple[int, ...]]:
    section = doc.data.get("forward_compat")
    if not isinstance(section, Mapping):
        raise KnowledgeError("compat.yaml: `forward_compat` must be a mapping")
    columns = section.get("branches")
    if not isinstance(columns, list) or not all(isinstance(b, int) for b in columns):
        raise KnowledgeError("compat.yaml: forward_compat.branches must be a list of branches")
    sub = _Doc("compat.yaml", {"sources": doc.data.get("sources"), **section})
    out: dict[tuple[int, int], ForwardCompatPackage] = {}
    for i, e in enumerate(sub.entries("packages")):
        where = f"forward_compat package #{i} ({e.get('cuda')})"
        cuda = sub.parse(parse_cuda, str(e.get("cuda")), where)
        cells_raw = e.get("cells")
        if not isinstance(cells_raw, Mapping) or sorted(cells_raw) != sorted(columns):
            raise KnowledgeError(f"compat.yaml: {where}: cells must cover exactly {columns}")
        try:
            cells = tuple((int(b), FcCell(str(cells_raw[b]))) for b in columns)
        except ValueError:
            raise KnowledgeError(f"compat.yaml: {where}: cells must be C, N/A or X") from None
        built = e.get("built_from_branch")
        if not isinstance(built, int):
            raise KnowledgeError(f"compat.yaml: {where}: built_from_branch must be an integer")
        key = (cuda.major, cuda.minor)
        if key in out:
            raise KnowledgeError(f"compat.yaml: {where}: duplicate package")
        out[key] = ForwardCompatPackage(cuda.release, built, cells, sub.source(e, where))
    return out, tuple(columns)


def _load_branches(doc: _Doc) -> dict[int, DriverBranch]:
    out: dict[int, DriverBranch] = {}
    for i, e in enumerate(doc.entries("driver_branches")):
        where = f"driver_branches #{i}"
        branch = e.get("branch")
        if not isinstance(branch, int) or branch in out:
            raise KnowledgeError(f"compat.yaml: {where}: branch must be a new integer")
        out[branch] = DriverBranch(
            branch=branch,
            type=str(e["type"]) if e.get("type") else None,
            eol=str(e["eol"]) if e.get("eol") else None,
            status=doc.status(e, where),
            source=doc.source(e, where),
            alternatives=tuple(str(a) for a in e.get("alternatives") or ()),
            note=_note(e),
        )
    return out


def _load_archs(doc: _Doc) -> tuple[tuple[ArchInfo, ...], dict[ComputeCapability, ArchInfo]]:
    rows: list[ArchInfo] = []
    by_cc: dict[ComputeCapability, ArchInfo] = {}
    for i, e in enumerate(doc.entries("architectures")):
        where = f"architecture #{i} ({e.get('name')})"
        computes = e.get("compute")
        if not isinstance(computes, list) or not computes:
            raise KnowledgeError(f"architectures.yaml: {where}: compute must be a non-empty list")
        ccs = tuple(doc.parse(parse_compute_capability, str(c), where) for c in computes)
        name, family = e.get("name"), e.get("family")
        if not isinstance(name, str) or not isinstance(family, str) or not name or not family:
            raise KnowledgeError(f"architectures.yaml: {where}: name and family are required")
        last_branch = e.get("last_driver_branch")
        if last_branch is not None and not isinstance(last_branch, int):
            raise KnowledgeError(f"architectures.yaml: {where}: last_driver_branch is a number")
        platform = str(e.get("platform", "discrete"))
        if platform not in ("discrete", "jetson"):
            raise KnowledgeError(f"architectures.yaml: {where}: platform is discrete or jetson")
        info = ArchInfo(
            name=name,
            family=family,
            first_cuda=doc.opt(parse_cuda, e.get("first_cuda"), where),
            last_cuda=doc.opt(parse_cuda, e.get("last_cuda"), where),
            last_driver_branch=last_branch,
            source=doc.source(e, where),
            compute=tuple(sorted(ccs)),
            platform=platform,
            status=doc.status(e, where),
            unknown=tuple(str(u) for u in e.get("unknown") or ()),
            alternatives=tuple(str(a) for a in e.get("alternatives") or ()),
            note=_note(e),
        )
        for cc in ccs:
            if cc in by_cc:
                raise KnowledgeError(f"architectures.yaml: {where}: {cc} is already in a row")
            by_cc[cc] = info
        rows.append(info)
    return tuple(sorted(rows, key=lambda a: a.compute[0])), by_cc


def _load_gpus(
    doc: _Doc, archs: Mapping[ComputeCapability, ArchInfo]
) -> tuple[tuple[GpuInfo, ...], dict[str, tuple[GpuInfo, str | None]]]:
    rows: list[GpuInfo] = []
    index: dict[str, tuple[GpuInfo, str | None]] = {}

    def add(key: str, info: GpuInfo, variant: str | None, where: str) -> None:
        if not key:
            raise KnowledgeError(f"gpus.yaml: {where}: a name normalises to nothing")
        existing = index.get(key)
        if existing is not None and existing[0].product != info.product:
            raise KnowledgeError(f"gpus.yaml: {where}: {key!r} already names {existing[0].product}")
        if existing is None or (existing[1] is None and variant is not None):
            index[key] = (info, variant)

    for i, e in enumerate(doc.entries("gpus")):
        where = f"gpu #{i} ({e.get('product')})"
        product = e.get("product")
        names = e.get("names")
        if not isinstance(product, str) or not product:
            raise KnowledgeError(f"gpus.yaml: {where}: product is required")
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise KnowledgeError(f"gpus.yaml: {where}: names must list the NVML names")
        compute = doc.parse(parse_compute_capability, str(e.get("compute")), where)
        arch = archs.get(compute)
        if arch is None:
            raise KnowledgeError(f"gpus.yaml: {where}: compute {compute} has no architecture row")
        if e.get("arch") != arch.name:
            raise KnowledgeError(
                f"gpus.yaml: {where}: arch {e.get('arch')!r} but compute {compute} is {arch.name}"
            )
        datacenter = e.get("datacenter")
        if not isinstance(datacenter, bool):
            raise KnowledgeError(f"gpus.yaml: {where}: datacenter must be true or false")
        info = GpuInfo(
            product=product,
            compute=compute,
            arch=arch.name,
            datacenter=datacenter,
            source=doc.source(e, where),
            family=arch.family,
            names=tuple(names),
            status=doc.status(e, where),
            open_kernel_only=bool(e.get("open_kernel_only", False)),
            first_listed_driver=doc.opt(parse_driver, e.get("first_listed_driver"), where),
            note=_note(e),
        )
        rows.append(info)
        for n in names:
            add(_product_key(n), info, n, where)
        for alias in (product, *(e.get("aliases") or ())):
            add(_product_key(str(alias)), info, None, where)
    return tuple(rows), index


def _load_torch(doc: _Doc) -> dict[str, _TorchRelease]:
    out: dict[str, _TorchRelease] = {}
    for i, e in enumerate(doc.entries("pytorch")):
        release = str(e.get("release"))
        where = f"pytorch #{i} ({release})"
        if not re.match(r"^\d+\.\d+$", release) or release in out:
            raise KnowledgeError(f"frameworks.yaml: {where}: release must be a new MAJOR.MINOR")
        raw_variants = e.get("variants")
        if not isinstance(raw_variants, Mapping) or not raw_variants:
            raise KnowledgeError(f"frameworks.yaml: {where}: variants are required")
        source = doc.source(e, where)
        variants: dict[str, _TorchVariant] = {}
        for tag, v in raw_variants.items():
            vwhere = f"{where} variant {tag}"
            if not isinstance(v, Mapping) or not _CU_TAG_RE.match(str(tag)):
                raise KnowledgeError(f"frameworks.yaml: {vwhere}: expected cuXYZ: {{channel: ...}}")
            archs = v.get("arch_list")
            arch_list = (
                tuple(doc.parse(parse_compute_capability, str(a), vwhere) for a in archs)
                if archs is not None
                else None
            )
            variants[str(tag)] = _TorchVariant(
                tag=str(tag),
                cuda=doc.parse(parse_cuda, str(tag), vwhere),
                channel=str(v.get("channel") or ""),
                arch_list=arch_list,
                ptx=bool(v.get("ptx", False)),
                arch_source=(doc.source(v, vwhere, "arch_source") if arch_list is not None else ""),
            )
        default = e.get("pypi_default")
        if default is not None and default not in variants:
            raise KnowledgeError(f"frameworks.yaml: {where}: pypi_default is not a variant")
        out[release] = _TorchRelease(
            release=release,
            variants=MappingProxyType(variants),
            pypi_default=str(default) if default is not None else None,
            pypi_default_source=(
                doc.source(e, where, "pypi_default_source") if default is not None else ""
            ),
            source=source,
        )
    return out


def _load_simple(doc: _Doc, key: str) -> dict[str, _SimpleRelease]:
    out: dict[str, _SimpleRelease] = {}
    for i, e in enumerate(doc.entries(key)):
        release = str(e.get("release"))
        where = f"{key} #{i} ({release})"
        if not re.match(r"^\d+\.\d+\.\d+$", release) or release in out:
            raise KnowledgeError(f"frameworks.yaml: {where}: release must be a new X.Y.Z")
        archs = e.get("arch_list")
        out[release] = _SimpleRelease(
            release=release,
            cuda=doc.opt(parse_cuda, e.get("cuda"), where),
            source=doc.source(e, where),
            alternates=tuple(
                doc.parse(parse_cuda, str(a), where) for a in e.get("alternates") or ()
            ),
            arch_list=(
                tuple(doc.parse(parse_compute_capability, str(a), where) for a in archs)
                if archs is not None
                else None
            ),
            ptx=bool(e.get("ptx", False)),
            status=doc.status(e, where),
            note=_note(e),
        )
    return out


def _load_ngc(doc: _Doc) -> dict[tuple[str, str], ContainerRelease]:
    out: dict[tuple[str, str], ContainerRelease] = {}
    for product in NGC_PRODUCTS:
        for i, e in enumerate(doc.entries(product)):
            release = str(e.get("release"))
            where = f"{product} #{i} ({release})"
            if not re.match(r"^\d{2}\.\d{2}(?:\.\d+)?$", release) or (product, release) in out:
                raise KnowledgeError(f"containers.yaml: {where}: release must be a new YY.MM")
            cuda_text = str(e.get("cuda"))
            # NGC prints build suffixes (12.5.0.23); the toolkit version is the first three parts.
            cuda = doc.parse(parse_cuda, ".".join(cuda_text.split(".")[:3]), where)
            fc = e.get("fc_branches")
            out[(product, release)] = ContainerRelease(
                product=product,
                release=release,
                cuda=cuda,
                cuda_text=cuda_text,
                source=doc.source(e, where),
                printed_min_driver=doc.opt(
                    _parse_branch_or_driver, e.get("printed_min_driver"), where
                ),
                fc_branches=(
                    tuple(doc.parse(_parse_branch_or_driver, str(b), where) for b in fc)
                    if fc is not None
                    else None
                ),
                min_compute=doc.opt(parse_compute_capability, e.get("min_compute"), where),
                framework=str(e["framework"]) if e.get("framework") else None,
                note=_note(e),
            )
    return out


def _parse_branch_or_driver(value: str) -> DriverVersion:
    """``545`` (a branch as NGC prints it) -> 545.00; anything else is a driver version."""
    text = value.strip()
    if text.isdigit():
        return DriverVersion(int(text), 0, 0, has_revision=False)
    return parse_driver(text)
