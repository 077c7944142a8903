"""Whether NVIDIA ships what a plan would install (who installs a node's driver is
:mod:`cudasched.compat.drivermanager`).

Pure: knowledge base, labels and dates in, answers out. Every answer is one of the facts of
``gpu-operator.yaml`` and ``drivers.yaml`` (see :mod:`cudasched.knowledge.operator`):

* **a driver container that exists** (:func:`container_release`): NVIDIA publishes
  ``driver:<version>-<os tag>`` only for the OS tags and branches its driver-container CI builds;
  an OS it stopped building keeps only the last releases it built, one it never built (Amazon
  Linux 2023) has none, and a release that did not exist yet on the plan's date is not offered;
* **precompiled containers** (:func:`precompiled_problem`): only for the branches, distributions,
  LTS kernel series and kernel flavours of NVIDIA's precompiled matrix, minus its exclusions;
* **the operator version** (:func:`operator_version`, :func:`operator_os_problem`): which
  NVIDIADriver fields it accepts, which OSes it supports, how it tags images;
* **support scope** (:func:`scope_problem`, :func:`board_minimum`): the operator supports
  data-center GPUs (and the boards its support page adds), some with a lowest driver container.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING

from cudasched.compat.branches import (
    ModuleType,
    drive_problem,
    judged_release,
    kernel_problem,
    module_type,
)
from cudasched.vocab.errors import InputError

if TYPE_CHECKING:
    from cudasched.compat.branches import GpuTarget, OsTag
    from cudasched.knowledge import KnowledgeBase
    from cudasched.knowledge.drivers import KernelRelease
    from cudasched.knowledge.operator import MinorTag, OperatorBoard, OperatorVersion
    from cudasched.vocab.versions import DriverVersion

__all__ = [
    "Install",
    "board_minimum",
    "container_oses",
    "container_release",
    "gpu_problem",
    "image_os_tag",
    "install_option",
    "known_os",
    "operator_board",
    "operator_os_problem",
    "operator_version",
    "precompiled_problem",
    "scope_problem",
]


# --------------------------------------------------------------------------- containers


def container_oses(kb: KnowledgeBase, branch: int, arch: str | None = None) -> tuple[str, ...]:
    """The OS tags NVIDIA still builds ``branch``'s driver containers for (for ``arch``, when
    given and the row records its architectures)."""
    return tuple(
        os
        for os, row in kb.operator.containers.items()
        if branch in row.branches
        and row.branches[branch] is None
        and row.ended is None
        and (arch is None or row.arches is None or arch in row.arches)
    )


def _building(kb: KnowledgeBase) -> str:
    """The OS tags NVIDIA builds driver containers for today (what an error can point to)."""
    return ", ".join(
        os
        for os, row in kb.operator.containers.items()
        if row.ended is None and None in row.branches.values()
    )


def _releases_text(rows: Iterable[tuple[int, DriverVersion | None]]) -> str:
    return ", ".join(str(v) if v is not None else f"R{b}" for b, v in rows)


def image_os_tag(os: OsTag | str, operator: OperatorVersion | None) -> str:
    """The OS part of the driver image tag (``driver:<version>-<this>``) GPU Operator
    ``operator`` forms for nodes of ``os``: RHEL 8 and 9 with the minor version before v26.7
    (``rhel9.4``), the major version from v26.7 (``rhel9``); ``os`` as it is without an
    operator or for a plain tag."""
    if operator is None or isinstance(os, str):
        return str(os)
    return operator.image_os_tag(os.id, os.full_version)


def container_release(
    kb: KnowledgeBase,
    branch: int,
    os: OsTag | str | None,
    as_of: date | None,
    operator: OperatorVersion | None = None,
    arch: str | None = None,
) -> DriverVersion | str:
    """The newest ``branch`` driver container NVIDIA publishes for ``os`` (and CPU
    architecture ``arch``, when known) on ``as_of`` under the image tag ``operator`` forms
    (:func:`image_os_tag`), or why there is none (an unknown OS or minor-version tag, one NVIDIA
    stopped or never built, an architecture it does not build the tag for, a branch it does not
    build for the OS, or no release of the branch yet on that date)."""
    found = _container_release(kb, branch, os, as_of, operator)
    if isinstance(found, str) or arch is None or os is None:
        return found
    return _arch_problem(kb, image_os_tag(os, operator), arch) or found


def _arch_problem(kb: KnowledgeBase, tag: str, arch: str) -> str | None:
    """Why the images NVIDIA pushes under ``tag`` are not built for ``arch`` (``None``: they
    are, or the sources do not record the tag's architectures)."""
    found_row = kb.operator.os_row(tag)
    if found_row is None:
        return None
    row, minor = found_row
    arches = minor.arches if minor is not None and minor.arches is not None else row.arches
    if arches is None or arch in arches:
        return None
    return f"NVIDIA builds the {tag} driver containers for {', '.join(arches)} only, not {arch}"


def _container_release(
    kb: KnowledgeBase,
    branch: int,
    os: OsTag | str | None,
    as_of: date | None,
    operator: OperatorVersion | None,
) -> DriverVersion | str:
    """:func:`container_release` before the architecture is judged."""
    if os is None:
        return "the OS is not known (no NFD system-os_release labels), and driver images are per OS"
    tag = image_os_tag(os, operator)
    found_row = kb.operator.os_row(tag)
    if found_row is None and tag != str(os) and operator is not None and not isinstance(os, str):
        return _no_minor_tag(kb, os, tag, operator, as_of)
    if found_row is None:
        return (
            f"NVIDIA publishes no driver containers for {tag} (it builds them for {_building(kb)})"
        )
    row, minor = found_row
    if minor is not None:
        return _minor_release(kb, branch, row.branches.get(branch), minor, as_of, operator)
    if not row.branches:
        return f"NVIDIA has never published driver containers for {tag}" + (
            f" ({row.note})" if row.note else ""
        )
    if branch not in row.branches:
        if row.ended is not None:
            return (
                f"NVIDIA stopped building {tag} driver containers on {row.ended} (the last: "
                f"{_releases_text(sorted(row.branches.items()))}), none for R{branch}"
            )
        others = ", ".join(f"R{b}" for b in sorted(row.branches))
        return f"NVIDIA publishes no R{branch} driver container for {tag} (only {others})"
    last = row.branches[branch]
    found = kb.drivers.release_on(branch, as_of, at_most=last)
    if found is None:
        when = f" on {as_of.isoformat()}" if as_of is not None else ""
        return f"no R{branch} driver container for {tag} was published yet{when}"
    return found.version


def _no_minor_tag(
    kb: KnowledgeBase, os: OsTag, tag: str, operator: OperatorVersion, as_of: date | None
) -> str:
    """Why a minor-version tag the operator release pulls (``rhel9.9``) has no container, and
    the ways out: a minor release NVIDIA still pushes, or an operator release that tags the
    major version."""
    pushed = [
        m.tag
        for row in kb.operator.containers.values()
        for m in row.minor_tags
        if m.tag.startswith(f"{os}.")
        and (m.until is None or (as_of is not None and date.fromisoformat(m.until) >= as_of))
    ]
    major = [v for v in kb.operator.versions if v.image_os_tag(os.id, os.full_version) == str(os)]
    since = f"v{min(major, key=lambda v: v.key).version} and newer" if major else None
    ways = [f"move the nodes to {' or '.join(pushed)}"] if pushed else []
    if since is not None:
        ways.append(f"use a GPU Operator that tags {os} images with the major version ({since})")
    return (
        f"GPU Operator {operator.version} pulls driver:<version>-{tag} for these nodes, and "
        f"NVIDIA publishes no {tag} driver containers" + (f": {', or '.join(ways)}" if ways else "")
    )


def _minor_release(
    kb: KnowledgeBase,
    branch: int,
    last: DriverVersion | None,
    minor: MinorTag,
    as_of: date | None,
    operator: OperatorVersion | None,
) -> DriverVersion | str:
    """The newest ``branch`` container under a minor-version tag: pushed from ``minor.since``
    (until ``minor.until``) for the branches built then, at most the row's ``last`` release."""
    tag = minor.tag
    who = f"GPU Operator {operator.version} pulls driver:<version>-{tag}: " if operator else ""
    if as_of is not None and as_of < date.fromisoformat(minor.since):
        return f"{who}NVIDIA pushed no {tag} driver containers before {minor.since}"
    if branch not in minor.branches:
        others = ", ".join(f"R{b}" for b in minor.branches)
        if minor.until is not None:
            return (
                f"{who}NVIDIA stopped pushing {tag} driver containers on {minor.until} (only "
                f"{others}), none for R{branch}"
            )
        return f"{who}NVIDIA publishes no R{branch} driver container tagged {tag} (only {others})"
    until = date.fromisoformat(minor.until) if minor.until is not None else None
    dates = [d for d in (as_of, until) if d is not None]
    when = min(dates) if dates else None
    found = kb.drivers.release_on(branch, when, at_most=last)
    if found is None:
        return f"{who}no R{branch} driver container tagged {tag} was published by {when}"
    return found.version


def operator_board(kb: KnowledgeBase, name: str) -> OperatorBoard | None:
    """The board the operator's support page lists for a GPU named ``name``: by the name as
    given (NVML, or GFD's with dashes), else through the knowledge base's product (a short name,
    ``RTX A6000``) and the NVML name it matched or its boards' names."""
    found = kb.operator.board(name)
    if found is not None:
        return found
    info = kb.gpu(name)
    if info is None:
        return None
    names = (info.variant,) if info.variant is not None else info.names
    return next((b for b in map(kb.operator.board, names) if b is not None), None)


def board_minimum(kb: KnowledgeBase, products: Iterable[str]) -> DriverVersion | None:
    """The lowest driver container the operator states for any of ``products`` (GFD or NVML
    board names, or the knowledge base's product names)."""
    floors = [
        b.min_driver
        for b in (operator_board(kb, p) for p in products)
        if b is not None and b.min_driver is not None
    ]
    return max(floors) if floors else None


def scope_problem(
    kb: KnowledgeBase, products: Iterable[str], datacenter: bool | None
) -> str | None:
    """Why the GPU Operator does not support these GPUs (``None``: it does): it supports
    NVIDIA's data-center GPUs and the boards its support page adds."""
    names = tuple(products)
    if datacenter is not False or any(operator_board(kb, p) is not None for p in names):
        return None
    shown = "/".join(names) or "this GPU"
    return (
        f"{shown} is not a GPU the GPU Operator supports (NVIDIA data-center GPUs and the RTX, "
        "Quadro and T-series boards its platform page lists), so its driver containers are not "
        "validated there"
    )


# --------------------------------------------------------------------------- precompiled


def precompiled_problem(
    kb: KnowledgeBase,
    os: OsTag | None,
    kernel: KernelRelease | None,
    branch: int | None = None,
    arch: str | None = None,
) -> str | None:
    """Why NVIDIA builds no precompiled driver container for this OS, kernel, branch and CPU
    architecture (``None``: it does; ``branch`` None: for any branch of the matrix; ``arch``
    None: not judged)."""
    matrix = kb.operator.precompiled
    if os is None:
        return "the OS is not known, and precompiled driver containers are built per OS"
    tag = str(os)
    series_of = matrix.dists.get(tag)
    if series_of is None:
        return f"precompiled driver containers are built for {', '.join(matrix.dists)}, not {tag}"
    arches = matrix.arches.get(tag)
    if arch is not None and arches and arch not in arches:
        return (
            f"precompiled driver containers for {tag} are built for {', '.join(arches)} only, "
            f"not {arch}"
        )
    if branch is not None and branch not in matrix.branches:
        listed = ", ".join(f"R{b}" for b in matrix.branches)
        return f"precompiled driver containers are built for {listed} only, not R{branch}"
    if branch is not None and matrix.excluded(tag, branch, None, ""):
        return f"NVIDIA builds no R{branch} precompiled driver container for {tag}"
    if kernel is None:
        return "the kernel is not known, and precompiled driver containers are built per kernel"
    series = f"{kernel.major}.{kernel.minor}"
    if series not in series_of:
        return (
            f"kernel {kernel} is not of an LTS kernel series NVIDIA precompiles for on {tag} "
            f"({', '.join(series_of)})"
        )
    if kernel.flavour not in matrix.kernel_flavours:
        what = f"variant {kernel.flavour!r}" if kernel.flavour else "no distribution variant"
        return (
            f"kernel {kernel} has {what}; precompiled driver containers are built for the "
            f"{', '.join(matrix.kernel_flavours)} kernels only"
        )
    if matrix.excluded(tag, branch, kernel.flavour, series) or matrix.excluded(
        tag, None, kernel.flavour, series
    ):
        return (
            f"NVIDIA builds no precompiled driver container for {kernel.flavour} kernels on {tag}"
        )
    if arch is not None and matrix.excluded("", None, kernel.flavour, "", arch):
        return f"NVIDIA builds no {arch} precompiled driver container for {kernel.flavour} kernels"
    return None


# --------------------------------------------------------------------------- operator versions


def operator_version(kb: KnowledgeBase, text: str | None) -> OperatorVersion:
    """``--gpu-operator-version``: a release the knowledge base knows (``None``: the newest);
    an :class:`InputError` naming the known ones otherwise."""
    facts = kb.operator
    if text is None:
        return facts.newest
    found = facts.version(text)
    if found is None:
        known = ", ".join(v.version for v in facts.versions)
        raise InputError(
            f"invalid --gpu-operator-version {text!r}: expected one of the GPU Operator releases "
            f"cudasched knows ({known}), as 26.7 or v26.7.0"
        )
    return found


def operator_os_problem(version: OperatorVersion, os: OsTag | None) -> str | None:
    """Why GPU Operator ``version`` does not support ``os`` (``None``: it does, or the OS is
    not known)."""
    if os is None or str(os) in version.os:
        return None
    listed = ", ".join(version.os)
    return f"GPU Operator {version.version} does not support {os} (it supports {listed})"


# --------------------------------------------------------------------------- one branch


@dataclass(frozen=True, slots=True)
class Install:
    """What installing ``branch`` on a pool means: the release (the driver container's, or the
    newest one for a host or node image), whether it is a precompiled container (then the
    NVIDIADriver version is the branch) and the kernel-module flavour."""

    branch: int
    release: DriverVersion
    precompiled: bool
    module: ModuleType

    @property
    def version(self) -> str:
        """The NVIDIADriver ``version``: the release, or the branch for precompiled drivers."""
        return str(self.branch) if self.precompiled else str(self.release)


def gpu_problem(kb: KnowledgeBase, gpu: GpuTarget, branch: int) -> str | None:
    """Why ``branch`` can never drive GPUs like ``gpu``, whatever release or OS (``None``: it
    can): no kernel modules for it, or outside the architecture's first and last branch."""
    module = module_type(kb, gpu, branch)
    if not isinstance(module, ModuleType):
        return module
    return drive_problem(gpu, judged_release(kb, branch, gpu))


def install_option(
    kb: KnowledgeBase,
    gpu: GpuTarget,
    branch: int,
    *,
    today: date,
    os: OsTag | None = None,
    kernel: KernelRelease | None = None,
    operator: OperatorVersion | None = None,
    precompiled: bool = False,
    products: Sequence[str] = (),
    arch: str | None = None,
) -> Install | str:
    """How ``branch`` would be installed on GPUs like ``gpu``, or why it cannot be: it must
    drive the GPU (kernel modules, last branch, then the first driver against the release that
    would be installed), have a release on ``today`` (with
    ``operator``: a driver container NVIDIA publishes for ``os`` that the operator version
    supports, at or above the lowest container the operator states for ``products``; else any
    dated release, installed with the host or its image) and build on ``kernel``. With
    ``precompiled`` a precompiled container is used where NVIDIA's matrix has one. ``arch``:
    the nodes' CPU architecture, which a driver container must be built for. The lifecycle is
    not judged here (callers rank by it)."""
    module = module_type(kb, gpu, branch)
    problem = gpu_problem(kb, gpu, branch)
    if problem is not None or not isinstance(module, ModuleType):
        return problem or str(module)
    if operator is not None:
        found = container_release(kb, branch, os, today, operator, arch)
        if isinstance(found, str):
            return found
        problem = operator_os_problem(operator, os)
        if problem is not None:
            return problem
        release = found
        minimum = board_minimum(kb, products)
        if minimum is not None and release < minimum:
            return (
                f"the GPU Operator needs a driver container >= {minimum} for {'/'.join(products)}; "
                f"the newest R{branch} one for {os} is {release}"
            )
    else:
        dated = kb.drivers.release_on(branch, today)
        if dated is None:
            known = kb.drivers.latest_release(branch)
            return (
                f"no R{branch} release is known"
                if known is None
                else f"no R{branch} release was out yet on {today.isoformat()} (first known later)"
            )
        release = dated.version
    problem = drive_problem(gpu, release)
    if problem is not None:
        return problem
    if kernel is not None:
        problem = kernel_problem(kb, release, kernel)
        if problem is not None:
            return problem
    use_precompiled = (
        precompiled
        and operator is not None
        and precompiled_problem(kb, os, kernel, branch, arch) is None
    )
    return Install(branch, release, use_precompiled, module)


def known_os(kb: KnowledgeBase, os: OsTag) -> OsTag:
    """``os`` when cudasched knows it (an OS tag NVIDIA publishes or published driver
    containers for, or one a GPU Operator release supports); an :class:`InputError` that lists
    them otherwise."""
    known = dict.fromkeys(kb.operator.containers)
    for version in kb.operator.versions:
        known.update(dict.fromkeys(version.os))
    if str(os) not in known:
        raise InputError(
            f"unknown OS {str(os)!r}: expected an OS tag cudasched knows "
            f"({', '.join(sorted(known))})"
        )
    return os
