"""What cudasched knows, as rows a person can read: the GPUs, the images, the CUDA toolkits, the
driver branches and the framework builds of the knowledge base and the image table, each with
its source. The first thing to check when a workload is not constrained: is its image (or its
GPU, its framework build) known at all?

Pure: the knowledge base and the image table in, :class:`Row` tuples out; ``cudasched
knowledge`` prints them as a table or JSON.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from cudasched.vocab.errors import InputError

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.knowledge.imagerules import ImageRule
    from cudasched.knowledge.images import ImageTable
    from cudasched.knowledge.records import ContainerRelease

__all__ = ["COLUMNS", "Row", "Topic", "rows"]


class Topic(StrEnum):
    GPUS = "gpus"
    IMAGES = "images"
    CUDA = "cuda"
    DRIVERS = "drivers"
    FRAMEWORKS = "frameworks"


@dataclass(frozen=True, slots=True)
class Row:
    """One fact: its fields (in :data:`COLUMNS` order) and where it comes from."""

    fields: Mapping[str, str]
    source: str

    def matches(self, needle: str) -> bool:
        """Whether a field (the facts, never the source: a link's "13" is not CUDA 13) has a
        word that starts with ``needle`` (case-insensitive; words are split at spaces, commas,
        slashes, colons, dashes and brackets, so ``13`` finds CUDA 13.0 but not 12.0.130, and
        ``tritonserver`` finds nvcr.io/nvidia/tritonserver). A needle that itself holds such a
        separator is looked for anywhere in the fields."""
        text = " ".join(self.fields.values()).lower()
        wanted = needle.strip().lower()
        if _WORDS.search(wanted):
            return wanted in text
        return any(word.startswith(wanted) for word in _WORDS.split(text) if word)

    def to_dict(self) -> dict[str, str]:
        return {**self.fields, "source": self.source}


_WORDS = re.compile(r"[\s,/:()\[\]_-]+")

#: The columns of each topic (the source is always the last one).
COLUMNS: Mapping[Topic, tuple[str, ...]] = {
    Topic.GPUS: ("product", "compute", "architecture", "datacenter", "firstDriver", "names"),
    Topic.IMAGES: ("id", "repositories", "tags", "cuda", "note"),
    Topic.CUDA: ("cuda", "release", "minDriver", "minorCompatFloor", "forwardCompatBranches"),
    Topic.DRIVERS: ("branch", "type", "endOfLife", "newestKnown", "status"),
    Topic.FRAMEWORKS: ("framework", "release", "cuda", "default"),
}


def _str_or_blank(value: object) -> str:
    """``str(value)`` for a table cell, ``""`` for ``None``."""
    return "" if value is None else str(value)


def _gpus(kb: KnowledgeBase) -> Iterator[Row]:
    for gpu in kb.gpus():
        yield Row(
            {
                "product": gpu.product,
                "compute": str(gpu.compute),
                "architecture": gpu.arch,
                "datacenter": "yes" if gpu.datacenter else "no",
                "firstDriver": _str_or_blank(gpu.first_driver),
                "names": ", ".join(gpu.names),
            },
            gpu.source,
        )


#: What the CUDA column says of a rule, by where its CUDA comes from (the rows below a ``ngc``
#: or ``versions`` rule give it release by release).
_CUDA_FROM = {
    "tag": "the CUDA in the tag",
    "ngc": "the NGC release's, per release below",
    "versions": "per release, below",
    "unknown": "unknown: not told by the tag",
}


def _images(images: ImageTable, kb: KnowledgeBase) -> Iterator[Row]:
    """The image table as tags and the CUDA they give: each rule with its tags as a person
    writes them (``<YY.MM>-py3``, ``v<release>``), then, release by release, the tags of an NGC
    product (consecutive releases on one CUDA together) or of a versions rule; never the
    regular expression a rule matches with, which only says it to whoever reads regexes."""
    for override in images.overrides:
        yield Row(
            {
                "id": "override",
                "repositories": override.pattern,
                "tags": "",
                "cuda": str(override.cuda),
                "note": "from the configuration's imageOverrides",
            },
            override.source,
        )
    for rule in images.rules:
        repositories = ", ".join(rule.repositories)
        cuda = _CUDA_FROM.get(rule.cuda_from, f"the framework table's {rule.framework} build")
        yield Row(
            {
                "id": rule.id,
                "repositories": repositories,
                "tags": rule.tags or rule.tag.pattern,
                "cuda": cuda,
                "note": " ".join(rule.note.split()),
            },
            " ".join(rule.source.split()),
        )
        if rule.cuda_from == "ngc" and rule.product is not None:
            yield from _ngc_rows(rule, repositories, rule.product, kb)
        # A versions rule's releases, one row each, with the source each was read from.
        for entry in rule.versions:
            first = _tag(rule, ".".join(str(p) for p in entry.first))
            last = _tag(rule, ".".join(str(p) for p in entry.last)) if entry.last else ""
            yield Row(
                {
                    "id": rule.id,
                    "repositories": repositories,
                    "tags": _span(first, last),
                    "cuda": f"at least {entry.cuda}" if entry.lower_bound else str(entry.cuda),
                    "note": "",
                },
                entry.source,
            )


def _span(first: str, last: str) -> str:
    """A versions rule's range of tags: one tag, ``A to B``, or ``A and later``."""
    if not last:
        return f"{first} and later"
    return first if first == last else f"{first} to {last}"


#: The placeholders of a rule's ``tags`` that one release fills in.
_RELEASE = ("<release>", "<YY.MM>")


def _tag(rule: ImageRule, release: str) -> str:
    """``release`` as the rule's tags spell it (``v<release>``: v0.6.3; ``<YY.MM>``: 24.04,
    as NGC writes a release that a versions rule holds as 24.4.0), or as it is."""
    for placeholder in _RELEASE:
        if placeholder in rule.tags:
            if placeholder == "<YY.MM>":
                year, month = [*release.split("."), "0"][:2]
                release = f"{int(year):02d}.{int(month):02d}"
            return rule.tags.replace(placeholder, release, 1)
    return release


def _ngc_rows(rule: ImageRule, repositories: str, product: str, kb: KnowledgeBase) -> Iterator[Row]:
    """An NGC product's releases as tags (``24.05-py3``) and CUDA, consecutive releases on one
    CUDA in one row."""
    runs: list[list[ContainerRelease]] = []
    for release in kb.ngc_releases(product):
        if runs and runs[-1][0].cuda_text == release.cuda_text:
            runs[-1].append(release)
        else:
            runs.append([release])
    for run in runs:
        first, last = run[0], run[-1]
        tags = _tag(rule, first.release)
        if last is not first:
            tags += f" to {_tag(rule, last.release)}"
        yield Row(
            {
                "id": rule.id,
                "repositories": repositories,
                "tags": tags,
                "cuda": first.cuda_text,
                "note": "",
            },
            first.source if last is first else f"{first.source}; {last.source}",
        )


def _cuda(kb: KnowledgeBase) -> Iterator[Row]:
    for toolkit in kb.toolkits():
        floor = kb.minor_compat_floor(toolkit.cuda.major)
        branches = sorted(kb.forward_compat_branches(toolkit.cuda))
        yield Row(
            {
                "cuda": str(toolkit.cuda),
                "release": toolkit.release or toolkit.kind.value,
                "minDriver": _str_or_blank(toolkit.min_driver) or toolkit.status.value,
                "minorCompatFloor": _str_or_blank(floor),
                "forwardCompatBranches": ", ".join(f"R{b}" for b in branches),
            },
            toolkit.source,
        )


def _drivers(kb: KnowledgeBase) -> Iterator[Row]:
    for branch in sorted(kb.driver_branches(), key=lambda b: b.branch, reverse=True):
        yield Row(
            {
                "branch": f"R{branch.branch}",
                "type": _str_or_blank(branch.type),
                "endOfLife": _str_or_blank(branch.eol),
                "newestKnown": _str_or_blank(kb.drivers.latest_release(branch.branch)),
                "status": branch.status.value,
            },
            branch.source,
        )


def _frameworks(kb: KnowledgeBase) -> Iterator[Row]:
    for name, release in kb.framework_releases():
        variants = getattr(release, "variants", None)
        if variants is not None:  # a PyTorch series: one wheel variant per CUDA
            default = getattr(release, "pypi_default", None)
            for tag, variant in sorted(variants.items()):
                yield Row(
                    {
                        "framework": name,
                        "release": f"{release.release} +{tag}",
                        "cuda": str(variant.cuda),
                        "default": "yes (PyPI)" if tag == default else "",
                    },
                    release.source,
                )
            continue
        cuda = getattr(release, "cuda", None)
        alternates = ", ".join(str(c) for c in getattr(release, "alternates", ()))
        yield Row(
            {
                "framework": name,
                "release": release.release,
                "cuda": _str_or_blank(cuda) + (f" (also {alternates})" if alternates else ""),
                "default": "yes",
            },
            release.source,
        )


def rows(
    topic: Topic | str, kb: KnowledgeBase, images: ImageTable, needle: str | None = None
) -> tuple[Row, ...]:
    """The rows of ``topic``, only those that mention ``needle`` when given."""
    try:
        chosen = topic if isinstance(topic, Topic) else Topic(str(topic).strip().lower())
    except ValueError:
        allowed = ", ".join(t.value for t in Topic)
        raise InputError(f"invalid topic {topic!r}: expected one of {allowed}") from None
    found = {
        Topic.GPUS: lambda: _gpus(kb),
        Topic.IMAGES: lambda: _images(images, kb),
        Topic.CUDA: lambda: _cuda(kb),
        Topic.DRIVERS: lambda: _drivers(kb),
        Topic.FRAMEWORKS: lambda: _frameworks(kb),
    }[chosen]()
    return tuple(r for r in found if needle is None or r.matches(needle))
