"""What a node can offer a CUDA workload, read from the labels it already carries.

Three label sources exist in real clusters and they are read per fact, first hit wins:

1. ``cudasched.io/*`` labels written by our agent (integer codes, one value per fact);
2. NVIDIA GPU Feature Discovery's new keys (``nvidia.com/cuda.driver-version.*``,
   ``nvidia.com/cuda.runtime-version.*``, GFD >= 0.15);
3. GFD's deprecated keys (``nvidia.com/cuda.driver.major|minor|rev``,
   ``nvidia.com/cuda.runtime.major|minor``), the only ones older GFD releases set.

Reading per fact (not per source) keeps a node useful while an upgrade of GFD or of our agent
rolls through the fleet. The placement compiler reads the same keys in the same order, which is
what makes its selectors agree with :func:`cudasched.compat.engine.check` (see ``placement``).

Label values are taken as GFD writes them (``reference/nvidia-labels.md`` §1.1, §1.5): integer
components keep leading zeros (``550.90.07`` gives minor ``90`` and revision ``07``), the driver
revision may be the empty string (two-part versions such as ``570.26``), Tegra writes the literal
``unknown`` for driver components, and vfio passthrough writes ``0``/``0.0`` for CUDA and ``-1`` for
the compute capability. None of these is an error: a value that does not parse is an *unknown*
fact, recorded in :attr:`NodeFacts.problems`, and the engine refuses to place a CUDA workload on
the strength of an unknown fact.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from cudasched.knowledge import GFD_UNDEFINED_FAMILY
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError, VersionError
from cudasched.vocab.versions import (
    ComputeCapability,
    CudaVersion,
    DriverVersion,
    parse_compute_capability,
    parse_cuda,
    parse_driver,
)

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase

__all__ = [
    "SOURCE_CUDASCHED",
    "SOURCE_GFD",
    "SOURCE_GFD_DEPRECATED",
    "SOURCE_MANUAL",
    "SOURCE_NONE",
    "NodeFacts",
    "facts_from_labels",
    "facts_from_parts",
    "has_gpu_labels",
    "reconcile_cuda",
    "stated_versions",
]

SOURCE_CUDASCHED = "cudasched"
SOURCE_GFD = "gfd"
SOURCE_GFD_DEPRECATED = "gfd-deprecated"
SOURCE_NONE = ""
SOURCE_MANUAL = "manual"  # described by hand (CLI), not read from labels

# Facts that were not read from a label but derived from another fact through the knowledge base.
DERIVED_CUDA = "cuda"  # from the driver version (newest toolkit whose minimum driver it meets)
DERIVED_COMPUTE = "compute"  # from the GPU product name
DERIVED_DATACENTER = "datacenter"  # from the GPU product name
DERIVED_ARCH = "arch"  # from the compute capability

_DIGITS = re.compile(r"^[0-9]{1,18}\Z")

T = TypeVar("T")

# Keys whose presence means "this node has (or had) an NVIDIA GPU", whatever their value.
_GPU_HINT_KEYS = (
    L.CUDA_CODE,
    L.CUDA_VERSION,
    L.DRIVER_CODE,
    L.DRIVER_VERSION,
    L.COMPUTE_CODE,
    L.GPU_PRODUCT,
    L.GFD_DRIVER_FULL,
    L.GFD_DRIVER_MAJOR,
    L.GFD_CUDA_FULL,
    L.GFD_CUDA_MAJOR,
    L.GFD_OLD_DRIVER_MAJOR,
    L.GFD_OLD_CUDA_MAJOR,
    L.GFD_PRODUCT,
    L.GFD_COMPUTE_MAJOR,
)


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """The GPU facts of one node, each ``None`` when unknown.

    ``compute`` is the *lowest* compute capability on the node: a workload scheduled there may be
    handed any of its GPUs, so the weakest one decides. ``cuda`` is what the driver supports:
    with both a driver and a CUDA label, the CUDA the driver's version gives in NVIDIA's Table 3
    (a label that disagrees is recorded in ``problems``).
    ``first_driver`` is the newest first driver among the node's known GPU products
    (``first_driver_product`` names it): an older driver cannot drive that GPU. ``source``
    names where the driver/CUDA facts came from (``cudasched``, ``gfd``, ``gfd-deprecated``)
    and is ``""`` when the node has no GPU facts at all: such a node is never eligible for a
    CUDA requirement. ``derived`` lists facts inferred through the knowledge base rather than
    read from a label, ``problems`` the label values that did not parse or disagree (so
    ``explain`` can say *why* a fact is unknown).
    """

    name: str
    labels: Mapping[str, str] = field(compare=False, repr=False)
    driver: DriverVersion | None = None
    cuda: CudaVersion | None = None
    compute: ComputeCapability | None = None
    products: tuple[str, ...] = ()
    arch: str | None = None
    datacenter: bool | None = None
    gpu_count: int | None = None
    source: str = SOURCE_NONE
    derived: frozenset[str] = frozenset()
    problems: tuple[str, ...] = ()
    first_driver: DriverVersion | None = None
    first_driver_product: str = ""

    @property
    def has_gpu(self) -> bool:
        return self.source != SOURCE_NONE

    def describe(self) -> str:
        """One line for humans, e.g. ``driver 550.90.07 (CUDA 12.4), cc 9.0, NVIDIA-H100``."""
        if not self.has_gpu:
            return "no GPU facts"
        parts = [
            f"driver {self.driver}" if self.driver else "driver unknown",
            f"CUDA {self.cuda}" if self.cuda else "CUDA unknown",
            f"cc {self.compute}" if self.compute else "cc unknown",
        ]
        if self.products:
            parts.append("/".join(self.products))
        return ", ".join(parts)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form (stable keys; used by ``check -o json`` and ``explain``)."""
        return {
            "name": self.name,
            "source": self.source,
            "driver": str(self.driver) if self.driver else None,
            "cuda": str(self.cuda) if self.cuda else None,
            "computeCapability": str(self.compute) if self.compute else None,
            "products": list(self.products),
            "arch": self.arch,
            "datacenter": self.datacenter,
            "gpuCount": self.gpu_count,
            "derived": sorted(self.derived),
            "problems": list(self.problems),
        }


def has_gpu_labels(labels: Mapping[str, str]) -> bool:
    """Whether a node's labels say it has an NVIDIA GPU (any GPU fact key, or GPU Operator's
    ``nvidia.com/gpu.present=true``). Used to decide which nodes a label scheme must cover."""
    if any(key in labels for key in _GPU_HINT_KEYS):
        return True
    return str(labels.get(L.GFD_PRESENT, "")).strip().lower() == "true"


class _Reader:
    """Reads label values leniently and remembers which ones were present but unusable."""

    def __init__(self, labels: Mapping[str, str]) -> None:
        self.labels = labels
        self.problems: list[str] = []

    def text(self, key: str) -> str | None:
        value = self.labels.get(key)
        if value is None:
            return None
        return str(value).strip()

    def integer(self, key: str) -> int | None:
        """A non-negative base-10 integer; leading zeros allowed (GFD keeps them)."""
        value = self.text(key)
        if value is None:
            return None
        if not _DIGITS.match(value):
            self.problems.append(f"{key}={value!r} is not a non-negative integer")
            return None
        return int(value)

    def bad(self, key: str, why: str) -> None:
        self.problems.append(f"{key}={self.labels.get(key)!r} {why}")


#: Reads one fact from one label source: the value, or ``None`` when the source does not give
#: it (a value that is present but unusable is recorded in the reader's problems).
_Read: TypeAlias = Callable[[_Reader], T | None]
#: Builds a fact from GFD's split labels (the keys, major first) once both numbers parsed.
_Build: TypeAlias = Callable[[_Reader, tuple[str, ...], int, int], T | None]


def _coded(key: str, from_code: Callable[[int], T], what: str) -> _Read[T]:
    """A fact as our agent's integer code (``from_code`` raises on a code out of range)."""

    def read(r: _Reader) -> T | None:
        code = r.integer(key)
        if code is None:
            return None
        try:
            return from_code(code)
        except VersionError:
            r.bad(key, f"is not {what}")
            return None

    return read


def _spelled(
    key: str, parse: Callable[[str], T], what: str, placeholders: Collection[str] = ()
) -> _Read[T]:
    """A fact written out as one text label; ``placeholders`` (lower-case) mean "not known"."""

    def read(r: _Reader) -> T | None:
        text = r.text(key)
        if not text or text.lower() in placeholders:
            return None
        try:
            return parse(text)
        except VersionError:
            r.bad(key, f"is not {what}")
            return None

    return read


def _split(keys: tuple[str, ...], build: _Build[T]) -> _Read[T]:
    """A fact GFD splits over labels (major, minor and maybe more): both numbers must parse."""
    major_key, minor_key = keys[0], keys[1]

    def read(r: _Reader) -> T | None:
        if major_key not in r.labels:
            return None
        major, minor = r.integer(major_key), r.integer(minor_key)
        if major is None or minor is None:
            if minor_key not in r.labels:
                r.bad(major_key, f"has no companion {minor_key}")
            return None
        return build(r, keys, major, minor)

    return read


def _driver_parts(
    r: _Reader, keys: tuple[str, ...], major: int, minor: int
) -> DriverVersion | None:
    """A driver version from GFD's split labels; an empty revision means a two-part version."""
    major_key, minor_key, rev_key = keys
    if major == 0:
        r.bad(major_key, "is not a driver branch")
        return None
    # The version as the labels spell it (GFD keeps the driver's own digits).
    spelled = f"{r.text(major_key)}.{r.text(minor_key)}"
    rev_text = r.text(rev_key)
    if not rev_text:
        return DriverVersion(major, minor, 0, has_revision=False, text=spelled)
    rev = r.integer(rev_key)
    if rev is None:
        return None
    return DriverVersion(major, minor, rev, text=f"{spelled}.{rev_text}")


def _cuda_parts(r: _Reader, keys: tuple[str, ...], major: int, minor: int) -> CudaVersion | None:
    if major == 0 or minor > 9:
        # vfio passthrough reports 0.0: no usable CUDA driver on the host.
        r.bad(keys[0], f"with minor {minor} is not a CUDA version")
        return None
    return CudaVersion(major, minor)


def _compute_parts(
    r: _Reader, keys: tuple[str, ...], major: int, minor: int
) -> ComputeCapability | None:
    if 1 <= major <= 99 and minor <= 9:
        return ComputeCapability(major, minor)
    r.bad(keys[0], f"with minor {minor} is not a compute capability")
    return None


def _cuda_release(text: str) -> CudaVersion:
    return parse_cuda(text).release


_AGENT_DRIVER_TEXT = _spelled(L.DRIVER_VERSION, parse_driver, "a driver version")


def _agent_driver(r: _Reader) -> DriverVersion | None:
    """Our agent's driver labels: the code, and the readable version that keeps the driver's own
    spelling (550.120 has no revision). The code is what selectors compare, so it wins whenever
    the two disagree."""
    code = r.integer(L.DRIVER_CODE)
    readable = _AGENT_DRIVER_TEXT(r)
    if code is None:
        return readable
    if code < 1_000_000:
        r.bad(L.DRIVER_CODE, "is not a driver code (major*1000000 + minor*1000 + revision)")
        return readable
    if readable is not None and readable.code == code:
        return readable
    return DriverVersion.from_code(code)


#: Where each fact is read, in order (the module docstring's sources); the first that gives a
#: value wins, and names the fact's source.
_DRIVER: tuple[tuple[str, _Read[DriverVersion]], ...] = (
    (SOURCE_CUDASCHED, _agent_driver),
    (
        SOURCE_GFD,
        _split((L.GFD_DRIVER_MAJOR, L.GFD_DRIVER_MINOR, L.GFD_DRIVER_REVISION), _driver_parts),
    ),
    # Tegra writes "unknown" for every driver component.
    (
        SOURCE_GFD,
        _spelled(L.GFD_DRIVER_FULL, parse_driver, "a driver version", ("unknown.unknown.unknown",)),
    ),
    (
        SOURCE_GFD_DEPRECATED,
        _split(
            (L.GFD_OLD_DRIVER_MAJOR, L.GFD_OLD_DRIVER_MINOR, L.GFD_OLD_DRIVER_REV), _driver_parts
        ),
    ),
)
_CUDA: tuple[tuple[str, _Read[CudaVersion]], ...] = (
    (
        SOURCE_CUDASCHED,
        _coded(L.CUDA_CODE, CudaVersion.from_code, "a CUDA code (1000*major + 10*minor)"),
    ),
    (SOURCE_CUDASCHED, _spelled(L.CUDA_VERSION, _cuda_release, "a CUDA version")),
    (SOURCE_GFD, _split((L.GFD_CUDA_MAJOR, L.GFD_CUDA_MINOR), _cuda_parts)),
    # vfio passthrough writes 0 or 0.0: no usable CUDA driver on the host.
    (SOURCE_GFD, _spelled(L.GFD_CUDA_FULL, _cuda_release, "a CUDA version", ("0", "0.0"))),
    (SOURCE_GFD_DEPRECATED, _split((L.GFD_OLD_CUDA_MAJOR, L.GFD_OLD_CUDA_MINOR), _cuda_parts)),
)
_COMPUTE: tuple[tuple[str, _Read[ComputeCapability]], ...] = (
    (
        SOURCE_CUDASCHED,
        _coded(
            L.COMPUTE_CODE,
            ComputeCapability.from_code,
            "a compute-capability code (10*major + minor)",
        ),
    ),
    (SOURCE_GFD, _split((L.GFD_COMPUTE_MAJOR, L.GFD_COMPUTE_MINOR), _compute_parts)),
)


def _read(r: _Reader, sources: tuple[tuple[str, _Read[T]], ...]) -> tuple[T | None, str]:
    """One fact: the first of its ``sources`` that gives a value, and that source's name."""
    for source, read in sources:
        value = read(r)
        if value is not None:
            return value, source
    return None, SOURCE_NONE


def _read_products(r: _Reader) -> tuple[tuple[str, ...], str]:
    text = r.text(L.GPU_PRODUCT)
    if text:
        # Our agent joins the sorted products of a mixed node with "_".
        return tuple(p for p in text.split("_") if p), SOURCE_CUDASCHED
    text = r.text(L.GFD_PRODUCT)
    if text:
        return (text,), SOURCE_GFD
    return (), SOURCE_NONE


def _read_bool(r: _Reader, key: str) -> bool | None:
    text = r.text(key)
    if text is None:
        return None
    if text.lower() in {"true", "false"}:
        return text.lower() == "true"
    r.bad(key, "is not true or false")
    return None


def stated_versions(
    labels: Mapping[str, str],
) -> tuple[DriverVersion | None, CudaVersion | None, ComputeCapability | None]:
    """The driver, CUDA version and compute capability ``labels`` state, read with the key
    order and leniency of :func:`facts_from_labels` but taken as written: nothing derived and
    the CUDA label not reconciled with the driver. For comparing what label sources say (the
    audit's ``labels-conflict``); decisions use :func:`facts_from_labels`."""
    r = _Reader(labels)
    return (
        _read(r, _DRIVER)[0],
        _read(r, _CUDA)[0],
        _read(r, _COMPUTE)[0],
    )


def reconcile_cuda(
    driver: DriverVersion | None, stated: CudaVersion | None, kb: KnowledgeBase
) -> tuple[CudaVersion | None, bool, str | None]:
    """The CUDA a node supports, from its driver and a stated CUDA version (a label, or
    ``--cuda`` on the command line): ``(cuda, derived_from_driver, problem)``.

    One answer whatever the input form (issue 12 item 4): the CUDA version is a property of
    the driver, so with a driver NVIDIA's Table 3 knows, its answer
    (:meth:`KnowledgeBase.max_cuda_for_driver`) is the node's CUDA; a stated version that
    disagrees is reported as ``problem`` (a label claiming more than the driver supports, for
    one, is never trusted). Without a driver, or one older than every known toolkit's minimum,
    the stated version stands only when there is no driver at all.
    """
    if driver is None:
        return stated, False, None
    from_driver = kb.max_cuda_for_driver(driver)
    if stated is None or from_driver == stated:
        return (
            (from_driver if stated is None else stated),
            stated is None and (from_driver is not None),
            None,
        )
    if from_driver is not None and stated < from_driver:
        return (
            from_driver,
            True,
            f"CUDA {stated} is stated but driver {driver} supports CUDA {from_driver} "
            f"(NVIDIA Table 3); using the driver's, CUDA {from_driver}",
        )
    need = kb.min_driver(stated)
    if need is not None and driver < need:
        why = f"driver {driver} is below CUDA {stated}'s minimum {need}"
    else:
        why = f"NVIDIA's tables cannot confirm that driver {driver} supports CUDA {stated}"
    using = f"CUDA {from_driver}" if from_driver is not None else "no CUDA version"
    return from_driver, True, f"CUDA {stated} is stated but {why}; using {using}"


def _first_driver(infos: list[Any]) -> tuple[DriverVersion | None, str]:
    """The newest first driver among the known products (the one an older driver fails)."""
    best: tuple[DriverVersion | None, str] = (None, "")
    for info in infos:
        if info is None or info.first_driver is None:
            continue
        if best[0] is None or info.first_driver > best[0]:
            best = (info.first_driver, info.variant or info.product)
    return best


def facts_from_labels(name: str, labels: Mapping[str, str], kb: KnowledgeBase) -> NodeFacts:
    """Read a node's GPU facts from its labels (see the module docstring for the key order).

    Facts missing from the labels are derived where NVIDIA's tables allow it: a driver without a
    CUDA label gets the newest CUDA whose Table 3 minimum it meets (``kb.max_cuda_for_driver``);
    a product without compute labels gets the product's compute capability (``kb.gpu``); data-center
    class comes from ``cudasched.io/gpu.datacenter`` else from the product. Never raises on label
    *values*; ``labels`` must be a mapping.
    """
    if not isinstance(labels, Mapping):
        raise InputError(f"labels of node {name!r} must be a mapping, got {type(labels).__name__}")
    r = _Reader(labels)
    derived: set[str] = set()

    driver, driver_src = _read(r, _DRIVER)
    cuda, cuda_src = _read(r, _CUDA)
    compute, compute_src = _read(r, _COMPUTE)
    products, product_src = _read_products(r)

    gpu_infos = [kb.gpu(p) for p in products]
    cuda, cuda_derived, disagreement = reconcile_cuda(driver, cuda, kb)
    if cuda_derived:
        derived.add(DERIVED_CUDA)
    if disagreement is not None:
        r.problems.append(disagreement)
    known = bool(gpu_infos) and all(g is not None for g in gpu_infos)
    if compute is None and known:
        compute = min(g.compute for g in gpu_infos if g is not None)
        derived.add(DERIVED_COMPUTE)
    datacenter = _read_bool(r, L.GPU_DATACENTER)
    if datacenter is None and known:
        # Forward compatibility needs every GPU the pod could get to be a data-center part.
        datacenter = all(g.datacenter for g in gpu_infos if g is not None)
        derived.add(DERIVED_DATACENTER)
    arch = _arch(r, compute, kb, derived)

    gpu_count = r.integer(L.GFD_COUNT)

    # A node with only `gpu.present=true` (or only unreadable values) has no facts: "".
    source = driver_src or cuda_src or compute_src or product_src
    first_driver, first_product = _first_driver(gpu_infos)
    return NodeFacts(
        name=name,
        labels=MappingProxyType(dict(labels)),
        driver=driver,
        cuda=cuda,
        compute=compute,
        products=products,
        arch=arch,
        datacenter=datacenter,
        gpu_count=gpu_count,
        source=source,
        derived=frozenset(derived),
        problems=tuple(r.problems),
        first_driver=first_driver,
        first_driver_product=first_product,
    )


def _arch(
    r: _Reader, compute: ComputeCapability | None, kb: KnowledgeBase, derived: set[str]
) -> str | None:
    """The GPU family from the labels, else from the compute capability (noted in
    ``derived``). The family words are architectures.yaml's (GFD's vocabulary); GFD's "no
    family" is unknown."""
    arch = r.text(L.GPU_ARCH) or r.text(L.GFD_FAMILY)
    if arch in {"", GFD_UNDEFINED_FAMILY, "unknown"}:
        arch = None
    if arch is None and compute is not None:
        info = kb.arch(compute)
        if info is not None:
            arch = info.family
            derived.add(DERIVED_ARCH)
    return arch


def facts_from_parts(
    name: str,
    *,
    gpu: str | None,
    driver: str | DriverVersion | None,
    kb: KnowledgeBase,
    cuda: str | CudaVersion | None = None,
) -> NodeFacts:
    """Facts for a hypothetical node described by hand (``cudasched check --gpu --driver``).

    ``gpu`` is a product name the knowledge base knows (``A100``, ``NVIDIA H100 80GB HBM3``,
    ``Tesla-T4``) or a compute capability (``8.6``, ``sm_90``); ``cuda`` states the node's CUDA
    version, reconciled with the driver exactly as a label is (:func:`reconcile_cuda`), so the
    same node gives the same answer however it is described. Unlike node labels these are user
    input, so bad values raise.
    """
    parsed_driver = parse_driver(driver) if driver is not None else None
    derived: set[str] = set()
    stated = parse_cuda(cuda).release if cuda is not None else None
    parsed_cuda, cuda_derived, disagreement = reconcile_cuda(parsed_driver, stated, kb)
    if cuda_derived:
        derived.add(DERIVED_CUDA)
    compute: ComputeCapability | None = None
    products: tuple[str, ...] = ()
    datacenter: bool | None = None
    info = None
    if gpu is not None:
        info = kb.gpu(gpu)
        if info is not None:
            compute, products, datacenter = info.compute, (info.product,), info.datacenter
            derived.update({DERIVED_COMPUTE, DERIVED_DATACENTER})
        else:
            try:
                compute = parse_compute_capability(gpu)
            except VersionError:
                raise kb.unknown_gpu(gpu, compute_too=True) from None
    arch_info = kb.arch(compute) if compute is not None else None
    if arch_info is not None:
        derived.add(DERIVED_ARCH)
    has_any = parsed_driver is not None or parsed_cuda is not None or compute is not None
    return NodeFacts(
        name=name,
        labels=MappingProxyType({}),
        driver=parsed_driver,
        cuda=parsed_cuda,
        compute=compute,
        products=products,
        arch=arch_info.family if arch_info is not None else None,
        datacenter=datacenter,
        gpu_count=None,
        source=SOURCE_MANUAL if has_any else SOURCE_NONE,
        derived=frozenset(derived),
        problems=(disagreement,) if disagreement is not None else (),
        first_driver=info.first_driver if info is not None else None,
        first_driver_product=(info.variant or info.product) if info is not None else "",
    )
