"""The knowledge as a bundle: every table the knowledge base and the image table load, with the
bundle's schema version, version and date, as one unit that can be published, pulled, pinned by
digest and verified apart from a cudasched release (docs/guide/knowledge.md).

A bundle is its metadata (:class:`BundleMeta`, the ``bundle.yaml`` of a bundle on disk) and the
bytes of each table, kept as written. Its identity is the digest of the OCI image manifest that
publishes it (:meth:`Bundle.manifest_bytes`): an artifact whose ``artifactType`` is
:data:`ARTIFACT_TYPE`, whose config blob is the metadata as canonical JSON
(:data:`CONFIG_TYPE`) and whose layers are the tables, one each (:data:`TABLE_TYPE`, titled with
the table's file name), as the OCI image spec 1.1 asks of artifacts that carry a config of
their own. The manifest is written the same way every time (sorted keys, no spaces), so a
bundle exported to a directory, pushed, pulled and exported again keeps its digest, and a
signature over that digest holds for each copy.

An overlay (:attr:`BundleKind.OVERLAY`) has the same shape with only some tables, holding the
rows a cluster owner adds (:mod:`cudasched.knowledge.overlay`). Pure: bytes in, bytes out; what
reads a directory or an archive is :mod:`cudasched.knowledge.bundlefiles`, what checks the
content :mod:`cudasched.knowledge.bundlecheck`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from enum import StrEnum
from typing import Any

import orjson

from cudasched.knowledge.loading import DATA_FILES, ParsedCache, read_data_bytes
from cudasched.knowledge.provenance import Provenance
from cudasched.vocab import inputfiles
from cudasched.vocab.errors import InputError, one_line, shown

__all__ = [
    "ARTIFACT_TYPE",
    "CONFIG_TYPE",
    "META_FILE",
    "OCI_MANIFEST",
    "SCHEMA_VERSION",
    "TABLES",
    "TABLE_LIMITS",
    "TABLE_TYPE",
    "TITLE",
    "ArtifactLayout",
    "Bundle",
    "BundleError",
    "BundleKind",
    "BundleMeta",
    "Descriptor",
    "assemble",
    "builtin_bundle",
    "read_layout",
]

#: The schema of the bundle format and of its tables this cudasched reads. A bundle of another
#: schema is refused whole: its tables may mean something else.
SCHEMA_VERSION = 1

#: Every table a bundle may carry, in the order a bundle lists them.
TABLES = (*DATA_FILES, "images.yaml")

#: A bundle's metadata file on disk.
META_FILE = "bundle.yaml"

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
#: The ``artifactType`` of a bundle's manifest.
ARTIFACT_TYPE = "application/vnd.cudasched.knowledge.v1"
#: The media type of its config blob: the metadata as canonical JSON.
CONFIG_TYPE = "application/vnd.cudasched.knowledge.config.v1+json"
#: The media type of each layer: one table, the YAML as written.
TABLE_TYPE = "application/vnd.cudasched.knowledge.table.v1+yaml"
#: The annotation that names a layer's table (the OCI pre-defined title annotation).
TITLE = "org.opencontainers.image.title"
_VERSION_ANNOTATION = "org.opencontainers.image.version"
_CREATED_ANNOTATION = "org.opencontainers.image.created"

#: How large one table may be.
TABLE_LIMITS = inputfiles.InputLimits(max_bytes=8 * inputfiles.MIB)
_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z._+-]{0,63}")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


class BundleError(InputError):
    """A bundle that cannot be used, and why. ``reason`` is a closed word for metrics and
    Events: ``format`` (not a bundle: a manifest, a metadata file or an archive that does not
    read), ``schema`` (another schema version, a table this cudasched does not know),
    ``digest`` (content that does not match its digest), ``signature`` (no valid signature
    from a trusted key), ``sources`` (a row that names no source), ``content`` (a table the
    knowledge base refuses), ``overlay`` (an overlay that cannot be merged)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class BundleKind(StrEnum):
    """A whole bundle (every table) or an overlay (rows on top of one)."""

    BASE = "KnowledgeBundle"
    OVERLAY = "KnowledgeOverlay"


@dataclass(frozen=True, slots=True)
class BundleMeta:
    """What a bundle says about itself: kind, schema version, version, the day its newest
    fact was read, its tables (in order) and a line of description."""

    kind: BundleKind
    version: str
    date: date
    tables: tuple[str, ...]
    schema: int = SCHEMA_VERSION
    description: str = ""

    def to_document(self) -> dict[str, Any]:
        """The metadata as ``bundle.yaml`` and the config blob hold it."""
        doc: dict[str, Any] = {
            "kind": self.kind.value,
            "schemaVersion": self.schema,
            "version": self.version,
            "date": self.date.isoformat(),
            "tables": list(self.tables),
        }
        if self.description:
            doc["description"] = self.description
        return doc

    @classmethod
    def from_document(cls, doc: object, label: str) -> BundleMeta:
        """Read and check a ``bundle.yaml`` or config blob (``label`` names it in errors)."""
        if not isinstance(doc, Mapping):
            raise BundleError("format", f"{label}: expected a mapping (kind, schemaVersion, ...)")
        unknown = sorted(
            set(doc) - {"kind", "schemaVersion", "version", "date", "tables", "description"}
        )
        if unknown:
            raise BundleError("format", f"{label}: unknown key {unknown[0]!r}")
        kind = _kind(doc.get("kind"), label)
        schema = doc.get("schemaVersion")
        if schema != SCHEMA_VERSION:
            raise BundleError(
                "schema",
                f"{label}: schemaVersion {shown(schema)}, but this cudasched reads bundles of "
                f"schema {SCHEMA_VERSION} (a newer cudasched, or a bundle published for it)",
            )
        return cls(
            kind=kind,
            version=_version(doc.get("version"), label),
            date=_date(doc.get("date"), label),
            tables=_tables(doc.get("tables"), kind, label),
            description=one_line(doc.get("description") or ""),
        )


def _kind(value: object, label: str) -> BundleKind:
    try:
        return BundleKind(str(value))
    except ValueError:
        raise BundleError(
            "format", f"{label}: kind {shown(value)}, expected KnowledgeBundle or KnowledgeOverlay"
        ) from None


def _version(value: object, label: str) -> str:
    text = value if isinstance(value, str) else ""
    if not _VERSION.fullmatch(text):
        raise BundleError(
            "format",
            f"{label}: version {shown(value)} is not a version (a quoted string of letters, "
            'digits and . _ + -, such as "2026.09.01")',
        )
    return text


def _date(value: object, label: str) -> date:
    if isinstance(value, date):
        return value
    if isinstance(value, str):
        try:
            return date.fromisoformat(value)
        except ValueError:
            pass
    raise BundleError("format", f'{label}: date {shown(value)} is not a day ("YYYY-MM-DD")')


def _tables(value: object, kind: BundleKind, label: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value) or not value:
        raise BundleError("format", f"{label}: tables must list the bundle's table files")
    unknown = [t for t in value if t not in TABLES]
    if unknown:
        raise BundleError(
            "schema",
            f"{label}: table {unknown[0]!r} is not one this cudasched reads ({', '.join(TABLES)})",
        )
    if len(set(value)) != len(value):
        raise BundleError("format", f"{label}: a table is listed twice")
    missing = [t for t in TABLES if t not in value]
    if kind is BundleKind.BASE and missing:
        raise BundleError(
            "schema", f"{label}: a KnowledgeBundle holds every table; {missing[0]} is missing"
        )
    return tuple(value)


@dataclass(frozen=True, slots=True)
class Descriptor:
    """An OCI content descriptor: what a manifest says of one blob."""

    media_type: str
    digest: str
    size: int
    title: str = ""

    def to_document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "mediaType": self.media_type,
            "digest": self.digest,
            "size": self.size,
        }
        if self.title:
            doc["annotations"] = {TITLE: self.title}
        return doc

    @classmethod
    def of(cls, media_type: str, body: bytes, title: str = "") -> Descriptor:
        return cls(media_type, "sha256:" + hashlib.sha256(body).hexdigest(), len(body), title)


@dataclass(frozen=True, slots=True)
class Bundle:
    """A bundle: its metadata and the bytes of every table it lists."""

    meta: BundleMeta
    tables: Mapping[str, bytes] = field(repr=False)

    def __post_init__(self) -> None:
        if tuple(self.tables) != self.meta.tables:
            listed, held = ", ".join(self.meta.tables), ", ".join(self.tables)
            raise BundleError("format", f"bundle lists {listed} but holds {held}")

    @property
    def is_overlay(self) -> bool:
        return self.meta.kind is BundleKind.OVERLAY

    def config_bytes(self) -> bytes:
        """The config blob: the metadata as canonical JSON."""
        return orjson.dumps(self.meta.to_document(), option=orjson.OPT_SORT_KEYS)

    def layers(self) -> tuple[Descriptor, ...]:
        return tuple(Descriptor.of(TABLE_TYPE, self.tables[n], n) for n in self.meta.tables)

    def manifest_bytes(self) -> bytes:
        """The OCI image manifest that publishes the bundle, canonical (sorted keys, compact)."""
        manifest = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": ARTIFACT_TYPE,
            "config": Descriptor.of(CONFIG_TYPE, self.config_bytes()).to_document(),
            "layers": [d.to_document() for d in self.layers()],
            "annotations": {
                _VERSION_ANNOTATION: self.meta.version,
                _CREATED_ANNOTATION: f"{self.meta.date.isoformat()}T00:00:00Z",
            },
        }
        return orjson.dumps(manifest, option=orjson.OPT_SORT_KEYS)

    @property
    def digest(self) -> str:
        """The bundle's identity: the digest of :meth:`manifest_bytes`."""
        return "sha256:" + hashlib.sha256(self.manifest_bytes()).hexdigest()

    def provenance(self, origin: str, digest: str = "") -> Provenance:
        """The bundle as its knowledge's provenance (``digest``: the one it was pulled by,
        else its own)."""
        return Provenance(self.meta.version, self.meta.date, digest or self.digest, origin)

    def documents(self) -> dict[str, object]:
        """Every table parsed (YAML as every input file is read: safe, bounded, duplicate keys
        refused), keyed by file name; a :class:`BundleError` (``format``) naming the table."""
        out: dict[str, object] = {}
        for name, raw in self.tables.items():
            if len(raw) > TABLE_LIMITS.max_bytes:
                raise BundleError(
                    "format", f"table {name}: larger than {TABLE_LIMITS.max_bytes} bytes"
                )
            try:
                docs = inputfiles.parse_yaml(inputfiles.decode(raw, name), name, TABLE_LIMITS)
            except InputError as exc:
                raise BundleError("format", f"table {exc}") from None
            if len(docs) != 1 or not isinstance(docs[0], Mapping):
                raise BundleError("format", f"table {name}: expected one YAML mapping")
            out[name] = docs[0]
        return out


@dataclass(frozen=True, slots=True)
class ArtifactLayout:
    """What a bundle's manifest names: its config blob and each table's layer, in order."""

    config: Descriptor
    layers: tuple[Descriptor, ...]


def read_layout(manifest: bytes, what: str) -> ArtifactLayout:
    """A pulled manifest read as a bundle's (``what`` names it in errors): an OCI image
    manifest with the bundle's ``artifactType``, its config and one titled table layer each;
    a :class:`BundleError` (``format``) for anything else, before any blob is fetched."""
    try:
        doc = orjson.loads(manifest)
    except orjson.JSONDecodeError:
        raise BundleError("format", f"{what}: the manifest is not JSON") from None
    if not isinstance(doc, Mapping) or doc.get("mediaType") != OCI_MANIFEST:
        raise BundleError("format", f"{what}: not an OCI image manifest")
    if doc.get("artifactType") != ARTIFACT_TYPE:
        raise BundleError(
            "format",
            f"{what}: artifactType {shown(doc.get('artifactType'))}, not a cudasched knowledge "
            f"bundle ({ARTIFACT_TYPE})",
        )
    config = _descriptor(doc.get("config"), f"{what} config")
    if config.media_type != CONFIG_TYPE:
        raise BundleError("format", f"{what}: config media type {config.media_type!r}")
    raw_layers = doc.get("layers")
    if not isinstance(raw_layers, list) or not raw_layers or len(raw_layers) > len(TABLES):
        raise BundleError("format", f"{what}: layers must list 1 to {len(TABLES)} tables")
    layers = tuple(_descriptor(d, f"{what} layer #{i}") for i, d in enumerate(raw_layers))
    for layer in layers:
        if layer.media_type != TABLE_TYPE or layer.title not in TABLES:
            raise BundleError(
                "format",
                f"{what}: layer {layer.digest} is not a table ({layer.title or 'untitled'})",
            )
    return ArtifactLayout(config, layers)


def _descriptor(value: object, what: str) -> Descriptor:
    if not isinstance(value, Mapping):
        raise BundleError("format", f"{what}: not a descriptor")
    media, digest, size = value.get("mediaType"), value.get("digest"), value.get("size")
    if not isinstance(media, str) or not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        raise BundleError("format", f"{what}: a descriptor needs a mediaType and a sha256 digest")
    if (
        not isinstance(size, int)
        or isinstance(size, bool)
        or not 0 <= size <= TABLE_LIMITS.max_bytes
    ):
        raise BundleError("format", f"{what}: size {shown(size)} out of range")
    annotations = value.get("annotations")
    title = annotations.get(TITLE, "") if isinstance(annotations, Mapping) else ""
    return Descriptor(media, digest, size, title if isinstance(title, str) else "")


def assemble(layout: ArtifactLayout, config: bytes, blobs: Mapping[str, bytes]) -> Bundle:
    """The bundle of a pulled manifest from its config blob and layer blobs (by digest; each
    already checked against its digest by whoever fetched it): the tables in the order the
    metadata lists them, which must be exactly the layers' titles."""
    try:
        meta_doc = orjson.loads(config)
    except orjson.JSONDecodeError:
        raise BundleError("format", "the bundle's config blob is not JSON") from None
    meta = BundleMeta.from_document(meta_doc, "the bundle's config")
    titles = [layer.title for layer in layout.layers]
    if sorted(titles) != sorted(meta.tables) or len(set(titles)) != len(titles):
        raise BundleError(
            "format",
            f"the manifest's layers ({', '.join(titles)}) are not the tables its config lists",
        )
    by_title = {layer.title: blobs[layer.digest] for layer in layout.layers}
    return Bundle(meta, {name: by_title[name] for name in meta.tables})


def builtin_bundle(cache: ParsedCache | None = None) -> Bundle:
    """The tables shipped in ``cudasched/data`` as a bundle (its ``bundle.yaml`` says its
    version and date); ``cache`` (an edge's) may hold ``bundle.yaml`` already parsed."""
    raw = read_data_bytes((META_FILE, *TABLES))
    meta = BundleMeta.from_document(
        _builtin_meta(raw[META_FILE], cache), f"cudasched/data/{META_FILE}"
    )
    return Bundle(meta, {name: raw[name] for name in meta.tables})


def _builtin_meta(raw: bytes, cache: ParsedCache | None) -> object:
    """``bundle.yaml``'s document, from ``cache`` when it holds these bytes: a command that
    finds the tables cached then reads no YAML and does not import the parser at all."""
    key = {META_FILE: raw}
    kept = cache.load(key) if cache is not None else None
    if kept is not None and META_FILE in kept:
        return kept[META_FILE]
    docs = inputfiles.parse_yaml(inputfiles.decode(raw, META_FILE), META_FILE, TABLE_LIMITS)
    doc = docs[0] if docs else None
    if cache is not None:
        cache.store(key, {META_FILE: doc})
    return doc
