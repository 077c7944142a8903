"""``NVIDIA_REQUIRE_CUDA``: the check the NVIDIA container toolkit makes before a container starts.

Images built on ``nvidia/cuda`` (NGC images, vLLM, KServe's GPU servers, llm-d) carry the
variable in their image config, e.g. ``cuda>=12.8 brand=tesla,driver>=535,driver<536 ...``. When
a container starts, the toolkit reads every ``NVIDIA_REQUIRE_*`` variable of its environment
(except ``NVIDIA_REQUIRE_JETPACK``) and refuses to start it unless every one holds, compared with
the host: ``cuda`` is the driver's CUDA version (``cuDriverGetVersion``), ``driver`` the driver
version, ``arch`` the compute capability of the first GPU and ``brand`` its NVML brand. This
module mirrors ``nvidia-container-toolkit`` ``internal/requirements`` and
``internal/config/image/cuda_image.go``:

* space-separated alternatives are ORed, comma-separated conditions ANDed;
* a condition is ``PROPERTY OPERATOR VALUE`` with operators ``!=``, ``<=``, ``>=``, ``=``,
  ``<``, ``>`` (tried in that order, so ``==`` leaves ``=12.4`` as a value, which is invalid);
  property names are case-sensitive and an unknown property is skipped;
* ``cuda``, ``driver`` and ``arch`` compare as semantic versions (``12`` is 12.0.0, leading zeros
  are invalid); ``brand`` compares as a string;
* ``NVIDIA_DISABLE_REQUIRE`` set to a true value (Go's ``strconv.ParseBool``: ``1``, ``t``,
  ``true``, ...) turns the check off; an image with ``CUDA_VERSION`` and no
  ``NVIDIA_REQUIRE_CUDA`` (a "legacy" image) is checked against ``cuda>=MAJOR.MINOR``.

The comparison is strict: a host whose driver supports CUDA 12.2 fails ``cuda>=12.8`` even when
minor-version compatibility would run the application; only an alternative such as
``brand=tesla,driver>=535,driver<536`` lets it start. A value the toolkit would reject raises
:class:`InputError`, as the container would not start.

Every condition becomes a set of intervals over the integer codes of :mod:`cudasched.vocab.versions`
(a host CUDA is ``X.Y.0``: ``cuda>=12.4.1`` needs 12.5), so the engine's evaluation and the
placement compiler's selector (:meth:`Gate.boxes`) are the same function. A node's brand is
not a label; what the engine knows is whether the GPU is a data-center part, so it evaluates
against every brand that class can have (:func:`brands_for`): a gate holds only if it holds
for all of them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from cudasched.vocab.errors import InputError
from cudasched.vocab.versions import CudaVersion

__all__ = [
    "ALL_BRANDS",
    "DATACENTER_BRANDS",
    "DISABLE_ENV",
    "LEGACY_ENV",
    "OTHER_BRANDS",
    "REQUIRE_ENV",
    "Box",
    "Gate",
    "brands_for",
    "gate_from_env",
    "is_gate_env",
    "parse_constraint",
]

REQUIRE_ENV = "NVIDIA_REQUIRE_CUDA"
DISABLE_ENV = "NVIDIA_DISABLE_REQUIRE"
_REQUIRE_PREFIX = "NVIDIA_REQUIRE_"
_JETPACK_ENV = "NVIDIA_REQUIRE_JETPACK"
LEGACY_ENV = "CUDA_VERSION"


def is_gate_env(name: object) -> bool:
    """Whether the toolkit's gate reads the environment variable ``name``: every
    ``NVIDIA_REQUIRE_*``, ``NVIDIA_DISABLE_REQUIRE`` and (for legacy images) ``CUDA_VERSION``.
    The one list of the gate's names: whatever keeps part of a pod's env (a reduced snapshot)
    keeps these, so the gate reads the same there as on the full pod."""
    return isinstance(name, str) and (
        name.startswith(_REQUIRE_PREFIX) or name in (DISABLE_ENV, LEGACY_ENV)
    )


#: NVML brands of data-center GPUs (``nvmlDeviceGetBrand``: Tesla on older, NVIDIA on newer
#: boards) and of every other GPU (GeForce, TITAN, Quadro/RTX workstation, NVS), as the
#: toolkit spells them.
DATACENTER_BRANDS = frozenset({"tesla", "nvidia"})
OTHER_BRANDS = frozenset(
    {
        "geforce",
        "geforcertx",
        "titan",
        "titanrtx",
        "quadro",
        "quadrortx",
        "nvidiartx",
        "nvidia",
        "nvs",
    }
)
ALL_BRANDS = DATACENTER_BRANDS | OTHER_BRANDS

_OPERATORS = ("!=", "<=", ">=", "=", "<", ">")
_VERSION_PROPERTIES = ("cuda", "driver", "arch")
_PROPERTIES = (*_VERSION_PROPERTIES, "brand")
_SEMVER = re.compile(r"^v?(0|[1-9]\d*)(?:\.(0|[1-9]\d*))?(?:\.(0|[1-9]\d*))?$")
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})

Interval = tuple[int | None, int | None]  # inclusive bounds over a code; None is unbounded


def brands_for(datacenter: bool | None) -> frozenset[str]:
    """The brands a GPU can report, given whether it is a data-center part (None: unknown)."""
    if datacenter is True:
        return DATACENTER_BRANDS
    if datacenter is False:
        return OTHER_BRANDS
    return ALL_BRANDS


# --------------------------------------------------------------------------- conditions


def _semver(value: str, condition: str) -> tuple[int, int, int]:
    m = _SEMVER.match(value)
    if m is None:
        raise InputError(
            f"invalid {REQUIRE_ENV} condition {condition!r}: {value!r} is not a version such as "
            "12.4 (no leading zeros; the container toolkit would refuse to start the container)"
        )
    major, minor, patch = m.groups()
    return int(major), int(minor or 0), int(patch or 0)


def _grid(prop: str, v: tuple[int, int, int]) -> tuple[int, int]:
    """``(code of the largest host value <= v, code of the smallest host value >= v)``.

    A host CUDA or compute capability is ``X.Y.0`` (codes ``1000X+10Y`` / ``10X+Y``), a host
    driver any ``A.B.C`` (code ``A*10^6 + B*10^3 + C``)."""
    major, minor, patch = v
    if prop == "driver":
        code = major * 1_000_000 + minor * 1_000 + patch
        return code, code
    step = 10 if prop == "cuda" else 1
    base = major * (1000 if prop == "cuda" else 10) + minor * step
    return base, base + (step if patch else 0)


def _intervals(prop: str, op: str, v: tuple[int, int, int]) -> tuple[Interval, ...]:
    below, above = _grid(prop, v)  # largest host <= v, smallest host >= v
    step = {"driver": 1, "cuda": 10, "arch": 1}[prop]
    exact = below == above  # v itself is a host value
    if op == ">=":
        return ((above, None),)
    if op == ">":
        return ((above + step if exact else above, None),)
    if op == "<=":
        return ((None, below),)
    if op == "<":
        return ((None, below - step if exact else below),)
    if op == "=":
        return ((above, below),) if exact else ()
    if op == "!=":
        return ((None, below - step), (above + step, None)) if exact else ((None, None),)
    return ()  # no operator: never satisfied


@dataclass(frozen=True, slots=True)
class _Condition:
    prop: str
    op: str
    value: str
    intervals: tuple[Interval, ...] = ()  # version properties

    def brand_holds(self, brand: str) -> bool:
        if self.op == "=":
            return brand == self.value
        if self.op == "!=":
            return brand != self.value
        if self.op == "<":
            return brand < self.value
        if self.op == "<=":
            return brand <= self.value
        if self.op == ">":
            return brand > self.value
        if self.op == ">=":
            return brand >= self.value
        return False

    def __str__(self) -> str:
        return f"{self.prop}{self.op}{self.value}"


def _parse_condition(factor: str, whole: str) -> _Condition | None:
    end = next((i for i, ch in enumerate(factor) if ch in "<>=!"), -1)
    if end == -1:
        raise InputError(
            f"invalid {REQUIRE_ENV} condition {factor!r} in {whole!r}: expected PROPERTY "
            "OPERATOR VALUE such as cuda>=12.4"
        )
    prop, rest = factor[:end], factor[end:]
    if prop not in _PROPERTIES:
        return None  # the toolkit skips properties it does not know
    op = next((o for o in _OPERATORS if rest.startswith(o)), "")
    value = rest[len(op) :]
    if prop == "brand":
        return _Condition(prop, op, value)
    return _Condition(prop, op, value, _intervals(prop, op, _semver(value, factor)))


@dataclass(frozen=True, slots=True)
class Constraint:
    """One ``NVIDIA_REQUIRE_*`` value: alternatives (ORed) of conditions (ANDed). No
    alternative at all (empty text, only unknown properties) means no constraint."""

    text: str
    alternatives: tuple[tuple[_Condition, ...], ...]
    # The hash, computed on first use: a gate is part of the admission memos' keys, and
    # hashing the nested conditions again on every lookup was microseconds per request.
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        known = self._hash
        if not known:
            known = hash((self.text, self.alternatives)) or 1
            object.__setattr__(self, "_hash", known)
        return known


def parse_constraint(text: str) -> Constraint:
    """Parse one value the way the toolkit does (see the module docstring)."""
    if not isinstance(text, str):
        raise InputError(f"invalid {REQUIRE_ENV} {text!r}: expected a string")
    alternatives: list[tuple[_Condition, ...]] = []
    if text.strip():
        for term in text.split(" "):
            factors = [c for f in term.split(",") if f.strip() and (c := _parse_condition(f, text))]
            if factors:
                alternatives.append(tuple(factors))
    return Constraint(text, tuple(alternatives))


# --------------------------------------------------------------------------- boxes


@dataclass(frozen=True, slots=True)
class Box:
    """Host values (codes, inclusive bounds, None unbounded) where a gate holds."""

    cuda: Interval = (None, None)
    driver: Interval = (None, None)
    arch: Interval = (None, None)

    def __and__(self, other: Box) -> Box | None:
        out = []
        for a, b in ((self.cuda, other.cuda), (self.driver, other.driver), (self.arch, other.arch)):
            lo = a[0] if b[0] is None else b[0] if a[0] is None else max(a[0], b[0])
            hi = a[1] if b[1] is None else b[1] if a[1] is None else min(a[1], b[1])
            if lo is not None and hi is not None and lo > hi:
                return None
            out.append((lo, hi))
        return Box(*out)

    def within(self, other: Box) -> bool:
        """Whether every point of this box is in ``other``."""
        for a, b in ((self.cuda, other.cuda), (self.driver, other.driver), (self.arch, other.arch)):
            if b[0] is not None and (a[0] is None or a[0] < b[0]):
                return False
            if b[1] is not None and (a[1] is None or a[1] > b[1]):
                return False
        return True

    def contains(self, cuda: int | None, driver: int | None, arch: int | None) -> bool | None:
        """Whether the point is inside; None when a coordinate the box bounds is unknown."""
        unknown = False
        for (lo, hi), value in ((self.cuda, cuda), (self.driver, driver), (self.arch, arch)):
            if lo is None and hi is None:
                continue
            if value is None:
                unknown = True
                continue
            if (lo is not None and value < lo) or (hi is not None and value > hi):
                return False
        return None if unknown else True


def _simplify(boxes: Iterable[Box]) -> tuple[Box, ...]:
    """Drop duplicates and boxes inside another one; keep the first-seen order."""
    out: list[Box] = []
    for box in boxes:
        if any(box.within(kept) for kept in out):
            continue
        out = [kept for kept in out if not kept.within(box)]
        out.append(box)
    return tuple(out)


def _alternative_boxes(conditions: tuple[_Condition, ...], brand: str) -> tuple[Box, ...]:
    boxes = [Box()]
    for c in conditions:
        if c.prop == "brand":
            if not c.brand_holds(brand):
                return ()
            continue
        nxt: list[Box] = []
        for box in boxes:
            for lo, hi in c.intervals:
                piece = box & Box(**{c.prop: (lo, hi)})
                if piece is not None:
                    nxt.append(piece)
        boxes = nxt
    return tuple(boxes)


def _intersect(a: tuple[Box, ...], b: tuple[Box, ...]) -> tuple[Box, ...]:
    return _simplify(x for p in a for q in b if (x := p & q) is not None)


# --------------------------------------------------------------------------- gate


def _brand_region(constraints: tuple[Constraint, ...], brand: str) -> tuple[Box, ...]:
    region: tuple[Box, ...] = (Box(),)
    for constraint in constraints:
        if not constraint.alternatives:
            continue
        union = _simplify(
            b for alt in constraint.alternatives for b in _alternative_boxes(alt, brand)
        )
        region = _intersect(region, union)
    return region


@dataclass(frozen=True, slots=True)
class Gate:
    """Every ``NVIDIA_REQUIRE_*`` constraint a container starts under (ANDed), and where they
    were found (``source``: the image table entry, or a container's env)."""

    constraints: tuple[Constraint, ...]
    source: str = field(default="", compare=False)
    # Where the gate holds, per brand the toolkit can read (computed on first use, once).
    _regions: tuple[tuple[str, tuple[Box, ...]], ...] = field(
        init=False, repr=False, compare=False, default=()
    )

    @property
    def text(self) -> str:
        return " AND ".join(c.text for c in self.constraints if c.alternatives)

    def _region(self, brand: str) -> tuple[Box, ...]:
        if not self._regions:
            regions = tuple((b, _brand_region(self.constraints, b)) for b in sorted(ALL_BRANDS))
            object.__setattr__(self, "_regions", regions)
        for known, region in self._regions:
            if known == brand:
                return region
        return _brand_region(self.constraints, brand)

    def boxes(self, brands: Iterable[str]) -> tuple[Box, ...]:
        """Where the gate holds for *every* brand in ``brands``, as a union of boxes."""
        region: tuple[Box, ...] | None = None
        for brand in sorted(set(brands)):
            own = self._region(brand)
            region = own if region is None else _intersect(region, own)
        return region if region is not None else (Box(),)

    def holds(
        self,
        cuda: CudaVersion | None,
        driver_code: int | None,
        arch_code: int | None,
        brands: Iterable[str],
    ) -> bool | None:
        """Whether the toolkit would start the container on this host; None when a fact the
        gate needs is unknown. ``brands`` are the brands the GPU can have (:func:`brands_for`)."""
        point = (cuda.code if cuda is not None else None, driver_code, arch_code)
        answers = []
        for brand in sorted(set(brands)):
            found = [b.contains(*point) for b in self._region(brand)]
            answers.append(True if True in found else None if None in found else False)
        if False in answers:
            return False
        return None if None in answers else True

    def cuda_floor(self) -> CudaVersion | None:
        """The lowest CUDA the gate asks for: over its alternatives that bound ``cuda`` from
        below (brand/driver alternatives state none), the lowest bound; ANDed constraints
        take the highest. None when no constraint names one."""
        floor: int | None = None
        for constraint in self.constraints:
            bounds = []
            for alt in constraint.alternatives:
                lows = [
                    lo
                    for c in alt
                    if c.prop == "cuda"
                    for lo, _ in c.intervals
                    if lo is not None and all(i[0] is not None for i in c.intervals)
                ]
                if lows:
                    bounds.append(max(lows))
            if bounds:
                low = min(bounds)
                floor = low if floor is None else max(floor, low)
        return CudaVersion.from_code(floor) if floor is not None else None

    def branches(self, brands: Iterable[str]) -> frozenset[int]:
        """Driver branches an alternative admits whatever the host's CUDA (the
        ``brand=...,driver>=N,driver<N+1`` entries) for every brand in ``brands``."""
        out: set[int] = set()
        for box in self.boxes(brands):
            lo, hi = box.driver
            if box.cuda != (None, None) or lo is None or hi is None:
                continue
            first, last = lo // 1_000_000, hi // 1_000_000
            if last - first <= 8:
                out.update(range(first, last + 1))
        return frozenset(out)


def _truthy(value: object) -> bool:
    return isinstance(value, str) and value in _TRUE


def gate_from_env(env: Mapping[str, str], source: str) -> Gate | None:
    """The gate a container environment sets: every ``NVIDIA_REQUIRE_*`` value but
    ``NVIDIA_REQUIRE_JETPACK``, or for a legacy image (``CUDA_VERSION`` without
    ``NVIDIA_REQUIRE_CUDA``) ``cuda>=MAJOR.MINOR``. None when there is none or
    ``NVIDIA_DISABLE_REQUIRE`` is true. Raises :class:`InputError` for a value the toolkit
    would reject."""
    if _truthy(env.get(DISABLE_ENV)):
        return None
    constraints = [
        parse_constraint(str(value))
        for name, value in sorted(env.items())
        if name.startswith(_REQUIRE_PREFIX) and not name.startswith(_JETPACK_ENV)
    ]
    legacy = env.get(LEGACY_ENV)
    if legacy and not env.get(REQUIRE_ENV):
        m = _SEMVER.match(str(legacy))
        if m is None:
            raise InputError(f"invalid {LEGACY_ENV} {legacy!r}: expected a version such as 12.4.1")
        constraints.append(parse_constraint(f"cuda>={m.group(1)}.{m.group(2) or 0}"))
    if not any(c.alternatives for c in constraints):
        return None
    return Gate(tuple(constraints), source)
