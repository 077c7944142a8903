"""The compat libcuda.so's forward-compatibility note, read from a real shared object (built
with gcc, the note added by objcopy) as it streams past, in pieces of any size."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.knowledge.compatnote import ElfWindow, read_compat_note
from tests.support.layers import compat_libcuda, compat_note
from tests.support.versions import cv

PATH = "usr/local/cuda-12.9/compat/libcuda.so.575.57.08"


def streamed(data: bytes, piece: int = 65536, **window: int) -> ElfWindow:
    found = ElfWindow(**window)
    for at in range(0, len(data), piece):
        found.feed(data[at : at + piece])
    return found


def test_the_note_of_a_real_library(tmp_path: Path) -> None:
    library = compat_libcuda(tmp_path, compat_note("12.9", [535, 550, 560, 565, 570, 575]))
    note, why = read_compat_note(streamed(library), "sha256:l", PATH, "575.57.08")
    assert why == "" and note is not None
    assert (note.cuda, note.driver_branches, note.format) == (
        cv("12.9"),
        (535, 550, 560, 565, 570, 575),
        1,
    )
    assert (note.devices, note.compat_driver, note.layer) == ((1, 2, 7, 8), "575.57.08", "sha256:l")


def test_a_large_library_is_read_from_its_head_and_tail_only(tmp_path: Path) -> None:
    # 24 MB of data between the ELF header and the section headers: the window keeps 8 MB.
    library = compat_libcuda(tmp_path, compat_note("13.1", [580, 590]), padding=24_000_000)
    assert len(library) > 24_000_000
    note, why = read_compat_note(streamed(library), "l", PATH, "590.44.01")
    assert note is not None and note.cuda == cv("13.1"), why
    # With a window too small for where the note lies, the answer says so.
    small = streamed(library, head=4096, before_headers=64)
    note, why = read_compat_note(small, "l", PATH, "590.44.01")
    assert note is None and "outside the bytes kept" in why


def test_libraries_without_a_readable_note(tmp_path: Path) -> None:
    bare = compat_libcuda(tmp_path, None)
    note, why = read_compat_note(streamed(bare), "l", PATH, "")
    assert note is not None and "has no .note.cuda.fwd_compatibility note" in why
    # A library without a note is still the toolkit's to use: its directory names its CUDA.
    assert (note.has_note, note.cuda, note.driver_branches) == (False, cv("12.9"), ())
    (tmp_path / "b").mkdir()
    broken = compat_libcuda(tmp_path / "b", compat_note("12.9", [570])[:-40] + b"not json" * 5)
    note, why = read_compat_note(streamed(broken), "l", PATH, "")
    assert note is None and "not JSON" in why
    note, why = read_compat_note(streamed(b"MZ" + b"\0" * 200), "l", PATH, "")
    assert note is None and "not an ELF file" in why
    note, why = read_compat_note(streamed(bare[:2000]), "l", PATH, "")
    assert note is None and why


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return compat_libcuda(tmp_path_factory.mktemp("lib"), compat_note("12.8", [535, 550, 570]))


@settings(max_examples=25, deadline=None)
@given(piece=st.integers(min_value=1, max_value=9000), cut=st.integers(min_value=0, max_value=7000))
def test_any_split_or_truncation_reads_the_note_or_says_why(
    library: bytes, piece: int, cut: int
) -> None:
    note, why = read_compat_note(streamed(library[: len(library) - cut], piece), "l", PATH, "")
    assert (note is not None and note.cuda == cv("12.8")) or why
    whole, _ = read_compat_note(streamed(library, piece), "l", PATH, "")
    assert whole is not None and whole.cuda == cv("12.8")
