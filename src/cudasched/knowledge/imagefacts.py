"""An image's facts as the cluster keeps them: one ``ImageFacts`` object
(``cudasched.io/v1alpha1``, cluster-scoped) per image digest, so that every webhook replica and
every command run with ``--live`` finds what one of them read, after any restart, and a person
can read it and correct it with kubectl (``docs/design.md``, "Facts shared, not recomputed").

The object's ``status`` is what cudasched read (written by its service account only): the
digest, the platform, the references it was read as (the newest first), the config's CUDA facts
(the ``NVIDIA_REQUIRE_*``/``CUDA_VERSION`` env, ``NV_CUDA_COMPAT_PACKAGE``, the CUDA labels:
never the rest of the env, which may hold credentials) and what its SBOM and layers carry. Its
``spec.override`` is a person's: ``cuda`` (and ``reason``) wins over what was read.

Pure: dicts in, :class:`StoredFacts` and configs out; the ``kube`` edge reads and writes the
objects (:mod:`cudasched.kube.imagefacts`), the registry edge decides when
(:mod:`cudasched.registry.factstore`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from cudasched.knowledge.imageconfig import (
    COMPAT_PACKAGE_ENV,
    CONFIG_CUDA_LABELS,
    ConfigSource,
    Correction,
    ImageConfig,
    config_cuda,
)
from cudasched.knowledge.imagecontents import CompatNote, ContentFact, ImageContents
from cudasched.vocab.errors import InputError
from cudasched.vocab.kinds import IMAGE_FACTS
from cudasched.vocab.requirecuda import is_gate_env
from cudasched.vocab.versions import CudaVersion, parse_cuda

__all__ = [
    "MAX_REFERENCES",
    "FactIndex",
    "StoredFacts",
    "StoredSource",
    "facts_name",
    "facts_object",
    "facts_status",
    "read_facts",
    "with_facts",
]

#: The references an object keeps (the newest first): enough for the tags one digest is
#: pushed as, bounded so that a moving tag's history cannot grow an object.
MAX_REFERENCES = 16
#: The contents' facts and notes an object keeps (an image with more runtimes than this is
#: answered by the rule over all of them; the object shows the first ones).
MAX_FACTS = 64
MAX_NOTES = 16

_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")


def facts_name(digest: str) -> str:
    """The object's name for an image digest: ``sha256-<hex>`` (a DNS subdomain)."""
    m = _DIGEST.fullmatch(digest)
    if m is None:
        raise InputError(f"invalid image digest {digest!r}: expected sha256: and 64 hex digits")
    return f"sha256-{m.group(1)}"


def facts_object(digest: str) -> dict[str, Any]:
    """A new object for ``digest``, without status (the status subresource is written apart)."""
    return {
        "apiVersion": IMAGE_FACTS.api_version,
        "kind": IMAGE_FACTS.kind,
        "metadata": {
            "name": facts_name(digest),
            "labels": {"app.kubernetes.io/managed-by": "cudasched"},
        },
        "spec": {},
    }


def _kept_env(config: ImageConfig) -> dict[str, str]:
    return {k: v for k, v in config.env.items() if is_gate_env(k) or k == COMPAT_PACKAGE_ENV}


def facts_status(config: ImageConfig, references: Iterable[str], observed: str) -> dict[str, Any]:
    """The ``status`` cudasched writes for a config it read (``references``: the newest
    first; ``observed``: an RFC 3339 time)."""
    refs = list(dict.fromkeys(r for r in references if r))[:MAX_REFERENCES]
    cuda, said = config_cuda(config)
    status: dict[str, Any] = {
        "digest": config.digest,
        "platform": config.platform,
        "image": refs[0] if refs else config.image,
        "references": refs or [config.image],
        "observedTime": observed,
        "config": {
            "cuda": str(cuda) if cuda is not None else None,
            "from": said or None,
            "env": _kept_env(config),
            "labels": {k: v for k, v in config.labels.items() if k in CONFIG_CUDA_LABELS},
            "mirror": config.mirror or None,
        },
    }
    if config.contents is not None:
        doc = config.contents.to_dict()
        doc["facts"] = [f.to_dict() for f in config.contents.facts[:MAX_FACTS]]
        doc["notes"] = list(config.contents.notes[:MAX_NOTES])
        status["contents"] = doc
    kept: dict[str, Any] = _without_nulls(status)
    return kept


def _without_nulls(value: Any) -> Any:
    """``value`` without ``None`` members (a structural schema types every field it keeps)."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class StoredFacts:
    """What one object says: its ``name``, the image ``digest`` and ``platform``, the
    ``references`` it was read as (the newest first), the config as read (its CUDA env and
    labels, and ``contents`` when its layers were read; with the ``correction`` in it), a
    person's ``correction``, and when it was ``observed``. ``config`` is ``None`` for an object
    with neither status nor override."""

    name: str
    digest: str
    platform: str = ""
    references: tuple[str, ...] = ()
    config: ImageConfig | None = None
    correction: Correction | None = None
    observed: str = ""

    @property
    def contents(self) -> ImageContents | None:
        return self.config.contents if self.config is not None else None


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _strings(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in _map(value).items() if isinstance(v, str)}


def _cuda(value: Any) -> CudaVersion | None:
    if not isinstance(value, str):
        return None
    try:
        return parse_cuda(value)
    except InputError:
        return None


def read_facts(obj: Mapping[str, Any]) -> StoredFacts | None:
    """The facts of one object, or ``None`` when it is not one cudasched can read (a name
    that is no digest's; a field of the wrong type is read as absent, never raised)."""
    name = _map(obj.get("metadata")).get("name")
    if not isinstance(name, str) or not name.startswith("sha256-"):
        return None
    digest = "sha256:" + name.removeprefix("sha256-")
    if _DIGEST.fullmatch(digest) is None:
        return None
    status, spec = _map(obj.get("status")), _map(obj.get("spec"))
    refs = tuple(r for r in status.get("references") or () if isinstance(r, str))
    config = None
    if status:
        first = refs[0] if refs else str(status.get("image") or "")
        read = _map(status.get("config"))
        config = ImageConfig(
            first,
            digest=digest,
            platform=str(status.get("platform") or ""),
            env=_strings(read.get("env")),
            labels=_strings(read.get("labels")),
            mirror=str(read.get("mirror") or ""),
            contents=_contents(_map(status.get("contents")), first, digest),
        )
    correction = _correction(name, _map(spec.get("override")))
    if correction is not None:
        # An object a person made with only an override still answers for its digest.
        made = config if config is not None else ImageConfig("", digest=digest)
        config = replace(made, correction=correction)
    return StoredFacts(
        name,
        digest,
        platform=str(status.get("platform") or ""),
        references=refs,
        config=config,
        correction=correction,
        observed=str(status.get("observedTime") or ""),
    )


def _correction(name: str, override: Mapping[str, Any]) -> Correction | None:
    cuda = _cuda(override.get("cuda"))
    if cuda is None:
        return None
    reason = override.get("reason")
    why = f": {reason}" if isinstance(reason, str) and reason.strip() else ""
    return Correction(cuda, f"override in ImageFacts {name} (CUDA {cuda}{why})")


def _contents(doc: Mapping[str, Any], image: str, digest: str) -> ImageContents | None:
    """The stored contents (as :meth:`ImageContents.to_dict` wrote them), or ``None``."""
    if not doc:
        return None
    facts = []
    for item in doc.get("facts") or ():
        fact = _map(item)
        cuda = _cuda(fact.get("cuda"))
        if cuda is None:
            continue
        facts.append(
            ContentFact(
                str(fact.get("kind") or ""),
                str(fact.get("what") or ""),
                cuda,
                str(fact.get("layer") or ""),
                str(fact.get("path") or ""),
                str(fact.get("why") or ""),
                floor=fact.get("floor") is True,
            )
        )
    return ImageContents(
        image,
        digest,
        facts=tuple(facts),
        compat=_compat(_map(doc.get("compat"))),
        cuda=_cuda(doc.get("cuda")),
        lower_bound=doc.get("lowerBound") is True,
        rule=str(doc.get("rule") or ""),
        unknown=str(doc.get("unknown") or ""),
        notes=tuple(str(n) for n in doc.get("notes") or () if isinstance(n, str)),
        stopped=str(doc.get("stopped") or ""),
        sbom=doc.get("sbom") is True,
        layers_read=_int(doc.get("layersRead")),
        layers_total=_int(doc.get("layersTotal")),
        bytes_read=_int(doc.get("bytesRead")),
    )


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _ints(value: Any) -> tuple[int, ...]:
    return tuple(v for v in value or () if isinstance(v, int) and not isinstance(v, bool))


def _compat(doc: Mapping[str, Any]) -> CompatNote | None:
    if not doc:
        return None
    form = doc.get("format")
    return CompatNote(
        cuda=_cuda(doc.get("cuda")),
        driver_branches=_ints(doc.get("driverBranches")),
        devices=_ints(doc.get("devices")),
        format=form if isinstance(form, int) and not isinstance(form, bool) else None,
        compat_driver=str(doc.get("compatDriver") or ""),
        layer=str(doc.get("layer") or ""),
        path=str(doc.get("path") or ""),
        has_note=doc.get("note") is not False,
    )


def with_facts(config: ImageConfig, stored: StoredFacts) -> ImageConfig:
    """A config read from its registry with what the cluster keeps for its digest: the
    contents another replica read (when this config has none) and a person's correction."""
    if not config.ok or config.digest != stored.digest:
        return config
    contents = config.contents if config.contents is not None else stored.contents
    if contents is not None and contents.image != config.image:
        contents = replace(contents, image=config.image)
    return replace(config, contents=contents, correction=stored.correction)


class FactIndex:
    """Stored facts by digest, and by the references they were read as (the most recently
    observed object wins a reference two digests share: a tag that moved)."""

    def __init__(self, stored: Iterable[StoredFacts]) -> None:
        self.by_digest: dict[str, StoredFacts] = {}
        self.by_reference: dict[str, StoredFacts] = {}
        for facts in sorted(stored, key=lambda f: f.observed):
            self.by_digest[facts.digest] = facts
            for ref in facts.references:
                self.by_reference[ref] = facts

    @classmethod
    def from_objects(cls, objects: Iterable[Mapping[str, Any]]) -> FactIndex:
        return cls(f for f in (read_facts(o) for o in objects) if f is not None)

    def __len__(self) -> int:
        return len(self.by_digest)

    def lookup(self, image: str) -> StoredFacts | None:
        """The facts of ``image``: by the digest it names, else by a reference it was read as."""
        _, _, digest = image.partition("@")
        found = self.by_digest.get(digest) if digest else None
        return found if found is not None else self.by_reference.get(image)


class StoredSource:
    """A :class:`~cudasched.knowledge.imageconfig.ConfigSource` over the cluster's stored
    facts (the commands with ``--live``): ``fallback`` (the registries, with
    ``--resolve-images``) is asked first and its answer completed with the stored facts of its
    digest; without it, or where it fails, the stored config of the reference answers."""

    def __init__(self, index: FactIndex, fallback: ConfigSource | None = None) -> None:
        self.index = index
        self.fallback = fallback

    def config_for(self, image: str) -> ImageConfig | None:
        read = self.fallback.config_for(image) if self.fallback is not None else None
        if read is not None and read.ok:
            stored = self.index.by_digest.get(read.digest)
            return with_facts(read, stored) if stored is not None else read
        found = self.index.lookup(image)
        if found is None or found.config is None:
            return read
        return replace(found.config, image=image)
