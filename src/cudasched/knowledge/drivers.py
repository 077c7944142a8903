"""Driver-release facts from ``data/drivers.yaml``: kernel-module flavours, the oldest kernel a
release builds on, reported kernel build breakages, the newest known release of each branch and
where precompiled driver containers exist.

The records keep their sources like every other fact of the knowledge base; the small lookups
that belong to the facts themselves (the minimum kernel of a release, the breakages that touch a
release on a kernel, the newest release of a branch on a date) live here. Where NVIDIA publishes
driver containers, precompiled ones included, is in :mod:`cudasched.knowledge.operator`. Which
branch to choose lives in :mod:`cudasched.compat.branches`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING, Any

from cudasched.vocab.errors import InputError, KnowledgeError
from cudasched.vocab.versions import (
    ComputeCapability,
    DriverVersion,
    parse_compute_capability,
    parse_driver,
)

if TYPE_CHECKING:
    from cudasched.knowledge.loading import DataFile

__all__ = [
    "Breakage",
    "DriverFacts",
    "KernelRelease",
    "LatestRelease",
    "MinimumKernel",
    "ModuleRules",
    "Release",
    "load_driver_facts",
    "parse_kernel",
]

_KERNEL_RE = re.compile(r"^(\d{1,2})\.(\d{1,3})(?:\.(\d{1,4}))?(?:[-+_.~](.*))?$")
_FLAVOURS = ("open", "proprietary")


@dataclass(frozen=True, slots=True)
class KernelRelease:
    """A Linux kernel release as ``uname -r`` (or NFD's ``kernel-version.full``) prints it:
    the version compares by (major, minor, patch); ``flavour`` is the distribution's kernel
    variant after the ABI number (``5.15.0-113-generic`` -> ``generic``, ``azure-fde``), empty
    when the release has none (Amazon Linux's ``6.1.115-126.197.amzn2023.x86_64``)."""

    major: int
    minor: int
    patch: int = 0
    text: str = ""
    flavour: str = ""

    @property
    def version(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)

    def __str__(self) -> str:
        return self.text or f"{self.major}.{self.minor}.{self.patch}"


def parse_kernel(value: object) -> KernelRelease:
    """``5.15.0-113-generic``, ``6.8``, ``6.1.115-126.197.amzn2023.x86_64``, ``4.15``.

    Raises :class:`InputError` naming the value for anything else."""
    text = str(value).strip() if isinstance(value, str | int | float) else ""
    m = _KERNEL_RE.match(text)
    if m is None or isinstance(value, bool):
        raise InputError(
            f"invalid kernel release {value!r}: expected MAJOR.MINOR[.PATCH][-ABI-FLAVOUR] as "
            "uname -r prints it, e.g. 5.15.0-113-generic"
        )
    major, minor, patch, rest = m.groups()
    flavour = ""
    if rest:
        # Ubuntu/Debian style: <abi number>-<flavour...>; anything else has no flavour.
        abi, _, tail = rest.partition("-")
        if abi.isdigit() and tail and re.fullmatch(r"[a-z][a-z0-9-]*", tail):
            flavour = tail
    return KernelRelease(int(major), int(minor), int(patch or 0), text, flavour)


@dataclass(frozen=True, slots=True)
class ModuleRules:
    """Kernel-module flavours: from which branch the open modules exist, the oldest compute
    capability they drive, and from which branch they are the installer's default."""

    open_first_branch: int
    open_min_compute: ComputeCapability
    open_default_branch: int
    source: str


@dataclass(frozen=True, slots=True)
class MinimumKernel:
    """The oldest kernel releases from ``from_driver`` on build against (``None``: the floor
    before the first row)."""

    from_driver: DriverVersion | None
    kernel: KernelRelease
    source: str
    note: str = ""


@dataclass(frozen=True, slots=True)
class Breakage:
    """A reported build failure of ``driver`` against ``kernel`` (see ``drivers.yaml``)."""

    driver: DriverVersion
    kernel: KernelRelease
    result: str
    source: str
    fixed_in: DriverVersion | None = None
    flavour: str | None = None

    def touches(
        self, release: DriverVersion, kernel: KernelRelease, flavour: str | None = None
    ) -> bool:
        """Whether the report is about ``release`` (same branch, not newer than the reported
        one, not fixed yet) on ``kernel`` (the reported kernel or newer) and ``flavour``."""
        if release.branch != self.driver.branch or release > self.driver:
            return False
        if self.fixed_in is not None and release >= self.fixed_in:
            return False
        if self.flavour is not None and flavour is not None and flavour != self.flavour:
            return False
        return kernel.version >= self.kernel.version

    def describe(self) -> str:
        which = f" ({self.flavour} modules)" if self.flavour else ""
        fixed = f"; {self.fixed_in} builds" if self.fixed_in is not None else ""
        return (
            f"driver {self.driver}{which} on kernel {self.kernel}: {self.result}{fixed} "
            f"(reported: {self.source})"
        )


@dataclass(frozen=True, slots=True)
class LatestRelease:
    """The newest release of a branch a source names (``None``: none known) and the day it
    was first available (``None``: not known)."""

    branch: int
    version: DriverVersion | None
    source: str
    note: str = ""
    released: date | None = None


@dataclass(frozen=True, slots=True)
class Release:
    """A release of a branch and the day it was first available."""

    version: DriverVersion
    released: date
    source: str


@dataclass(frozen=True, slots=True)
class DriverFacts:
    """Everything ``drivers.yaml`` says, with the lookups that belong to the facts."""

    modules: ModuleRules
    minimum_kernels: tuple[MinimumKernel, ...]  # by from_driver, the floor first
    breakages: tuple[Breakage, ...]
    latest: Mapping[int, LatestRelease]
    releases: Mapping[int, tuple[Release, ...]]  # every dated release per branch, newest first

    def minimum_kernel(self, release: DriverVersion) -> MinimumKernel:
        """The oldest kernel ``release`` builds on."""
        found = self.minimum_kernels[0]
        for row in self.minimum_kernels[1:]:
            if row.from_driver is not None and row.from_driver <= release:
                found = row
        return found

    def breakages_for(
        self, release: DriverVersion, kernel: KernelRelease, flavour: str | None = None
    ) -> tuple[Breakage, ...]:
        """The reported breakages that touch ``release`` on ``kernel``."""
        return tuple(b for b in self.breakages if b.touches(release, kernel, flavour))

    def latest_release(self, branch: int, as_of: date | None = None) -> DriverVersion | None:
        """The newest known release of ``branch``; with ``as_of``, the newest one available on
        that day (``None``: none known, or none released yet)."""
        found = self.release_on(branch, as_of)
        return found.version if found is not None else None

    def release_on(
        self, branch: int, as_of: date | None = None, at_most: DriverVersion | None = None
    ) -> Release | None:
        """The newest dated release of ``branch`` available on ``as_of`` (any day when
        ``None``) and not newer than ``at_most``."""
        for release in self.releases.get(branch, ()):
            if as_of is not None and release.released > as_of:
                continue
            if at_most is not None and release.version > at_most:
                continue
            return release
        return None


# --------------------------------------------------------------------------- loading


def _driver(doc: DataFile, value: object, where: str) -> DriverVersion:
    return doc.parse(parse_driver, str(value), where)


def _kernel(doc: DataFile, value: object, where: str) -> KernelRelease:
    try:
        return parse_kernel(str(value))
    except InputError as exc:
        raise KnowledgeError(f"{doc.name}: {where}: {exc}") from None


def _rule(doc: DataFile, section: Mapping[str, Any], key: str) -> tuple[Any, str]:
    entry = section.get(key)
    if not isinstance(entry, Mapping) or "value" not in entry:
        raise KnowledgeError(f"{doc.name}: kernel_modules.{key} must be {{value, source}}")
    return entry["value"], doc.source(entry, f"kernel_modules.{key}")


def _modules(doc: DataFile) -> ModuleRules:
    section = doc.data.get("kernel_modules")
    if not isinstance(section, Mapping):
        raise KnowledgeError(f"{doc.name}: `kernel_modules` must be a mapping")
    first, source = _rule(doc, section, "open_first_branch")
    compute, _ = _rule(doc, section, "open_min_compute")
    default, _ = _rule(doc, section, "open_default_branch")
    if not isinstance(first, int) or not isinstance(default, int):
        raise KnowledgeError(f"{doc.name}: kernel_modules branches must be integers")
    return ModuleRules(
        open_first_branch=first,
        open_min_compute=doc.parse(parse_compute_capability, str(compute), "open_min_compute"),
        open_default_branch=default,
        source=source,
    )


def _note(entry: Mapping[str, Any]) -> str:
    return " ".join(str(entry.get("note") or "").split())


def _minimum_kernels(doc: DataFile) -> tuple[MinimumKernel, ...]:
    rows = []
    for i, e in enumerate(doc.entries("minimum_kernel")):
        where = f"minimum_kernel #{i}"
        start = e.get("from_driver")
        rows.append(
            MinimumKernel(
                from_driver=_driver(doc, start, where) if start is not None else None,
                kernel=_kernel(doc, e.get("kernel"), where),
                source=doc.source(e, where),
                note=_note(e),
            )
        )
    floors = [r for r in rows if r.from_driver is None]
    if len(floors) != 1:
        raise KnowledgeError(
            f"{doc.name}: minimum_kernel needs exactly one row without from_driver"
        )
    dated = [(r.from_driver, r) for r in rows if r.from_driver is not None]
    return (floors[0], *(r for _, r in sorted(dated, key=lambda pair: pair[0])))


def _breakages(doc: DataFile) -> tuple[Breakage, ...]:
    rows = []
    for i, e in enumerate(doc.entries("build_breakages")):
        where = f"build_breakages #{i} ({e.get('driver')})"
        flavour = e.get("flavour")
        if flavour is not None and flavour not in _FLAVOURS:
            raise KnowledgeError(f"{doc.name}: {where}: flavour is open or proprietary")
        fixed = e.get("fixed_in")
        result = e.get("result")
        if not isinstance(result, str) or not result.strip():
            raise KnowledgeError(f"{doc.name}: {where}: result is required")
        rows.append(
            Breakage(
                driver=_driver(doc, e.get("driver"), where),
                kernel=_kernel(doc, e.get("kernel"), where),
                result=result.strip(),
                source=doc.source(e, where),
                fixed_in=_driver(doc, fixed, where) if fixed is not None else None,
                flavour=flavour,
            )
        )
    return tuple(rows)


def _released(doc: DataFile, value: object, where: str) -> date | None:
    if value is None:
        return None
    if isinstance(value, date):
        return value
    try:
        return date.fromisoformat(str(value))
    except ValueError:
        raise KnowledgeError(f"{doc.name}: {where}: released {value!r} is not YYYY-MM-DD") from None


def _latest(doc: DataFile) -> dict[int, LatestRelease]:
    out: dict[int, LatestRelease] = {}
    for i, e in enumerate(doc.entries("latest_releases")):
        where = f"latest_releases #{i}"
        branch = e.get("branch")
        if not isinstance(branch, int) or branch in out:
            raise KnowledgeError(f"{doc.name}: {where}: branch must be a new integer")
        version = e.get("version")
        release = _driver(doc, version, where) if version is not None else None
        if release is not None and release.branch != branch:
            raise KnowledgeError(f"{doc.name}: {where}: {release} is not a release of R{branch}")
        released = _released(doc, e.get("released"), where)
        if release is not None and released is None:
            raise KnowledgeError(f"{doc.name}: {where}: a known release needs its released date")
        out[branch] = LatestRelease(branch, release, doc.source(e, where), _note(e), released)
    return out


def _releases(doc: DataFile, latest: Mapping[int, LatestRelease]) -> dict[int, tuple[Release, ...]]:
    """Every dated release per branch, newest version first: the latest ones and
    ``earlier_releases`` (each older than its branch's latest)."""
    found: dict[int, list[Release]] = {}
    for row in latest.values():
        if row.version is not None and row.released is not None:
            found.setdefault(row.branch, []).append(Release(row.version, row.released, row.source))
    for i, e in enumerate(doc.entries("earlier_releases")):
        where = f"earlier_releases #{i} ({e.get('version')})"
        version = _driver(doc, e.get("version"), where)
        newest = latest.get(version.branch)
        if newest is None or newest.version is None or version >= newest.version:
            raise KnowledgeError(
                f"{doc.name}: {where}: not older than a latest release of R{version.branch}"
            )
        released = _released(doc, e.get("released"), where)
        if released is None:
            raise KnowledgeError(f"{doc.name}: {where}: released is required")
        found[version.branch].append(Release(version, released, doc.source(e, where)))
    return {
        branch: tuple(sorted(rows, key=lambda r: (r.version, r.released), reverse=True))
        for branch, rows in found.items()
    }


def load_driver_facts(doc: DataFile) -> DriverFacts:
    """``drivers.yaml`` into :class:`DriverFacts` (a :class:`KnowledgeError` for a malformed
    file: a packaging bug)."""
    latest = _latest(doc)
    return DriverFacts(
        modules=_modules(doc),
        minimum_kernels=_minimum_kernels(doc),
        breakages=_breakages(doc),
        latest=latest,
        releases=_releases(doc, latest),
    )
