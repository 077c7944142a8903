"""What an image carries, read from the real registry (Debian's docker-registry on
127.0.0.1): images built like the real ones resolve exactly; corrupt, huge, slow and
truncated layers end with a bounded, clear unknown."""

from __future__ import annotations

import hashlib
import http.server
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cudasched.knowledge.layerscan import ScanLimits
from cudasched.registry.client import Limits, RegistryClient
from cudasched.registry.layers import LayerBudget, read_contents
from tests.support.layers import (
    GZIP_LAYER,
    ZSTD_LAYER,
    Link,
    compat_libcuda,
    compat_note,
    dist_info,
    dpkg_status,
    layer,
    push_layered,
    rpmdb_sqlite,
)
from tests.support.registry import Registry, run_registry, serving
from tests.support.versions import cv

UBUNTU = layer({"etc/os-release": b"ID=ubuntu\nVERSION_ID=24.04\n", "usr/bin/sh": b"\x7fELF"})


@pytest.fixture(scope="module")
def registry() -> Iterator[Registry]:
    with run_registry() as running:
        yield running


@pytest.fixture(scope="module")
def client(registry: Registry) -> Iterator[RegistryClient]:
    with RegistryClient(plain_http=[registry.host]) as made:
        yield made


def test_ollama_style_runners(registry: Registry, client: RegistryClient) -> None:
    # ollama/ollama: FROM ubuntu, the binary and lib/ollama with one directory per runner.
    runners = layer(
        {
            "usr/lib/ollama/libggml-base.so": b"cpu",
            "usr/lib/ollama/cuda_v12/libcudart.so.12": Link("libcudart.so.12.8.90"),
            "usr/lib/ollama/cuda_v12/libcudart.so.12.8.90": b"cudart 12",
            "usr/lib/ollama/cuda_v12/libcublas.so.12.8.4.1": b"cublas 12",
            "usr/lib/ollama/cuda_v13/libcudart.so.13.0.96": b"cudart 13",
            "usr/lib/ollama/cuda_v13/libcublasLt.so.13.1.0.3": b"cublasLt 13",
        },
        ZSTD_LAYER,
    )
    binary = layer({"usr/bin/ollama": b"\x7fELF ollama"})
    digest = push_layered(registry, "ollama/ollama", "0.12.3", [UBUNTU, runners, binary])
    found = read_contents(client, f"{registry.host}/ollama/ollama:0.12.3")
    assert (found.digest, found.cuda, found.lower_bound) == (digest, cv("12.8"), False)
    assert "runners cuda_v12, cuda_v13 under /usr/lib/ollama" in found.rule
    paths = {f.path for f in found.facts}
    assert "usr/lib/ollama/cuda_v13/libcudart.so.13.0.96" in paths
    assert {f.layer for f in found.facts} == {"sha256:" + hashlib.sha256(runners[0]).hexdigest()}
    # The binary's layer (top) and the runners' were read; the base was not needed.
    assert (found.layers_read, found.layers_total, found.stopped) == (2, 3, "")


def test_pip_torch_without_cuda_version(registry: Registry, client: RegistryClient) -> None:
    # python:3.12 + pip install torch: no CUDA_VERSION, the CUDA is in the wheels.
    site = "usr/local/lib/python3.12/site-packages"
    files = dict(
        [
            dist_info("nvidia-cuda-runtime-cu12", "12.6.77", site),
            dist_info("nvidia-cublas-cu12", "12.6.4.1", site),
            dist_info("torch", "2.6.0+cu126", site),
            (
                f"{site}/torch/version.py",
                b"__version__ = '2.6.0+cu126'\ncuda: Optional[str] = '12.6'\n",
            ),
            (f"{site}/nvidia/cuda_runtime/lib/libcudart.so.12", b"cudart"),
        ]
    )
    push_layered(
        registry, "ml/pip-torch", "1", [UBUNTU, layer(files), layer({"app/serve.py": b""})]
    )
    found = read_contents(client, f"{registry.host}/ml/pip-torch:1")
    assert (found.cuda, found.lower_bound) == (cv("12.6"), False)
    kinds = sorted((f.kind, f.what) for f in found.facts)
    assert kinds == [
        ("pip", "nvidia-cublas-cu12 12.6.4.1"),
        ("pip", "nvidia-cuda-runtime-cu12 12.6.77"),
        ("torch", "torch 2.6.0+cu126"),
        ("torch", "torch.version.cuda 12.6"),
    ]


def test_compat_library_note_and_system_packages(
    registry: Registry, client: RegistryClient, tmp_path: Path
) -> None:
    # Built like nvidia/cuda: apt packages, cuda-compat's libcuda.so under /usr/local/cuda-X.Y.
    library = compat_libcuda(tmp_path, compat_note("12.9", [535, 550, 570, 575]), padding=6_000_000)
    base = layer(
        {
            "var/lib/dpkg/status": dpkg_status(
                [("cuda-cudart-12-9", "12.9.79-1", "install ok installed")]
            ),
            "usr/local/cuda-12.9/compat/libcuda.so.575.57.08": library,
            "usr/local/cuda-12.9/targets/x86_64-linux/lib/libcudart.so.12.9.79": b"cudart",
        }
    )
    rhel = layer(
        {"var/lib/rpm/rpmdb.sqlite": rpmdb_sqlite([("cuda-nvrtc-12-9", "12.9.86")], tmp_path)}
    )
    push_layered(registry, "nvidia/cuda-like", "12.9", [UBUNTU, base, rhel])
    budget = LayerBudget(scan=ScanLimits(read_all=True))
    found = read_contents(client, f"{registry.host}/nvidia/cuda-like:12.9", budget=budget)
    assert found.cuda == cv("12.9") and found.layers_read == 3
    assert {f.kind for f in found.facts} == {"rpm", "deb", "library"}
    assert found.compat is not None
    assert (found.compat.cuda, found.compat.driver_branches, found.compat.compat_driver) == (
        cv("12.9"),
        (535, 550, 570, 575),
        "575.57.08",
    )
    assert found.compat.path == "usr/local/cuda-12.9/compat/libcuda.so.575.57.08"
    # Stopping at the first layer with a runtime (the default), the rpm layer answers alone.
    first = read_contents(client, f"{registry.host}/nvidia/cuda-like:12.9")
    assert first.layers_read == 1 and {f.kind for f in first.facts} == {"rpm"}


def test_sbom_attestation_is_read_first(registry: Registry, client: RegistryClient) -> None:
    # A layer that would say 11.8 is never read: the SBOM answers first.
    misleading = layer({"opt/lib/libcudart.so.11.8.89": b"x"})
    push_layered(
        registry,
        "ml/attested",
        "2",
        [UBUNTU, misleading],
        sbom=[("pypi", "torch", "2.7.1+cu128"), ("deb", "bash", "5.2")],
    )
    found = read_contents(client, f"{registry.host}/ml/attested:2")
    assert (found.sbom, found.cuda, found.layers_read, found.bytes_read) == (True, cv("12.8"), 0, 0)
    assert [f.what for f in found.facts] == ["torch 2.7.1+cu128"]
    assert found.facts[0].layer.startswith("sbom sha256:")


def test_missing_images_and_corrupt_layers_are_reasons(
    registry: Registry, client: RegistryClient
) -> None:
    missing = read_contents(client, f"{registry.host}/ml/absent:1")
    assert missing.cuda is None and "not found" in missing.unknown
    runners = layer({"usr/lib/ollama/cuda_v12/libcudart.so.12.8.90": b"x"})[0]
    cut = (runners[: len(runners) - 10], GZIP_LAYER)
    push_layered(registry, "ml/truncated", "1", [UBUNTU, cut])
    found = read_contents(client, f"{registry.host}/ml/truncated:1")
    assert found.cuda is None and found.facts == ()
    assert "layer 1 of 2" in found.stopped and "not a readable layer" in found.stopped


def test_huge_layers_stop_at_the_byte_budget(registry: Registry, client: RegistryClient) -> None:
    noise = layer({"data/blob.bin": random.Random(0).randbytes(2_500_000)})  # incompressible
    runtime = layer({"usr/lib/libcudart.so.12.4.127": b"x"})
    push_layered(registry, "ml/huge", "1", [runtime, noise])
    budget = LayerBudget(max_bytes=512 * 1024)
    started = time.monotonic()
    found = read_contents(client, f"{registry.host}/ml/huge:1", budget=budget)
    assert time.monotonic() - started < 10
    assert found.cuda is None and f"more than the {512 * 1024} bytes budget" in found.stopped
    assert found.bytes_read <= 512 * 1024 + 256 * 1024  # one chunk past the budget at most


def test_a_slow_registry_stops_at_the_deadline(registry: Registry) -> None:
    # A front that serves the registry's manifests but trickles a layer blob (a stalled CDN).
    slow_layer = layer({"data/blob.bin": random.Random(1).randbytes(1_000_000)})
    push_layered(registry, "ml/slow", "1", [slow_layer])
    target = registry.host

    class Trickle(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            return

        def do_GET(self) -> None:
            import httpx

            reply = httpx.get(f"http://{target}{self.path}", headers=dict(self.headers))
            self.send_response(reply.status_code)
            for key in ("content-type", "docker-content-digest"):
                if key in reply.headers:
                    self.send_header(key, reply.headers[key])
            self.send_header("content-length", str(len(reply.content)))
            self.end_headers()
            if "/blobs/" not in self.path:
                self.wfile.write(reply.content)
                return
            for at in range(0, len(reply.content), 4096):
                try:
                    self.wfile.write(reply.content[at : at + 4096])
                    self.wfile.flush()
                except OSError:
                    return
                time.sleep(0.05)

    with serving(Trickle) as port:
        front = f"127.0.0.1:{port}"
        with RegistryClient(plain_http=[front], limits=Limits(request_seconds=2)) as slow:
            started = time.monotonic()
            budget = LayerBudget(deadline_seconds=1.5)
            found = read_contents(slow, f"{front}/ml/slow:1", budget=budget)
            took = time.monotonic() - started
    assert found.cuda is None and "1.5s budget" in found.stopped
    assert took < 1.5 + 2.5  # the deadline, plus at most one read timeout's chunk wait
