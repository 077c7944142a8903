"""A bundle checked and read into knowledge, or refused with the reason.

What ``cudasched knowledge verify`` reports and what any follower of a published bundle does
before it swaps one in, in this order, the first failure refusing the bundle whole
(:class:`~cudasched.knowledge.bundle.BundleError`, its ``reason`` a closed word):

1. the metadata: a schema this cudasched reads, the tables it knows (``schema``, ``format``;
   checked when the metadata is read, :class:`~cudasched.knowledge.bundle.BundleMeta`);
2. each table parses as one YAML mapping (``format``);
3. every row cites its source (``sources``, :mod:`cudasched.knowledge.citations`);
4. overlays merge (``overlay``, :mod:`cudasched.knowledge.overlay`);
5. the tables load: the knowledge base and the image table build from them with every check
   their loaders make (``content``).

Digests and signatures are checked where the bytes arrive (the registry pull, a bundle read
from disk), before any of this.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from cudasched.knowledge.base import KnowledgeBase
from cudasched.knowledge.bundle import Bundle, BundleError, BundleKind, builtin_bundle
from cudasched.knowledge.citations import unsourced_rows
from cudasched.knowledge.images import ImageTable
from cudasched.knowledge.loading import ParsedCache
from cudasched.knowledge.overlay import merge_overlay
from cudasched.knowledge.provenance import BUILT_IN, Provenance
from cudasched.vocab.errors import KnowledgeError

__all__ = [
    "BundleKnowledge",
    "Sourced",
    "builtin_knowledge",
    "builtin_source",
    "checked_tables",
    "knowledge_of",
]

#: Shown unsourced rows per refusal (the message stays a line a person reads).
_SHOWN = 5


@dataclass(frozen=True, slots=True)
class Sourced:
    """A bundle and where it was read (``origin``; ``digest``: the one it was pulled by)."""

    bundle: Bundle
    origin: str
    digest: str = ""

    @property
    def label(self) -> str:
        return f"bundle {self.bundle.meta.version} ({self.origin})"


@dataclass(frozen=True, slots=True)
class BundleKnowledge:
    """What a bundle (with its overlays) makes known: the knowledge base and the bundle's
    image table, before a deployment's ``imageOverrides`` and ``imageMirrors``."""

    kb: KnowledgeBase
    images: ImageTable

    @property
    def provenance(self) -> Provenance:
        return self.kb.provenance


def checked_tables(
    source: Sourced, cache: ParsedCache | None = None, *, kind: BundleKind | None = None
) -> dict[str, object]:
    """The bundle's tables parsed, every row citing its source (steps 2 and 3). ``kind``: the
    kind it must be. ``cache`` (an edge's) may hold the tables parsed already."""
    bundle = source.bundle
    if kind is not None and bundle.meta.kind is not kind:
        raise BundleError(
            "format", f"{source.label}: a {bundle.meta.kind.value}, expected a {kind.value}"
        )
    docs = cache.load(bundle.tables) if cache is not None else None
    if docs is None or set(docs) != set(bundle.tables):
        docs = bundle.documents()
        if cache is not None:
            cache.store(bundle.tables, docs)
    missing: list[str] = []
    for name, doc in docs.items():
        if not isinstance(doc, Mapping):
            raise BundleError("format", f"{source.label}: table {name} is not a mapping")
        missing.extend(f"{name} {row}" for row in unsourced_rows(name, doc))
    if missing:
        more = f" and {len(missing) - _SHOWN} more" if len(missing) > _SHOWN else ""
        raise BundleError(
            "sources",
            f"{source.label}: every fact must cite its source; no source: "
            f"{'; '.join(missing[:_SHOWN])}{more}",
        )
    return docs


def knowledge_of(
    base: Sourced,
    overlays: Sequence[Sourced] = (),
    cache: ParsedCache | None = None,
) -> BundleKnowledge:
    """The knowledge of ``base`` with ``overlays`` merged on top in order, every step above
    checked; a :class:`BundleError` says which step refused which bundle."""
    docs = checked_tables(base, cache, kind=BundleKind.BASE)
    for overlay in overlays:
        layer = checked_tables(overlay, cache, kind=BundleKind.OVERLAY)
        docs = merge_overlay(docs, layer, overlay.label)
    provenance = base.bundle.provenance(base.origin, base.digest)
    if overlays:
        said = tuple(f"{o.bundle.meta.version} ({o.origin})" for o in overlays)
        provenance = replace(provenance, overlays=said)
    return _loaded(docs, provenance, base.label)


def _loaded(docs: Mapping[str, object], provenance: Provenance, label: str) -> BundleKnowledge:
    try:
        kb = KnowledgeBase.from_documents(docs, provenance)
        images = ImageTable.from_data(docs["images.yaml"], kb=kb)
    except KnowledgeError as exc:
        raise BundleError("content", f"{label}: {exc}") from None
    return BundleKnowledge(kb, images)


def builtin_knowledge(cache: ParsedCache | None = None) -> BundleKnowledge:
    """The knowledge built into cudasched, read as every command reads it (through ``cache``);
    what is left when no followed bundle could be used."""
    kb = KnowledgeBase.load(cache)
    return BundleKnowledge(kb, ImageTable.builtin(kb))


def builtin_source() -> Sourced:
    """The built-in tables as a bundle to check, diff or export."""
    return Sourced(builtin_bundle(), BUILT_IN)
