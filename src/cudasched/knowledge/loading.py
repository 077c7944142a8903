"""Reading the bundled data files and validating them into records.

:func:`read_data_files` reads ``cudasched/data/*.yaml`` (also from a wheel or a zip) and parses
them, or takes them from a :class:`ParsedCache` its caller passes in: parsing is most of a short
command's start-up, but a cache kept between processes is files and environment, which the pure
core never reads, so the command line keeps it (:mod:`cudasched.cli.knowledgecache`). One
``load_*`` function per file section turns the parsed YAML into records and indexes. Anything
malformed (a missing file, an entry without a resolvable source, a bad value, a duplicate key)
raises :class:`KnowledgeError` naming the file and the entry: those are packaging bugs, never
user input.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol, TypeVar

from cudasched.knowledge.frameworks import FrameworkCatalog, is_cuda_wheel_tag
from cudasched.knowledge.naming import product_key
from cudasched.knowledge.records import (
    ArchInfo,
    ContainerRelease,
    DriverBranch,
    FcCell,
    ForwardCompatPackage,
    FrameworkRelease,
    GpuInfo,
    MinorCompat,
    ReleaseKind,
    Status,
    ToolkitRelease,
    TorchRelease,
    TorchVariant,
)
from cudasched.vocab.errors import KnowledgeError, VersionError
from cudasched.vocab.versions import (
    ComputeCapability,
    DriverVersion,
    parse_compute_capability,
    parse_cuda,
    parse_driver,
)

__all__ = [
    "DATA_FILES",
    "NGC_PRODUCTS",
    "DataFile",
    "ParsedCache",
    "load_archs",
    "load_branches",
    "load_forward_compat",
    "load_frameworks",
    "load_gpus",
    "load_minor_compat",
    "load_ngc",
    "load_toolkits",
    "parse_data_files",
    "read_data_bytes",
    "read_data_files",
]

DATA_FILES = (
    "toolkits.yaml",
    "compat.yaml",
    "architectures.yaml",
    "gpus.yaml",
    "frameworks.yaml",
    "containers.yaml",
    "drivers.yaml",
    "gpu-operator.yaml",
)

NGC_PRODUCTS = ("tritonserver", "pytorch", "tensorflow", "sglang")

_T = TypeVar("_T")


class DataFile:
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

    def parse(self, fn: Callable[[str], _T], value: str, where: str) -> _T:
        """``fn(value)``, with a parse failure reported as this file's error at ``where``."""
        try:
            return fn(value)
        except (VersionError, TypeError, ValueError) as exc:
            raise KnowledgeError(f"{self.name}: {where}: {exc}") from None

    def opt(self, fn: Callable[[str], _T], value: object, where: str) -> _T | None:
        """Like :meth:`parse` for an optional field: None stays None."""
        return None if value is None else self.parse(fn, str(value), where)

    def status(self, entry: Mapping[str, Any], where: str) -> Status:
        try:
            return Status(entry.get("status", "known"))
        except ValueError:
            allowed = ", ".join(s.value for s in Status)
            raise KnowledgeError(f"{self.name}: {where}: status must be one of {allowed}") from None


def _note(entry: Mapping[str, Any]) -> str:
    """An entry's ``note`` on one line (YAML folded text keeps its newlines)."""
    return " ".join(str(entry.get("note") or "").split())


def parse_data_files(raw: Mapping[str, bytes]) -> dict[str, object]:
    """Data files' bytes parsed with a safe YAML loader, keyed by file name."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return {
        name: yaml.load(data.decode("utf-8"), Loader=loader)  # noqa: S506 - a safe loader
        for name, data in raw.items()
    }


class ParsedCache(Protocol):
    """Where parsed data files may be kept between processes, keyed by the files' bytes (a
    changed file is another entry, so a cache never serves stale data)."""

    def load(self, raw: Mapping[str, bytes]) -> dict[str, object] | None:
        """The documents parsed from exactly ``raw``, or ``None`` when not kept."""
        ...

    def store(self, raw: Mapping[str, bytes], docs: Mapping[str, object]) -> None:
        """Keep ``docs``, parsed from ``raw``; a cache that cannot keep them says nothing."""
        ...


def read_data_bytes(names: tuple[str, ...]) -> dict[str, bytes]:
    """The bundled data files' bytes. A package installed as files is read directly;
    anything else (a zip import) through :mod:`importlib.resources`."""
    here = Path(__file__).resolve().parent.parent / "data"
    if all((here / name).is_file() for name in names):
        return {name: (here / name).read_bytes() for name in names}
    from importlib import resources

    root = resources.files("cudasched").joinpath("data")
    return {name: root.joinpath(name).read_bytes() for name in names}


def read_data_files(
    cache: ParsedCache | None = None, read: Mapping[str, bytes] | None = None
) -> dict[str, object]:
    """Every file of :data:`DATA_FILES` parsed, keyed by file name: from ``cache`` when it
    holds these exact bytes, else parsed (and given to ``cache`` to keep). ``read``: the
    files' bytes where the caller has read them already."""
    raw = {n: read[n] for n in DATA_FILES} if read is not None else read_data_bytes(DATA_FILES)
    found = cache.load(raw) if cache is not None else None
    if found is not None and set(found) == set(DATA_FILES):
        return found
    docs = parse_data_files(raw)
    if cache is not None:
        cache.store(raw, docs)
    return docs


def load_toolkits(
    doc: DataFile,
) -> tuple[
    tuple[ToolkitRelease, ...],
    dict[tuple[int, int], ToolkitRelease],
    dict[tuple[int, int, int], ToolkitRelease],
]:
    """``toolkits.yaml`` (Table 3): every row oldest first, the GA row per CUDA major.minor and
    every row per full version."""
    rows: list[ToolkitRelease] = []
    ga: dict[tuple[int, int], ToolkitRelease] = {}
    by_version: dict[tuple[int, int, int], ToolkitRelease] = {}
    for i, e in enumerate(doc.entries("releases")):
        where = f"release #{i} ({e.get('version')})"
        cuda = doc.parse(parse_cuda, str(e.get("version")), where)
        try:
            kind = ReleaseKind(str(e.get("kind")))
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


def load_minor_compat(doc: DataFile) -> dict[int, MinorCompat]:
    """``compat.yaml`` minor-version compatibility: the driver floor per CUDA major."""
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


def load_forward_compat(
    doc: DataFile,
) -> tuple[dict[tuple[int, int], ForwardCompatPackage], tuple[int, ...]]:
    """``compat.yaml`` forward compatibility: each ``cuda-compat`` package by CUDA major.minor,
    and the host branches the matrix lists."""
    section = doc.data.get("forward_compat")
    if not isinstance(section, Mapping):
        raise KnowledgeError("compat.yaml: `forward_compat` must be a mapping")
    columns = section.get("branches")
    if not isinstance(columns, list) or not all(isinstance(b, int) for b in columns):
        raise KnowledgeError("compat.yaml: forward_compat.branches must be a list of branches")
    sub = DataFile("compat.yaml", {"sources": doc.data.get("sources"), **section})
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


def load_branches(doc: DataFile) -> dict[int, DriverBranch]:
    """``compat.yaml`` driver branches: lifecycle type and end of life per branch."""
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


def load_archs(doc: DataFile) -> tuple[tuple[ArchInfo, ...], dict[ComputeCapability, ArchInfo]]:
    """``architectures.yaml``: rows by lowest compute capability, and the row of every listed
    capability (no capability may be in two rows)."""
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
        gfd_family, gfd_family_source = _gfd_family(doc, e, family, where)
        info = ArchInfo(
            name=name,
            family=family,
            gfd_family=gfd_family,
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
            gfd_family_source=gfd_family_source,
        )
        for cc in ccs:
            if cc in by_cc:
                raise KnowledgeError(f"architectures.yaml: {where}: {cc} is already in a row")
            by_cc[cc] = info
        rows.append(info)
    return tuple(sorted(rows, key=lambda a: a.compute[0])), by_cc


def _gfd_family(
    doc: DataFile, entry: Mapping[str, Any], family: str, where: str
) -> tuple[str, str]:
    """A row's GFD word and the source of it: ``gfd_family`` with its ``gfd_family_source`` where
    GFD's word differs from ``family``, else ``family`` itself (its source is the row's)."""
    if "gfd_family" not in entry:
        return family, ""
    word = entry["gfd_family"]
    if not isinstance(word, str) or not word:
        raise KnowledgeError(f"architectures.yaml: {where}: gfd_family must be a word")
    if word == family:
        raise KnowledgeError(f"architectures.yaml: {where}: gfd_family repeats family; omit it")
    return word, doc.source(entry, where, "gfd_family_source")


def load_gpus(
    doc: DataFile, archs: Mapping[ComputeCapability, ArchInfo]
) -> tuple[tuple[GpuInfo, ...], dict[str, tuple[GpuInfo, str | None]]]:
    """``gpus.yaml``: the products, and an index from every name's lookup key to the product and
    the exact NVML name it spells (None for short names and aliases)."""
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
            **_first_drivers(doc, e, names, where),
            note=_note(e),
            **_host_arch(doc, e, where),
        )
        rows.append(info)
        for n in names:
            add(product_key(n), info, n, where)
        for alias in (product, *(e.get("aliases") or ())):
            add(product_key(str(alias)), info, None, where)
    return tuple(rows), index


#: CPU architectures as Kubernetes names them (the ``kubernetes.io/arch`` label, GOARCH).
HOST_ARCHES = ("amd64", "arm64")


def _host_arch(doc: DataFile, e: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``host_arch`` (arm64, amd64) with its source, or nothing."""
    value = e.get("host_arch")
    if value is None:
        return {}
    if value not in HOST_ARCHES:
        raise KnowledgeError(f"gpus.yaml: {where}: host_arch is one of {', '.join(HOST_ARCHES)}")
    return {"host_arch": str(value), "host_arch_source": doc.source(e, where, "host_arch_source")}


def _first_drivers(
    doc: DataFile, e: Mapping[str, Any], names: list[str], where: str
) -> dict[str, Any]:
    """``first_driver`` (the product's: the lowest of its boards), ``first_drivers`` (boards
    listed later than that) and the source both need."""
    first = doc.opt(parse_driver, e.get("first_driver"), where)
    boards = e.get("first_drivers") or {}
    if not isinstance(boards, Mapping):
        raise KnowledgeError(f"gpus.yaml: {where}: first_drivers must map NVML names to drivers")
    if boards and first is None:
        raise KnowledgeError(f"gpus.yaml: {where}: first_drivers needs the product's first_driver")
    per_board: list[tuple[str, DriverVersion]] = []
    for board, value in boards.items():
        if board not in names:
            raise KnowledgeError(f"gpus.yaml: {where}: first_drivers names {board!r}, not a board")
        version = doc.parse(parse_driver, str(value), where)
        if first is not None and version < first:  # first is set: boards need it (above)
            raise KnowledgeError(
                f"gpus.yaml: {where}: {board} first driver {version} is below the product's {first}"
            )
        per_board.append((str(board), version))
    return {
        "first_driver": first,
        "first_driver_source": (
            doc.source(e, where, "first_driver_source") if first is not None else ""
        ),
        "first_drivers": tuple(per_board),
    }


def load_frameworks(doc: DataFile) -> FrameworkCatalog:
    """``frameworks.yaml``: PyTorch series with their wheel variants, TensorFlow and vLLM
    releases."""
    return FrameworkCatalog(
        torch=MappingProxyType(_load_torch(doc)),
        tensorflow=MappingProxyType(_load_releases(doc, "tensorflow")),
        vllm=MappingProxyType(_load_releases(doc, "vllm")),
    )


def _load_torch(doc: DataFile) -> dict[str, TorchRelease]:
    """PyTorch series (``2.5``) with their CUDA wheel variants."""
    out: dict[str, TorchRelease] = {}
    for i, e in enumerate(doc.entries("pytorch")):
        release = str(e.get("release"))
        where = f"pytorch #{i} ({release})"
        if not re.match(r"^\d+\.\d+$", release) or release in out:
            raise KnowledgeError(f"frameworks.yaml: {where}: release must be a new MAJOR.MINOR")
        raw_variants = e.get("variants")
        if not isinstance(raw_variants, Mapping) or not raw_variants:
            raise KnowledgeError(f"frameworks.yaml: {where}: variants are required")
        source = doc.source(e, where)
        variants: dict[str, TorchVariant] = {}
        for tag, v in raw_variants.items():
            vwhere = f"{where} variant {tag}"
            if not isinstance(v, Mapping) or not is_cuda_wheel_tag(str(tag)):
                raise KnowledgeError(f"frameworks.yaml: {vwhere}: expected cuXYZ: {{channel: ...}}")
            archs = v.get("arch_list")
            arch_list = (
                tuple(doc.parse(parse_compute_capability, str(a), vwhere) for a in archs)
                if archs is not None
                else None
            )
            variants[str(tag)] = TorchVariant(
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
        out[release] = TorchRelease(
            release=release,
            variants=MappingProxyType(variants),
            pypi_default=str(default) if default is not None else None,
            pypi_default_source=(
                doc.source(e, where, "pypi_default_source") if default is not None else ""
            ),
            source=source,
        )
    return out


def _load_releases(doc: DataFile, key: str) -> dict[str, FrameworkRelease]:
    """TensorFlow or vLLM releases (``X.Y.Z``), one default CUDA each."""
    out: dict[str, FrameworkRelease] = {}
    for i, e in enumerate(doc.entries(key)):
        release = str(e.get("release"))
        where = f"{key} #{i} ({release})"
        if not re.match(r"^\d+\.\d+\.\d+$", release) or release in out:
            raise KnowledgeError(f"frameworks.yaml: {where}: release must be a new X.Y.Z")
        archs = e.get("arch_list")
        out[release] = FrameworkRelease(
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


def load_ngc(doc: DataFile) -> dict[tuple[str, str], ContainerRelease]:
    """``containers.yaml``: NGC container releases by (product, ``YY.MM``)."""
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
