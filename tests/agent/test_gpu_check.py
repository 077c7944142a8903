"""scripts/gpu-check.sh against a fake ``nvidia-smi`` on PATH (the real check needs a GPU).

The fake answers from recordings; ``cudasched probe`` then falls back from NVML (absent here)
to the same fake binary, so agreement and disagreement can both be exercised.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu-check.sh"
DATA = Path(__file__).parents[1] / "data" / "nvidia-smi"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")

FAKE = """#!/bin/sh
case "$*" in
  "-q -x") cat "{xml}" ;;
  "--query-gpu=driver_version --format=csv,noheader") printf '%s\\n%s\\n' "{driver}" "{driver}" ;;
  "--query-gpu=name --format=csv,noheader") printf '%s\\n' {names} ;;
  "") cat "{table}" ;;
  *) echo "unexpected: $*" >&2; exit 9 ;;
esac
"""


def run_check(
    tmp_path: Path, *, driver: str, table: str, names: list[str]
) -> subprocess.CompletedProcess[str]:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "nvidia-smi"
    fake.write_text(
        FAKE.format(
            xml=DATA / "xml-580-h100x2.xml",
            driver=driver,
            names=" ".join(f"'{n}'" for n in names),
            table=tmp_path / "table.txt",
        )
    )
    fake.chmod(0o755)
    (tmp_path / "table.txt").write_text(table)
    # A pynvml that cannot find libnvidia-ml, even on a machine that has one.
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "pynvml.py").write_text(
        "class NVMLError(Exception):\n"
        "    def __init__(self, value):\n"
        "        self.value = value\n"
        "        super().__init__('NVML Shared Library Not Found')\n"
        "def nvmlInit():\n"
        "    raise NVMLError(12)\n"
    )
    env = {
        **os.environ,
        "PATH": f"{bindir}:{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(shim),
        "CUDASCHED": str(Path(sys.executable).parent / "cudasched"),
        "PYTHON": sys.executable,
    }
    return subprocess.run(
        ["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60, check=False
    )


H100 = ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"]


def table_580() -> str:
    # The H100 table of a 570 driver, relabelled as the 580 driver of the XML recording.
    text = (DATA / "plain-570-h100x2.txt").read_text()
    return text.replace("570.124.06", "580.95.05 ").replace(
        "CUDA Version: 12.8", "CUDA Version: 13.0"
    )


def test_agreement_passes(tmp_path: Path) -> None:
    result = run_check(tmp_path, driver="580.95.05", table=table_580(), names=H100)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "FAIL" not in result.stdout


def test_driver_mismatch_fails(tmp_path: Path) -> None:
    result = run_check(tmp_path, driver="580.95.06", table=table_580(), names=H100)
    assert result.returncode == 1
    assert "FAIL driver version" in result.stdout


def test_cuda_mismatch_fails_with_new_header(tmp_path: Path) -> None:
    table = table_580().replace("Driver Version: 580.95.05 ", "KMD Version: 580.95.05    ")
    table = table.replace("CUDA Version: 13.0", "CUDA UMD Version: 13.1")
    result = run_check(tmp_path, driver="580.95.05", table=table, names=H100)
    assert result.returncode == 1
    assert "FAIL CUDA version" in result.stdout


def test_driver_down_exits_2(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "nvidia-smi"
    message = (DATA / "error-no-driver.txt").read_text().strip()
    fake.write_text(f'#!/bin/sh\necho "{message}"\nexit 9\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ.get('PATH', '')}"}
    result = subprocess.run(
        ["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert result.returncode == 2
    assert "couldn't communicate with the NVIDIA driver" in result.stderr
