"""What one file of an image says about its CUDA: which paths are worth reading
(:func:`probe`), the facts a file name alone gives (:func:`name_facts`: a CUDA runtime
library's versioned name), and the facts a file's bytes give (:func:`read_facts`: a Python
distribution's ``METADATA``, ``torch/version.py``, a conda package record, the dpkg status
database, the rpm sqlite database). Pure: bytes in, :class:`ContentFact` out; the walk over a
layer is :mod:`cudasched.knowledge.layerscan`, the compat library's note
:mod:`cudasched.knowledge.compatnote`.

Which packages name a CUDA, and how (:func:`package_cuda`): the CUDA runtime (``cudart``) and
NVRTC carry the toolkit's ``major.minor`` in their versions (12.8.57 and 12.8.61 in CUDA 12.8);
cuBLAS is versioned apart from the toolkit ("Starting with CUDA 11, the various components in
the toolkit are versioned independently", CUDA Toolkit release notes, section 1.1; CUDA 11.8
shipped cuBLAS 11.11), so its version gives only the CUDA major, a floor. Debian and RPM
packages of NVIDIA's repositories name the toolkit release they belong to
(``cuda-cudart-12-8``, ``libcublas-12-8``); a torch wheel names its CUDA in its local version
(``2.7.0+cu128``).
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import orjson

from cudasched.knowledge.imagecontents import ContentFact
from cudasched.vocab.errors import InputError
from cudasched.vocab.versions import CudaVersion, parse_cuda

__all__ = [
    "COMPAT_LIBCUDA",
    "Probe",
    "name_facts",
    "package_cuda",
    "probe",
    "read_facts",
]

_KIB = 1024
_MIB = 1024 * 1024

#: A compat ``libcuda.so`` where the container toolkit looks for one:
#: ``/usr/local/cuda/compat/libcuda.so.*.*`` (``cudacompat.go``'s ``defaultCudaCompatPath``);
#: in a layer the directory is the versioned one ``/usr/local/cuda`` links to.
COMPAT_LIBCUDA = re.compile(r"^usr/local/cuda(?:-\d+\.\d+)?/compat/libcuda\.so\.(\d+(?:\.\d+)+)$")

# Versioned runtime libraries (the real file; its symlinks carry fewer digits).
_LIBRARY_RE = re.compile(r"^lib(cudart|nvrtc|cublas|cublasLt)\.so\.(\d+)\.(\d+)\.(\d+)(?:\.\d+)?$")
_DIST_INFO_RE = re.compile(r"(?:^|/)([A-Za-z0-9_.]+)-([^/-]+)\.dist-info/METADATA$")
_TORCH_VERSION_RE = re.compile(r"(?:^|/)(?:site|dist)-packages/torch/version\.py$")
_CONDA_META_RE = re.compile(r"(?:^|/)conda-meta/([a-z0-9_.-]+?)-(\d[^-]*)-[^-]+\.json$")
_DPKG_STATUS = ("var/lib/dpkg/status",)
_DPKG_STATUS_D = re.compile(r"^var/lib/dpkg/status\.d/[^/]+$")
_RPM_SQLITE = ("var/lib/rpm/rpmdb.sqlite", "usr/lib/sysimage/rpm/rpmdb.sqlite")
_RPM_OTHER = (
    "var/lib/rpm/Packages",
    "var/lib/rpm/Packages.db",
    "usr/lib/sysimage/rpm/Packages.db",
)


@dataclass(frozen=True, slots=True)
class Probe:
    """A file worth reading: what it is (``kind``) and at most how many bytes of it are read
    (a file over ``cap`` is noted, not read)."""

    kind: str
    cap: int


def _norm(name: str) -> str:
    """A Python distribution name normalised as PEP 503 does."""
    return re.sub(r"[-_.]+", "-", name).lower()


# ---------------------------------------------------------------------------- packages

_PIP_RUNTIME = re.compile(r"^nvidia-cuda-(runtime|nvrtc)(?:-cu\d+)?$")
_PIP_CUBLAS = re.compile(r"^nvidia-cublas(?:-cu\d+)?$")
_SYSTEM_TOOLKIT = re.compile(r"^(cuda-cudart|cuda-nvrtc|libcublas)-(\d+)-(\d+)$")
_DEBIAN_CUDART = re.compile(r"^libcudart(\d+)$")
_CONDA_EXACT = frozenset({"cuda-cudart", "cuda-nvrtc", "cuda-version", "pytorch-cuda"})
_INTERESTING_PIP = re.compile(r"^(nvidia-cuda-runtime|nvidia-cuda-nvrtc|nvidia-cublas)|^torch$")
_LEADING_VERSION = re.compile(r"^(?:\d+:)?(\d+)\.(\d+)")


def _major_minor(version: str) -> CudaVersion | None:
    m = _LEADING_VERSION.match(version.strip())
    if m is None or int(m.group(1)) == 0:
        return None
    return CudaVersion(int(m.group(1)), int(m.group(2)))


def package_cuda(ecosystem: str, name: str, version: str) -> tuple[CudaVersion, bool, str] | None:
    """The CUDA a package names: ``(cuda, floor, why)``, or ``None`` when it names none.
    ``ecosystem`` is ``pip``, ``conda``, ``deb`` or ``rpm``."""
    if ecosystem == "pip":
        return _pip_cuda(_norm(name), version)
    if ecosystem == "conda":
        if name in _CONDA_EXACT:
            cuda = _major_minor(version)
            why = f"the conda package {name}'s version is its CUDA release"
            return (cuda, False, why) if cuda is not None else None
        if name == "libcublas":
            cuda = _major_minor(version)
            return (CudaVersion(cuda.major), True, _CUBLAS_WHY) if cuda is not None else None
        return None
    if ecosystem in ("deb", "rpm"):
        m = _SYSTEM_TOOLKIT.match(name)
        if m is not None and int(m.group(2)) > 0:
            why = f"NVIDIA's {ecosystem} package {name} belongs to CUDA {m.group(2)}.{m.group(3)}"
            return CudaVersion(int(m.group(2)), int(m.group(3))), False, why
        m = _DEBIAN_CUDART.match(name)
        if m is not None:
            upstream = version.split("~")[0]
            cuda = _major_minor(upstream)
            if cuda is not None and str(cuda.major) == m.group(1):
                return cuda, False, f"the distribution's {name} {version} is CUDA runtime {cuda}"
    return None


_CUBLAS_WHY = (
    "cuBLAS is versioned apart from the CUDA toolkit, so its version gives only the CUDA major "
    "(a floor)"
)


def _pip_cuda(name: str, version: str) -> tuple[CudaVersion, bool, str] | None:
    if _PIP_RUNTIME.match(name):
        cuda = _major_minor(version)
        why = f"{name}'s version follows the CUDA toolkit's major.minor"
        return (cuda, False, why) if cuda is not None else None
    if _PIP_CUBLAS.match(name):
        cuda = _major_minor(version)
        return (CudaVersion(cuda.major), True, _CUBLAS_WHY) if cuda is not None else None
    if name == "torch":
        _, plus, local = version.partition("+")
        if plus and re.fullmatch(r"cu\d{2,3}", local):
            with contextlib.suppress(InputError):
                cuda = parse_cuda(local)
                return cuda, False, f"the torch wheel's local version +{local} names its CUDA"
    return None


# ---------------------------------------------------------------------------- probes


def probe(path: str) -> Probe | None:
    """Whether the regular file at ``path`` (a layer's path, no leading ``/``) is read, and
    how much of it."""
    if path in _DPKG_STATUS or _DPKG_STATUS_D.match(path):
        return Probe("dpkg-status", 32 * _MIB)
    if path in _RPM_SQLITE:
        return Probe("rpm-sqlite", 64 * _MIB)
    if path in _RPM_OTHER:
        return Probe("rpm-other", 0)
    if COMPAT_LIBCUDA.match(path):
        return Probe("compat-libcuda", 0)  # read through compatnote's window, never whole
    if path.endswith("/METADATA"):
        m = _DIST_INFO_RE.search(path)
        if m is not None and _INTERESTING_PIP.match(_norm(m.group(1))):
            return Probe("pip-metadata", 1 * _MIB)
        return None
    if _TORCH_VERSION_RE.search(path):
        return Probe("torch-version", 64 * _KIB)
    m = _CONDA_META_RE.search(path)
    if m is not None and (m.group(1) in _CONDA_EXACT or m.group(1) == "libcublas"):
        return Probe("conda-meta", 8 * _MIB)
    return None


def name_facts(path: str, layer: str) -> list[ContentFact]:
    """Facts from a regular file's name alone: a versioned CUDA runtime library."""
    base = path.rsplit("/", 1)[-1]
    m = _LIBRARY_RE.match(base)
    if m is None or int(m.group(2)) == 0:
        return []
    lib, major, minor = m.group(1), int(m.group(2)), int(m.group(3))
    if lib in ("cudart", "nvrtc"):
        why = f"lib{lib}'s file name carries its version, which follows the toolkit's major.minor"
        return [ContentFact("library", base, CudaVersion(major, minor), layer, path, why)]
    return [ContentFact("library", base, CudaVersion(major), layer, path, _CUBLAS_WHY, True)]


def read_facts(found: Probe, path: str, data: bytes, layer: str) -> tuple[list[ContentFact], str]:
    """The facts of a probed file's bytes, and a note when the file could not be read
    (``""`` otherwise)."""
    try:
        if found.kind == "pip-metadata":
            return _pip_metadata(path, data, layer), ""
        if found.kind == "torch-version":
            return _torch_version(path, data, layer), ""
        if found.kind == "conda-meta":
            return _conda_meta(path, data, layer), ""
        if found.kind == "dpkg-status":
            return _dpkg_status(path, data, layer), ""
        if found.kind == "rpm-sqlite":
            return _rpm_sqlite(path, data, layer)
    except (UnicodeDecodeError, orjson.JSONDecodeError, ValueError, struct.error) as exc:
        return [], f"/{path} in {layer} not read: {type(exc).__name__}"
    return [], ""


def _fact(
    ecosystem: str, kind: str, name: str, version: str, layer: str, path: str
) -> list[ContentFact]:
    found = package_cuda(ecosystem, name, version)
    if found is None:
        return []
    cuda, floor, why = found
    return [ContentFact(kind, f"{name} {version}", cuda, layer, path, why, floor)]


def _pip_metadata(path: str, data: bytes, layer: str) -> list[ContentFact]:
    m = _DIST_INFO_RE.search(path)
    assert m is not None
    name, version = m.group(1), m.group(2)
    head = data.decode("utf-8", "replace").split("\n\n", 1)[0]
    for line in head.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() == "name" and value.strip():
            name = value.strip()
        elif key.strip().lower() == "version" and value.strip():
            version = value.strip()
    kind = "torch" if _norm(name) == "torch" else "pip"
    return _fact("pip", kind, name, version, layer, path)


_TORCH_CUDA_RE = re.compile(r"^cuda\s*(?::[^=\n]*)?=\s*['\"](\d+\.\d+)['\"]", re.MULTILINE)


def _torch_version(path: str, data: bytes, layer: str) -> list[ContentFact]:
    m = _TORCH_CUDA_RE.search(data.decode("utf-8", "replace"))
    if m is None:
        return []  # cuda = None: a build without CUDA
    why = "torch/version.py records the CUDA torch was built with"
    cuda = parse_cuda(m.group(1))
    return [ContentFact("torch", f"torch.version.cuda {m.group(1)}", cuda, layer, path, why)]


def _conda_meta(path: str, data: bytes, layer: str) -> list[ContentFact]:
    doc = orjson.loads(data)
    if not isinstance(doc, dict):
        return []
    name, version = doc.get("name"), doc.get("version")
    if not isinstance(name, str) or not isinstance(version, str):
        return []
    return _fact("conda", "conda", name, version, layer, path)


def _stanzas(text: str) -> Iterator[dict[str, str]]:
    """The dpkg status file's stanzas (RFC 822 style, continuation lines skipped)."""
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            if not line or line[0] in " \t":
                continue
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        if fields:
            yield fields


def _dpkg_status(path: str, data: bytes, layer: str) -> list[ContentFact]:
    facts: list[ContentFact] = []
    for fields in _stanzas(data.decode("utf-8", "replace")):
        status = fields.get("status", "install ok installed")  # status.d files carry none
        if not status.endswith(" installed"):
            continue
        name, version = fields.get("package", ""), fields.get("version", "")
        facts.extend(_fact("deb", "deb", name, version, layer, path))
    return facts


# rpm's header blob (rpm-software-management/rpm lib/header.c, hdrblobInit): two big-endian
# int32 (index entries, data length), the entries (tag, type, offset, count), the data store.
_RPMTAG_NAME, _RPMTAG_VERSION = 1000, 1001
_RPM_STRING = 6
_MAX_ENTRIES = 65536


def _rpm_header(blob: bytes) -> tuple[str, str] | None:
    if len(blob) < 8:
        return None
    entries, length = struct.unpack_from(">ii", blob, 0)
    start = 8 + 16 * entries
    if not (0 < entries <= _MAX_ENTRIES) or length < 0 or start + length > len(blob):
        return None
    found: dict[int, str] = {}
    for i in range(entries):
        tag, kind, offset, _count = struct.unpack_from(">iiii", blob, 8 + 16 * i)
        if tag in (_RPMTAG_NAME, _RPMTAG_VERSION) and kind == _RPM_STRING:
            if not 0 <= offset < length:
                return None
            at = start + offset
            end = blob.find(b"\0", at, start + length)
            if end < 0:
                return None
            found[tag] = blob[at:end].decode("utf-8", "replace")
    if _RPMTAG_NAME in found and _RPMTAG_VERSION in found:
        return found[_RPMTAG_NAME], found[_RPMTAG_VERSION]
    return None


def _rpm_sqlite(path: str, data: bytes, layer: str) -> tuple[list[ContentFact], str]:
    """rpm's sqlite database (``Packages`` table: ``hnum``, ``blob``; rpm lib/backend/sqlite.c),
    opened in memory, read only."""
    if len(data) < 100 or not data.startswith(b"SQLite format 3\0"):
        return [], f"/{path} in {layer} not read: not an SQLite database"
    image = bytearray(data)
    if image[18] == 2 and image[19] == 2:  # WAL mode: read it as a rollback-journal database
        image[18] = image[19] = 1
    connection = sqlite3.connect(":memory:")
    try:
        connection.deserialize(bytes(image))
        connection.execute("PRAGMA query_only = 1")
        connection.execute("PRAGMA cell_size_check = 1")
        rows = connection.execute("SELECT blob FROM Packages").fetchall()
    except sqlite3.Error as exc:
        return [], f"/{path} in {layer} not read: {exc}"
    finally:
        connection.close()
    facts: list[ContentFact] = []
    for (blob,) in rows:
        header = _rpm_header(blob) if isinstance(blob, bytes) else None
        if header is not None:
            facts.extend(_fact("rpm", "rpm", header[0], header[1], layer, path))
    return facts, ""
