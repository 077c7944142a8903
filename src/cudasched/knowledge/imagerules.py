"""The image table's rows: the built-in rules of ``data/images.yaml`` (which repositories,
which tag pattern, where the CUDA comes from: the tag, an NGC release, a framework build or a
list of version ranges; the ``NVIDIA_REQUIRE_CUDA`` the image carries), validated as they are
read, a deployment's own overrides (a glob and a CUDA), and the ``NVIDIA_REQUIRE_CUDA`` values
of ``nvidia/cuda`` base releases. :class:`cudasched.knowledge.images.ImageTable` asks them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from cudasched.knowledge.imageref import ImageRef
from cudasched.vocab.errors import InputError, KnowledgeError
from cudasched.vocab.versions import CudaVersion, parse_cuda

__all__ = [
    "BaseGates",
    "ImageRule",
    "OverrideRule",
    "VersionRange",
    "compile_override",
    "compile_rule",
    "read_base_gates",
    "release_line",
    "version_key",
]

_CUDA_FROM = frozenset({"tag", "ngc", "framework", "versions", "unknown"})
_GATES = frozenset({"nvidia-cuda", "ngc"})
_VERSION_RE = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?")
_LINE_RE = re.compile(r"^(\d+)\.(\d+)$")


@dataclass(frozen=True, slots=True)
class VersionRange:
    """One entry of a ``versions`` rule: releases ``first`` to ``last`` (inclusive; None open)."""

    first: tuple[int, ...]
    last: tuple[int, ...] | None
    cuda: CudaVersion
    source: str
    lower_bound: bool = False

    def holds(self, version: tuple[int, ...]) -> bool:
        return version >= self.first and (self.last is None or version <= self.last)

    def meets_line(self, line: tuple[int, int]) -> bool:
        """Whether some release of the ``major.minor`` line falls in this range."""
        return self.first[:2] <= line and (self.last is None or self.last[:2] >= line)


@dataclass(frozen=True, slots=True)
class ImageRule:
    """One row of the built-in table (see ``data/images.yaml`` for the field meanings)."""

    id: str
    repositories: tuple[str, ...]
    tag: re.Pattern[str]
    cuda_from: str
    source: str
    tags: str = ""
    product: str | None = None
    framework: str | None = None
    main_variants: tuple[str, ...] | None = None
    note: str = ""
    versions: tuple[VersionRange, ...] = ()
    gate: str | None = None
    ships_cuda_compat: bool | None = None
    bundled: bool = False
    moving_lines: bool = False

    def matches(self, ref: ImageRef) -> re.Match[str] | None:
        if ref.tag is None or not any(_path_matches(ref.path, r) for r in self.repositories):
            return None
        return self.tag.search(ref.tag)


@dataclass(frozen=True, slots=True)
class OverrideRule:
    """A deployment's own image: a glob over the whole reference and the CUDA it needs."""

    pattern: str
    cuda: CudaVersion
    source: str

    def matches(self, image: str, ref: ImageRef) -> bool:
        candidates = {image, _without_digest(image)}
        if ref.host in (None, "docker.io", "index.docker.io"):
            short = ref.path.removeprefix("library/")
            tail = f":{ref.tag}" if ref.tag else ""
            candidates |= {f"{ref.path}{tail}", f"{short}{tail}", f"docker.io/{ref.path}{tail}"}
        return any(fnmatchcase(c, self.pattern) for c in candidates)


def _path_ends_with(path: str, repository: str) -> bool:
    return path == repository or path.endswith("/" + repository)


def _path_matches(path: str, repository: str) -> bool:
    """:func:`_path_ends_with`, where a ``*`` segment of a rule's repository stands for any
    one segment (``nim/*/*`` is every NIM, ``nvcr.io/nim/meta/llama-3.1-8b-instruct``)."""
    if "*" not in repository:
        return _path_ends_with(path, repository)
    wanted = repository.split("/")
    have = path.split("/")
    if len(have) < len(wanted):
        return False
    tail = have[len(have) - len(wanted) :]
    return all(w == "*" or w == h for w, h in zip(wanted, tail, strict=True))


def _without_digest(image: str) -> str:
    return image.split("@", 1)[0]


def version_key(text: str) -> tuple[int, ...] | None:
    m = _VERSION_RE.match(text)
    if m is None:
        return None
    return tuple(int(p) for p in m.groups(default="0"))


def release_line(text: str) -> tuple[int, int] | None:
    """The ``(major, minor)`` of a version that names a release line (``3.3``) rather than a
    release (``3.3.7``), else None. Projects publish such tags as moving ones, each pointing at
    the newest release of its line (TGI's build workflow tags ``{{major}}.{{minor}}`` with
    docker/metadata-action's semver type), so the line's newest CUDA is what the tag needs."""
    m = _LINE_RE.match(text)
    return (int(m[1]), int(m[2])) if m else None


def _versions(entry: Mapping[str, Any], rule_id: str) -> tuple[VersionRange, ...]:
    raw = entry.get("versions")
    if not isinstance(raw, list) or not raw:
        raise KnowledgeError(f"images.yaml {rule_id}: versions rules need a `versions` list")
    out = []
    for i, v in enumerate(raw):
        where = f"images.yaml {rule_id} versions #{i}"
        if not isinstance(v, Mapping) or not v.get("source"):
            raise KnowledgeError(f"{where}: expected {{from, to, cuda, source}}")
        first = version_key(str(v.get("from")))
        last = version_key(str(v["to"])) if v.get("to") is not None else None
        if first is None or (v.get("to") is not None and last is None):
            raise KnowledgeError(f"{where}: from/to must be versions such as 0.15.0")
        try:
            cuda = parse_cuda(str(v.get("cuda")))
        except InputError as exc:
            raise KnowledgeError(f"{where}: {exc}") from None
        bound = v.get("bound", "exact")
        if bound not in ("exact", "lower"):
            raise KnowledgeError(f"{where}: bound must be exact or lower")
        out.append(
            VersionRange(first, last, cuda, " ".join(str(v["source"]).split()), bound == "lower")
        )
    return tuple(out)


def compile_rule(entry: object, index: int) -> ImageRule:
    """One images.yaml rule, checked field by field (a :class:`KnowledgeError` names the rule
    and the field)."""
    if not isinstance(entry, Mapping):
        raise KnowledgeError(f"images.yaml entry {index} is not a mapping")
    rule_id = str(entry.get("id") or f"#{index}")
    cuda_from = entry.get("cuda_from")
    repos = entry.get("repositories")
    if cuda_from not in _CUDA_FROM:
        raise KnowledgeError(f"images.yaml {rule_id}: cuda_from {cuda_from!r} not in {_CUDA_FROM}")
    if not isinstance(repos, list) or not repos or not all(isinstance(r, str) for r in repos):
        raise KnowledgeError(f"images.yaml {rule_id}: repositories must be a list of strings")
    tag = _rule_tag(entry, rule_id, str(cuda_from))
    variants = _main_variants(entry, rule_id, tag)
    return ImageRule(
        id=rule_id,
        repositories=tuple(r.strip("/").lower() for r in repos),
        tag=tag,
        cuda_from=str(cuda_from),
        source=" ".join(str(entry["source"]).split()),
        tags=" ".join(str(entry.get("tags") or "").split()),
        product=str(entry["product"]) if entry.get("product") else None,
        framework=str(entry["framework"]) if entry.get("framework") else None,
        main_variants=variants,
        note=" ".join(str(entry.get("note") or "").split()),
        versions=_versions(entry, rule_id) if cuda_from == "versions" else (),
        **_flags(entry, rule_id, str(cuda_from)),
    )


def _flags(entry: Mapping[str, Any], rule_id: str, cuda_from: str) -> dict[str, Any]:
    """The rule's optional fields about the image rather than its tag (``gate``,
    ``ships_cuda_compat``, ``cuda_of``, ``moving_lines``), checked, as ImageRule's keywords."""
    gate = entry.get("gate")
    if gate is not None and gate not in _GATES:
        raise KnowledgeError(f"images.yaml {rule_id}: gate {gate!r} not in {sorted(_GATES)}")
    ships = entry.get("ships_cuda_compat")
    if ships is not None and not isinstance(ships, bool):
        raise KnowledgeError(f"images.yaml {rule_id}: ships_cuda_compat must be true or false")
    moving = entry.get("moving_lines", False)
    if not isinstance(moving, bool) or (moving and cuda_from != "versions"):
        raise KnowledgeError(
            f"images.yaml {rule_id}: moving_lines must be true or false, and only on versions rules"
        )
    cuda_of = entry.get("cuda_of", "image")
    if cuda_of not in ("image", "bundled"):
        raise KnowledgeError(f"images.yaml {rule_id}: cuda_of must be image or bundled")
    return {
        "gate": gate,
        "ships_cuda_compat": ships,
        "bundled": cuda_of == "bundled",
        "moving_lines": moving,
    }


def _rule_tag(entry: Mapping[str, Any], rule_id: str, cuda_from: str) -> re.Pattern[str]:
    """The rule's tag pattern, with the group its ``cuda_from`` reads, and the fields that kind
    of rule needs (a product, a framework, a source for every rule)."""
    try:
        tag = re.compile(str(entry.get("tag") or ""))
    except re.error as exc:
        raise KnowledgeError(f"images.yaml {rule_id}: bad tag pattern: {exc}") from None
    needed = {"tag": "cuda", "ngc": "release", "framework": "version", "versions": "version"}.get(
        cuda_from
    )
    if needed and needed not in tag.groupindex:
        raise KnowledgeError(f"images.yaml {rule_id}: tag pattern lacks group {needed!r}")
    if cuda_from == "ngc" and not entry.get("product"):
        raise KnowledgeError(f"images.yaml {rule_id}: ngc rules need a product")
    if cuda_from == "framework" and not entry.get("framework"):
        raise KnowledgeError(f"images.yaml {rule_id}: framework rules need a framework")
    if not entry.get("source"):
        raise KnowledgeError(f"images.yaml {rule_id}: every rule needs a source")
    tags = entry.get("tags")
    if tags is not None and (not isinstance(tags, str) or not tags.strip()):
        raise KnowledgeError(f"images.yaml {rule_id}: tags must be the tags' form as text")
    return tag


def _main_variants(
    entry: Mapping[str, Any], rule_id: str, tag: re.Pattern[str]
) -> tuple[str, ...] | None:
    """The rule's main variants (read from the tag's ``variant`` group), if it names any."""
    variants = entry.get("main_variants")
    if variants is None:
        return None
    if not isinstance(variants, list) or not all(isinstance(v, str) for v in variants):
        raise KnowledgeError(f"images.yaml {rule_id}: main_variants must be a list of strings")
    if "variant" not in tag.groupindex:
        raise KnowledgeError(f"images.yaml {rule_id}: main_variants needs a `variant` group")
    return tuple(variants)


def compile_override(entry: object, index: int) -> OverrideRule:
    if not isinstance(entry, Mapping) and hasattr(entry, "pattern") and hasattr(entry, "cuda"):
        entry = {"pattern": entry.pattern, "cuda": entry.cuda}  # e.g. a pydantic config model
    if not isinstance(entry, Mapping):
        raise InputError(
            f"invalid image override #{index} {entry!r}: expected a mapping such as "
            '{pattern: "registry.example.com/team/llm:*", cuda: "12.4"}'
        )
    pattern = entry.get("pattern")
    if not isinstance(pattern, str) or not pattern.strip():
        raise InputError(
            f"invalid image override #{index}: pattern {pattern!r} must be a non-empty glob "
            "such as registry.example.com/team/llm:*"
        )
    cuda_value = entry.get("cuda")
    try:
        # Any value: parse_cuda refuses what is not a version text or number (VersionError).
        cuda = parse_cuda(cuda_value)  # type: ignore[arg-type]
    except InputError as exc:
        raise InputError(f"invalid image override {pattern!r}: {exc}") from None
    source = entry.get("source") or f"image override {pattern}"
    return OverrideRule(pattern=pattern.strip(), cuda=cuda, source=str(source))


@dataclass(frozen=True, slots=True)
class BaseGates:
    """The ``NVIDIA_REQUIRE_CUDA`` of ``nvidia/cuda`` base releases (``cuda_base_gates``)."""

    brands: tuple[str, ...] = ()
    releases: tuple[tuple[tuple[int, int, int], tuple[int, ...], str], ...] = ()

    def value(self, cuda: CudaVersion, exact: bool) -> str:
        """The value an image built on nvidia/cuda ``cuda`` carries; ``cuda>=X.Y`` alone when
        its release is not recorded (or only a floor is known)."""
        floor = f"cuda>={cuda.major}.{cuda.minor}"
        key = (cuda.major, cuda.minor, cuda.patch or 0)
        for release, branches, _source in self.releases:
            if exact and cuda.patch is not None and release == key:
                alts = [
                    f"brand={b},driver>={n},driver<{n + 1}" for n in branches for b in self.brands
                ]
                return " ".join([floor, *alts])
        return floor


def read_base_gates(data: object) -> BaseGates:
    if data is None:
        return BaseGates()
    if not isinstance(data, Mapping) or not isinstance(data.get("releases"), list):
        raise KnowledgeError("images.yaml cuda_base_gates: expected {brands, releases}")
    brands = tuple(str(b) for b in data.get("brands") or ())
    releases = []
    for r in data["releases"]:
        if not isinstance(r, Mapping) or not r.get("source"):
            raise KnowledgeError("images.yaml cuda_base_gates: every release needs a source")
        try:
            cuda = parse_cuda(str(r.get("cuda")))
        except InputError as exc:
            raise KnowledgeError(f"images.yaml cuda_base_gates: {exc}") from None
        branches = tuple(int(b) for b in r.get("branches") or ())
        releases.append(((cuda.major, cuda.minor, cuda.patch or 0), branches, str(r["source"])))
    return BaseGates(brands, tuple(releases))
