"""What reading an image's layers costs (issue 29): bytes fetched per image, time and CPU to
an answer, the reading process's memory, for images up to 10 GB, with a baseline measured in
the same run.

The images are synthesized lazily by a small registry of this script's own (the distribution
API's GETs: ``/v2/``, a manifest, blobs), run as a child process: a layer of model weights is a
plain tar of N bytes generated from a 4 MiB random block (incompressible, as weights are), the
same bytes every time, so its digest is computed once by streaming it and nothing is ever held
or written whole. The reads run each in a child process of their own (a fresh interpreter), so
their CPU time and peak RSS are the reader's alone, not the registry's or this script's:

* ``runners-over-weights``: an Ollama-style image, its CUDA runners in the top layer above a
  layer of weights (``--gib``, 10 by default): the read stops at the first layer that names a
  runtime;
* ``weights-then-runtime``: the CUDA runtime after the weights in one layer, with budgets that
  let the read through (bytes fetched and unpacked raised past the layer's size): the time to
  answer a 10 GB image the slow way;
* ``weights-budget``: the same image under the default byte budget (``--budget-gib``, 2 GiB
  fetched, as ``imageResolver.layers.maxBytes``): where the read stops;
* ``pip-torch``, ``sbom``: the small shapes of the tests (a torch wheel without
  ``CUDA_VERSION``; an image whose BuildKit SBOM answers before any layer);
* ``cuda-base+compat``: a base layer built like ``nvidia/cuda``'s, with a 30 MB compat
  ``libcuda.so`` carrying its note (a real shared object: gcc and objcopy; left out without
  them), read to its end;
* ``raw-weights`` (the baseline): the same weights layer fetched and hashed, nothing unpacked;
* ``gzip-weights-then-runtime``: the weights-then-runtime layer as registries serve most layers,
  ``tar+gzip`` (Docker's and BuildKit's default compression; zstd is opt-in), compressed at
  gzip's default level 6 from the same incompressible bytes (so about as large as the plain
  tar), read through with the raised budgets: what inflating adds to walking the archive;
* ``gzip-libs-over-runtime``: a ``tar+gzip`` layer of cuDNN-like libraries (``--gib`` of them,
  in four files, content of about 4 bits per byte, so about half the size compressed, as shared
  libraries compress) above a small runtime layer: the read inflates the libraries' layer to
  its end, finds no runtime, and answers from the layer below;
* ``raw-gzip-weights``: the gzip weights layer fetched and hashed (its baseline).

A generated gzip layer is a sequence of gzip members (RFC 1952 allows several; every reader,
Python's ``gzip`` and Go's included, inflates them as one stream): each distinct piece (a tar
header, the tail) is compressed once, and the 4 MiB block repeated as the body is compressed
once and its member sent as many times as the body needs, so generating a large layer costs
no compression per read. Inflating it costs what inflating one member of the same bytes does
(a member's window starts empty, every 4 MiB).

Reported per image: bytes fetched, layers read, seconds, CPU seconds, MiB/s, the reader's RSS
before the read and its peak, and ratios against the baseline (seconds, CPU) and the idle RSS.

Run ``python -m benchmarks.layerreads [--gib 10] [--quick] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import http.server
import json
import os
import random
import re
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import Table, loadavg, progress, report

__all__ = ["main", "run"]

_BLOCK = random.Random(29).randbytes(4 * 1024 * 1024)
_CHUNK = 1024 * 1024
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
PLAIN = "application/vnd.oci.image.layer.v1.tar"
GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"


# --------------------------------------------------------------------------- synthetic layers


def _weights(size: int) -> Iterator[bytes]:
    """``size`` bytes of the random block repeated (incompressible within any window)."""
    left = size
    while left > 0:
        piece = _BLOCK[: min(left, len(_BLOCK))]
        left -= len(piece)
        yield piece


def _member(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = 0o644
    return info.tobuf(format=tarfile.PAX_FORMAT)


def weights_layer(size: int, runtime_after: bool) -> Iterator[bytes]:
    """A plain tar: ``data/weights.bin`` of ``size`` bytes, then (``runtime_after``) a
    ``libcudart.so.12.8.90``, then the end of the archive."""
    yield _member("data/weights.bin", size)
    yield from _weights(size)
    if size % 512:
        yield b"\0" * (512 - size % 512)
    if runtime_after:
        body = b"cudart 12.8"
        yield _member("usr/lib/x86_64-linux-gnu/libcudart.so.12.8.90", len(body))
        yield body + b"\0" * (512 - len(body))
    yield b"\0" * 1024


def _code_block() -> bytes:
    """4 MiB of bytes with 4 bits of entropy each (16 values): about what shared libraries
    compress to (half), and inflated through Huffman codes, as their layers are."""
    packed = random.Random(30).randbytes(len(_BLOCK) // 2)
    out = bytearray(len(_BLOCK))
    out[0::2] = packed.translate(bytes((b >> 4) * 17 for b in range(256)))
    out[1::2] = packed.translate(bytes((b & 15) * 17 for b in range(256)))
    return bytes(out)


def _gz(data: bytes) -> bytes:
    """One gzip member at gzip's default level (6), with no time stamp (the same bytes each
    run, so the same digest)."""
    return gzip.compress(data, compresslevel=6, mtime=0)


Segments = tuple[tuple[bytes, int], ...]  # (a gzip member, how many times it is sent)


def gzip_weights_segments(size: int, runtime_after: bool) -> Segments:
    """``weights_layer`` as ``tar+gzip``: ``size`` is rounded down to whole 4 MiB blocks."""
    blocks = max(1, size // len(_BLOCK))
    tail = b""
    if runtime_after:
        body = b"cudart 12.8"
        tail = _member("usr/lib/x86_64-linux-gnu/libcudart.so.12.8.90", len(body))
        tail += body + b"\0" * (512 - len(body))
    return (
        (_gz(_member("data/weights.bin", blocks * len(_BLOCK))), 1),
        (_gz(_BLOCK), blocks),
        (_gz(tail + b"\0" * 1024), 1),
    )


_CUDNN = ("adv", "cnn", "engines_precompiled", "ops")


def _lib_blocks(size: int) -> int:
    return max(1, size // len(_BLOCK) // len(_CUDNN))


def gzip_libs_segments(size: int) -> Segments:
    """A ``tar+gzip`` layer of four cuDNN-like libraries sharing ``size`` bytes (no name that
    tells a CUDA: cuDNN's libraries do not)."""
    blocks = _lib_blocks(size)
    code = _gz(_code_block())
    parts: list[tuple[bytes, int]] = []
    for name in _CUDNN:
        path = f"usr/lib/x86_64-linux-gnu/libcudnn_{name}.so.9.10.2"
        parts += [(_gz(_member(path, blocks * len(_BLOCK))), 1), (code, blocks)]
    return (*parts, (_gz(b"\0" * 1024), 1))


@dataclass(frozen=True)
class Blob:
    """A blob the registry serves: small ones held, a weights layer generated each time."""

    digest: str
    size: int
    media: str
    data: bytes = b""
    weights: int = -1  # the weights' size, or -1 for a held blob
    runtime_after: bool = False
    segments: Segments = ()  # a generated gzip layer

    def chunks(self) -> Iterator[bytes]:
        if self.segments:
            for member, times in self.segments:
                for _ in range(times):
                    yield member
            return
        if self.weights < 0:
            yield self.data
            return
        buffer = bytearray()
        for piece in weights_layer(self.weights, self.runtime_after):
            buffer += piece
            while len(buffer) >= _CHUNK:
                yield bytes(buffer[:_CHUNK])
                del buffer[:_CHUNK]
        if buffer:
            yield bytes(buffer)


def held(data: bytes, media: str) -> Blob:
    return Blob("sha256:" + hashlib.sha256(data).hexdigest(), len(data), media, data)


def generated(size: int, runtime_after: bool) -> Blob:
    """A weights layer, its digest and size computed by streaming it once."""
    blob = Blob("", 0, PLAIN, weights=size, runtime_after=runtime_after)
    digest, total = hashlib.sha256(), 0
    for chunk in blob.chunks():
        digest.update(chunk)
        total += len(chunk)
    return Blob(
        "sha256:" + digest.hexdigest(), total, PLAIN, weights=size, runtime_after=runtime_after
    )


def generated_gzip(segments: Segments) -> Blob:
    """A generated ``tar+gzip`` layer, its digest and size computed by streaming it once."""
    digest, total = hashlib.sha256(), 0
    for member, times in segments:
        for _ in range(times):
            digest.update(member)
        total += len(member) * times
    return Blob("sha256:" + digest.hexdigest(), total, GZIP, segments=segments)


# --------------------------------------------------------------------------- the images


def _small_layers() -> dict[str, Any]:
    from tests.support.layers import ZSTD_LAYER, Link, dist_info, layer

    site = "usr/local/lib/python3.12/site-packages"
    return {
        "base": layer({"etc/os-release": b"ID=ubuntu\nVERSION_ID=24.04\n"}),
        "runners": layer(
            {
                "usr/lib/ollama/cuda_v12/libcudart.so.12": Link("libcudart.so.12.8.90"),
                "usr/lib/ollama/cuda_v12/libcudart.so.12.8.90": b"cudart 12",
                "usr/lib/ollama/cuda_v13/libcudart.so.13.0.96": b"cudart 13",
            },
            ZSTD_LAYER,
        ),
        "torch": layer(
            dict(
                [
                    dist_info("nvidia-cuda-runtime-cu12", "12.6.77", site),
                    dist_info("torch", "2.6.0+cu126", site),
                    (f"{site}/torch/version.py", b"cuda: Optional[str] = '12.6'\n"),
                ]
            )
        ),
        "app": layer({"app/serve.py": b"print('serving')\n"}),
    }


@dataclass
class Catalog:
    """The images by reference (``repo:tag``), the blobs by digest, the manifests by ref."""

    manifests: dict[str, tuple[bytes, str]]
    blobs: dict[str, Blob]


def _add(
    catalog: Catalog, ref: str, layers: list[Blob], index_extra: list[Blob] | None = None
) -> None:
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Env": ["PATH=/usr/bin"]},
            "rootfs": {"type": "layers", "diff_ids": []},
        }
    ).encode()
    cfg = held(config, OCI_CONFIG)
    for blob in (cfg, *layers):
        catalog.blobs[blob.digest] = blob
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": cfg.digest, "size": cfg.size},
            "layers": [{"mediaType": b.media, "digest": b.digest, "size": b.size} for b in layers],
        }
    ).encode()
    catalog.manifests[ref] = (manifest, OCI_MANIFEST)
    digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    catalog.manifests[f"{ref.partition(':')[0]}:{digest}"] = (manifest, OCI_MANIFEST)
    if index_extra is not None:
        _with_sbom(catalog, ref, digest, len(manifest))


def _with_sbom(catalog: Catalog, ref: str, digest: str, size: int) -> None:
    """An index holding the image and a BuildKit SBOM attestation naming torch+cu128."""
    from tests.support.layers import spdx_statement

    statement = held(
        spdx_statement(digest, [("pypi", "torch", "2.7.1+cu128")]), "application/vnd.in-toto+json"
    )
    empty = held(b"{}", "application/vnd.oci.empty.v1+json")
    for blob in (statement, empty):
        catalog.blobs[blob.digest] = blob
    attestation = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": empty.media, "digest": empty.digest, "size": empty.size},
            "layers": [
                {
                    "mediaType": "application/vnd.in-toto+json",
                    "digest": statement.digest,
                    "size": statement.size,
                    "annotations": {"in-toto.io/predicate-type": "https://spdx.dev/Document"},
                }
            ],
        }
    ).encode()
    att_digest = "sha256:" + hashlib.sha256(attestation).hexdigest()
    repo = ref.partition(":")[0]
    catalog.manifests[f"{repo}:{att_digest}"] = (attestation, OCI_MANIFEST)
    index = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": [
                {"mediaType": OCI_MANIFEST, "digest": digest, "size": size,
                 "platform": {"architecture": "amd64", "os": "linux"}},
                {"mediaType": OCI_MANIFEST, "digest": att_digest, "size": len(attestation),
                 "platform": {"architecture": "unknown", "os": "unknown"},
                 "annotations": {"vnd.docker.reference.type": "attestation-manifest",
                                 "vnd.docker.reference.digest": digest}},
            ],
        }
    ).encode()  # fmt: skip
    catalog.manifests[ref] = (index, OCI_INDEX)


def catalog(size: int) -> Catalog:
    """Every image of the benchmark, for weights of ``size`` bytes."""
    small = {k: held(*v) for k, v in _small_layers().items()}
    made = Catalog({}, {})
    progress(f"hashing the synthetic weights layers ({size / 2**30:.1f} GiB each)")
    plain, behind = generated(size, False), generated(size, True)
    _add(made, "ml/runners-over-weights:1", [small["base"], plain, small["runners"]])
    _add(made, "ml/weights-then-runtime:1", [small["base"], behind])
    _add(made, "ml/pip-torch:1", [small["base"], small["torch"], small["app"]])
    _add(made, "ml/sbom:1", [small["base"], small["app"]], index_extra=[])
    made.blobs[plain.digest] = plain
    progress("hashing the synthetic gzip layers")
    gz_behind = generated_gzip(gzip_weights_segments(size, True))
    _add(made, "ml/gzip-weights-then-runtime:1", [small["base"], gz_behind])
    cuda_runtime = held(*_runtime_layer())
    libs = generated_gzip(gzip_libs_segments(size))
    _add(made, "ml/gzip-libs-over-runtime:1", [small["base"], cuda_runtime, libs])
    compat = _compat_layer()
    if compat is not None:
        _add(made, "ml/cuda-base-compat:1", [small["base"], held(*compat), small["app"]])
    return made


def _runtime_layer() -> tuple[bytes, str]:
    """The small ``tar+gzip`` runtime layer below the libraries (as ``nvidia/cuda``'s
    runtime layer lies below its cuDNN layer)."""
    from tests.support.layers import layer

    lib = "usr/local/cuda-12.8/targets/x86_64-linux/lib"
    return layer(
        {
            f"{lib}/libcublas.so.12.8.4.1": b"cublas",
            f"{lib}/libcudart.so.12.8.90": b"cudart",
        }
    )


def _can_build_compat() -> bool:
    import shutil

    return shutil.which("gcc") is not None and shutil.which("objcopy") is not None


def _compat_layer() -> tuple[bytes, str] | None:
    """A layer like ``nvidia/cuda``'s base: dpkg's status, the runtime, a 30 MB compat
    ``libcuda.so`` with its note; ``None`` without gcc and objcopy."""
    import tempfile

    if not _can_build_compat():
        return None
    from tests.support.layers import compat_libcuda, compat_note, dpkg_status, layer

    with tempfile.TemporaryDirectory() as tmp:
        note = compat_note("12.9", [535, 550, 560, 565, 570, 575])
        library = compat_libcuda(Path(tmp), note, padding=30_000_000)
    return layer(
        {
            "var/lib/dpkg/status": dpkg_status(
                [("cuda-cudart-12-9", "12.9.79-1", "install ok installed")]
            ),
            "usr/local/cuda-12.9/compat/libcuda.so.575.57.08": library,
            "usr/local/cuda-12.9/targets/x86_64-linux/lib/libcudart.so.12.9.79": b"cudart",
        }
    )


# --------------------------------------------------------------------------- the registry


def serve(size: int, port_file: Path) -> None:
    """The synthetic registry (the child process): serves until killed."""
    images = catalog(size)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            return

        def do_GET(self) -> None:
            path = self.path.partition("?")[0]
            if path in ("/v2/", "/v2"):
                return self._send(200, b"{}", "application/json")
            found = re.fullmatch(r"/v2/(.+)/(manifests|blobs)/([^/]+)", path)
            if found is None:
                return self._send(404, b"{}", "application/json")
            repo, what, ref = found.groups()
            if what == "manifests":
                key = f"{repo}:{ref}"
                if key not in images.manifests:
                    return self._send(
                        404, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}', "application/json"
                    )
                body, media = images.manifests[key]
                digest = "sha256:" + hashlib.sha256(body).hexdigest()
                return self._send(200, body, media, digest)
            blob = images.blobs.get(ref)
            if blob is None:
                return self._send(404, b'{"errors":[{"code":"BLOB_UNKNOWN"}]}', "application/json")
            self.send_response(200)
            self.send_header("content-type", "application/octet-stream")
            self.send_header("content-length", str(blob.size))
            self.send_header("docker-content-digest", blob.digest)
            self.end_headers()
            try:
                for chunk in blob.chunks():
                    self.wfile.write(chunk)
            except OSError:
                return None
            return None

        def _send(self, code: int, body: bytes, media: str, digest: str = "") -> None:
            self.send_response(code)
            self.send_header("content-type", media)
            self.send_header("content-length", str(len(body)))
            if digest:
                self.send_header("docker-content-digest", digest)
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port_file.write_text(str(server.server_address[1]))
    server.serve_forever()


# --------------------------------------------------------------------------- one read


def _rss_kib() -> int:
    status = Path("/proc/self/status").read_text()
    found = re.search(r"^VmRSS:\s+(\d+) kB$", status, re.MULTILINE)
    return int(found.group(1)) if found else 0


def read_one(host: str, image: str, budget_bytes: int, raw_digest: str) -> dict[str, Any]:
    """One read in this (fresh) process: ``raw_digest`` fetches and hashes that blob only. A
    budget over the scan's default unpacked limit (8 GiB) raises that limit with it."""
    import resource

    import httpx

    from cudasched.knowledge.layerscan import ScanLimits
    from cudasched.registry.client import RegistryClient
    from cudasched.registry.layers import LayerBudget, read_contents

    before = _rss_kib()
    started, cpu = time.perf_counter(), time.process_time()
    if raw_digest:
        fetched = 0
        digest = hashlib.sha256()
        with httpx.stream("GET", f"http://{host}/v2/{image}/blobs/{raw_digest}", timeout=60) as r:
            for chunk in r.iter_raw(256 * 1024):
                digest.update(chunk)
                fetched += len(chunk)
        answer = {"cuda": None, "layersRead": 1, "bytesRead": fetched, "stopped": ""}
    else:
        with RegistryClient(plain_http=[host]) as client:
            scan = ScanLimits(max_unpacked_bytes=max(ScanLimits().max_unpacked_bytes, budget_bytes))
            budget = LayerBudget(max_bytes=budget_bytes, deadline_seconds=3600, scan=scan)
            contents = read_contents(client, f"{host}/{image}", budget=budget)
        answer = contents.to_dict()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "cuda": answer["cuda"],
        "layers_read": answer["layersRead"],
        "bytes": answer["bytesRead"],
        "stopped": answer["stopped"] or "",
        "seconds": seconds,
        "cpu": cpu,
        "rss_before_mib": before / 1024,
        "rss_peak_mib": peak / 1024,
    }


@dataclass
class Read:
    name: str
    budget: int
    cuda: str | None
    layers_read: int
    bytes: int
    stopped: str
    seconds: float
    cpu: float
    rss_before_mib: float
    rss_peak_mib: float


def _child(host: str, image: str, budget: int, raw: str = "") -> dict[str, Any]:
    code = (
        "import json,sys; from benchmarks.layerreads import read_one; "
        f"print(json.dumps(read_one({host!r}, {image!r}, {budget}, {raw!r})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- the run


def _size(count: int) -> str:
    if count >= 2**30:
        return f"{count / 2**30:.2f} GiB"
    if count >= 2**20:
        return f"{count / 2**20:.1f} MiB"
    return f"{count / 1024:.1f} KiB"


def _why(stopped: str) -> str:
    """The end of a stop reason (the budget), without the layer's digest."""
    return stopped.rpartition(": ")[2] if stopped else ""


@dataclass
class Result:
    gib: float
    reads: list[Read]
    ratios: dict[str, float]

    def table(self) -> str:
        table = Table(
            ["image", "budget", "CUDA", "layers", "fetched", "s", "CPU s", "MiB/s (CPU)",
             "RSS before MiB", "RSS peak MiB", "stopped"]
        )  # fmt: skip
        for r in self.reads:
            table.add(
                r.name, f"{r.budget / 2**30:.1f} GiB", r.cuda or "-", r.layers_read,
                _size(r.bytes), r.seconds, r.cpu, r.bytes / 2**20 / max(r.cpu, 1e-9),
                r.rss_before_mib, r.rss_peak_mib, _why(r.stopped),
            )  # fmt: skip
        ratios = Table(["ratio", "value"])
        for key, value in self.ratios.items():
            ratios.add(key, value)
        return table.render() + "\n\n" + ratios.render()


def run(gib: float = 10.0, budget_gib: float = 2.0) -> Result:
    size = int(gib * 2**30)
    port_file = Path(f"/tmp/cudasched-layerreads-{os.getpid()}.port")
    port_file.unlink(missing_ok=True)
    code = (
        "from benchmarks.layerreads import serve; from pathlib import Path; "
        f"serve({size}, Path({str(port_file)!r}))"
    )
    root = Path(__file__).resolve().parents[1]
    server = subprocess.Popen([sys.executable, "-c", code], cwd=root)
    try:
        while not port_file.exists():
            if server.poll() is not None:
                raise RuntimeError("the synthetic registry exited")
            time.sleep(0.2)
        time.sleep(0.2)
        host = f"127.0.0.1:{port_file.read_text().strip()}"
        progress(f"synthetic registry at {host}")
        big = int((gib + 1) * 2**30)
        default = int(budget_gib * 2**30)
        raw = _largest_layer(host, "ml/runners-over-weights:1")
        raw_gz = _largest_layer(host, "ml/gzip-weights-then-runtime:1")
        plan = [
            ("raw-weights", "ml/runners-over-weights", big, raw),
            ("runners-over-weights", "ml/runners-over-weights:1", default, ""),
            ("weights-then-runtime", "ml/weights-then-runtime:1", big, ""),
            ("raw-gzip-weights", "ml/gzip-weights-then-runtime", big, raw_gz),
            ("gzip-weights-then-runtime", "ml/gzip-weights-then-runtime:1", big, ""),
            ("gzip-libs-over-runtime", "ml/gzip-libs-over-runtime:1", big, ""),
            ("weights-budget", "ml/weights-then-runtime:1", default, ""),
            ("pip-torch", "ml/pip-torch:1", default, ""),
            ("sbom", "ml/sbom:1", default, ""),
        ]
        if _can_build_compat():
            plan.append(("cuda-base+compat", "ml/cuda-base-compat:1", default, ""))
        reads = []
        for name, image, budget, blob in plan:
            progress(f"reading {name}")
            found = _child(host, image, budget, blob)
            reads.append(Read(name, budget, **found))
    finally:
        server.kill()
        server.wait(10)
        port_file.unlink(missing_ok=True)
    by = {r.name: r for r in reads}
    baseline, slow = by["raw-weights"], by["weights-then-runtime"]
    ratios = {
        "weights answered / raw fetch+hash (seconds)": slow.seconds / baseline.seconds,
        "weights answered / raw fetch+hash (CPU)": slow.cpu / max(baseline.cpu, 1e-9),
        "peak RSS, weights answered / idle reader": slow.rss_peak_mib / slow.rss_before_mib,
        "peak RSS added by reading the weights (MiB)": slow.rss_peak_mib - slow.rss_before_mib,
    }
    gz, raw_gz = by["gzip-weights-then-runtime"], by["raw-gzip-weights"]
    libs = by["gzip-libs-over-runtime"]
    ratios.update(
        {
            "gzip weights answered / plain weights answered (CPU)": gz.cpu / max(slow.cpu, 1e-9),
            "gzip weights answered / raw gzip fetch+hash (CPU)": gz.cpu / max(raw_gz.cpu, 1e-9),
            "gzip libraries read, uncompressed MiB per CPU s": _lib_blocks(size)
            * len(_CUDNN)
            * len(_BLOCK)
            / 2**20
            / max(libs.cpu, 1e-9),
            "peak RSS added by reading the gzip weights (MiB)": gz.rss_peak_mib - gz.rss_before_mib,
        }
    )
    return Result(gib, reads, ratios)


def _largest_layer(host: str, ref: str) -> str:
    """The digest of an image's largest layer (the weights, which the baseline fetches)."""
    import httpx

    repo, _, tag = ref.partition(":")
    manifest = httpx.get(f"http://{host}/v2/{repo}/manifests/{tag}", timeout=30).json()
    return str(max(manifest["layers"], key=lambda d: d["size"])["digest"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=10.0, help="size of the weights layers")
    parser.add_argument("--budget-gib", type=float, default=2.0, help="the default byte budget")
    parser.add_argument("--quick", action="store_true", help="0.25 GiB weights, 0.1 GiB budget")
    parser.add_argument("--json", help="also write the numbers as JSON")
    args = parser.parse_args(argv)
    gib, budget = (0.25, 0.1) if args.quick else (args.gib, args.budget_gib)
    before = loadavg()
    result = run(gib, budget)
    settings = {"gib": gib, "budget_gib": budget, "load before": before, "load after": loadavg()}
    data = {
        "settings": settings,
        "reads": [asdict(r) for r in result.reads],
        "ratios": result.ratios,
    }
    report("layerreads", argv, settings, result.table(), args.json, data)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
