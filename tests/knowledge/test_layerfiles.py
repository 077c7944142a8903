"""What one file of a layer says: versioned library names, Python distributions, torch's
version file, conda records, dpkg's status and rpm's sqlite database."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from cudasched.knowledge.layerfiles import name_facts, package_cuda, probe, read_facts
from tests.support.layers import dist_info, dpkg_status, rpmdb_sqlite
from tests.support.versions import cv

LAYER = "sha256:" + "a" * 64


def facts_of(path: str, data: bytes) -> list[tuple[str, str, str, bool]]:
    found = probe(path)
    assert found is not None, path
    facts, note = read_facts(found, path, data, LAYER)
    assert note == ""
    return [(f.kind, f.what, str(f.cuda), f.floor) for f in facts]


def test_versioned_runtime_libraries_name_their_cuda() -> None:
    cudart = name_facts("usr/lib/ollama/cuda_v12/libcudart.so.12.8.90", LAYER)
    nvrtc = name_facts("usr/local/cuda-13.0/lib64/libnvrtc.so.13.0.48", LAYER)
    cublas = name_facts("usr/lib/ollama/cuda_v13/libcublasLt.so.13.0.2.14", LAYER)
    assert [(f.what, f.cuda, f.floor) for f in cudart] == [
        ("libcudart.so.12.8.90", cv("12.8"), False)
    ]
    assert [(f.cuda, f.floor) for f in nvrtc] == [(cv("13.0"), False)]
    # cuBLAS is versioned apart from the toolkit: its major only, as a floor.
    assert [(f.cuda, f.floor) for f in cublas] == [(cv("13.0"), True)]
    # Symlinks' shorter names and other libraries say nothing.
    assert name_facts("usr/lib/libcudart.so.12", LAYER) == []
    assert name_facts("usr/lib/libcudnn.so.9.1.0", LAYER) == []


@pytest.mark.parametrize(
    ("ecosystem", "name", "version", "expected"),
    [
        ("pip", "nvidia-cuda-runtime-cu12", "12.4.127", ("12.4", False)),
        ("pip", "nvidia_cuda_nvrtc_cu12", "12.8.93", ("12.8", False)),
        ("pip", "nvidia-cuda-runtime", "13.0.96", ("13.0", False)),
        ("pip", "nvidia-cublas-cu12", "12.8.4.1", ("12.0", True)),
        ("pip", "torch", "2.5.1+cu124", ("12.4", False)),
        ("pip", "torch", "2.5.1+cpu", None),
        ("pip", "torch", "2.7.0", None),  # PyPI's wheel: its nvidia-* dependencies say
        ("conda", "cuda-cudart", "12.4.127", ("12.4", False)),
        ("conda", "pytorch-cuda", "12.1", ("12.1", False)),
        ("conda", "libcublas", "12.4.5.8", ("12.0", True)),
        ("deb", "cuda-cudart-12-8", "12.8.90-1", ("12.8", False)),
        ("deb", "libcublas-12-4", "12.4.5.8-1", ("12.4", False)),
        ("deb", "libcudart12", "12.0.146~12.0.1-4build4", ("12.0", False)),
        ("rpm", "cuda-nvrtc-13-0", "13.0.48", ("13.0", False)),
        ("deb", "cuda-compat-12-8", "570.124.06-1", None),
        ("deb", "libc6", "2.39-0ubuntu8", None),
    ],
)
def test_packages_that_name_a_cuda(
    ecosystem: str, name: str, version: str, expected: tuple[str, bool] | None
) -> None:
    found = package_cuda(ecosystem, name, version)
    assert (None if found is None else (str(found[0]), found[1])) == expected


def test_python_distributions_and_torch_version_file() -> None:
    path, body = dist_info("torch", "2.5.1+cu124")
    assert facts_of(path, body) == [("torch", "torch 2.5.1+cu124", "12.4", False)]
    path, body = dist_info("nvidia-cuda-runtime-cu12", "12.4.127")
    assert facts_of(path, body) == [("pip", "nvidia-cuda-runtime-cu12 12.4.127", "12.4", False)]
    # METADATA's own Version wins over the folder name.
    folder = "usr/lib/python3/dist-packages/nvidia_cuda_runtime_cu12-0.0.dist-info/METADATA"
    assert facts_of(folder, b"Name: nvidia-cuda-runtime-cu12\nVersion: 12.6.77\n")[0][2] == "12.6"
    version_py = "opt/conda/lib/python3.11/site-packages/torch/version.py"
    assert facts_of(version_py, b"__version__ = '2.4.0'\ncuda: Optional[str] = '12.4'\n") == [
        ("torch", "torch.version.cuda 12.4", "12.4", False)
    ]
    assert facts_of(version_py, b"cuda = '11.8'\n")[0][2] == "11.8"
    assert facts_of(version_py, b"cuda: Optional[str] = None\n") == []
    # Distributions that name no CUDA are not even read.
    assert probe("usr/lib/python3/site-packages/numpy-2.0.0.dist-info/METADATA") is None


def test_conda_records() -> None:
    path = "opt/conda/conda-meta/cuda-cudart-12.4.127-0.json"
    body = orjson.dumps({"name": "cuda-cudart", "version": "12.4.127", "files": []})
    assert facts_of(path, body) == [("conda", "cuda-cudart 12.4.127", "12.4", False)]
    assert probe("opt/conda/conda-meta/numpy-2.0.0-py311_0.json") is None


def test_dpkg_status_counts_installed_packages_only() -> None:
    status = dpkg_status(
        [
            ("cuda-cudart-12-1", "12.1.105-1", "install ok installed"),
            ("cuda-nvrtc-12-9", "12.9.86-1", "deinstall ok config-files"),
            ("libc6", "2.35", "install ok installed"),
        ]
    )
    assert facts_of("var/lib/dpkg/status", status) == [
        ("deb", "cuda-cudart-12-1 12.1.105-1", "12.1", False)
    ]


def test_rpm_sqlite_database(tmp_path: Path) -> None:
    db = rpmdb_sqlite([("cuda-cudart-12-8", "12.8.90"), ("bash", "5.1.8")], tmp_path)
    path = "var/lib/rpm/rpmdb.sqlite"
    assert facts_of(path, db) == [("rpm", "cuda-cudart-12-8 12.8.90", "12.8", False)]
    # A database that is not one is a note, not a crash.
    found = probe(path)
    assert found is not None
    facts, note = read_facts(found, path, b"SQLite format 3\0" + b"\xff" * 200, LAYER)
    assert facts == [] and "not read" in note
    facts, note = read_facts(found, path, b"garbage", LAYER)
    assert facts == [] and "not an SQLite database" in note
    # Berkeley DB and ndb databases are named, never guessed at.
    assert probe("var/lib/rpm/Packages") is not None
