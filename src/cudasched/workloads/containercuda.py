"""What a workload's GPU container says about its CUDA requirement, the third source of
:mod:`cudasched.workloads.sources`: its ``NVIDIA_REQUIRE_CUDA`` env, then its image (the image's
own config when it was read from its registry, else the image table), and the NVIDIA container
toolkit's gate the container starts under. The env comes first because a pod-level value
replaces the image's own and is exactly what the toolkit enforces when the container starts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cudasched.knowledge.imageconfig import COMPAT_PACKAGE_ENV, ImageConfig, config_cuda, gate_env
from cudasched.knowledge.images import (
    ImageLookup,
    ImageMatch,
    ImageTable,
    ReleaseFacts,
    parse_require_cuda,
)
from cudasched.vocab.errors import InputError
from cudasched.vocab.requirecuda import REQUIRE_ENV, Gate
from cudasched.vocab.requirements import CompatLibrary, FrameworkBuild
from cudasched.vocab.versions import ComputeCapability, CudaVersion, DriverVersion, parse_driver

__all__ = [
    "ContainerFacts",
    "compat_library",
    "from_container",
]


_COMPAT_PACKAGE = re.compile(r"cuda-compat-(\d{1,2})-(\d{1,2})")


@dataclass(frozen=True, slots=True)
class ContainerFacts:
    """What the GPU container says: a CUDA (from its ``NVIDIA_REQUIRE_CUDA`` env or its image),
    the container toolkit's gate it starts under, the compat library its image was found to
    ship (read from its layers), and why there is no CUDA when there is none."""

    cuda: CudaVersion | None = None
    min_compute: ComputeCapability | None = None
    framework: FrameworkBuild | None = None
    source: str = ""
    gate: Gate | None = None
    ships_cuda_compat: bool | None = None
    lower_bound: bool = False
    why_unknown: str = ""
    compat: CompatLibrary | None = None


def _literal_env(container: Mapping[str, Any], name: str) -> dict[str, str]:
    """The container's env given as literal values (``valueFrom`` is not knowable here)."""
    env = container.get("env") or []
    if not isinstance(env, list):
        raise InputError(f"invalid env of container {name}: expected a list")
    out: dict[str, str] = {}
    for var in env:
        if (type(var) is dict or isinstance(var, Mapping)) and isinstance(var.get("name"), str):
            value = var.get("value")
            if value is not None:
                out[var["name"]] = str(value)
    return out


@dataclass(frozen=True, slots=True)
class _Start:
    """The terms the container starts under, whatever its CUDA: the toolkit's gate, whether
    the image ships compat libraries, the compat library found."""

    gate: Gate | None
    ships: bool | None
    compat: CompatLibrary | None

    def facts(
        self,
        cuda: CudaVersion | None = None,
        min_compute: ComputeCapability | None = None,
        framework: FrameworkBuild | None = None,
        source: str = "",
        *,
        lower_bound: bool = False,
        why_unknown: str = "",
    ) -> ContainerFacts:
        return ContainerFacts(
            cuda,
            min_compute,
            framework,
            source,
            self.gate,
            self.ships,
            lower_bound,
            why_unknown,
            self.compat,
        )


def from_container(
    container: Mapping[str, Any] | None, images: ImageTable, kb: ReleaseFacts | None
) -> ContainerFacts:
    if container is None:
        return ContainerFacts()
    name = str(container.get("name") or "?")
    env = _literal_env(container, name)
    image = container.get("image")
    lookup = _lookup(image, images, kb)
    match = lookup.match if lookup is not None else None
    config = images.config_for(lookup.image) if lookup is not None else None
    if config is not None and not config.ok:
        config = None  # not read: the table decides (and an unknown says why)
    where = f"container {name}"
    start = _start(env, config, match, images, kb, where, image)
    floor = parse_require_cuda(env[REQUIRE_ENV]) if env.get(REQUIRE_ENV) else None
    if floor is not None:
        return start.facts(floor, source=f"env {REQUIRE_ENV} of {where}")
    if config is not None:
        found = _image_facts(config, match, str(image).strip())
        if found is not None:
            cuda, source, lower = found
            same = match is not None and match.cuda == cuda
            low = match.min_compute if same and match is not None else None
            return start.facts(cuda, low, source=source, lower_bound=lower)
    if match is not None:
        source = f"image {str(image).strip()}" + (
            " (at least this CUDA; its exact version is not recorded)" if match.lower_bound else ""
        )
        return start.facts(
            match.cuda.release,
            match.min_compute,
            match.framework,
            source,
            lower_bound=match.lower_bound,
        )
    return start.facts(why_unknown=_why_unknown(lookup, config, where, image))


def _start(
    env: Mapping[str, str],
    config: ImageConfig | None,
    match: ImageMatch | None,
    images: ImageTable,
    kb: ReleaseFacts | None,
    where: str,
    image: object,
) -> _Start:
    """The container's gate, and what its image ships of compat libraries. The container's
    env replaces the image's variable of the same name (Kubernetes env over image ENV), which
    is what the toolkit reads when the container starts. The image's own config, when read
    from its registry, is the image's env; the table's value is what the table knows of it."""
    if config is not None:
        image_env = gate_env(config)
    else:
        image_env = {REQUIRE_ENV: match.require_cuda} if match and match.require_cuda else {}
    try:
        gate = images.gate_for({**image_env, **env}, _gate_source(env, image_env, where, image))
    except InputError as exc:
        raise InputError(f"invalid env of {where}: {exc}") from None
    compat = compat_library(config, kb)
    # A compat library read from the image itself says it ships one, whatever the table says.
    ships = True if compat is not None else match.ships_cuda_compat if match is not None else None
    return _Start(gate, ships, compat)


def compat_library(config: ImageConfig | None, kb: ReleaseFacts | None) -> CompatLibrary | None:
    """The compat ``libcuda.so`` the image ships, as the engine reads it: the one its layers
    were read to carry (its file name's driver, its note), else the ``cuda-compat-X-Y``
    package its config's ``NV_CUDA_COMPAT_PACKAGE`` names (every ``nvidia/cuda`` base image
    sets it, and installs the package in the same step), whose driver branch NVIDIA's
    forward-compatibility matrix gives; ``None`` when neither says."""
    if config is None:
        return None
    note = config.contents.compat if config.contents is not None else None
    if note is not None and note.compat_driver:
        try:
            driver = parse_driver(note.compat_driver)
        except InputError:
            return None
        branches = note.driver_branches if note.has_note else None
        where = f"/{note.path.strip('/')} in {note.layer}"
        return CompatLibrary(driver, note.cuda, branches, source=where)
    package = config.env.get(COMPAT_PACKAGE_ENV, "").strip()
    m = _COMPAT_PACKAGE.fullmatch(package)
    if m is None or kb is None:
        return None
    cuda = CudaVersion(int(m.group(1)), int(m.group(2)))
    branch = kb.compat_driver_branch(cuda)
    if branch is None:
        return None
    return CompatLibrary(
        DriverVersion(branch, 0, 0),
        cuda,
        None,
        source=f"{COMPAT_PACKAGE_ENV}={package} of the image's config (R{branch} libraries)",
        name=f"{package} (R{branch})",
    )


def _lookup(image: object, images: ImageTable, kb: ReleaseFacts | None) -> ImageLookup | None:
    """The image table's answer for the container's image, if it names one we can parse."""
    if not isinstance(image, str) or not image.strip():
        return None
    try:
        return images.lookup(image, kb=kb)
    except InputError:
        # The API server does not validate image references; one we cannot parse is
        # simply not a well-known image (the kubelet will report it at pull time).
        return None


def _why_unknown(
    lookup: ImageLookup | None, config: ImageConfig | None, where: str, image: object
) -> str:
    """Why neither the env, the image's config nor the table names the container's CUDA."""
    if config is not None:
        why = f"the config of image {str(image).strip()} names no CUDA ({config.digest})"
        if config.contents is not None:
            why += f", nor do its contents ({config.contents.unknown})"
        return why
    return lookup.why if lookup is not None else f"{where} names no image cudasched can read"


def _image_facts(
    config: ImageConfig, match: ImageMatch | None, image: str
) -> tuple[CudaVersion, str, bool] | None:
    """The CUDA an image read from its registry needs, the source in words, and whether it is
    a floor. The convention (``docs/guide/images.md``, "Base and bundled CUDA"): the config
    names the runtime base's CUDA (what the gate enforces); the libraries the image bundles
    (its layers, or a table row of ``cuda_of: bundled``) may need a newer one; the
    requirement is the newer of the two, the gate stays the config's."""
    if config.correction is not None:  # a person's word on this image wins
        return config.correction.cuda, config.correction.source, False
    base, said = config_cuda(config)
    mirror = f", read from mirror {config.mirror}" if config.mirror else ""
    found: list[tuple[CudaVersion, str, bool]] = []
    if base is not None:
        found.append((base, f"image config of {image} ({said}{mirror})", False))
    contents = config.contents
    if contents is not None and contents.cuda is not None:
        bound = " (at least)" if contents.lower_bound else ""
        source = f"contents of image {image}: CUDA {contents.cuda}{bound}, {contents.rule}"
        found.append((contents.cuda, source, contents.lower_bound))
    elif match is not None and match.bundled and base is not None:
        found.append((match.cuda.release, f"image {image}: {match.source}", match.lower_bound))
    if not found:
        return None
    cuda, source, lower = max(found, key=lambda item: (item[0], not item[2]))
    if base is not None and cuda > base:
        source += f"; newer than its base's CUDA {base} ({said}), which the gate keeps"
    return cuda, source, lower


def _gate_source(
    env: Mapping[str, str], image_env: Mapping[str, str], where: str, image: object
) -> str:
    if REQUIRE_ENV in env:
        return f"env of {where}"
    if image_env:
        return f"image {str(image).strip()}"
    return f"env of {where}"
