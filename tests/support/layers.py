"""Images with real layers for the tests: tar archives built here (gzip, zstd or plain), laid
out like the images people run (Ollama's runners, a pip torch install, NVIDIA's compat
library, dpkg and rpm databases), a compat ``libcuda.so`` that is a real ELF shared object
(gcc, then objcopy adds the note), a BuildKit-shaped SBOM attestation, and pushing all of it
to the real registry of :mod:`tests.support.registry`.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import shutil
import sqlite3
import struct
import subprocess
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import zstandard

from tests.support.registry import OCI_CONFIG, OCI_INDEX, OCI_MANIFEST, Registry

GZIP_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
ZSTD_LAYER = "application/vnd.oci.image.layer.v1.tar+zstd"
PLAIN_LAYER = "application/vnd.oci.image.layer.v1.tar"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"


@dataclass(frozen=True)
class Link:
    """A symbolic link in a layer."""

    target: str


WHITEOUT = object()  # a deleted path: the layer gets ``.wh.<name>``
OPAQUE = object()  # an opaque directory: the layer gets ``<dir>/.wh..wh..opq``


def tar_bytes(files: Mapping[str, Any]) -> bytes:
    """A tar archive of ``files`` (path -> bytes, :class:`Link`, ``WHITEOUT``, ``OPAQUE``),
    in the given order, as a layer holds them."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, content in files.items():
            directory, _, base = path.rpartition("/")
            if content is WHITEOUT:
                info = tarfile.TarInfo(f"{directory}/.wh.{base}".lstrip("/"))
                tar.addfile(info, io.BytesIO(b""))
            elif content is OPAQUE:
                tar.addfile(tarfile.TarInfo(f"{path}/.wh..wh..opq"), io.BytesIO(b""))
            elif isinstance(content, Link):
                info = tarfile.TarInfo(path)
                info.type = tarfile.SYMTYPE
                info.linkname = content.target
                tar.addfile(info)
            else:
                info = tarfile.TarInfo(path)
                info.size = len(content)
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(content))
    return out.getvalue()


def compress(tar: bytes, media: str = GZIP_LAYER) -> bytes:
    if media in (GZIP_LAYER, DOCKER_LAYER):
        return gzip.compress(tar, compresslevel=1, mtime=0)
    if media == ZSTD_LAYER:
        return zstandard.ZstdCompressor(level=1).compress(tar)
    return tar


def layer(files: Mapping[str, Any], media: str = GZIP_LAYER) -> tuple[bytes, str]:
    """A layer blob and its media type."""
    return compress(tar_bytes(files), media), media


# ---------------------------------------------------------------------- what layers hold


def dist_info(name: str, version: str, site: str = "usr/local/lib/python3.12/site-packages"):
    """A Python distribution's METADATA at its dist-info path."""
    folder = f"{site}/{name.replace('-', '_')}-{version}.dist-info"
    body = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nA package.\n"
    return f"{folder}/METADATA", body.encode()


def dpkg_status(packages: Sequence[tuple[str, str, str]]) -> bytes:
    """A dpkg status database of ``(package, version, status)``."""
    stanzas = [
        f"Package: {name}\nStatus: {status}\nArchitecture: amd64\nVersion: {version}\n"
        f"Description: {name}\n continued line\n"
        for name, version, status in packages
    ]
    return "\n".join(stanzas).encode()


def _rpm_header(name: str, version: str) -> bytes:
    """An rpm header blob (rpm lib/header.c: index count, data length, entries, data)."""
    data = name.encode() + b"\0" + version.encode() + b"\0"
    entries = [(1000, 6, 0, 1), (1001, 6, len(name) + 1, 1)]
    head = struct.pack(">ii", len(entries), len(data))
    return head + b"".join(struct.pack(">iiii", *e) for e in entries) + data


def rpmdb_sqlite(packages: Sequence[tuple[str, str]], tmp: Path) -> bytes:
    """An rpm sqlite database (the Packages table rpm lib/backend/sqlite.c creates) holding
    ``(name, version)`` headers."""
    path = tmp / "rpmdb.sqlite"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE IF NOT EXISTS 'Packages' (hnum INTEGER PRIMARY KEY AUTOINCREMENT,"
            "blob BLOB NOT NULL)"
        )
        db.executemany(
            "INSERT INTO Packages (blob) VALUES (?)", [(_rpm_header(n, v),) for n, v in packages]
        )
    return path.read_bytes()


def compat_note(cuda: str, drivers: Sequence[int]) -> bytes:
    """An ELF note (owner ``NVIDIA Corporation``, type 0) with the toolkit's JSON shape."""
    name = b"NVIDIA Corporation\0"
    desc = orjson.dumps(
        {"format": 1, "CUDA version": cuda, "driver": list(drivers), "device": [1, 2, 7, 8]}
    )

    def pad(b: bytes) -> bytes:
        return b + b"\0" * (-len(b) % 4)

    return struct.pack("<III", len(name), len(desc), 0) + pad(name) + pad(desc)


def need_toolchain() -> None:
    for tool in ("gcc", "objcopy"):
        if shutil.which(tool) is None:
            import os

            if os.environ.get("CI"):
                pytest.fail(f"{tool} is missing on CI (.ci/run installs it)")
            pytest.skip(f"{tool} not installed (apt-get install gcc binutils)")


def compat_libcuda(tmp: Path, note: bytes | None, *, padding: int = 0) -> bytes:
    """A real shared object built with gcc, with ``note`` added by objcopy as the section
    ``.note.cuda.fwd_compatibility`` (type SHT_NOTE, as objcopy types ``.note*``) and
    ``padding`` bytes of code data before it, so the library is as large as a real one."""
    need_toolchain()
    source = tmp / "compat.c"
    body = "int cuInit(unsigned int flags) { return (int)flags; }\n"
    if padding:
        body += f"const unsigned char cudasched_padding[{padding}] = {{1}};\n"
    source.write_text(body)
    library = tmp / "libcuda.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O0", "-o", str(library), str(source)],
        check=True,
        capture_output=True,
    )
    if note is not None:
        (tmp / "note.bin").write_bytes(note)
        subprocess.run(
            [
                "objcopy",
                "--add-section",
                f".note.cuda.fwd_compatibility={tmp / 'note.bin'}",
                "--set-section-flags",
                ".note.cuda.fwd_compatibility=readonly,data",
                str(library),
            ],
            check=True,
            capture_output=True,
        )
    return library.read_bytes()


def spdx_statement(subject: str, packages: Sequence[tuple[str, str, str]]) -> bytes:
    """A BuildKit SBOM: an in-toto statement whose predicate is an SPDX document listing
    ``(purl type, name, version)`` packages, each found at a path (``sourceInfo``)."""
    listed = [
        {
            "name": name,
            "SPDXID": f"SPDXRef-Package-{kind}-{name}",
            "versionInfo": version,
            "sourceInfo": f"acquired package info from installed package: /usr/{kind}/{name}",
            "externalRefs": [
                {
                    "referenceCategory": "PACKAGE-MANAGER",
                    "referenceType": "purl",
                    "referenceLocator": f"pkg:{kind}/{name}@{version.replace('+', '%2B')}",
                }
            ],
        }
        for kind, name, version in packages
    ]
    return orjson.dumps(
        {
            "_type": "https://in-toto.io/Statement/v0.1",
            "predicateType": "https://spdx.dev/Document",
            "subject": [{"name": "_", "digest": {"sha256": subject.partition(":")[2]}}],
            "predicate": {
                "spdxVersion": "SPDX-2.3",
                "SPDXID": "SPDXRef-DOCUMENT",
                "packages": listed,
            },
        }
    )


# ---------------------------------------------------------------------- pushing


#: An Ollama-style image's runner layer: no CUDA in the config, the CUDA runtimes it ships
#: (12.8 and 13.0) in its layers, the 12 one behind a symlink. Its CUDA, read from the layers,
#: is 12.8.
RUNNERS = layer(
    {
        "usr/lib/ollama/cuda_v12/libcudart.so.12": Link("libcudart.so.12.8.90"),
        "usr/lib/ollama/cuda_v12/libcudart.so.12.8.90": b"cudart 12",
        "usr/lib/ollama/cuda_v13/libcudart.so.13.0.96": b"cudart 13",
    },
    ZSTD_LAYER,
)


def push_layered(
    registry: Registry,
    repo: str,
    tag: str,
    layers: Sequence[tuple[bytes, str]],
    *,
    env: Sequence[str] = ("PATH=/usr/bin",),
    sbom: Sequence[tuple[str, str, str]] | None = None,
) -> str:
    """An image of ``layers`` (base layer first), tagged ``tag``; with ``sbom`` packages, an
    index holding the image and a BuildKit attestation manifest for it. The digest of the
    image's manifest."""
    diff_ids = ["sha256:" + hashlib.sha256(b"uncompressed").hexdigest() for _ in layers]
    config = orjson.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Env": list(env)},
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        }
    )
    config_digest = registry.push_blob(repo, config)
    descriptors = []
    for blob, media in layers:
        digest = registry.push_blob(repo, blob)
        descriptors.append({"mediaType": media, "digest": digest, "size": len(blob)})
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": config_digest, "size": len(config)},
        "layers": descriptors,
    }
    body = orjson.dumps(manifest)
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    if sbom is None:
        registry.push_manifest(repo, tag, manifest)
        return digest
    registry.push_manifest(repo, digest, manifest)
    statement = spdx_statement(digest, sbom)
    statement_digest = registry.push_blob(repo, statement)
    empty = b"{}"
    empty_digest = registry.push_blob(repo, empty)
    attestation = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": empty_digest,
            "size": len(empty),
        },
        "layers": [
            {
                "mediaType": "application/vnd.in-toto+json",
                "digest": statement_digest,
                "size": len(statement),
                "annotations": {"in-toto.io/predicate-type": "https://spdx.dev/Document"},
            }
        ],
    }
    attestation_body = orjson.dumps(attestation)
    attestation_digest = registry.push_manifest(
        repo, "sha256:" + hashlib.sha256(attestation_body).hexdigest(), attestation
    )
    index = {
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [
            {
                "mediaType": OCI_MANIFEST,
                "digest": digest,
                "size": len(body),
                "platform": {"os": "linux", "architecture": "amd64"},
            },
            {
                "mediaType": OCI_MANIFEST,
                "digest": attestation_digest,
                "size": len(attestation_body),
                "platform": {"os": "unknown", "architecture": "unknown"},
                "annotations": {
                    "vnd.docker.reference.type": "attestation-manifest",
                    "vnd.docker.reference.digest": digest,
                },
            },
        ],
    }
    registry.push_manifest(repo, tag, index)
    return digest
