"""The webhook resolver's layer reads against the real registry (Debian's docker-registry on
127.0.0.1): an image whose config names no CUDA is read once per digest, in the background,
and its contents join the cached config; corrupt, huge and slow layers end as a bounded
unknown with the reason, a full queue drops, and no look-up ever waits for a read."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator

import pytest

from cudasched.knowledge.imagecontents import ImageContents
from cudasched.registry.client import Platform, RegistryClient
from cudasched.registry.configcache import ConfigCache
from cudasched.registry.layerreads import LayerReads
from cudasched.registry.layers import LayerBudget
from cudasched.registry.resolver import BackgroundResolver
from tests.support.layers import GZIP_LAYER, RUNNERS, layer, push_layered
from tests.support.registry import Registry, run_registry
from tests.support.versions import cv

BASE = layer({"etc/os-release": b"ID=ubuntu\nVERSION_ID=24.04\n"})


class Counted:
    """A :class:`~cudasched.registry.layerreads.LayerObserver` that keeps what it is told."""

    def __init__(self) -> None:
        self.reads: list[tuple[str, int]] = []
        self.lock = threading.Lock()

    def layer_read(self, outcome: str, seconds: float, fetched: int) -> None:
        with self.lock:
            self.reads.append((outcome, fetched))

    def layer_reads_in_flight(self, count: int) -> None:
        return None

    def outcomes(self) -> list[str]:
        with self.lock:
            return [o for o, _ in self.reads]


@pytest.fixture(scope="module")
def registry() -> Iterator[Registry]:
    with run_registry() as running:
        yield running


def resolver(
    registry: Registry, budget: LayerBudget | None = None, **kw: object
) -> tuple[BackgroundResolver, Counted]:
    counted = Counted()
    client = RegistryClient(plain_http=[registry.host])
    reads = LayerReads(
        client,
        Platform(),
        budget or LayerBudget(),
        observer=counted,
        **kw,  # type: ignore[arg-type]
    )
    return BackgroundResolver(client, ConfigCache(), layers=reads), counted


def settled(source: BackgroundResolver, image: str) -> ImageContents | None:
    """Look ``image`` up until the background is idle, then the contents its config carries."""
    source.config_for(image)
    assert source.wait_idle(30)
    config = source.config_for(image)
    assert config is not None and config.ok, config
    return config.contents


def test_an_image_whose_config_names_no_cuda_is_read_once_per_digest(registry: Registry) -> None:
    digest = push_layered(registry, "acme/ollama-build", "0.12.3", [BASE, RUNNERS])
    push_layered(registry, "acme/ollama-build", "same", [BASE, RUNNERS])  # the same digest
    source, counted = resolver(registry)
    try:
        first = source.config_for(f"{registry.host}/acme/ollama-build:0.12.3")
        assert first is None  # queued: nobody waits for the config, let alone the layers
        contents = settled(source, f"{registry.host}/acme/ollama-build:0.12.3")
        assert contents is not None and (contents.digest, contents.cuda) == (digest, cv("12.8"))
        again = settled(source, f"{registry.host}/acme/ollama-build:same")
        assert again is contents
    finally:
        source.close()
    assert counted.outcomes() == ["answered"]
    assert counted.reads[0][1] == contents.bytes_read > 0


def test_config_that_names_its_cuda_reads_no_layer(registry: Registry) -> None:
    push_layered(registry, "ml/based", "1", [BASE, RUNNERS], env=["CUDA_VERSION=12.4.1"])
    source, counted = resolver(registry)
    try:
        assert settled(source, f"{registry.host}/ml/based:1") is None
    finally:
        source.close()
    assert counted.outcomes() == []


@pytest.mark.parametrize("damage", ["corrupt", "truncated", "huge"])
def test_damaged_and_huge_layers_end_as_a_bounded_unknown(registry: Registry, damage: str) -> None:
    blob, media = RUNNERS
    if damage == "corrupt":
        gz = layer({"usr/lib/libcudart.so.12.4.127": b"x"}, GZIP_LAYER)[0]
        broken = (gz[:20] + bytes(b ^ 0x5A for b in gz[20:60]) + gz[60:], GZIP_LAYER)
    elif damage == "truncated":
        broken = (blob[: len(blob) - 12], media)
    else:
        noise = random.Random(2).randbytes(3_000_000)  # incompressible
        broken = layer({"data/weights.bin": noise, "usr/lib/libcudart.so.12.4.127": b"x"})
    push_layered(registry, f"ml/{damage}", "1", [BASE, broken])
    source, counted = resolver(registry, LayerBudget(max_bytes=1024 * 1024))
    try:
        contents = settled(source, f"{registry.host}/ml/{damage}:1")
    finally:
        source.close()
    assert contents is not None and contents.cuda is None and contents.stopped
    assert counted.outcomes() == ["unknown"]
    if damage == "huge":
        assert "more than the 1048576 bytes budget" in contents.stopped
        assert contents.bytes_read <= 1024 * 1024 + 256 * 1024


def test_a_full_queue_drops_and_no_look_up_waits_for_a_read(registry: Registry) -> None:
    noise = random.Random(3).randbytes(2_000_000)
    slow = [layer({"data/a.bin": noise}), RUNNERS]
    for name in ("one", "two"):
        push_layered(registry, f"ml/{name}", "1", [BASE, *slow, layer({"x": name.encode()})])
    # One layer worker, one place in the queue: the second image is dropped while the first
    # is read, and asked again at its next resolution.
    source, counted = resolver(registry, max_queued=1)
    try:
        source.config_for(f"{registry.host}/ml/one:1")
        source.config_for(f"{registry.host}/ml/two:1")
        started = time.monotonic()
        for _ in range(50):
            source.config_for(f"{registry.host}/ml/one:1")
        assert time.monotonic() - started < 2.0  # look-ups answer from the cache
        assert source.wait_idle(30)
    finally:
        source.close()
    assert sorted(counted.outcomes()) == ["answered", "dropped"]
