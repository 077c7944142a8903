"""The forward-compatibility note of an image's compat ``libcuda.so``, read from the library
as it streams past in a layer, without holding it whole.

NVIDIA's container toolkit (v1.20, ``cmd/nvidia-cdi-hook/cudacompat/cuda-elf-header.go`` in
NVIDIA/nvidia-container-toolkit) decides whether a container's compat libraries replace the
host's from the ELF section ``.note.cuda.fwd_compatibility`` (type ``SHT_NOTE``) of the one
``/usr/local/cuda/compat/libcuda.so.*.*``: a note owned by ``NVIDIA Corporation`` whose
description is JSON, ``{"format": 1, "CUDA version": "12.9", "driver": [535, 550, ...],
"device": [...]}`` (Go's JSON decoding matches the keys without regard to case). The toolkit
uses the compat libraries when the host driver's branch is in ``driver`` and the compat
driver (the version in the library's file name) is newer than the host's; without a note it
falls back to comparing CUDA versions or driver majors.

A real ``libcuda.so`` is tens of megabytes and a layer is a stream, so :class:`ElfWindow`
keeps only what an ELF reader needs for one section: the head of the file (the ELF header,
and the note where the linker places allocated notes), and the section header table with
the bytes just before it (where ``.shstrtab`` and a note added after linking lie). The ELF
structure is read with ``pyelftools`` over that window; a read outside it is a clear "not
read", never a guess.
"""

from __future__ import annotations

import io
import re
import struct
from typing import IO, Any, cast

import orjson
from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import NoteSection

from cudasched.knowledge.imagecontents import CompatNote
from cudasched.vocab.errors import InputError
from cudasched.vocab.versions import parse_cuda

__all__ = [
    "NOTE_OWNER",
    "NOTE_SECTION",
    "ElfWindow",
    "read_compat_note",
]

NOTE_SECTION = ".note.cuda.fwd_compatibility"
NOTE_OWNER = "NVIDIA Corporation"
_HEAD = 4 * 1024 * 1024
_BEFORE_HEADERS = 4 * 1024 * 1024
_MAX_HEADERS = 1024 * 1024


class _OutsideWindow(Exception):
    """A read of bytes the window did not keep."""


class ElfWindow:
    """The parts of a streamed ELF file one section needs (see the module's docstring): feed
    it the file's bytes in order, then read the note from it."""

    def __init__(self, head: int = _HEAD, before_headers: int = _BEFORE_HEADERS) -> None:
        self._head_cap = head
        self._before = before_headers
        self._head = bytearray()
        self._size = 0
        self._keep: tuple[int, int] | None = None  # [start, end) of the tail kept
        self._tail = bytearray()
        self.problem = ""

    def feed(self, chunk: bytes) -> None:
        at = self._size
        self._size += len(chunk)
        if len(self._head) < self._head_cap:
            self._head += chunk[: self._head_cap - len(self._head)]
        if self._keep is None and not self.problem and len(self._head) >= 64:
            self._plan()
        if self._keep is not None:
            start, end = self._keep
            lo, hi = max(start, at), min(end, at + len(chunk))
            if lo < hi:
                self._tail += chunk[lo - at : hi - at]

    def _plan(self) -> None:
        """Where the section header table lies, from the ELF header."""
        head = bytes(self._head[:64])
        if head[:4] != b"\x7fELF" or head[4] not in (1, 2) or head[5] not in (1, 2):
            self.problem = "not an ELF file"
            return
        order = "<" if head[5] == 1 else ">"
        if head[4] == 2:
            shoff = struct.unpack_from(order + "Q", head, 0x28)[0]
            entsize, count = struct.unpack_from(order + "HH", head, 0x3A)
        else:
            shoff = struct.unpack_from(order + "I", head, 0x20)[0]
            entsize, count = struct.unpack_from(order + "HH", head, 0x2E)
        if shoff == 0 or count == 0:
            self.problem = "no section headers"
            return
        if entsize * count > _MAX_HEADERS:
            self.problem = f"{count} section headers, more than this reader keeps"
            return
        self._keep = (max(0, shoff - self._before), shoff + entsize * count)

    def _read(self, offset: int, size: int) -> bytes:
        """Bytes ``offset`` to ``offset + size`` from the head and the tail kept."""
        out = bytearray()
        position, end = offset, offset + size
        start = self._keep[0] if self._keep is not None else -1
        while position < end:
            if position < len(self._head):
                piece = self._head[position : min(end, len(self._head))]
            elif 0 <= start <= position < start + len(self._tail):
                piece = self._tail[position - start : min(end, start + len(self._tail)) - start]
            else:
                raise _OutsideWindow(f"bytes {offset}..{end} of {self._size} not kept")
            out += piece
            position += len(piece)
        return bytes(out)

    def stream(self) -> io.RawIOBase:
        return _WindowStream(self)

    @property
    def size(self) -> int:
        return self._size


class _WindowStream(io.RawIOBase):
    """A seekable, read-only view of an :class:`ElfWindow` (what ``pyelftools`` reads)."""

    def __init__(self, window: ElfWindow) -> None:
        super().__init__()
        self._window = window
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._window.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            size = self._window.size - self._pos
        size = max(0, min(size, self._window.size - self._pos))
        data = self._window._read(self._pos, size)
        self._pos += len(data)
        return data


def read_compat_note(
    window: ElfWindow, layer: str, path: str, compat_driver: str
) -> tuple[CompatNote | None, str]:
    """The note of the library kept in ``window`` and ``""``; for a readable library without
    a note, a :class:`CompatNote` without one (``has_note`` false, the CUDA of its
    ``cuda-X.Y`` directory) and why; ``None`` and why when the library could not be read."""
    if window.problem:
        return None, f"/{path} in {layer}: {window.problem}"
    try:
        elf = ELFFile(cast(IO[bytes], window.stream()))
        section = elf.get_section_by_name(NOTE_SECTION)
        if section is None or section["sh_type"] != "SHT_NOTE":
            why = f"/{path} in {layer} has no {NOTE_SECTION} note"
            return _without_note(layer, path, compat_driver), why
        for note in cast(NoteSection, section).iter_notes():
            if note["n_name"] != NOTE_OWNER:
                continue
            return _parse(bytes(note["n_descdata"]), layer, path, compat_driver)
    except _OutsideWindow as exc:
        return None, f"/{path} in {layer}: the note lies outside the bytes kept ({exc})"
    except (ELFError, struct.error, ValueError, KeyError, EOFError) as exc:
        return None, f"/{path} in {layer}: not a readable ELF file ({type(exc).__name__})"
    why = f"/{path} in {layer}: {NOTE_SECTION} has no note of {NOTE_OWNER}"
    return _without_note(layer, path, compat_driver), why


#: The CUDA release directory a compat library lies in (``usr/local/cuda-12.4/compat/...``).
_CUDA_DIR = re.compile(r"(?:^|/)cuda-(\d+\.\d+)/compat/")


def _without_note(layer: str, path: str, compat_driver: str) -> CompatNote:
    """A compat library that carries no note: what its path and file name say."""
    m = _CUDA_DIR.search(path)
    return CompatNote(
        cuda=parse_cuda(m.group(1)) if m else None,
        driver_branches=(),
        devices=(),
        format=None,
        compat_driver=compat_driver,
        layer=layer,
        path=path,
        has_note=False,
    )


def _ints(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(v for v in value if isinstance(v, int) and not isinstance(v, bool))


def _parse(desc: bytes, layer: str, path: str, compat_driver: str) -> tuple[CompatNote | None, str]:
    try:
        doc = orjson.loads(desc.strip(b"\0"))
    except orjson.JSONDecodeError:
        return None, f"/{path} in {layer}: the {NOTE_SECTION} note is not JSON"
    if not isinstance(doc, dict):
        return None, f"/{path} in {layer}: the {NOTE_SECTION} note is not a JSON object"
    fields = {str(k).lower(): v for k, v in doc.items()}
    cuda = None
    raw = fields.get("cuda version")
    if isinstance(raw, str):
        try:
            cuda = parse_cuda(raw.strip())
        except InputError:
            cuda = None
    form = fields.get("format")
    return (
        CompatNote(
            cuda=cuda,
            driver_branches=_ints(fields.get("driver")),
            devices=_ints(fields.get("device")),
            format=form if isinstance(form, int) and not isinstance(form, bool) else None,
            compat_driver=compat_driver,
            layer=layer,
            path=path,
        ),
        "",
    )
