"""What a workload's GPU container says about its CUDA requirement, the third source of
:mod:`cudasched.workloads.sources`: its ``NVIDIA_REQUIRE_CUDA`` env, then its image (the image's
own config when it was read from its registry, else the image table), and the NVIDIA container
toolkit's gate the container starts under. The env comes first because a pod-level value
replaces the image's own and is exactly what the toolkit enforces when the container starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cudasched.knowledge.imageconfig import config_cuda, gate_env
from cudasched.knowledge.images import ImageTable, ReleaseFacts, parse_require_cuda
from cudasched.vocab.errors import InputError
from cudasched.vocab.requirecuda import REQUIRE_ENV, Gate
from cudasched.vocab.requirements import FrameworkBuild
from cudasched.vocab.versions import ComputeCapability, CudaVersion

__all__ = [
    "ContainerFacts",
    "from_container",
]


@dataclass(frozen=True, slots=True)
class ContainerFacts:
    """What the GPU container says: a CUDA (from its ``NVIDIA_REQUIRE_CUDA`` env or its image),
    the container toolkit's gate it starts under, and why there is no CUDA when there is none."""

    cuda: CudaVersion | None = None
    min_compute: ComputeCapability | None = None
    framework: FrameworkBuild | None = None
    source: str = ""
    gate: Gate | None = None
    ships_cuda_compat: bool | None = None
    lower_bound: bool = False
    why_unknown: str = ""


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


def from_container(
    container: Mapping[str, Any] | None, images: ImageTable, kb: ReleaseFacts | None
) -> ContainerFacts:
    if container is None:
        return ContainerFacts()
    name = str(container.get("name") or "?")
    env = _literal_env(container, name)
    lookup = None
    image = container.get("image")
    if isinstance(image, str) and image.strip():
        try:
            lookup = images.lookup(image, kb=kb)
        except InputError:
            # The API server does not validate image references; one we cannot parse is
            # simply not a well-known image (the kubelet will report it at pull time).
            lookup = None
    match = lookup.match if lookup is not None else None
    config = images.config_for(lookup.image) if lookup is not None else None
    if config is not None and not config.ok:
        config = None  # not read: the table decides (and an unknown says why)
    # The container's env replaces the image's variable of the same name (Kubernetes env
    # over image ENV), which is what the toolkit reads when the container starts. The image's
    # own config, when read from its registry, is the image's env; the table's value is what
    # the table knows of it.
    if config is not None:
        image_env = gate_env(config)
    else:
        image_env = {REQUIRE_ENV: match.require_cuda} if match and match.require_cuda else {}
    where = f"container {name}"
    try:
        gate = images.gate_for({**image_env, **env}, _gate_source(env, image_env, where, image))
    except InputError as exc:
        raise InputError(f"invalid env of container {name}: {exc}") from None
    ships = match.ships_cuda_compat if match is not None else None
    floor = parse_require_cuda(env[REQUIRE_ENV]) if env.get(REQUIRE_ENV) else None
    if floor is not None:
        return ContainerFacts(
            floor, source=f"env {REQUIRE_ENV} of {where}", gate=gate, ships_cuda_compat=ships
        )
    if config is not None:
        cuda, said = config_cuda(config)
        if cuda is not None:
            return ContainerFacts(
                cuda,
                match.min_compute if match is not None and match.cuda == cuda else None,
                source=f"image config of {str(image).strip()} ({said}"
                + (f", read from mirror {config.mirror})" if config.mirror else ")"),
                gate=gate,
                ships_cuda_compat=ships,
            )
    if match is not None:
        return ContainerFacts(
            match.cuda.release,
            match.min_compute,
            match.framework,
            f"image {str(image).strip()}"
            + (
                " (at least this CUDA; its exact version is not recorded)"
                if match.lower_bound
                else ""
            ),
            gate=gate,
            ships_cuda_compat=ships,
            lower_bound=match.lower_bound,
        )
    why = lookup.why if lookup is not None else f"{where} names no image cudasched can read"
    if config is not None:
        why = f"the config of image {str(image).strip()} names no CUDA ({config.digest})"
    return ContainerFacts(gate=gate, why_unknown=why)


def _gate_source(
    env: Mapping[str, str], image_env: Mapping[str, str], where: str, image: object
) -> str:
    if REQUIRE_ENV in env:
        return f"env of {where}"
    if image_env:
        return f"image {str(image).strip()}"
    return f"env of {where}"
