"""The CUDA toolkit a container image was built with, read from its name and tag.

A serving runtime rarely says which CUDA it needs, but its image usually does: NGC images are
tagged by monthly release (``nvcr.io/nvidia/tritonserver:24.05-py3``), ``nvidia/cuda`` and
``pytorch/pytorch`` put the toolkit in the tag, vLLM images name a vLLM release. The built-in
table (``data/images.yaml``) holds those tag conventions; the facts behind them (NGC release ->
CUDA, vLLM release -> CUDA) belong to the knowledge base, so this module only parses names.
A deployment adds its own images as glob overrides, which win over the built-in table.

``NVIDIA_REQUIRE_CUDA`` is the other place a CUDA floor is written down: the NVIDIA container
toolkit refuses to start a container whose constraint the host driver does not meet.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from importlib import resources
from typing import Any, Protocol

import yaml

from cudasched.errors import InputError, KnowledgeError
from cudasched.requirements import FrameworkBuild
from cudasched.versions import ComputeCapability, CudaVersion, parse_cuda

__all__ = [
    "ImageMatch",
    "ImageRef",
    "ImageRule",
    "ImageTable",
    "OverrideRule",
    "ReleaseFacts",
    "parse_image_ref",
    "parse_require_cuda",
]

_CUDA_FROM = frozenset({"tag", "ngc", "framework", "unknown"})
_DIGEST_RE = re.compile(r"^[A-Za-z][A-Za-z0-9]*(?:[+._-][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}$")
_TAG_RE = re.compile(r"^[\w][\w.-]{0,127}$")
_PATH_RE = re.compile(
    r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$"
)
_REQUIRE_TERM_RE = re.compile(r"^cuda\s*(>=|==|=|>)\s*(.*)$", re.IGNORECASE)
_REQUIRE_VERSION_RE = re.compile(r"^\d{1,2}(?:\.\d{1,2}(?:\.\d{1,4})?)?\Z", re.ASCII)


class ReleaseFacts(Protocol):
    """The part of ``cudasched.knowledge.KnowledgeBase`` the image table needs."""

    def ngc_release(self, product: str, release: str) -> Any: ...

    def framework(self, spec: str) -> Any: ...


@dataclass(frozen=True, slots=True)
class ImageRef:
    """A parsed image reference. ``host`` is ``None`` for Docker Hub short names."""

    host: str | None
    path: str
    tag: str | None
    digest: str | None

    @property
    def repository(self) -> str:
        return f"{self.host}/{self.path}" if self.host else self.path


@dataclass(frozen=True, slots=True)
class ImageMatch:
    """The CUDA an image was built with and the fact that says so. When the knowledge base
    knows more about the build, ``min_compute`` (an NGC release's lowest supported GPU) and
    ``framework`` (a framework build with its kernel list) come along."""

    cuda: CudaVersion
    source: str
    min_compute: ComputeCapability | None = None
    framework: FrameworkBuild | None = None


@dataclass(frozen=True, slots=True)
class ImageRule:
    """One row of the built-in table (see ``data/images.yaml`` for the field meanings)."""

    id: str
    repositories: tuple[str, ...]
    tag: re.Pattern[str]
    cuda_from: str
    source: str
    product: str | None = None
    framework: str | None = None
    main_variants: tuple[str, ...] | None = None
    note: str = ""

    def matches(self, ref: ImageRef) -> re.Match[str] | None:
        if ref.tag is None or not any(_path_ends_with(ref.path, r) for r in self.repositories):
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


def _without_digest(image: str) -> str:
    return image.split("@", 1)[0]


def parse_image_ref(image: str) -> ImageRef:
    """Split ``[host[:port]/]path[:tag][@digest]`` the way container runtimes do: the first
    path component is a registry host when it contains ``.`` or ``:`` or is ``localhost``."""
    if not isinstance(image, str) or not image.strip():
        raise InputError(f"invalid image {image!r}: expected a container image reference")
    text = image.strip()
    digest = None
    if "@" in text:
        text, digest = text.split("@", 1)
        if not _DIGEST_RE.match(digest):
            raise InputError(
                f"invalid image {image!r}: expected a digest such as @sha256:<64 hex digits>"
            )
    tag = None
    slash = text.rfind("/")
    colon = text.rfind(":")
    if colon > slash:
        text, tag = text[:colon], text[colon + 1 :]
        if not _TAG_RE.match(tag):
            raise InputError(f"invalid image {image!r}: the tag {tag!r} is not a valid tag")
    host = None
    first, _, rest = text.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        host, text = first.lower(), rest
    if not text or not _PATH_RE.match(text):
        raise InputError(
            f"invalid image {image!r}: expected lowercase repository path components "
            "such as nvcr.io/nvidia/tritonserver"
        )
    return ImageRef(host=host, path=text, tag=tag, digest=digest)


def _compile_rule(entry: object, index: int) -> ImageRule:
    if not isinstance(entry, Mapping):
        raise KnowledgeError(f"images.yaml entry {index} is not a mapping")
    rule_id = str(entry.get("id") or f"#{index}")
    cuda_from = entry.get("cuda_from")
    repos = entry.get("repositories")
    if cuda_from not in _CUDA_FROM:
        raise KnowledgeError(f"images.yaml {rule_id}: cuda_from {cuda_from!r} not in {_CUDA_FROM}")
    if not isinstance(repos, list) or not repos or not all(isinstance(r, str) for r in repos):
        raise KnowledgeError(f"images.yaml {rule_id}: repositories must be a list of strings")
    try:
        tag = re.compile(str(entry.get("tag") or ""))
    except re.error as exc:
        raise KnowledgeError(f"images.yaml {rule_id}: bad tag pattern: {exc}") from None
    needed = {"tag": "cuda", "ngc": "release", "framework": "version"}.get(cuda_from)
    if needed and needed not in tag.groupindex:
        raise KnowledgeError(f"images.yaml {rule_id}: tag pattern lacks group {needed!r}")
    if cuda_from == "ngc" and not entry.get("product"):
        raise KnowledgeError(f"images.yaml {rule_id}: ngc rules need a product")
    if cuda_from == "framework" and not entry.get("framework"):
        raise KnowledgeError(f"images.yaml {rule_id}: framework rules need a framework")
    if not entry.get("source"):
        raise KnowledgeError(f"images.yaml {rule_id}: every rule needs a source")
    variants = entry.get("main_variants")
    if variants is not None:
        if not isinstance(variants, list) or not all(isinstance(v, str) for v in variants):
            raise KnowledgeError(f"images.yaml {rule_id}: main_variants must be a list of strings")
        if "variant" not in tag.groupindex:
            raise KnowledgeError(f"images.yaml {rule_id}: main_variants needs a `variant` group")
        variants = tuple(variants)
    return ImageRule(
        id=rule_id,
        repositories=tuple(r.strip("/").lower() for r in repos),
        tag=tag,
        cuda_from=str(cuda_from),
        source=" ".join(str(entry["source"]).split()),
        product=str(entry["product"]) if entry.get("product") else None,
        framework=str(entry["framework"]) if entry.get("framework") else None,
        main_variants=variants,
        note=" ".join(str(entry.get("note") or "").split()),
    )


def _override(entry: object, index: int) -> OverrideRule:
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
        cuda = parse_cuda(cuda_value)  # type: ignore[arg-type]
    except InputError as exc:
        raise InputError(f"invalid image override {pattern!r}: {exc}") from None
    source = entry.get("source") or f"image override {pattern}"
    return OverrideRule(pattern=pattern.strip(), cuda=cuda, source=str(source))


@dataclass(frozen=True, slots=True)
class ImageTable:
    """Overrides (first match wins) in front of the built-in rules (first match wins).

    ``kb`` is the knowledge base that turns NGC and framework releases into CUDA versions; it
    can also be passed per call. Without one, those rules find the image but answer ``None``.
    """

    rules: tuple[ImageRule, ...] = ()
    overrides: tuple[OverrideRule, ...] = ()
    kb: ReleaseFacts | None = field(default=None, compare=False)

    @classmethod
    def builtin(cls, kb: ReleaseFacts | None = None) -> ImageTable:
        """The table shipped in ``cudasched/data/images.yaml`` (read on every call; callers
        build it once and pass it around)."""
        text = resources.files("cudasched").joinpath("data/images.yaml").read_text("utf-8")
        return cls.from_data(yaml.safe_load(text), kb=kb)

    @classmethod
    def from_data(cls, data: object, kb: ReleaseFacts | None = None) -> ImageTable:
        if not isinstance(data, Mapping) or not isinstance(data.get("images"), list):
            raise KnowledgeError("images.yaml must be a mapping with an `images` list")
        rules = tuple(_compile_rule(e, i) for i, e in enumerate(data["images"]))
        return cls(rules=rules, kb=kb)

    @classmethod
    def from_config(cls, config: object, kb: ReleaseFacts | None = None) -> ImageTable:
        """The built-in table with a webhook configuration's ``image_overrides`` in front
        (any object with that attribute; entries are mappings or objects with ``pattern`` and
        ``cuda``). Pass ``kb``, or NGC and vLLM images cannot be answered."""
        return cls.builtin(kb=kb).with_overrides(getattr(config, "image_overrides", ()) or ())

    def with_overrides(self, entries: Iterable[Mapping[str, Any]]) -> ImageTable:
        """A copy whose overrides are ``entries`` (in order) in front of the existing ones."""
        if isinstance(entries, Mapping | str):
            raise InputError("invalid image overrides: expected a list of {pattern, cuda}")
        new = tuple(_override(e, i) for i, e in enumerate(entries))
        return ImageTable(rules=self.rules, overrides=new + self.overrides, kb=self.kb)

    def rule_for(self, image: str) -> tuple[ImageRule, re.Match[str]] | None:
        """The built-in rule that recognises ``image`` (even one that cannot answer)."""
        ref = parse_image_ref(image)
        for rule in self.rules:
            if (m := rule.matches(ref)) is not None:
                return rule, m
        return None

    def cuda_for_image(self, image: str, kb: ReleaseFacts | None = None) -> ImageMatch | None:
        """The CUDA ``image`` was built with, or ``None`` when the table cannot tell.

        Raises :class:`InputError` for a string that is not an image reference.
        """
        ref = parse_image_ref(image)
        for override in self.overrides:
            if override.matches(image.strip(), ref):
                return ImageMatch(override.cuda, override.source)
        found = self.rule_for(image)
        if found is None:
            return None
        rule, m = found
        facts = kb if kb is not None else self.kb
        if rule.cuda_from == "tag":
            return ImageMatch(parse_cuda(m.group("cuda")), f"image table {rule.id}, tag {m.string}")
        if rule.cuda_from == "ngc" and facts is not None and rule.product:
            variant = (m.groupdict().get("variant")) or ""
            if rule.main_variants is not None and variant not in rule.main_variants:
                return None  # another build of that release: the notes do not cover it
            release = facts.ngc_release(rule.product, m.group("release"))
            return _from_fact(release, f"NGC {rule.product} {m.group('release')}")
        if rule.cuda_from == "framework" and facts is not None and rule.framework:
            build = facts.framework(f"{rule.framework} {m.group('version')}")
            return _from_fact(build, f"{rule.framework} {m.group('version')}")
        return None


def _from_fact(fact: object, what: str) -> ImageMatch | None:
    """Knowledge-base entries carry ``cuda`` (None when unknown) and ``source``."""
    if fact is None:
        return None
    cuda = getattr(fact, "cuda", None)
    if cuda is None:
        return None
    source = getattr(fact, "source", "") or ""
    min_compute = getattr(fact, "min_compute", None)
    return ImageMatch(
        parse_cuda(cuda),
        f"{what}: {source}" if source else what,
        min_compute=min_compute if isinstance(min_compute, ComputeCapability) else None,
        framework=fact if isinstance(fact, FrameworkBuild) else None,
    )


def parse_require_cuda(value: str | None) -> CudaVersion | None:
    """The CUDA floor in an ``NVIDIA_REQUIRE_CUDA`` value, or ``None`` if it states none.

    The NVIDIA container toolkit reads the value as space-separated alternatives, each a
    comma-separated list of conditions that must all hold, e.g.
    ``cuda>=12.4 brand=tesla,driver>=470,driver<471``: the host needs CUDA >= 12.4, or a Tesla
    driver of the 470 branch (forward compatibility). The floor is the ``cuda>=`` operand; if
    several alternatives give one, the lowest holds (any alternative suffices), and within one
    alternative the highest. ``cuda=X``/``cuda==X`` count as a floor of X; ``cuda>X`` is taken
    as the floor X (slightly permissive); upper bounds (``cuda<``) say nothing about a floor.
    Raises :class:`InputError` for a ``cuda`` condition whose operand is not a version.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise InputError(f"invalid NVIDIA_REQUIRE_CUDA {value!r}: expected a string")
    floors: list[CudaVersion] = []
    for alternative in value.split():
        best: CudaVersion | None = None
        for condition in alternative.split(","):
            condition = condition.strip()
            if not condition.lower().startswith("cuda"):
                continue
            m = _REQUIRE_TERM_RE.match(condition)
            if m is None:
                if re.match(r"^cuda\s*(<|<=|!=)", condition, re.IGNORECASE):
                    continue
                raise InputError(
                    f"invalid NVIDIA_REQUIRE_CUDA condition {condition!r}: expected "
                    "cuda>=MAJOR.MINOR such as cuda>=12.4"
                )
            operand = m.group(2).strip()
            if not _REQUIRE_VERSION_RE.match(operand):
                raise InputError(
                    f"invalid NVIDIA_REQUIRE_CUDA condition {condition!r}: the operand "
                    f"{operand!r} is not a CUDA version such as 12.4"
                )
            floor = parse_cuda(operand)
            best = floor if best is None or floor > best else best
        if best is not None:
            floors.append(best)
    return min(floors) if floors else None
