"""Framework specs (``torch 2.5.1+cu124``, ``tensorflow 2.15.0``, ``vllm 0.9.0``) and the CUDA
build each one names.

:func:`parse_framework_spec` reads the text people write in annotations and on the command line;
:class:`FrameworkCatalog` answers it from the releases recorded in ``frameworks.yaml`` (a wheel's
CUDA variant, PyPI's default variant, TensorFlow's tested build, vLLM's default build).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from cudasched.knowledge.records import FrameworkRelease, Status, TorchRelease, TorchVariant
from cudasched.vocab.errors import InputError
from cudasched.vocab.requirements import FrameworkBuild
from cudasched.vocab.versions import parse_cuda

__all__ = [
    "FrameworkCatalog",
    "FrameworkSpec",
    "is_cuda_wheel_tag",
    "parse_framework_spec",
    "release_series",
]

_FRAMEWORK_ALIASES = MappingProxyType(
    {
        "torch": "torch",
        "pytorch": "torch",
        "tensorflow": "tensorflow",
        "tensorflow-gpu": "tensorflow",
        "tensorflow-cuda": "tensorflow",
        "tf": "tensorflow",
        "vllm": "vllm",
    }
)
_SPEC_RE = re.compile(
    r"^\s*(?P<name>[A-Za-z][A-Za-z0-9_-]*)\s*(?:==|=|@|\s)\s*v?"
    r"(?P<version>\d+(?:\.\d+){0,3}(?:(?:a|b|rc)\d+|\.dev\d+|\.post\d+)?)"
    r"(?:\+(?P<local>[A-Za-z0-9_.]+))?"
    r"(?:\s+(?P<tag>cu\d{2,4}|cpu))?\s*$"
)
_CUDA_WHEEL_TAG_RE = re.compile(r"^cu\d{2,4}$")
_SPEC_FORMS = "'torch 2.5.1+cu124', 'torch==2.5.1+cu124', 'tensorflow 2.15.0' or 'vllm 0.9.0'"


def is_cuda_wheel_tag(tag: str) -> bool:
    """Whether a wheel's local version tag names a CUDA build (``cu124``, not ``cpu``)."""
    return bool(_CUDA_WHEEL_TAG_RE.match(tag))


def release_series(version: str) -> str:
    """``2.5.1`` -> ``2.5``; pre-release suffixes belong to the series (``2.10.0a0`` -> 2.10)."""
    parts = re.match(r"^(\d+)(?:\.(\d+))?", version)
    assert parts is not None  # the spec regex guarantees leading digits
    return f"{parts.group(1)}.{parts.group(2) or 0}"


@dataclass(frozen=True, slots=True)
class FrameworkSpec:
    """A parsed spec: the framework's canonical name (``torch``, ``tensorflow``, ``vllm``), its
    version and the lower-cased variant tag (``cu124``, ``cpu``) when one was given."""

    text: str
    name: str
    version: str
    local: str | None


def parse_framework_spec(spec: object) -> FrameworkSpec:
    """Read ``torch 2.5.1+cu124``, ``torch==2.5.1+cu124``, ``pytorch 2.5.1 cu124``,
    ``tensorflow 2.15.0`` or ``vllm 0.9.0``; anything else raises :class:`InputError`."""
    if not isinstance(spec, str):
        raise InputError(f"invalid framework spec {spec!r}: expected text such as {_SPEC_FORMS}")
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
    return FrameworkSpec(spec, name, m.group("version"), (local or tag or "").lower() or None)


@dataclass(frozen=True, slots=True)
class FrameworkCatalog:
    """The framework releases of ``frameworks.yaml``, indexed: PyTorch by series (``2.5``),
    TensorFlow and vLLM by full release (``2.15.0``)."""

    torch: Mapping[str, TorchRelease]
    tensorflow: Mapping[str, FrameworkRelease]
    vllm: Mapping[str, FrameworkRelease]

    def build(self, spec: str) -> FrameworkBuild | None:
        """The build a spec names and the CUDA it was built with (see
        :meth:`cudasched.knowledge.KnowledgeBase.framework`)."""
        parsed = parse_framework_spec(spec)
        if parsed.name == "torch":
            return self._torch_build(parsed)
        if parsed.name == "tensorflow":
            return self._tensorflow_build(parsed)
        return self._vllm_build(parsed)

    def _torch_build(self, spec: FrameworkSpec) -> FrameworkBuild | None:
        version, local = spec.version, spec.local
        series = release_series(version)
        release = self.torch.get(series)
        shown = f"{version}+{local}" if local else version
        if local is not None and not is_cuda_wheel_tag(local):
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
                    f"invalid framework spec {spec.text!r}: torch {series} was not published as "
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

    def _tensorflow_build(self, spec: FrameworkSpec) -> FrameworkBuild | None:
        version = spec.version
        if spec.local is not None:
            raise InputError(
                f"invalid framework spec {spec.text!r}: TensorFlow wheels carry no CUDA variant "
                "tag; write e.g. 'tensorflow 2.15.0'"
            )
        row = self.tensorflow.get(version)
        how = "tested build configuration"
        if row is None:
            series = release_series(version)
            same = [r for r in self.tensorflow.values() if release_series(r.release) == series]
            if len(same) != 1:
                return None
            row = same[0]
            how = f"tested build configuration of {row.release} (same {series} series)"
        return FrameworkBuild("tensorflow", version, row.cuda, source=f"{row.source} ({how})")

    def _vllm_build(self, spec: FrameworkSpec) -> FrameworkBuild | None:
        version, local = spec.version, spec.local
        row = self.vllm.get(version)
        shown = f"{version}+{local}" if local else version
        if local is not None and not is_cuda_wheel_tag(local):
            raise InputError(
                f"invalid framework spec {spec.text!r}: vLLM variant tags are cuXYZ such as +cu118"
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
                    f"invalid framework spec {spec.text!r}: vllm {version} builds are {listed}"
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


def _torch_framework_build(
    release: TorchRelease, variant: TorchVariant, shown: str, *, default: bool
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
