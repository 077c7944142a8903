"""``cudasched mutate``: the webhook's decision offline, on recorded AdmissionReview files."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml
from typer.testing import CliRunner

from cudasched.cli import app
from cudasched.cluster.snapshot import bundled_snapshot
from cudasched.vocab.labels import ANN_REQUIREMENT
from tests.support.admission import isvcs, nodes, runtimes
from tests.support.k8s_schema import assert_valid_pod

DATA = Path(__file__).parents[1] / "data" / "admission"
runner = CliRunner()


@pytest.fixture()
def cluster_file(tmp_path: Path) -> Path:
    """The small test cluster as ``kubectl get ... -o yaml`` prints it (a List)."""
    path = tmp_path / "cluster.yaml"
    items = nodes() + runtimes() + isvcs()
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


def _response(stdout: str) -> dict[str, Any]:
    answer = json.loads(stdout)
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    return answer["response"]


def _patched(review_file: Path, response: dict[str, Any]) -> dict[str, Any]:
    review = json.loads(review_file.read_text())
    ops = json.loads(base64.b64decode(response["patch"]))
    return jsonpatch.apply_patch(review["request"]["object"], ops)


def test_mutate_file_with_bundled_cluster() -> None:
    result = runner.invoke(app, ["mutate", str(DATA / "pod-predictor-triton.json")])
    assert result.exit_code == 0, result.output
    resp = _response(result.stdout)
    assert resp["uid"] == "9e5b3c71-5d8e-4a0f-b6d2-3c1f7a9e0b11" and resp["allowed"] is True
    pod = _patched(DATA / "pod-predictor-triton.json", resp)
    assert_valid_pod(pod)
    assert pod["metadata"]["annotations"][ANN_REQUIREMENT].startswith("cuda>=12.4")


def test_mutate_stdin_and_cluster_file(cluster_file: Path) -> None:
    body = (DATA / "pod-predictor-affinity.json").read_text()
    result = runner.invoke(app, ["mutate", "--cluster", str(cluster_file)], input=body)
    assert result.exit_code == 0, result.output
    pod = _patched(DATA / "pod-predictor-affinity.json", _response(result.stdout))
    assert pod["metadata"]["annotations"][ANN_REQUIREMENT] == (
        "cuda>=12.4 (ClusterServingRuntime vllm-cuda-12-4, label cpaas.io/cuda-version)"
    )
    dash = runner.invoke(app, ["mutate", "-", "--cluster", str(cluster_file)], input=body)
    assert dash.stdout == result.stdout


def test_mutate_explain_goes_to_stderr(cluster_file: Path) -> None:
    result = runner.invoke(
        app,
        [
            "mutate",
            str(DATA / "pod-predictor-triton.json"),
            "--cluster",
            str(cluster_file),
            "--explain",
        ],
    )
    assert result.exit_code == 0, result.output
    _response(result.stdout)  # stdout stays one parseable JSON document
    assert "outcome: patched" in result.stderr
    assert "requirement: cuda>=12.4" in result.stderr
    assert '"path": "/spec/affinity"' in result.stderr


def test_mutate_isvc_kind_detected_and_deny_exit_code(cluster_file: Path, tmp_path: Path) -> None:
    review = str(DATA / "isvc-create.json")
    warned = runner.invoke(app, ["mutate", review, "--cluster", str(cluster_file)])
    assert warned.exit_code == 0, warned.output
    assert _response(warned.stdout)["warnings"] == [
        "cudasched: no node can run CUDA 12.9; newest driver supports 12.8 (2 nodes)"
    ]
    config = tmp_path / "config.yaml"
    config.write_text("onNoFit: deny\n")
    denied = runner.invoke(
        app, ["mutate", review, "--cluster", str(cluster_file), "--config", str(config)]
    )
    assert denied.exit_code == 1, denied.output
    assert _response(denied.stdout)["allowed"] is False


def test_mutate_cpu_pod_unchanged() -> None:
    result = runner.invoke(app, ["mutate", str(DATA / "pod-predictor-cpu.json")])
    assert result.exit_code == 0
    assert _response(result.stdout) == {
        "uid": "4b8d1e6a-2c7f-49b3-a0d5-e8f1c3b7a925",
        "allowed": True,
    }


def test_mutate_explicit_kind_overrides(cluster_file: Path) -> None:
    # A pod review sent as if to the InferenceService endpoint: not handled, no patch.
    result = runner.invoke(
        app,
        [
            "mutate",
            str(DATA / "pod-predictor-triton.json"),
            "--kind",
            "isvc",
            "--cluster",
            str(cluster_file),
        ],
    )
    assert result.exit_code == 0
    assert "patch" not in _response(result.stdout)


@pytest.mark.parametrize(
    ("args", "stdin", "fragment"),
    [
        (["--kind", "deployment"], "{}", "invalid --kind 'deployment'"),
        ([], "not json", "the document is a string, expected a Kubernetes object"),
        (["--kind", "pod"], "[1, 2", "invalid JSON"),
        (
            [],
            json.dumps(
                {
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "request": {"uid": "u", "kind": {"kind": "Deployment"}},
                }
            ),
            "expected Pod, InferenceService or LLMInferenceService",
        ),
        (["/nonexistent/review.json"], "", "review file '/nonexistent/review.json': no such file"),
        (
            ["--cluster", "/nonexistent/cluster.yaml"],
            None,
            "/nonexistent/cluster.yaml: no such file",
        ),
    ],
)
def test_mutate_bad_input_exit_2(args: list[str], stdin: str | None, fragment: str) -> None:
    body = stdin if stdin is not None else (DATA / "pod-predictor-triton.json").read_text()
    result = runner.invoke(app, ["mutate", *args], input=body)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("cudasched: error: ")
    assert fragment in result.stderr


def test_mutate_bad_config_names_the_field(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("mode: sometimes\n")
    result = runner.invoke(
        app, ["mutate", str(DATA / "pod-predictor-triton.json"), "--config", str(config)]
    )
    assert result.exit_code == 2
    assert "mode" in result.stderr and "'required' or 'preferred'" in result.stderr


def test_mutate_wraps_a_plain_workload_in_a_create_review(tmp_path: Path) -> None:
    """A Deployment (its pod template), a Pod or an InferenceService file, YAML or JSON, is
    admitted as the CREATE review the API server would send, and stderr says so."""
    deployment = Path(__file__).parents[1] / "data" / "deployment-vllm.yaml"
    result = runner.invoke(app, ["mutate", str(deployment)])
    assert result.exit_code == 0, result.output
    assert (
        "the pod template of serving/Deployment/vllm-llama, as a Pod, wrapped in a CREATE "
        "AdmissionReview" in result.stderr
    )
    answer = json.loads(result.stdout)
    assert answer["response"]["allowed"] and answer["response"]["patch"]

    isvc = next(
        i for i in bundled_snapshot().inference_services if i["metadata"]["name"] == "qwen2-7b"
    )
    path = tmp_path / "isvc.json"
    path.write_text(json.dumps(isvc))
    result = runner.invoke(app, ["mutate", str(path), "--explain"])
    assert result.exit_code == 0, result.output
    assert "team-nlp/InferenceService/qwen2-7b wrapped" in result.stderr
    assert "requirement: cuda>=12.8" in result.stderr


def test_mutate_refuses_an_object_that_makes_no_pod(tmp_path: Path) -> None:
    path = tmp_path / "secret.yaml"
    path.write_text("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n")
    result = runner.invoke(app, ["mutate", str(path)])
    assert result.exit_code == 2
    assert "default/Secret/s: no pod spec found" in result.stderr


def test_one_wording_for_an_unknown_image_in_mutate_audit_and_demo_rows() -> None:
    """The sample's bert-legacy (TorchServe, CUDA not recorded): the webhook's warning (what
    mutate prints) and the audit's finding say why and what to do in the same words."""
    from cudasched.cluster.snapshot import bundled_snapshot
    from cudasched.webhook.admission.review import creation_review
    from cudasched.workloads.resolution import unknown_fix

    pod = next(p for p in bundled_snapshot().pods if "bert-legacy" in p["metadata"]["name"])
    answer = runner.invoke(app, ["mutate"], input=json.dumps(creation_review(pod, uid="u")))
    warnings = json.loads(answer.stdout)["response"]["warnings"]
    audit = json.loads(runner.invoke(app, ["audit", "-o", "json"]).stdout)
    (finding,) = [f for f in audit["findings"] if f["object"].endswith("/bert-legacy")]
    fix = unknown_fix("ClusterServingRuntime kserve-torchserve", runtime=True)
    reason = "tag's CUDA not recorded: pytorch/torchserve-kfs:latest-gpu"
    assert any(fix in w for w in warnings) and finding["fix"].startswith(fix)
    assert any(reason in w for w in warnings) and reason in finding["message"]
