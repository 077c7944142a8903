"""The knowledge base: NVIDIA's published compatibility tables as typed, indexed facts.

Every answer cudasched gives rests on a fact in ``cudasched/data/*.yaml``, and every fact
there names its source, so an explanation can always say *who* said a driver is too old.
Unknown facts stay ``None`` with status ``unknown``; facts that sources disagree on carry
status ``disputed`` and every alternative, never a silent pick.

:meth:`KnowledgeBase.load` reads the files once (:mod:`cudasched.knowledge.loading`) and indexes
them; callers keep the object and pass it around. Nothing is cached at module level and nothing
is read at import time. This module holds the queries.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from cudasched.knowledge.bundle import builtin_bundle
from cudasched.knowledge.drivers import DriverFacts, load_driver_facts
from cudasched.knowledge.frameworks import FrameworkCatalog
from cudasched.knowledge.loading import (
    DATA_FILES,
    NGC_PRODUCTS,
    DataFile,
    ParsedCache,
    load_archs,
    load_branches,
    load_forward_compat,
    load_frameworks,
    load_gpus,
    load_minor_compat,
    load_ngc,
    load_toolkits,
    read_data_files,
)
from cudasched.knowledge.naming import BRAND_WORDS, candidate_keys, gfd_product_label, product_key
from cudasched.knowledge.operator import OperatorFacts, load_operator_facts
from cudasched.knowledge.provenance import BUILT_IN, UNDESCRIBED, Provenance
from cudasched.knowledge.records import (
    ArchInfo,
    ContainerRelease,
    DriverBranch,
    ForwardCompatPackage,
    FrameworkRelease,
    GpuInfo,
    MinorCompat,
    ToolkitRelease,
    TorchRelease,
)
from cudasched.vocab.errors import InputError, KnowledgeError
from cudasched.vocab.requirements import FrameworkBuild
from cudasched.vocab.versions import ComputeCapability, CudaVersion, DriverVersion

__all__ = ["KnowledgeBase", "release_order"]


def release_order(release: str) -> tuple[int, ...]:
    """The sort key of a release number: ``2.10`` after ``2.9``, parts compared as numbers.

    A part that is not a decimal number (the ``0rc1`` of ``0.9.0rc1``) sorts before every
    number, so a pre-release comes before its release and no release text raises: the loader
    admits digits only today, but an ordering must not be what breaks when a source does not.
    """
    return tuple(int(part) if part.isdecimal() else -1 for part in release.split("."))


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
    _frameworks: FrameworkCatalog
    _ngc: Mapping[tuple[str, str], ContainerRelease]
    _drivers: DriverFacts
    _operator: OperatorFacts
    _ga_desc: tuple[ToolkitRelease, ...] = field(default=(), repr=False)
    # Every capability X.0 .. X.9 of a major that has rows, resolved once (placement asks for
    # whole ranges of capabilities on every compile).
    _arch_nearest: Mapping[ComputeCapability, ArchInfo] = field(
        default_factory=lambda: MappingProxyType({}), repr=False
    )
    # The SASS targets of every GA toolkit, by (major, minor).
    _targets: Mapping[tuple[int, int], tuple[ComputeCapability, ...]] = field(
        default_factory=lambda: MappingProxyType({}), repr=False
    )
    # Which bundle these facts are (version, date, digest, where read).
    _provenance: Provenance = field(default=UNDESCRIBED, repr=False)

    def __repr__(self) -> str:
        return (
            f"KnowledgeBase({len(self._toolkits)} toolkit releases, {len(self._archs)} "
            f"architectures, {len(self._gpus)} GPUs, {len(self._ngc)} NGC releases)"
        )

    # ---- construction --------------------------------------------------------------------

    @classmethod
    def load(cls, cache: ParsedCache | None = None) -> KnowledgeBase:
        """Read and index the YAML files bundled in ``cudasched/data``; ``cache`` (an edge's)
        may hold them already parsed. Its provenance is the built-in bundle's."""
        bundle = builtin_bundle(cache)  # its tables' bytes are read once, for both
        docs = read_data_files(cache, bundle.tables)
        return cls.from_documents(docs, bundle.provenance(BUILT_IN))

    @classmethod
    def from_documents(
        cls, docs: Mapping[str, object], provenance: Provenance = UNDESCRIBED
    ) -> KnowledgeBase:
        """Index already-parsed data files keyed by file name (see :data:`DATA_FILES`), which
        are the bundle ``provenance`` describes.

        Raises :class:`KnowledgeError` for a missing file, an entry without a resolvable
        source, a malformed value or a duplicate key: those are packaging bugs.
        """
        missing = [n for n in DATA_FILES if n not in docs]
        if missing:
            raise KnowledgeError(f"knowledge base is missing data files: {', '.join(missing)}")
        toolkits, ga, by_version = load_toolkits(DataFile("toolkits.yaml", docs["toolkits.yaml"]))
        compat = DataFile("compat.yaml", docs["compat.yaml"])
        minor = load_minor_compat(compat)
        fc, columns = load_forward_compat(compat)
        branches = load_branches(compat)
        archs, arch_by_cc = load_archs(DataFile("architectures.yaml", docs["architectures.yaml"]))
        gpus, gpu_index = load_gpus(DataFile("gpus.yaml", docs["gpus.yaml"]), arch_by_cc)
        frameworks = load_frameworks(DataFile("frameworks.yaml", docs["frameworks.yaml"]))
        ngc = load_ngc(DataFile("containers.yaml", docs["containers.yaml"]))
        drivers = load_driver_facts(DataFile("drivers.yaml", docs["drivers.yaml"]))
        operator = load_operator_facts(DataFile("gpu-operator.yaml", docs["gpu-operator.yaml"]))
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
            _frameworks=frameworks,
            _ngc=MappingProxyType(ngc),
            _drivers=drivers,
            _operator=operator,
            _ga_desc=ga_desc,
            _arch_nearest=MappingProxyType(_nearest_arch_rows(arch_by_cc)),
            _targets=MappingProxyType({key: _targets(archs, row.cuda) for key, row in ga.items()}),
            _provenance=provenance,
        )

    @property
    def provenance(self) -> Provenance:
        """Which bundle these facts are: version, date, digest, where they were read."""
        return self._provenance

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

    def driver_floor(self, cuda: CudaVersion) -> DriverVersion | None:
        """The lowest driver :meth:`max_cuda_for_driver` reads as supporting ``cuda`` or newer
        (the lowest known Table 3 minimum of a GA release >= ``cuda``); None when no such
        release has a known minimum. A node's CUDA derived from its driver is >= ``cuda``
        exactly when its driver is >= this floor."""
        found: DriverVersion | None = None
        for row in self._ga_desc:
            if row.cuda.release < cuda.release:
                break
            need = row.effective_min_driver
            if need is not None and (found is None or need < found):
                found = need
        return found

    def driver_floor_above(self, cuda: CudaVersion) -> DriverVersion | None:
        """The lowest driver :meth:`max_cuda_for_driver` reads as supporting a release newer
        than ``cuda``: a node's CUDA derived from its driver is <= ``cuda`` exactly when its
        driver is below this (None: no newer release has a known minimum)."""
        found: DriverVersion | None = None
        for row in self._ga_desc:
            if row.cuda.release <= cuda.release:
                break
            need = row.effective_min_driver
            if need is not None and (found is None or need < found):
                found = need
        return found

    def toolkit_targets(self, cuda: CudaVersion) -> tuple[ComputeCapability, ...]:
        """The compute capabilities toolkit ``cuda`` compiles SASS for, lowest first: those
        of every architecture row whose toolkit window contains it (a row whose first toolkit
        is unknown counts up to its last one)."""
        known = self._targets.get((cuda.major, cuda.minor))
        if known is not None:
            return known
        return _targets(self._archs, cuda)

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

    def compat_driver_branch(self, cuda: CudaVersion) -> int | None:
        """The driver branch ``cuda-compat-X-Y``'s libraries come from: the matrix's
        ``built_from_branch``, else the branch of the release's Table 3 minimum (the note under
        the matrix says they are the same); ``None`` when neither is known."""
        package = self._fc.get((cuda.major, cuda.minor))
        if package is not None:
            return package.built_from_branch
        floor = self.min_driver(cuda)
        return floor.major if floor is not None else None

    def forward_compat_packages(self) -> Iterator[ForwardCompatPackage]:
        return iter(sorted(self._fc.values(), key=lambda p: p.cuda))

    def forward_compat_columns(self) -> tuple[int, ...]:
        """The host branches the forward-compatibility matrix lists (all others are EOL)."""
        return self._fc_columns

    def driver_branch(self, branch: int) -> DriverBranch | None:
        return self._branches.get(branch)

    def driver_branches(self) -> Iterator[DriverBranch]:
        return iter(sorted(self._branches.values(), key=lambda b: b.branch))

    @property
    def drivers(self) -> DriverFacts:
        """Driver-release facts (``drivers.yaml``): module flavours, minimum kernels, reported
        build breakages, releases per branch with their dates."""
        return self._drivers

    @property
    def operator(self) -> OperatorFacts:
        """GPU Operator facts (``gpu-operator.yaml``): published driver containers per OS, the
        precompiled matrix, operator versions, supported boards, who installs a driver."""
        return self._operator

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
        key = product_key(name)
        if not key:
            return None
        for candidate, exact in candidate_keys(key):
            hit = self._gpu_index.get(candidate)
            if hit is not None:
                info, variant = hit
                # A hit after dropping memory/form-factor words names the product, not a board.
                if variant is None or not exact:
                    return info
                return replace(info, variant=variant, first_driver=info.first_driver_of(variant))
        return None

    def unknown_gpu(self, name: str, *, compute_too: bool = False) -> InputError:
        """The one error for a GPU name the knowledge base does not know: what it expected,
        the nearest names it knows, and where to look them all up. ``compute_too``: a
        compute capability would also have done."""
        import difflib

        known: dict[str, str] = {}
        for gpu in self._gpus:
            short = gpu.product.removeprefix("NVIDIA ").removeprefix("Tesla ")
            for label in (gpu.product, short):
                known.setdefault(label.lower(), short)
        close = difflib.get_close_matches(str(name).lower(), list(known), n=3, cutoff=0.6)
        nearest = list(dict.fromkeys(known[c] for c in close))
        hint = f"; did you mean {' or '.join(repr(n) for n in nearest)}?" if nearest else ""
        also = " or a compute capability (8.6, sm_90)" if compute_too else ""
        return InputError(
            f"unknown GPU {name!r}: expected the name nvidia-smi prints ('NVIDIA H100 80GB "
            f"HBM3'), its GFD label (NVIDIA-H100-80GB-HBM3) or a short name (H100){also}{hint} "
            "(every GPU cudasched knows: cudasched knowledge gpus)"
        )

    def truncated_product(self, name: str) -> bool:
        """Whether ``name`` is a cut-off GPU name rather than a product: a brand word alone
        (``NVIDIA-GeForce``, ``Tesla``), text ending in ``...``, or a strict prefix of a name
        the knowledge base knows (``NVIDIA-RTX-A200`` of ``NVIDIA RTX A2000``). Such a name
        must never be published or read as a product."""
        if not isinstance(name, str):
            raise InputError(f"invalid GPU product name {name!r}: expected a string")
        text = name.strip()
        if text.endswith(("...", "\u2026")):
            return True
        key = product_key(text)
        if key in BRAND_WORDS or not key:
            return True
        if self.gpu(text) is not None:
            return False
        return any(known != key and known.startswith(key) for known in self._gpu_index)

    def gpus(self) -> Iterator[GpuInfo]:
        return iter(self._gpus)

    def product_labels(self, datacenter: bool) -> tuple[str, ...]:
        """Every ``nvidia.com/gpu.product`` value GFD writes for the data-center (or the other)
        GPUs the knowledge base knows: each NVML name as GFD sanitises it, and its ``-SHARED``
        form (time-slicing). MIG forms are not listed: their profiles are open-ended."""
        labels = set()
        for info in self._gpus:
            if info.datacenter is datacenter:
                for name in info.names:
                    label = gfd_product_label(name)
                    labels.update({label, f"{label}-SHARED"})
        return tuple(sorted(labels))

    # ---- software ------------------------------------------------------------------------

    def framework(self, spec: str) -> FrameworkBuild | None:
        """The build a framework spec names and the CUDA it was built with.

        ``torch 2.5.1+cu124`` / ``torch==2.5.1+cu124`` / ``pytorch 2.5.1 cu124``: the variant's
        CUDA (and kernel list when known); a variant the release never shipped raises
        :class:`InputError` naming those it did. ``torch 2.8.0``: the PyPI default variant when
        a source gives it, else ``cuda=None``. ``tensorflow 2.15.0``: the tested build.
        ``vllm 0.9.0``: the default build. An unknown release without a CUDA tag gives None.
        """
        return self._frameworks.build(spec)

    def framework_releases(self) -> Iterator[tuple[str, TorchRelease | FrameworkRelease]]:
        """Every framework release the knowledge base knows, as (``torch`` | ``tensorflow`` |
        ``vllm``, release), newest first within each framework."""
        catalog = self._frameworks
        frameworks: tuple[tuple[str, Mapping[str, TorchRelease | FrameworkRelease]], ...] = (
            ("torch", catalog.torch),
            ("tensorflow", catalog.tensorflow),
            ("vllm", catalog.vllm),
        )
        for name, releases in frameworks:
            ordered = sorted(
                releases.values(), key=lambda r: release_order(r.release), reverse=True
            )
            for release in ordered:
                yield name, release

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
        return iter(sorted(rows, key=lambda r: (r.product, release_order(r.release))))


def _targets(archs: tuple[ArchInfo, ...], cuda: CudaVersion) -> tuple[ComputeCapability, ...]:
    out: list[ComputeCapability] = []
    for arch in archs:
        if arch.toolkit_supports(cuda) is False:
            continue
        out.extend(arch.compute)
    return tuple(sorted(set(out)))


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
