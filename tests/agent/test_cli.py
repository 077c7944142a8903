"""``cudasched probe`` on every recording and ``cudasched agent --oneshot`` end to end.

NVML is replaced by the module-like fake from test_agent_nvml (installed as ``pynvml``) and
``PATH`` is emptied, so these tests behave the same on machines with and without a GPU.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cudasched.cli import app
from cudasched.vocab import labels as L
from tests.support.nvml import DRIVER_NOT_LOADED, LIBRARY_NOT_FOUND, FakeGpu, FakeNvml

DATA = Path(__file__).parents[1] / "data" / "nvidia-smi"
RECORDINGS = sorted(p.name for p in DATA.iterdir() if p.suffix in (".txt", ".xml"))
GOOD = [n for n in RECORDINGS if not n.startswith("error")]
BAD = [n for n in RECORDINGS if n.startswith("error")]

runner = CliRunner()


def invoke(*args: str, stdin: str | None = None) -> Any:
    return runner.invoke(app, list(args), input=stdin)


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeNvml:
    lib = FakeNvml(init_error=LIBRARY_NOT_FOUND)
    monkeypatch.setitem(sys.modules, "pynvml", lib)
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi either
    return lib


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeNvml:
    lib = FakeNvml(
        driver="570.124.06",
        cuda=12080,
        gpus=[FakeGpu(), FakeGpu(name="Tesla T4", cc=(7, 5), brand=2, mig=None)],
    )
    monkeypatch.setitem(sys.modules, "pynvml", lib)
    monkeypatch.setenv("PATH", str(tmp_path))
    return lib


@pytest.mark.parametrize("name", GOOD)
def test_probe_json_shape_for_every_recording(name: str) -> None:
    result = invoke("probe", "--from-nvidia-smi", str(DATA / name), "-o", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert {"driver_version", "cuda_version", "gpus", "labels"} <= set(doc)
    assert isinstance(doc["driver_version"], str)
    assert doc["cuda_version"] is None or isinstance(doc["cuda_version"], str)
    assert bool(doc["gpus"]) == (doc["missing"] is None), "GPUs listed unless reported missing"
    for gpu in doc["gpus"]:
        assert set(gpu) == {"name", "compute_capability", "memory_mib"}
        assert isinstance(gpu["name"], str) and gpu["name"]
        assert gpu["compute_capability"] is None or isinstance(gpu["compute_capability"], str)
        assert gpu["memory_mib"] is None or isinstance(gpu["memory_mib"], int)
    assert doc["labels"][L.DRIVER_VERSION] == doc["driver_version"]
    assert doc["labels"][L.PROBE_STATUS] == ("ok" if doc["missing"] is None else "partial")
    if doc["cuda_version"] is None:
        assert L.CUDA_CODE not in doc["labels"]
    else:
        assert doc["labels"][L.CUDA_VERSION] == doc["cuda_version"]


def test_partial_report_publishes_driver_facts_as_partial() -> None:
    result = invoke(
        "probe",
        "--from-nvidia-smi",
        str(DATA / "query-610-partial-no-gpu-section.txt"),
        "-o",
        "labels",
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "cudasched.io/cuda.code=13030",
        "cudasched.io/cuda.version=13.3",
        "cudasched.io/driver.branch=610",
        "cudasched.io/driver.code=610047000",
        "cudasched.io/driver.version=610.47",
        "cudasched.io/probe.reason=no-gpu-section",
        "cudasched.io/probe.status=partial",
    ]


@pytest.mark.parametrize("name", BAD)
def test_probe_on_error_output_exits_2_with_one_line(name: str) -> None:
    result = invoke("probe", "--from-nvidia-smi", str(DATA / name))
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cudasched: error:")


def test_probe_specific_values() -> None:
    result = invoke("probe", "--from-nvidia-smi", str(DATA / "plain-535-a100x2.txt"))
    doc = json.loads(result.stdout)
    assert doc["driver_version"] == "535.104.05" and doc["cuda_version"] == "12.2"
    assert len(doc["gpus"]) == 2
    assert doc["gpus"][0] == {
        "name": "NVIDIA A100-SXM4-80GB",
        "compute_capability": "8.0",  # from the knowledge base: the table does not print it
        "memory_mib": 81920,
    }
    na = json.loads(
        invoke("probe", "--from-nvidia-smi", str(DATA / "plain-575-cuda-na.txt")).stdout
    )
    assert na["cuda_version"] is None


def test_probe_labels_output() -> None:
    result = invoke("probe", "--from-nvidia-smi", str(DATA / "xml-580-h100x2.xml"), "-o", "labels")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert "cudasched.io/cuda.code=13000" in lines
    assert "cudasched.io/gpu.compute.code=90" in lines
    assert all("=" in line for line in lines)


def test_probe_reads_stdin() -> None:
    text = (DATA / "plain-610-umd-b200x2.txt").read_text()
    result = invoke("probe", "--from-nvidia-smi", "-", stdin=text)
    assert result.exit_code == 0
    assert json.loads(result.stdout)["cuda_version"] == "13.3"


@pytest.mark.parametrize(
    ("content", "needle"),
    [("kind: Node\n", "not nvidia-smi output"), ("", "empty input")],
)
def test_probe_rejects_non_nvidia_smi_input(tmp_path: Path, content: str, needle: str) -> None:
    path = tmp_path / "input.txt"
    path.write_text(content)
    result = invoke("probe", "--from-nvidia-smi", str(path))
    assert result.exit_code == 2
    assert needle in result.stderr and str(path) in result.stderr


def test_probe_missing_file_and_bad_output_flag(tmp_path: Path) -> None:
    assert invoke("probe", "--from-nvidia-smi", str(tmp_path / "nope")).exit_code == 2
    bad = invoke("probe", "--from-nvidia-smi", str(DATA / "plain-550-l40s.txt"), "-o", "yaml")
    assert bad.exit_code == 2 and "invalid output 'yaml'" in bad.stderr


def test_probe_without_gpu_exits_2_naming_nvml(no_gpu: FakeNvml) -> None:
    result = invoke("probe")
    assert result.exit_code == 2
    assert "NVML library not found" in result.stderr
    assert "nvidia-smi not found" in result.stderr


def test_probe_live_through_nvml(fake_gpu: FakeNvml) -> None:
    result = invoke("probe", "-o", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["source"] == "nvml"
    assert doc["driver_version"] == "570.124.06" and doc["cuda_version"] == "12.8"
    assert [g["compute_capability"] for g in doc["gpus"]] == ["9.0", "7.5"]
    assert doc["labels"][L.COMPUTE_CODE] == "75"
    assert fake_gpu.init_count == 1 and fake_gpu.shutdown_count == 1


def test_agent_oneshot_nfd(fake_gpu: FakeNvml, tmp_path: Path) -> None:
    path = tmp_path / "features.d" / "cudasched"
    result = invoke("agent", "--oneshot", "--output", "nfd", "--nfd-path", str(path))
    assert result.exit_code == 0, result.stderr
    lines = path.read_text().splitlines()
    assert "cudasched.io/driver.version=570.124.06" in lines
    assert "cudasched.io/probe.status=ok" in lines


def test_agent_oneshot_nfd_gfd_compatible(fake_gpu: FakeNvml, tmp_path: Path) -> None:
    path = tmp_path / "cudasched"
    args = ["agent", "--oneshot", "--output", "nfd", "--nfd-path", str(path), "--gfd-compatible"]
    assert invoke(*args).exit_code == 0
    assert "nvidia.com/cuda.runtime-version.full=12.8" in path.read_text().splitlines()


def test_agent_oneshot_failure_exits_1_and_records_status(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(init_error=DRIVER_NOT_LOADED))
    monkeypatch.setenv("PATH", str(tmp_path))
    path = tmp_path / "cudasched"
    result = invoke("agent", "--oneshot", "--output", "nfd", "--nfd-path", str(path))
    assert result.exit_code == 1
    assert "cudasched.io/probe.reason=no-driver" in path.read_text().splitlines()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["agent", "--output", "node"], "--node-name"),
        (["agent", "--output", "pigeon"], "invalid --output"),
        (["agent", "--interval", "0", "--output", "nfd"], "invalid --interval"),
        (["agent", "--jitter", "-1", "--output", "nfd"], "invalid --jitter"),
    ],
)
def test_agent_rejects_bad_flags(
    args: list[str], needle: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    result = invoke(*args)
    assert result.exit_code == 2
    assert needle in result.stderr


def test_agent_node_output_without_cluster_config(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))
    monkeypatch.setenv("HOME", str(tmp_path))
    result = invoke("agent", "--oneshot", "--node-name", "n1", "--kubeconfig", str(tmp_path / "x"))
    assert result.exit_code == 2
    assert "no usable Kubernetes configuration" in result.stderr


def test_probe_and_agent_take_gpu_families_from_the_knowledge_base(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # architectures.yaml calls cc 10.7 rubin; GFD's own word for every 10.x is blackwell.
    rubin = FakeGpu(name="NVIDIA Rubin Preview", cc=(10, 7), mig=None)
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(driver="620.10.01", gpus=[rubin]))
    monkeypatch.setenv("PATH", str(tmp_path))
    probed = invoke("probe", "-o", "json", "--gfd-compatible")
    assert probed.exit_code == 0, probed.stderr
    labels = json.loads(probed.stdout)["labels"]
    assert (labels[L.GPU_ARCH], labels[L.GFD_FAMILY]) == ("rubin", "blackwell")
    path = tmp_path / "cudasched"
    args = ["agent", "--oneshot", "--output", "nfd", "--nfd-path", str(path), "--gfd-compatible"]
    assert invoke(*args).exit_code == 0
    lines = path.read_text().splitlines()
    assert f"{L.GPU_ARCH}=rubin" in lines and f"{L.GFD_FAMILY}=blackwell" in lines
