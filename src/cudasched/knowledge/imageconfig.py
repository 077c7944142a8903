"""What an image's own config says about its CUDA (the config blob its registry serves).

CUDA base images set ``ENV NVIDIA_REQUIRE_CUDA`` and ``CUDA_VERSION`` (and ``NV_CUDA_*``) in the
image config; images built on them inherit the env. The registry client
(:mod:`cudasched.registry`) reads the config of the manifest for a node's platform; this module
only interprets it, so resolution (:mod:`cudasched.workloads.resolution`) stays pure: it asks a
:class:`ConfigSource` (an edge object: the CLI's pre-resolved map, the webhook's background
resolver) and reads the answer with :func:`config_cuda`.

Reading order, most precise first: ``CUDA_VERSION`` (the toolkit the image was built with,
patch included), the floor of ``NVIDIA_REQUIRE_CUDA`` (what the container toolkit enforces),
then the image's labels ``cudasched.io/cuda-version`` (an image author's own declaration) and
``com.nvidia.cuda.version`` (NGC images). When ``CUDA_VERSION`` and the gate's floor disagree,
the stricter wins.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from cudasched.knowledge.imagecontents import ImageContents
from cudasched.vocab.errors import InputError
from cudasched.vocab.requirecuda import LEGACY_ENV, REQUIRE_ENV, gate_from_env, is_gate_env
from cudasched.vocab.versions import CudaVersion, parse_cuda

__all__ = [
    "COMPAT_PACKAGE_ENV",
    "CONFIG_CUDA_LABELS",
    "ConfigSource",
    "Correction",
    "ImageConfig",
    "PullScope",
    "RememberedSource",
    "ScopedSource",
    "config_cuda",
    "gate_env",
]

#: Image labels that name the CUDA toolkit, in the order they are trusted.
CONFIG_CUDA_LABELS = ("cudasched.io/cuda-version", "com.nvidia.cuda.version")

#: The env a ``nvidia/cuda`` base image names its compat package in (``cuda-compat-12-4``),
#: gitlab.com/nvidia/container-images/cuda ``dist/<release>/ubuntu*/base/Dockerfile``.
COMPAT_PACKAGE_ENV = "NV_CUDA_COMPAT_PACKAGE"


@dataclass(frozen=True, slots=True)
class Correction:
    """A person's correction of what an image needs (an ImageFacts object's
    ``spec.override``): it wins over the config and the contents; ``source`` says where it
    was made and why."""

    cuda: CudaVersion
    source: str


@dataclass(frozen=True, slots=True)
class ImageConfig:
    """One image's config as its registry served it for one platform, or why it could not
    be read (``error``, with ``env`` and ``labels`` empty). ``digest`` is the platform
    manifest's digest (what a node pulls); ``env`` and ``labels`` are the config's
    ``config.Env`` (split at the first ``=``) and ``config.Labels``; ``mirror`` the
    repository it was read from when a mirror served it (``imageMirrors``); ``error_kind``
    the closed word for a failure (``unauthorized``, ``not-found``, ``timeout``, ...: the
    registry client's error kinds), which decides whether credentials could change it.
    ``contents`` is what the image's SBOM and layers were found to carry, when they were read
    (:mod:`cudasched.knowledge.imagecontents`); ``None`` when they were not. ``correction``
    is a person's override of the answer, shared with the image's facts
    (:mod:`cudasched.knowledge.imagefacts`)."""

    image: str
    digest: str = ""
    platform: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    error: str = ""
    mirror: str = ""
    error_kind: str = ""
    contents: ImageContents | None = None
    correction: Correction | None = None

    @property
    def ok(self) -> bool:
        return not self.error

    def size(self) -> int:
        """Roughly the bytes it holds (caches bound themselves with it)."""
        text = sum(len(k) + len(v) for k, v in self.env.items())
        text += sum(len(k) + len(v) for k, v in self.labels.items())
        read = self.contents.size() if self.contents is not None else 0
        fixed = 100 + len(self.correction.source) if self.correction is not None else 0
        return (
            (200 + len(self.image) + len(self.digest) + len(self.error) + len(self.mirror) + text)
            + read
            + fixed
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "image": self.image,
            "digest": self.digest or None,
            "platform": self.platform or None,
            "env": dict(self.env),
            "labels": dict(self.labels),
            "error": self.error or None,
            "mirror": self.mirror or None,
            "contents": self.contents.to_dict() if self.contents is not None else None,
            "override": (
                {"cuda": str(self.correction.cuda), "source": self.correction.source}
                if self.correction is not None
                else None
            ),
        }


class ConfigSource(Protocol):
    """Where resolution finds an image's config: ``None`` when it is not known (yet)."""

    def config_for(self, image: str) -> ImageConfig | None: ...


@dataclass(frozen=True, slots=True)
class PullScope:
    """Whose pull credentials a look-up for one workload may use, as the kubelet would: the
    Secrets the workload names in ``imagePullSecrets`` (``secrets``), or when it names none
    those of its ServiceAccount (``service_account``), always in its own ``namespace``."""

    namespace: str
    secrets: tuple[str, ...] = ()
    service_account: str = "default"


@runtime_checkable
class ScopedSource(Protocol):
    """A :class:`ConfigSource` that can look up with one workload's pull credentials (the
    webhook's resolver with ``imageResolver.pullSecrets`` on)."""

    def for_scope(self, scope: PullScope) -> ConfigSource: ...


def gate_env(config: ImageConfig) -> dict[str, str]:
    """The config's env the container toolkit's gate reads (``NVIDIA_REQUIRE_*``,
    ``NVIDIA_DISABLE_REQUIRE``, ``CUDA_VERSION``)."""
    return {k: v for k, v in config.env.items() if is_gate_env(k)}


def config_cuda(config: ImageConfig) -> tuple[CudaVersion | None, str]:
    """The CUDA the config names and which variable or label said so (``""`` when none).
    A value that does not parse is ignored here (the gate reports a bad gate value)."""
    found: list[tuple[CudaVersion, str]] = []
    legacy = config.env.get(LEGACY_ENV)
    if legacy:
        with contextlib.suppress(InputError):
            found.append((parse_cuda(legacy.strip()), f"{LEGACY_ENV}={legacy.strip()}"))
    require = config.env.get(REQUIRE_ENV)
    if require:
        try:
            gate = gate_from_env({REQUIRE_ENV: require}, "")
        except InputError:
            gate = None
        floor = gate.cuda_floor() if gate is not None else None
        if floor is not None:
            found.append((floor, f"{REQUIRE_ENV} {require.split()[0]}"))
    if found:
        return max(found, key=lambda pair: pair[0])
    for key in CONFIG_CUDA_LABELS:
        value = config.labels.get(key)
        if value:
            try:
                return parse_cuda(_short_version(value.strip())), f"label {key}={value.strip()}"
            except InputError:
                continue
    return None, ""


def _short_version(text: str) -> str:
    """``12.4.1.003`` (NGC's label) as ``12.4.1``."""
    parts = text.split(".")
    return ".".join(parts[:3])


class RememberedSource:
    """A :class:`ConfigSource` whose answers are kept for one decision: each image is asked of
    the source once, however often resolution looks (the webhook's resolver may wait a small
    budget for a resolution in flight; a decision must not wait twice)."""

    __slots__ = ("_seen", "_source")

    def __init__(self, source: ConfigSource) -> None:
        self._source = source
        self._seen: dict[str, ImageConfig | None] = {}

    def config_for(self, image: str) -> ImageConfig | None:
        if image not in self._seen:
            self._seen[image] = self._source.config_for(image)
        return self._seen[image]
