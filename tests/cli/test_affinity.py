"""``cudasched affinity``: exit codes, the JSON contract, bad input."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from cudasched.cli import app
from cudasched.vocab import labels as L
from cudasched.vocab.nodeaffinity import Node, NodeSelector
from tests.support.k8s_schema import assert_valid_node_affinity

runner = CliRunner()


def run(*args: str) -> Any:
    return runner.invoke(app, list(args))


def check_json(*args: str) -> tuple[int, dict[str, Any]]:
    result = run("check", *args, "-o", "json")
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.stdout)


# --------------------------------------------------------------------------- affinity


def affinity(*args: str) -> dict[str, Any]:
    result = run("affinity", *args, "-o", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _terms(doc: dict[str, Any]) -> list[dict[str, Any]]:
    required = doc["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return required["nodeSelectorTerms"]


def test_affinity_cudasched_default() -> None:
    doc = affinity("--cuda", "12.4")
    assert_valid_node_affinity(doc["nodeAffinity"])
    terms = _terms(doc)
    # The node's CUDA is its driver's: CUDA 12.4 needs driver 550.54.14 (NVIDIA Table 3).
    gt = {"key": L.DRIVER_CODE, "operator": "Gt", "values": ["550054013"]}
    assert all(gt in t["matchExpressions"] for t in terms)
    selector = NodeSelector.from_terms(terms)
    ok = {L.CUDA_CODE: "12040", L.DRIVER_CODE: "550054014", L.COMPUTE_CODE: "80"}
    assert selector.match(Node("a", ok))
    assert not selector.match(Node("b", {**ok, L.DRIVER_CODE: "535104005"}))


def test_affinity_gfd_x0_has_no_minus_one() -> None:
    doc = affinity("--cuda", "13.0", "--scheme", "gfd", "--gfd-keys", "deprecated")
    assert_valid_node_affinity(doc["nodeAffinity"])
    text = json.dumps(doc)
    assert '"-1"' not in text and L.GFD_OLD_DRIVER_MAJOR in text and L.GFD_DRIVER_MAJOR not in text


def test_affinity_preferred_mode() -> None:
    doc = affinity("--cuda", "12.8", "--mode", "preferred", "--policy", "minor-compat")
    assert_valid_node_affinity(doc["nodeAffinity"])
    preferred = doc["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred and all(p["weight"] == 100 for p in preferred)


def test_affinity_yaml_default_output() -> None:
    result = run("affinity", "--cuda", "12.4", "--scheme", "gfd")
    assert result.exit_code == 0
    doc = yaml.safe_load(result.stdout)
    assert_valid_node_affinity(doc["nodeAffinity"])
    assert doc == affinity("--cuda", "12.4", "--scheme", "gfd")


def test_affinity_forward_compat_over_gfd_warns() -> None:
    args = ["--cuda", "13.0", "--policy", "forward-compat", "--ships-cuda-compat"]
    result = run("affinity", *args, "--scheme", "gfd", "-o", "json")
    assert result.exit_code == 0
    assert "not expressible over GFD" in result.stderr
    ours = affinity(*args)
    fc = {"key": L.GPU_DATACENTER, "operator": "In", "values": ["true"]}
    assert any(fc in t["matchExpressions"] for t in _terms(ours))


def test_affinity_min_compute_only() -> None:
    doc = affinity("--min-compute-capability", "8.0")
    assert _terms(doc) == [
        {"matchExpressions": [{"key": L.COMPUTE_CODE, "operator": "Gt", "values": ["79"]}]}
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cuda", "12.7"], "unknown CUDA toolkit 12.7"),
        (["--cuda", "11.8", "--min-compute-capability", "10.0"], "no GPU can run"),
        ([], "nothing to constrain"),
        (["--cuda", "12.4", "--policy", "loose"], "invalid policy"),
        (["--cuda", "12.4", "--scheme", "auto"], "auto"),
        (["--cuda", "12.4", "--gfd-keys", "old"], "old"),
        (["--cuda", "12.4", "--mode", "maybe"], "maybe"),
    ],
)
def test_affinity_bad_input_exits_2(args: list[str], message: str) -> None:
    result = run("affinity", *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert result.stdout == ""


def test_help_texts() -> None:
    for command in ("check", "affinity"):
        result = run(command, "--help")
        assert result.exit_code == 0
        assert "--policy" in result.stdout and "--cuda" in result.stdout
    assert "--node-labels" in run("check", "--help").stdout
    assert "--gfd-keys" in run("affinity", "--help").stdout


def test_bound_cuda_class_adds_the_class_key_kueue_flavors_declare() -> None:
    """``--bound-cuda-class`` prints what the webhook injects under
    ``placement.boundCudaClass``: every term that bounds the driver bounds the class too."""
    plain = _terms(affinity("--cuda", "12.8"))
    bounded = _terms(affinity("--cuda", "12.8", "--bound-cuda-class"))
    assert_valid_node_affinity(affinity("--cuda", "12.8", "--bound-cuda-class")["nodeAffinity"])
    classes = [[e for e in t["matchExpressions"] if e["key"] == L.CUDA_CODE] for t in bounded]
    assert all({"key": L.CUDA_CODE, "operator": "Gt", "values": ["12079"]} in c for c in classes)
    assert not any(e["key"] == L.CUDA_CODE for t in plain for e in t["matchExpressions"])
    assert len(bounded) == len(plain)
