"""Layers read top first as streams: what a container would see (whiteouts, replaced files),
where to stop, and every kind of bad layer ending with a reason, never an exception."""

from __future__ import annotations

import contextlib
import gzip
import io
import tarfile
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.knowledge.layerscan import (
    LayerSource,
    ReadStopped,
    ScanLimits,
    contents_of,
    scan_layers,
)
from tests.support.layers import (
    GZIP_LAYER,
    OPAQUE,
    PLAIN_LAYER,
    WHITEOUT,
    ZSTD_LAYER,
    Link,
    dist_info,
    dpkg_status,
    layer,
)
from tests.support.versions import cv

RUNNERS = {
    "usr/lib/ollama/cuda_v12/libcudart.so.12.8.90": b"12",
    "usr/lib/ollama/cuda_v12/libcublas.so.12.8.4.1": b"12",
    "usr/lib/ollama/cuda_v13/libcudart.so.13.0.96": b"13",
    "usr/lib/ollama/cuda_v13/libcublasLt.so.13.1.0.3": b"13",
    "usr/lib/ollama/libggml-base.so": b"cpu",
}


def source(blob: bytes, digest: str, media: str = GZIP_LAYER) -> LayerSource:
    @contextlib.contextmanager
    def opened() -> Iterator[io.BytesIO]:
        yield io.BytesIO(blob)

    return LayerSource(digest, media, opened)


def built(files: dict, digest: str, media: str = GZIP_LAYER) -> LayerSource:
    return source(layer(files, media)[0], digest, media)


def scanned(*layers: LayerSource, **limits: object):
    facts, compat, notes, stopped, read = scan_layers(list(layers), ScanLimits(**limits))
    return contents_of(
        "img",
        "sha256:d",
        facts,
        compat=compat,
        notes=notes,
        stopped=stopped,
        layers_read=read,
        layers_total=len(layers),
    )


def test_runners_are_alternatives_and_the_oldest_counts() -> None:
    found = scanned(built(RUNNERS, "sha256:top", ZSTD_LAYER), built({}, "sha256:base"))
    assert (found.cuda, found.lower_bound) == (cv("12.8"), False)
    assert "runners cuda_v12, cuda_v13 under /usr/lib/ollama" in found.rule
    assert {f.path for f in found.facts} >= {"usr/lib/ollama/cuda_v13/libcudart.so.13.0.96"}
    # The read stopped at the first layer that named a runtime.
    assert (found.layers_read, found.stopped) == (1, "")


def test_runtimes_loaded_together_count_by_the_newest() -> None:
    runtime, runtime_body = dist_info("nvidia-cuda-runtime-cu12", "12.4.127")
    torch, torch_body = dist_info("torch", "2.6.0+cu126")
    top = built({runtime: runtime_body, torch: torch_body}, "sha256:app")
    found = scanned(top, built({}, "sha256:base", PLAIN_LAYER))
    assert found.cuda == cv("12.6") and "torch 2.6.0+cu126" in found.rule


def test_reading_every_layer_sees_the_base_too() -> None:
    torch, body = dist_info("torch", "2.4.0+cu121")
    base = {
        "var/lib/dpkg/status": dpkg_status(
            [("cuda-cudart-12-4", "12.4.127-1", "install ok installed")]
        )
    }
    layers = (built({torch: body}, "sha256:app"), built(base, "sha256:base"))
    assert scanned(*layers).cuda == cv("12.1")
    everything = scanned(*layers, read_all=True)
    assert everything.cuda == cv("12.4") and everything.layers_read == 2


def test_whiteouts_and_replaced_files_hide_lower_layers() -> None:
    status = "var/lib/dpkg/status"
    old = dpkg_status([("cuda-cudart-12-1", "12.1.105-1", "install ok installed")])
    new = dpkg_status([("libc6", "2.39", "install ok installed")])
    lower = built(
        {
            status: old,
            "opt/cuda/lib/libcudart.so.12.1.105": b"x",
            "venv/lib/libnvrtc.so.12.2.140": b"x",
        },
        "sha256:lower",
    )
    upper = built(
        {
            status: new,
            "opt/cuda": WHITEOUT,
            "venv": OPAQUE,
            "usr/lib/libcudart.so.12": Link("libcudart.so.12.1.105"),
        },
        "sha256:upper",
    )
    found = scanned(upper, lower, read_all=True)
    assert found.facts == () and found.cuda is None
    assert "no CUDA runtime" in found.unknown and found.layers_read == 2


def test_bad_layers_end_with_a_reason() -> None:
    good = layer(RUNNERS)[0]
    tar = layer(RUNNERS, PLAIN_LAYER)[0]
    cases = {
        "truncated gzip": good[: len(good) // 2],
        "garbage": b"\x1f\x8b" + b"\x00garbage" * 100,
        "not an archive": b"hello, this is not a tar" * 40,
        "truncated tar": tar[:700],
        "zstd garbage": b"\x28\xb5\x2f\xfd" + b"\xff" * 64,
    }
    for name, blob in cases.items():
        found = scanned(source(blob, f"sha256:{name}"))
        assert found.cuda is None and found.facts == (), name
    found = scanned(source(good[:-9], "sha256:cut"))
    assert "not a readable layer" in found.stopped and "layer 1 of 1" in found.stopped


def test_a_layer_that_inflates_without_end_is_bounded() -> None:
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024), compresslevel=9)
    assert len(bomb) < 100_000
    found = scanned(source(bomb, "sha256:bomb"), max_unpacked_bytes=8 * 1024 * 1024)
    assert found.cuda is None and "more than 8388608 bytes unpacked" in found.stopped


def test_huge_extended_headers_and_member_counts_are_bounded() -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("x")
        info.pax_headers = {"comment": "y" * (2 * 1024 * 1024)}
        tar.addfile(info, io.BytesIO(b""))
    found = scanned(source(out.getvalue(), "sha256:pax", PLAIN_LAYER))
    assert "extended tar header" in found.stopped
    many = built({f"f{i}": b"" for i in range(50)}, "sha256:many")
    found = scanned(many, max_members=10)
    assert "more than 10 archive entries" in found.stopped
    deletions = built({f"d/f{i}": WHITEOUT for i in range(50)}, "sha256:deletions")
    found = scanned(deletions, max_whiteouts=10)
    assert "more than 10 paths deleted" in found.stopped


def test_a_budget_spent_while_reading_stops_with_its_reason() -> None:
    blob = layer(RUNNERS)[0]

    class Slow(io.BytesIO):
        def read(self, size: int | None = -1) -> bytes:
            if self.tell() > 100:
                raise ReadStopped("no answer within the 1s budget")
            return super().read(size)

    @contextlib.contextmanager
    def opened() -> Iterator[Slow]:
        yield Slow(blob)

    found = scanned(LayerSource("sha256:slow", GZIP_LAYER, opened))
    assert found.cuda is None and found.facts == ()
    assert found.stopped == "layer 1 of 1 (sha256:slow): no answer within the 1s budget"
    assert found.unknown.startswith("the read stopped before a CUDA runtime was found")


@pytest.mark.parametrize("media", [GZIP_LAYER, ZSTD_LAYER, PLAIN_LAYER])
def test_each_compression_is_told_by_its_bytes(media: str) -> None:
    # The media type is not trusted: a layer is read as its first bytes say.
    blob = layer(RUNNERS, media)[0]
    assert scanned(source(blob, "sha256:x", "application/octet-stream")).cuda == cv("12.8")


@settings(max_examples=60, deadline=None)
@given(
    media=st.sampled_from([GZIP_LAYER, ZSTD_LAYER, PLAIN_LAYER]),
    at=st.integers(min_value=0, max_value=10_000),
    junk=st.binary(min_size=1, max_size=64),
    cut=st.booleans(),
)
def test_damaged_layers_never_raise(media: str, at: int, junk: bytes, cut: bool) -> None:
    blob = layer(RUNNERS, media)[0]
    at %= len(blob)
    damaged = blob[:at] + junk if cut else blob[:at] + junk + blob[at + len(junk) :]
    found = scanned(source(damaged, "sha256:damaged"))
    # Either the runners were read whole, or the answer is unknown and says why.
    assert found.cuda == cv("12.8") or (found.cuda is None and found.unknown)
