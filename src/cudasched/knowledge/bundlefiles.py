"""A bundle on disk: a directory, or the same files as one tar archive.

The directory is what a person keeps in git and edits (an overlay most of all)::

    bundle.yaml        kind, schemaVersion, version, date, tables (BundleMeta)
    drivers.yaml ...   each table the metadata lists, as written
    signatures.json    optional: the bundle's signatures ([{digest, keyId, algorithm,
                       signature}])

An archive (``.tar``, ``.tar.gz``, ``.tgz``) holds the same files at its top level: one file
to copy, attach or mount. Reading goes through :mod:`cudasched.vocab.inputfiles` like every
user file (regular files only, bounded); writing is the caller's (the command line writes
:func:`directory_files` or :func:`archive_bytes`). Both forms hold the tables' bytes as they
are, so the bundle's digest is the same in each.
"""

from __future__ import annotations

import gzip
import io
import tarfile
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson
import yaml

from cudasched.knowledge.bundle import (
    META_FILE,
    TABLE_LIMITS,
    Bundle,
    BundleError,
    BundleMeta,
)
from cudasched.knowledge.signing import Signature
from cudasched.vocab import inputfiles

__all__ = [
    "ARCHIVE_LIMITS",
    "SIGNATURES_FILE",
    "OnDisk",
    "archive_bytes",
    "directory_files",
    "is_archive_name",
    "meta_text",
    "read_bundle_path",
    "signatures_of",
]

SIGNATURES_FILE = "signatures.json"
#: How large a bundle archive may be.
ARCHIVE_LIMITS = inputfiles.InputLimits(max_bytes=64 * inputfiles.MIB)
_SMALL = inputfiles.InputLimits(max_bytes=inputfiles.MIB)
_ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")


@dataclass(frozen=True, slots=True)
class OnDisk:
    """A bundle read from disk, with the signatures kept beside it."""

    bundle: Bundle
    signatures: tuple[Signature, ...] = ()


def is_archive_name(path: Path) -> bool:
    """Whether ``path`` names an archive (else a directory is meant)."""
    return path.name.endswith(_ARCHIVE_SUFFIXES)


def read_bundle_path(path: Path) -> OnDisk:
    """The bundle in the directory or archive ``path``; a :class:`BundleError` (``format``)
    or an ``InputError`` naming the file that cannot be read."""
    if path.is_dir():
        return _from_files(str(path), lambda name: _read(path / name, f"{path}/{name}"))
    raw = inputfiles.read_bytes(path, str(path), ARCHIVE_LIMITS, expected="a bundle archive")
    files = _unpacked(raw, str(path))
    return _from_files(str(path), lambda name: files.get(name))


def _read(path: Path, label: str) -> bytes | None:
    if not path.exists():
        return None
    return inputfiles.read_bytes(path, label, TABLE_LIMITS, expected="a bundle file")


def _from_files(label: str, read: Callable[[str], bytes | None]) -> OnDisk:
    meta_raw = read(META_FILE)
    if meta_raw is None:
        raise BundleError("format", f"{label}: no {META_FILE}, so not a bundle")
    docs = inputfiles.parse_yaml(inputfiles.decode(meta_raw, META_FILE), META_FILE, _SMALL)
    meta = BundleMeta.from_document(docs[0] if len(docs) == 1 else None, f"{label}/{META_FILE}")
    tables: dict[str, bytes] = {}
    for name in meta.tables:
        found = read(name)
        if found is None:
            raise BundleError("format", f"{label}: {META_FILE} lists {name}, which is missing")
        tables[name] = found
    signed = read(SIGNATURES_FILE)
    signatures = signatures_of(signed, f"{label}/{SIGNATURES_FILE}") if signed is not None else ()
    return OnDisk(Bundle(meta, tables), signatures)


def signatures_of(raw: bytes, label: str) -> tuple[Signature, ...]:
    """The signatures a ``signatures.json`` (or a signature layer) holds."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise BundleError("signature", f"{label}: not JSON") from None
    items = doc if isinstance(doc, list) else [doc]
    return tuple(Signature.from_document(item, label) for item in items)


def _unpacked(raw: bytes, label: str) -> dict[str, bytes]:
    """The regular files at the top of a tar archive (gzip or not); anything else refused."""
    if raw[:2] == b"\x1f\x8b":
        raw = _gunzipped(raw, label)
    files: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as archive:
            for member in archive:
                name = member.name.removeprefix("./")
                if member.isdir() and name in ("", "."):
                    continue
                if not member.isfile() or "/" in name or name in files:
                    raise BundleError(
                        "format", f"{label}: {member.name!r} is not a file at the archive's top"
                    )
                handle = archive.extractfile(member)
                files[name] = handle.read() if handle is not None else b""
    except tarfile.TarError as exc:
        raise BundleError("format", f"{label}: not a tar archive ({exc})") from None
    return files


def _gunzipped(raw: bytes, label: str) -> bytes:
    """A gzip stream unpacked, never past :data:`ARCHIVE_LIMITS` (a small archive may unpack
    to gigabytes)."""
    limit = ARCHIVE_LIMITS.max_bytes
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflate.decompress(raw, limit + 1)
        if len(out) > limit or inflate.unconsumed_tail:
            raise BundleError("format", f"{label}: larger than {limit} bytes unpacked")
        if not inflate.eof:
            raise BundleError("format", f"{label}: not a gzip archive (truncated)")
    except zlib.error as exc:
        raise BundleError("format", f"{label}: not a gzip archive ({exc})") from None
    return out


def meta_text(meta: BundleMeta) -> bytes:
    """``bundle.yaml`` for ``meta``."""
    header = "# A cudasched knowledge bundle (docs/guide/knowledge.md).\n"
    return (header + yaml.safe_dump(meta.to_document(), sort_keys=False)).encode("utf-8")


def directory_files(bundle: Bundle, signatures: Sequence[Signature] = ()) -> dict[str, bytes]:
    """The files of the bundle's directory, by name."""
    files = {META_FILE: meta_text(bundle.meta), **bundle.tables}
    if signatures:
        docs = [s.to_document() for s in signatures]
        files[SIGNATURES_FILE] = orjson.dumps(docs, option=orjson.OPT_INDENT_2) + b"\n"
    return files


def archive_bytes(files: Mapping[str, bytes], *, compress: bool) -> bytes:
    """``files`` as one tar archive, the same bytes for the same files (no dates, owners or
    modes of this machine); gzip-compressed when ``compress``."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:", format=tarfile.PAX_FORMAT) as archive:
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size = len(files[name])
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(files[name]))
    raw = out.getvalue()
    return gzip.compress(raw, mtime=0) if compress else raw
