"""The CUDA toolkit a container image was built with, read from its name and tag.

A serving runtime rarely says which CUDA it needs, but its image usually does: NGC images are
tagged by monthly release (``nvcr.io/nvidia/tritonserver:24.05-py3``), ``nvidia/cuda`` and
``pytorch/pytorch`` put the toolkit in the tag, vLLM images name a vLLM release. The built-in
table (``data/images.yaml``) holds those tag conventions; the facts behind them (NGC release ->
CUDA, vLLM release -> CUDA) belong to the knowledge base, so this module only parses names.
A deployment adds its own images as glob overrides, which win over the built-in table, and
its mirrors (a repository renamed on the way, ``alaudadockerhub/tritonserver``) as a mirror map.

The table also knows which images carry ``NVIDIA_REQUIRE_CUDA`` and with which alternatives
(images built on ``nvidia/cuda`` and NGC images; :mod:`cudasched.vocab.requirecuda`), and when it
cannot answer it says why (:meth:`ImageTable.lookup`), so the webhook can tell the user what
to label instead of passing a GPU pod silently.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from importlib import resources
from typing import Any, Protocol

import yaml

from cudasched.knowledge.imageconfig import (
    ConfigSource,
    ImageConfig,
    PullScope,
    RememberedSource,
    ScopedSource,
)
from cudasched.knowledge.imageref import ImageRef, parse_image_ref
from cudasched.knowledge.imagerules import (
    BaseGates,
    ImageRule,
    OverrideRule,
    VersionRange,
    compile_override,
    compile_rule,
    read_base_gates,
    release_line,
    version_key,
)
from cudasched.knowledge.mirrors import Mirror, parse_mirrors
from cudasched.vocab.errors import InputError, KnowledgeError
from cudasched.vocab.requirecuda import REQUIRE_ENV, Gate, gate_from_env, is_gate_env
from cudasched.vocab.requirements import FrameworkBuild, ToolkitMode
from cudasched.vocab.versions import ComputeCapability, CudaVersion, parse_cuda

__all__ = [
    "ImageLookup",
    "ImageMatch",
    "ImageTable",
    "ReleaseFacts",
    "parse_require_cuda",
    "unmirror",
]

_GATE_MEMO_LIMIT = 256
# Lookups remembered per image reference (pods repeat a few images); longer references, which
# only a request crafted to fill the memo would carry, are looked up every time.
_LOOKUP_MEMO_LIMIT = 1024
_LOOKUP_MEMO_MAX_CHARS = 512


class _Memo(Enum):
    """The memo's miss: an enum member, so that ``is`` narrows what a look-up returned."""

    UNSEEN = 0


_UNSEEN = _Memo.UNSEEN


class ReleaseFacts(Protocol):
    """The part of ``cudasched.knowledge.KnowledgeBase`` the image table needs."""

    def ngc_release(self, product: str, release: str) -> Any: ...

    def framework(self, spec: str) -> Any: ...

    def compat_driver_branch(self, cuda: CudaVersion) -> int | None: ...


@dataclass(frozen=True, slots=True)
class ImageMatch:
    """The CUDA an image was built with and the fact that says so. When the knowledge base
    knows more about the build, ``min_compute`` (an NGC release's lowest supported GPU) and
    ``framework`` (a framework build with its kernel list) come along. ``require_cuda`` is the
    ``NVIDIA_REQUIRE_CUDA`` value the image carries (None: not known to carry one);
    ``ships_cuda_compat`` whether it loads its compat libraries itself (None: not known);
    ``lower_bound`` that the CUDA is known only as a floor; ``bundled`` that it is the CUDA of
    libraries the image bundles above a runtime base of another CUDA (the image's own config
    names the base's; ``docs/guide/images.md``, "Base and bundled CUDA")."""

    cuda: CudaVersion
    source: str
    min_compute: ComputeCapability | None = None
    framework: FrameworkBuild | None = None
    require_cuda: str | None = None
    ships_cuda_compat: bool | None = None
    lower_bound: bool = False
    bundled: bool = False


@dataclass(frozen=True, slots=True)
class ImageLookup:
    """What the table says about an image: a match, or why there is none (``why``: the image
    is not in the table, or its family is but not the tag)."""

    image: str
    match: ImageMatch | None
    why: str = ""


def unmirror(ref: ImageRef, mirrors: Iterable[Mirror]) -> ImageRef:
    """``ref`` with a mirrored repository replaced by the canonical path the rules know: the
    first mirror that covers it wins (:class:`~cudasched.knowledge.mirrors.Mirror`). Pure; the
    registry host is dropped, as rules ignore it anyway."""
    for mirror in mirrors:
        path = mirror.rename(ref.host, ref.path)
        if path is not None:
            return ImageRef(host=None, path=path, tag=ref.tag, digest=ref.digest)
    return ref


@dataclass(frozen=True, slots=True)
class ImageTable:
    """Overrides (first match wins) in front of the built-in rules (first that answers wins).

    ``kb`` is the knowledge base that turns NGC and framework releases into CUDA versions; it
    can also be passed per call. Without one, those rules find the image but answer ``None``.
    ``mirrors`` rename mirrored repositories before the rules are tried (:func:`unmirror`).
    ``toolkit`` is the mode the cluster's container toolkit starts containers in, which
    decides whether an image's gate is checked and when its compat libraries are used (it
    goes into every requirement resolved through this table).
    """

    rules: tuple[ImageRule, ...] = ()
    overrides: tuple[OverrideRule, ...] = ()
    kb: ReleaseFacts | None = field(default=None, compare=False)
    mirrors: tuple[Mirror, ...] = ()
    base_gates: BaseGates = field(default_factory=BaseGates)
    # Gates parsed per distinct container environment (replicas repeat a few), bounded.
    _gates: dict[frozenset[tuple[str, str]], Gate | None] = field(
        default_factory=dict, compare=False, repr=False
    )
    # Answers of :meth:`lookup` with the table's own ``kb``, bounded. Not an init field, so a
    # copy made by ``with_overrides`` or ``with_mirrors`` (other answers) starts empty.
    _lookups: dict[str, ImageLookup] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )
    # Answers of :meth:`rule_for`, the same way.
    _recognised: dict[str, tuple[ImageRule, re.Match[str]] | None] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )
    # Images' own configs, read from their registries by an edge (the CLI's --resolve-images,
    # the webhook's resolver); trusted before the rules (imageconfig.py).
    configs: ConfigSource | None = field(default=None, compare=False, repr=False)
    toolkit: ToolkitMode = ToolkitMode.LEGACY

    def with_toolkit(self, mode: ToolkitMode) -> ImageTable:
        """A copy whose requirements are for containers the toolkit starts in ``mode``."""
        return self if mode is self.toolkit else replace(self, toolkit=mode)

    def with_configs(self, source: ConfigSource | None) -> ImageTable:
        """A copy that asks ``source`` for an image's config before its rules."""
        return replace(self, configs=source)

    def per_request(self, scope: PullScope | None = None) -> ImageTable:
        """This table for one decision: each image's config asked of the source once, with
        the workload's pull credentials (``scope``) when the source can use them."""
        if self.configs is None or isinstance(self.configs, RememberedSource):
            return self
        source: ConfigSource = self.configs
        if scope is not None and isinstance(source, ScopedSource):
            source = source.for_scope(scope)
        table = replace(self, configs=RememberedSource(source))
        # :meth:`lookup` and :meth:`rule_for` do not read the configs: the copy shares this
        # table's answers.
        object.__setattr__(table, "_lookups", self._lookups)
        object.__setattr__(table, "_recognised", self._recognised)
        return table

    def config_for(self, image: str) -> ImageConfig | None:
        """The image's config from the source, or ``None`` (no source, or not known)."""
        return self.configs.config_for(image.strip()) if self.configs is not None else None

    def gate_for(self, env: Mapping[str, str], source: str) -> Gate | None:
        """:func:`cudasched.vocab.requirecuda.gate_from_env`, remembered per environment (the
        ``source`` of a remembered gate is the first caller's)."""
        key = frozenset((k, v) for k, v in env.items() if is_gate_env(k))
        if key in self._gates:
            found = self._gates[key]
            if found is None or found.source == source:
                return found  # gates are immutable: the remembered one serves as it is
            return replace(found, source=source)
        gate = gate_from_env(dict(key), source)
        if len(self._gates) >= _GATE_MEMO_LIMIT:
            self._gates.clear()
        self._gates[key] = gate
        return gate

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
        rules = tuple(compile_rule(e, i) for i, e in enumerate(data["images"]))
        try:
            mirrors = parse_mirrors(data.get("mirrors"), "images.yaml mirrors")
        except InputError as exc:
            raise KnowledgeError(str(exc)) from None
        return cls(
            rules=rules,
            kb=kb,
            mirrors=mirrors,
            base_gates=read_base_gates(data.get("cuda_base_gates")),
        )

    @classmethod
    def from_config(
        cls, config: object, kb: ReleaseFacts | None = None, base: ImageTable | None = None
    ) -> ImageTable:
        """The built-in table (or ``base``: a knowledge bundle's) with a webhook
        configuration's ``image_overrides`` in front and its ``image_mirrors`` (a mapping)
        before the table's own, for its ``toolkit_mode`` (any object with those attributes;
        override entries are mappings or objects with ``pattern`` and ``cuda``). Pass ``kb``,
        or NGC and vLLM images cannot be answered."""
        table = base if base is not None else cls.builtin(kb=kb)
        table = table.with_overrides(getattr(config, "image_overrides", ()) or ())
        table = table.with_mirrors(getattr(config, "image_mirrors", None) or {})
        mode = getattr(config, "toolkit_mode", None)
        return table.with_toolkit(mode) if isinstance(mode, ToolkitMode) else table

    def with_overrides(self, entries: Iterable[Mapping[str, Any]]) -> ImageTable:
        """A copy whose overrides are ``entries`` (in order) in front of the existing ones."""
        if isinstance(entries, Mapping | str):
            raise InputError("invalid image overrides: expected a list of {pattern, cuda}")
        new = tuple(compile_override(e, i) for i, e in enumerate(entries))
        return replace(self, overrides=new + self.overrides)

    def with_mirrors(self, entries: Mapping[str, str]) -> ImageTable:
        """A copy with ``entries`` ({mirror: canonical}, :mod:`cudasched.knowledge.mirrors`)
        tried before its mirrors."""
        return replace(self, mirrors=parse_mirrors(entries, "image mirrors") + self.mirrors)

    def rule_for(self, image: str) -> tuple[ImageRule, re.Match[str]] | None:
        """The first built-in rule that recognises ``image`` (even one that cannot answer)."""
        memo = len(image) <= _LOOKUP_MEMO_MAX_CHARS
        known = self._recognised.get(image, _UNSEEN) if memo else _UNSEEN
        if known is not _UNSEEN:
            return known
        found = self._rules_for(parse_image_ref(image))
        first = found[0] if found else None
        if memo:
            if len(self._recognised) >= _LOOKUP_MEMO_LIMIT:
                self._recognised.clear()
            self._recognised[image] = first
        return first

    def _rules_for(self, ref: ImageRef) -> list[tuple[ImageRule, re.Match[str]]]:
        ref = unmirror(ref, self.mirrors)
        return [(rule, m) for rule in self.rules if (m := rule.matches(ref)) is not None]

    def cuda_for_image(self, image: str, kb: ReleaseFacts | None = None) -> ImageMatch | None:
        """The CUDA ``image`` was built with, or ``None`` when the table cannot tell.

        Raises :class:`InputError` for a string that is not an image reference.
        """
        return self.lookup(image, kb).match

    def lookup(self, image: str, kb: ReleaseFacts | None = None) -> ImageLookup:
        """What the table knows of ``image``: its CUDA (with the fact that says so, and the
        ``NVIDIA_REQUIRE_CUDA`` it carries), or why it cannot tell. Raises
        :class:`InputError` for a string that is not an image reference. Answers with the
        table's own knowledge base are remembered (the table never changes)."""
        if (kb is not None and kb is not self.kb) or len(image) > _LOOKUP_MEMO_MAX_CHARS:
            return self._lookup(image, kb)
        found = self._lookups.get(image)
        if found is None:
            found = self._lookup(image, kb)
            if len(self._lookups) >= _LOOKUP_MEMO_LIMIT:
                self._lookups.clear()
            self._lookups[image] = found
        return found

    def _lookup(self, image: str, kb: ReleaseFacts | None) -> ImageLookup:
        ref = parse_image_ref(image)
        text = image.strip()
        for override in self.overrides:
            if override.matches(text, ref):
                return ImageLookup(text, ImageMatch(override.cuda, override.source))
        facts = kb if kb is not None else self.kb
        found = self._rules_for(ref)
        answers = (a for r, m in found if (a := self._answer(r, m, facts)) is not None)
        if any(_names_line(rule, m) for rule, m in found):
            # A moving tag: every rule's answer counts, and the newest CUDA is the safe one.
            match = max(answers, key=lambda a: (a.cuda, a.lower_bound), default=None)
        else:
            match = next(answers, None)  # the first rule that answers
        if match is not None:
            return ImageLookup(text, match)
        if not found:
            why = f"image {text} is not in the image table"
            return ImageLookup(text, None, why)
        rule = found[0][0]
        detail = f" ({rule.note})" if rule.note else ""
        why = (
            f"image {text} is {rule.repositories[0]} (image table {rule.id}), but the table does "
            f"not record which CUDA tag {ref.tag or '(none)'} carries{detail}"
        )
        return ImageLookup(text, None, why)

    def _answer(
        self, rule: ImageRule, m: re.Match[str], facts: ReleaseFacts | None
    ) -> ImageMatch | None:
        fact: Any = None
        if rule.cuda_from == "tag":
            cuda = parse_cuda(m.group("cuda"))
            match: ImageMatch | None = ImageMatch(cuda, f"image table {rule.id}, tag {m.string}")
        elif rule.cuda_from == "ngc" and facts is not None and rule.product:
            variant = (m.groupdict().get("variant")) or ""
            if rule.main_variants is not None and variant not in rule.main_variants:
                return None  # another build of that release: the notes do not cover it
            fact = facts.ngc_release(rule.product, m.group("release"))
            match = _from_fact(fact, f"NGC {rule.product} {m.group('release')}")
        elif rule.cuda_from == "framework" and facts is not None and rule.framework:
            build = facts.framework(f"{rule.framework} {m.group('version')}")
            match = _from_fact(build, f"{rule.framework} {m.group('version')}")
        elif rule.cuda_from == "versions":
            entry, moving = _version_entry(rule, m.group("version"))
            if entry is None:
                return None
            bound = " (at least)" if entry.lower_bound else ""
            match = ImageMatch(
                entry.cuda,
                f"image table {rule.id}, tag {m.string}: CUDA {entry.cuda}{bound}; {moving}"
                f"{entry.source}",
                lower_bound=entry.lower_bound,
            )
        else:
            return None
        if match is None:
            return None
        return replace(
            match,
            require_cuda=self._require_cuda(rule, match, fact),
            ships_cuda_compat=rule.ships_cuda_compat,
            bundled=rule.bundled,
        )

    def _require_cuda(self, rule: ImageRule, match: ImageMatch, fact: Any) -> str | None:
        """The ``NVIDIA_REQUIRE_CUDA`` value the image carries, per the rule's ``gate``
        (``fact``: the NGC release, whose notes name the older branches it runs on)."""
        if rule.gate == "nvidia-cuda":
            return self.base_gates.value(match.cuda, exact=not match.lower_bound)
        if rule.gate == "ngc":
            floor = f"cuda>={match.cuda.major}.{match.cuda.minor}"
            branches = getattr(fact, "fc_branches", None) or ()
            alts = [
                f"brand={brand},driver>={_semver_text(d)},driver<{d.major + 1}"
                for d in branches
                for brand in ("tesla", "nvidia")
            ]
            return " ".join([floor, *alts])
        return None


def _names_line(rule: ImageRule, m: re.Match[str]) -> bool:
    """Whether ``rule`` reads a release line (a moving tag such as TGI's ``3.3``) from ``m``."""
    return rule.moving_lines and release_line(m.group("version")) is not None


def _version_entry(rule: ImageRule, text: str) -> tuple[VersionRange | None, str]:
    """The range of a ``versions`` rule that answers the tag's version ``text``, and a note
    for the answer's source. A release (``3.3.7``) is answered by the range holding it. On a
    row whose project publishes moving line tags (``moving_lines``), a release line (``3.3``)
    is answered by the newest CUDA of any range that meets the line, since the tag may point at
    any of its releases and moves on to the newest."""
    line = release_line(text) if rule.moving_lines else None
    if line is None:
        version = version_key(text)
        return next((v for v in rule.versions if version and v.holds(version)), None), ""
    met = [v for v in rule.versions if v.meets_line(line)]
    if not met:
        return None, ""
    entry = max(met, key=lambda v: (v.cuda, v.lower_bound))  # "at least" where it may move on
    return entry, f"tag {text} moves to the newest {text}.x release, so the line's newest CUDA; "


def _semver_text(driver: Any) -> str:
    """A driver version as a semantic version (no leading zeros): 470.57 -> 470.57."""
    parts = [driver.major, driver.minor] + ([driver.revision] if driver.revision else [])
    return ".".join(str(p) for p in parts)


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
    """The CUDA floor of an ``NVIDIA_REQUIRE_CUDA`` value, as the NVIDIA container toolkit reads
    it (:mod:`cudasched.vocab.requirecuda`): over the alternatives that bound ``cuda`` from below,
    the lowest bound (any alternative suffices; ``cuda>12.1`` is 12.2, ``cuda>=12.4.1`` is 12.5 as a
    host CUDA is X.Y.0). ``None`` when it states none (empty, brand/driver alternatives only,
    upper bounds, properties the toolkit does not know such as ``CUDA``). Raises
    :class:`InputError` for a value the toolkit would reject."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InputError(f"invalid {REQUIRE_ENV} {value!r}: expected a string")
    gate = gate_from_env({REQUIRE_ENV: value}, "")
    return gate.cuda_floor() if gate is not None else None
