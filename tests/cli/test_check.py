"""``cudasched check``: exit codes, the JSON contract, bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from cudasched.cli import app
from cudasched.vocab import labels as L

runner = CliRunner()


def run(*args: str) -> Any:
    return runner.invoke(app, list(args))


def check_json(*args: str) -> tuple[int, dict[str, Any]]:
    result = run("check", *args, "-o", "json")
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.stdout)


# --------------------------------------------------------------------------- check


def test_check_compatible() -> None:
    code, doc = check_json("--gpu", "H100", "--driver", "550.90.07", "--cuda", "12.4")
    assert code == 0
    assert doc["verdict"] == "compatible"
    assert [r["code"] for r in doc["reasons"]] == ["native"]
    assert doc["policy"] == "strict"
    assert doc["node"]["cuda"] == "12.4"


def test_check_json_shape_is_stable() -> None:
    code, doc = check_json("--gpu", "A100", "--driver", "535.104.05", "--cuda", "12.4")
    assert code == 1
    assert set(doc) >= {"verdict", "reasons"}
    assert doc["verdict"] == "incompatible"
    assert doc["reasons"] == [
        {
            "code": "driver-too-old",
            "message": "driver 535.104.05 supports CUDA 12.2; the workload needs CUDA 12.4 "
            "(driver >= 550.54.14)",
            "fix": "needs driver >= 550.54.14: install R580 >= 580.65.06 (LTSB), "
            "or policy minor-compat",
        }
    ]


def test_check_caveats_exit_zero() -> None:
    code, doc = check_json(
        "--gpu", "A100", "--driver", "535.104.05", "--cuda", "12.8", "--policy", "minor-compat"
    )
    assert code == 0 and doc["verdict"] == "compatible-with-caveats"
    assert doc["reasons"][0]["code"] == "minor-version-compat"


def test_check_forward_compat() -> None:
    base = ["--driver", "535.104.05", "--cuda", "13.0", "--policy", "forward-compat"]
    code, doc = check_json("--gpu", "A100", *base, "--ships-cuda-compat")
    assert code == 0 and doc["reasons"][0]["code"] == "forward-compat"
    code, doc = check_json("--gpu", "RTX 4090", *base, "--ships-cuda-compat")
    assert code == 1
    assert "no-forward-compat-on-geforce" in [r["code"] for r in doc["reasons"]]


def test_check_framework_gives_the_cuda() -> None:
    code, doc = check_json(
        "--gpu", "H100", "--driver", "550.90.07", "--framework", "torch 2.5.1+cu124"
    )
    assert code == 0 and doc["verdict"] == "compatible"
    code, doc = check_json(
        "--gpu", "V100", "--driver", "580.65.06", "--framework", "torch 2.11.0+cu130"
    )
    assert code == 1
    assert {"arch-dropped", "framework-arch-unsupported"} <= {r["code"] for r in doc["reasons"]}


def test_check_min_compute_capability() -> None:
    code, doc = check_json(
        "--gpu", "T4", "--driver", "550.90.07", "--cuda", "12.4", "--min-compute-capability", "8.0"
    )
    assert code == 1 and doc["reasons"][0]["code"] == "compute-capability-too-low"


def test_check_text_output() -> None:
    result = run("check", "--gpu", "B200", "--driver", "580.65.06", "--cuda", "11.8")
    assert result.exit_code == 1
    assert result.stdout.startswith("incompatible: cuda>=11.8 [strict]")
    assert "arch-too-new" in result.stdout


def test_check_node_labels_map(tmp_path: Path) -> None:
    path = tmp_path / "gpu-a100-1.yaml"
    labels = {
        L.GFD_DRIVER_MAJOR: "550",
        L.GFD_DRIVER_MINOR: "90",
        L.GFD_DRIVER_REVISION: "07",
        L.GFD_CUDA_MAJOR: 12,  # unquoted YAML integers are accepted
        L.GFD_CUDA_MINOR: 4,
        L.GFD_PRODUCT: "NVIDIA-A100-SXM4-80GB",
        L.GFD_COMPUTE_MAJOR: 8,
        L.GFD_COMPUTE_MINOR: 0,
    }
    path.write_text(yaml.safe_dump(labels))
    code, doc = check_json("--node-labels", str(path), "--cuda", "12.4")
    assert code == 0
    assert doc["node"]["name"] == "the node of gpu-a100-1.yaml" and doc["node"]["source"] == "gfd"
    assert doc["node"]["driver"] == "550.90.07"


def test_check_node_object_json(tmp_path: Path) -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "h100-7",
            "labels": {L.CUDA_CODE: "12080", L.DRIVER_CODE: "570124006", L.COMPUTE_CODE: "90"},
        },
    }
    path = tmp_path / "node.json"
    path.write_text(json.dumps(node))
    code, doc = check_json("--node-labels", str(path), "--cuda", "12.9")
    assert code == 1 and doc["node"]["name"] == "h100-7"
    assert doc["reasons"][0]["code"] == "driver-too-old"


def test_check_node_without_gpu_facts(tmp_path: Path) -> None:
    path = tmp_path / "cpu.yaml"
    path.write_text(yaml.safe_dump({"kubernetes.io/os": "linux"}))
    code, doc = check_json("--node-labels", str(path), "--cuda", "12.4")
    assert code == 1 and doc["reasons"][0]["code"] == "no-gpu-facts"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpu", "A100", "--driver", "535.104.05", "--cuda", "12.x"], "invalid CUDA version"),
        (["--gpu", "A100", "--driver", "newest", "--cuda", "12.4"], "invalid driver version"),
        (["--gpu", "Voodoo", "--driver", "550.90.07", "--cuda", "12.4"], "unknown GPU 'Voodoo'"),
        (
            ["--gpu", "A100", "--driver", "550.90.07", "--cuda", "12.4", "--policy", "yolo"],
            "policy",
        ),
        (["--gpu", "A100", "--cuda", "12.4"], "--gpu and --driver"),
        (["--gpu", "A100", "--driver", "550.90.07"], "nothing to check"),
        (
            ["--gpu", "A100", "--driver", "550.90.07", "--framework", "jax 0.4"],
            "framework",
        ),
        (
            ["--gpu", "A100", "--driver", "550.90.07", "--cuda", "12.4", "--node-labels", "x.yaml"],
            "replaces --gpu",
        ),
        (["--node-labels", "/nonexistent/labels.yaml", "--cuda", "12.4"], "no such file"),
        (
            [
                "--gpu",
                "A100",
                "--driver",
                "550.90.07",
                "--cuda",
                "12.4",
                "--min-compute-capability",
                "x",
            ],
            "compute capability",
        ),
    ],
)
def test_check_bad_input_exits_2(args: list[str], message: str) -> None:
    result = run("check", *args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cudasched: error: ")
    assert message in lines[0]


@pytest.mark.parametrize(
    "content",
    ["- a\n- b\n", "kind: ConfigMap\nmetadata: {name: x}\n", "a: [1, 2]\n", "a: {b: c\n"],
)
def test_check_bad_labels_file(tmp_path: Path, content: str) -> None:
    path = tmp_path / "labels.yaml"
    path.write_text(content)
    result = run("check", "--node-labels", str(path), "--cuda", "12.4")
    assert result.exit_code == 2
    assert result.stderr.startswith("cudasched: error: node labels file")


def test_a_label_map_names_its_file_and_an_empty_file_says_so(tmp_path: Path) -> None:
    labels = tmp_path / "labels.yaml"
    labels.write_text(
        "nvidia.com/gpu.product: Tesla-T4\nnvidia.com/cuda.driver-version.full: 550.90.07\n"
    )
    result = CliRunner().invoke(app, ["check", "--node-labels", str(labels), "--cuda", "12.4"])
    assert result.stdout.splitlines()[0].endswith("on the node of labels.yaml")
    empty = tmp_path / "empty.yaml"
    empty.write_text("\n")
    result = CliRunner().invoke(app, ["check", "--node-labels", str(empty), "--cuda", "12.4"])
    assert result.exit_code == 2
    assert f"node labels file {str(empty)!r} is empty" in result.stderr
    assert "NoneType" not in result.stderr


def test_a_misspelled_gpu_gets_the_nearest_names_and_where_to_look() -> None:
    """Issue 20 item 5: ``--gpu A1000`` suggests the GPUs it may be and points at the list."""
    result = CliRunner().invoke(
        app, ["check", "--gpu", "A1000", "--driver", "535.104.05", "--cuda", "12.4"]
    )
    assert (result.exit_code, result.stdout) == (2, "")
    [line] = result.stderr.splitlines()
    assert line.startswith("cudasched: error: unknown GPU 'A1000'")
    assert "did you mean 'A100'" in line and "cudasched knowledge gpus" in line


def test_the_compat_library_and_the_toolkit_mode_give_each_outcome() -> None:
    # nvidia/cuda:12.9's compat library (575.57.08) and its note, on R550.
    image = ["--cuda", "12.9", "--policy", "minor-compat", "--compat-driver", "575.57.08"]
    image += ["--compat-cuda", "12.9", "--compat-branches", "535,550,560,565,570,575"]
    geforce = ["--gpu", "RTX 4090", "--driver", "550.90.07"]
    a100 = ["--gpu", "A100", "--driver", "550.90.07"]
    code, doc = check_json(*geforce, *image)
    assert (code, doc["reasons"][0]["code"]) == (1, "no-forward-compat-on-geforce")
    assert "error 804" in doc["reasons"][0]["message"] and doc["toolkitMode"] == "legacy"
    assert doc["compatLibrary"].startswith("libcuda.so.575.57.08 (CUDA 12.9; note: R535")
    code, doc = check_json(*a100, *image, "--toolkit-mode", "cdi")
    assert (code, [r["code"] for r in doc["reasons"]]) == (0, ["forward-compat"])
    gate = ["--gpu", "A100", "--driver", "545.29.06", *image]
    code, doc = check_json(*gate)
    assert (code, doc["reasons"][0]["code"]) == (1, "compat-branch-unsupported")
    result = run("check", *a100, "--cuda", "12.9", "--compat-branches", "535")
    assert result.exit_code == 2 and "--compat-driver" in result.output
