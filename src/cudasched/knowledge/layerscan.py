"""An image's layers read top layer first, as a stream, for the CUDA its files name.

Pure over what it is handed: each :class:`LayerSource` opens a readable stream of the layer's
blob (the registry edge's bounded reader, or a file in a test); this module decompresses it
(gzip, zstd or none, told by the stream's first bytes), walks the tar archive in stream mode
(``tarfile``'s ``r|``: no seeking, one member at a time) and asks
:mod:`cudasched.knowledge.layerfiles` what each file says. The edge enforces the byte and time
budgets by raising :class:`ReadStopped` from its reads; this module bounds what it unpacks,
what it keeps (a file over its cap is noted, not read; a tar extended header over 1 MiB ends
the layer) and how many members it looks at. Whatever goes wrong inside a layer (a corrupt or
truncated archive, a budget spent) ends the read with the reason, never an exception.

Layers read top first see the image as a container does: a file a higher layer replaced or
deleted (an OCI whiteout ``.wh.<name>``, or an opaque directory ``.wh..wh..opq``) is not read
again below. Facts count only from layers read to their end. The read stops at the end of the
first layer that names a CUDA runtime (that layer is read whole, so runners shipped side by
side are all seen), unless ``read_all`` asks for every layer (the compat library's note, the
base's runtimes).
"""

from __future__ import annotations

import gzip
import tarfile
import zlib
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import IO, Any, Protocol, cast

import zstandard

from cudasched.knowledge.compatnote import ElfWindow, read_compat_note
from cudasched.knowledge.imagecontents import CompatNote, ContentFact, ImageContents, decide
from cudasched.knowledge.layerfiles import COMPAT_LIBCUDA, name_facts, probe, read_facts

__all__ = [
    "LayerSource",
    "ReadStopped",
    "Readable",
    "ScanLimits",
    "contents_of",
    "scan_layers",
]

_GZIP = b"\x1f\x8b"
_ZSTD = b"\x28\xb5\x2f\xfd"
_CHUNK = 256 * 1024
_MAX_EXTENDED_HEADER = 1024 * 1024
_WHITEOUT = ".wh."
_OPAQUE = ".wh..wh..opq"


class ReadStopped(Exception):
    """Raised by a layer's stream when a budget is spent (``why`` says which); the scan ends
    with that reason."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


@dataclass(frozen=True, slots=True)
class ScanLimits:
    """What one image's scan may unpack and look at. ``max_unpacked_bytes`` bounds the tar
    bytes after decompression (a small blob that inflates without end), ``max_members`` the
    archive entries, ``max_whiteouts`` the deleted paths remembered across layers,
    ``max_window_bytes`` the zstd window a frame may ask for; ``read_all`` reads every layer
    instead of stopping at the first one that names a CUDA runtime."""

    max_unpacked_bytes: int = 8 * 1024**3
    max_members: int = 2_000_000
    max_whiteouts: int = 200_000
    max_window_bytes: int = 64 * 1024 * 1024
    read_all: bool = False


class Readable(Protocol):
    """What a layer's blob is read through: ``read(size)`` until it returns ``b""``."""

    def read(self, size: int = -1, /) -> bytes: ...


@dataclass(frozen=True, slots=True)
class LayerSource:
    """One layer: its digest, media type, and how to open its blob as a binary stream."""

    digest: str
    media_type: str
    open: Callable[[], AbstractContextManager[Readable]]


@dataclass
class _State:
    """What the scan carries from one layer to the next (top first)."""

    limits: ScanLimits
    facts: list[ContentFact] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    compat: CompatNote | None = None
    hidden: set[str] = field(default_factory=set)  # deleted by a higher layer
    opaque: set[str] = field(default_factory=set)  # directories a higher layer made opaque
    seen: set[str] = field(default_factory=set)  # paths a higher layer provided
    unpacked: int = 0
    members: int = 0

    def covered(self, path: str) -> bool:
        """Whether a higher layer replaced or deleted ``path``."""
        if path in self.seen or path in self.hidden:
            return True
        parts = path.split("/")
        for i in range(1, len(parts)):
            prefix = "/".join(parts[:i])
            if prefix in self.hidden or prefix in self.opaque:
                return True
        return False


class _Prefixed:
    """A stream with bytes already read put back in front."""

    def __init__(self, prefix: bytes, rest: Readable) -> None:
        self._prefix = prefix
        self._rest = rest

    def read(self, size: int = -1) -> bytes:
        if self._prefix:
            if size is None or size < 0:
                data, self._prefix = self._prefix + self._rest.read(), b""
                return data
            data, self._prefix = self._prefix[:size], self._prefix[size:]
            return data
        return self._rest.read(size)


class _Counted:
    """The decompressed tar stream, counted against the unpacked-bytes budget."""

    def __init__(self, inner: Any, state: _State) -> None:
        self._inner = inner
        self._state = state

    def read(self, size: int = -1) -> bytes:
        data: bytes = self._inner.read(size if size is not None and size >= 0 else _CHUNK)
        self._state.unpacked += len(data)
        if self._state.unpacked > self._state.limits.max_unpacked_bytes:
            raise ReadStopped(f"more than {self._state.limits.max_unpacked_bytes} bytes unpacked")
        return data


class _BoundedInfo(tarfile.TarInfo):
    """A tar member whose extended headers (pax, GNU long names) are read into memory only
    up to 1 MiB (``tarfile`` reads them whole; its ``tarinfo`` class is the documented way to
    change how members are read)."""

    _EXTENDED = (
        tarfile.GNUTYPE_LONGNAME,
        tarfile.GNUTYPE_LONGLINK,
        tarfile.XHDTYPE,
        tarfile.XGLTYPE,
        tarfile.SOLARIS_XHDTYPE,
    )

    def _proc_member(self, tarfile_: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in self._EXTENDED and self.size > _MAX_EXTENDED_HEADER:
            raise tarfile.HeaderError(f"an extended tar header of {self.size} bytes")
        # _proc_member is tarfile's private hook, not in typeshed's TarInfo.
        member: tarfile.TarInfo = super()._proc_member(tarfile_)  # type: ignore[misc]
        return member


def _decompressed(raw: Readable, limits: ScanLimits) -> Any:
    """``raw`` decompressed as its first bytes say (gzip, zstd, else a plain tar)."""
    head = raw.read(4)
    stream = _Prefixed(head, raw)
    if head.startswith(_GZIP):
        return gzip.GzipFile(fileobj=cast(IO[bytes], stream), mode="rb")
    if head.startswith(_ZSTD):
        decompressor = zstandard.ZstdDecompressor(max_window_size=limits.max_window_bytes)
        return decompressor.stream_reader(cast(IO[bytes], stream), read_across_frames=True)
    return stream


_READ_ERRORS = (
    tarfile.TarError,
    zlib.error,
    gzip.BadGzipFile,
    EOFError,
    zstandard.ZstdError,
    OSError,
    ValueError,
)


def scan_layers(
    layers: Iterable[LayerSource], limits: ScanLimits | None = None
) -> tuple[list[ContentFact], CompatNote | None, list[str], str, int]:
    """Read ``layers`` (top layer first): the facts of the layers read whole, the compat
    note, notes, why the read stopped early (``""`` when it did not) and how many layers were
    read whole."""
    state = _State(limits if limits is not None else ScanLimits())
    listed = list(layers)
    read = 0
    for index, layer in enumerate(listed):
        where = f"layer {index + 1} of {len(listed)} ({layer.digest})"
        layer_facts: list[ContentFact] = []
        pending_hidden: set[str] = set()
        pending_opaque: set[str] = set()
        provided: set[str] = set()
        try:
            with layer.open() as raw:
                stream = _Counted(_decompressed(raw, state.limits), state)
                _walk(
                    stream,
                    layer.digest,
                    state,
                    layer_facts,
                    pending_hidden,
                    pending_opaque,
                    provided,
                )
        except ReadStopped as exc:
            return state.facts, state.compat, state.notes, f"{where}: {exc.why}", read
        except _READ_ERRORS as exc:
            detail = str(exc) or type(exc).__name__
            why = f"{where} is not a readable layer ({type(exc).__name__}: {detail})"
            return state.facts, state.compat, state.notes, why, read
        read += 1
        state.facts.extend(layer_facts)
        state.seen |= provided
        state.hidden |= pending_hidden
        state.opaque |= pending_opaque
        if len(state.hidden) + len(state.opaque) + len(state.seen) > state.limits.max_whiteouts:
            why = f"{where}: more than {state.limits.max_whiteouts} paths deleted or replaced"
            return state.facts, state.compat, state.notes, why, read
        if layer_facts and not state.limits.read_all:
            break
    return state.facts, state.compat, state.notes, "", read


def _walk(
    stream: _Counted,
    digest: str,
    state: _State,
    facts: list[ContentFact],
    hidden: set[str],
    opaque: set[str],
    provided: set[str],
) -> None:
    """One layer's members: whiteouts remembered for the layers below, each file not covered
    by a higher layer asked for its facts."""
    with tarfile.open(fileobj=stream, mode="r|", tarinfo=_BoundedInfo) as tar:  # type: ignore[call-overload]
        while True:
            member = tar.next()
            if member is None:
                break
            tar.members.clear()  # stream mode keeps every member otherwise
            state.members += 1
            if state.members > state.limits.max_members:
                raise ReadStopped(f"more than {state.limits.max_members} archive entries")
            path = _clean(member.name)
            if not path:
                continue
            directory, _, base = path.rpartition("/")
            if base == _OPAQUE:
                opaque.add(directory)
                continue
            if base.startswith(_WHITEOUT):
                hidden.add(f"{directory}/{base[len(_WHITEOUT) :]}".lstrip("/"))
                if len(hidden) + len(state.hidden) > state.limits.max_whiteouts:
                    raise ReadStopped(f"more than {state.limits.max_whiteouts} paths deleted")
                continue
            if not (member.isreg() or member.islnk()) or state.covered(path):
                continue
            found = name_facts(path, digest)
            wanted = probe(path) if member.isreg() else None
            if found or wanted is not None:
                provided.add(path)
            facts.extend(found)
            if wanted is not None:
                _read_member(tar, member, path, wanted, digest, state, facts)
    # Past the archive's end marker, to the end of the compressed stream: a truncated or
    # altered blob (a gzip trailer that does not match) is caught here, not trusted.
    while stream.read(_CHUNK):
        pass


def _clean(name: str) -> str:
    """A member's name as a path in the image, without ``./`` or ``/`` in front."""
    while name.startswith("./"):
        name = name[2:]
    return name.lstrip("/")


def _read_member(
    tar: tarfile.TarFile,
    member: tarfile.TarInfo,
    path: str,
    wanted: Any,
    digest: str,
    state: _State,
    facts: list[ContentFact],
) -> None:
    if wanted.kind == "rpm-other":
        state.notes.append(
            f"/{path} in {digest}: an rpm database in a format not read (Berkeley DB or ndb); "
            "rpmdb.sqlite is read"
        )
        return
    handle = tar.extractfile(member)
    if handle is None:
        return
    if wanted.kind == "compat-libcuda":
        _read_compat(handle, path, digest, state)
        return
    if member.size > wanted.cap:
        state.notes.append(f"/{path} in {digest}: {member.size} bytes, over {wanted.cap}; not read")
        return
    found, note = read_facts(wanted, path, handle.read(wanted.cap + 1), digest)
    facts.extend(found)
    if note:
        state.notes.append(note)


def _read_compat(handle: Readable, path: str, digest: str, state: _State) -> None:
    if state.compat is not None:
        state.notes.append(
            f"/{path} in {digest}: another compat libcuda.so (the toolkit uses only one)"
        )
        return
    window = ElfWindow()
    while chunk := handle.read(_CHUNK):
        window.feed(chunk)
    m = COMPAT_LIBCUDA.match(path)
    note, why = read_compat_note(window, digest, path, m.group(1) if m else "")
    if note is not None:
        state.compat = note
    if why:
        state.notes.append(why)


def contents_of(
    image: str,
    digest: str,
    facts: Iterable[ContentFact],
    *,
    compat: CompatNote | None = None,
    notes: Iterable[str] = (),
    stopped: str = "",
    sbom: bool = False,
    layers_read: int = 0,
    layers_total: int = 0,
    bytes_read: int = 0,
) -> ImageContents:
    """The facts found, decided (:func:`~cudasched.knowledge.imagecontents.decide`), with
    why there is no answer when there is none."""
    listed = tuple(facts)
    cuda, floor, rule = decide(listed)
    unknown = ""
    if cuda is None:
        if stopped:
            unknown = f"the read stopped before a CUDA runtime was found: {stopped}"
        elif layers_total == 0 and not sbom:
            unknown = "the image has no layers"
        else:
            read = f"{layers_read} of {layers_total} layers" + (" and the SBOM" if sbom else "")
            unknown = f"no CUDA runtime, CUDA package or torch build in {read}"
    return ImageContents(
        image=image,
        digest=digest,
        facts=listed,
        compat=compat,
        cuda=cuda,
        lower_bound=floor,
        rule=rule,
        unknown=unknown,
        notes=tuple(notes),
        stopped=stopped,
        sbom=sbom,
        layers_read=layers_read,
        layers_total=layers_total,
        bytes_read=bytes_read,
    )
