"""``cudasched image`` and ``--resolve-images`` against the real registry on 127.0.0.1: an
in-house image whose config says ``cuda>=12.6`` is constrained after one resolution, by
``image``, ``explain``, ``mutate`` and ``audit`` alike; credentials from a Docker config.json."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cudasched.cli import app
from tests.harness.controlplane.processes import free_port
from tests.support.layers import Link, layer, push_layered
from tests.support.registry import Registry, run_registry

runner = CliRunner()
IN_HOUSE_ENV = ["PATH=/usr/bin", "NVIDIA_REQUIRE_CUDA=cuda>=12.6"]


@pytest.fixture(scope="module")
def registry() -> Iterator[Registry]:
    with run_registry() as running:
        running.push_image("ml/llm", "7", IN_HOUSE_ENV)
        running.push_image("web/frontend", "2", ["PATH=/usr/bin"])
        runners = {
            "usr/lib/ollama/cuda_v12/libcudart.so.12": Link("libcudart.so.12.8.90"),
            "usr/lib/ollama/cuda_v12/libcudart.so.12.8.90": b"12",
            "usr/lib/ollama/cuda_v13/libcudart.so.13.0.96": b"13",
        }
        push_layered(running, "ml/ollama", "0.12", [layer({"etc/os-release": b""}), layer(runners)])
        yield running


def invoke(*args: str) -> Any:
    return runner.invoke(app, list(args))


def gpu_deployment(image: str, path: Path) -> Path:
    doc = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "llm", "namespace": "ml"},
        "spec": {
            "template": {
                "metadata": {"labels": {"app": "llm"}},
                "spec": {
                    "containers": [
                        {
                            "name": "llm",
                            "image": image,
                            "resources": {"limits": {"nvidia.com/gpu": 1}},
                        }
                    ]
                },
            }
        },
    }
    path.write_text(json.dumps(doc))
    return path


def test_image_prints_digest_platform_requirement_and_source(registry: Registry) -> None:
    image = f"{registry.host}/ml/llm:7"
    plain = f"{registry.host}/web/frontend:2"
    result = invoke("image", image, plain, "--plain-http", registry.host, "-o", "json")
    assert result.exit_code == 1, result.output  # the frontend's requirement is unknown
    rows = json.loads(result.stdout)["images"]
    assert [r["image"] for r in rows] == [image, plain]
    llm, web = rows
    assert llm["requirement"] == "cuda>=12.6" and llm["status"] == "known"
    assert llm["source"] == f"image config of {image} (NVIDIA_REQUIRE_CUDA cuda>=12.6)"
    assert llm["digest"].startswith("sha256:") and llm["platform"] == "linux/amd64"
    # An image whose config names no CUDA stays unknown, and says why.
    assert web["status"] == "unknown" and web["source"] == f"image config names no CUDA: {plain}"
    # Its layers were read for want of a CUDA in its config (its one layer is no archive).
    assert "is not a readable layer" in web["contents"]["unknown"]
    assert llm["contents"] is None  # the config answered: no layer read
    table = invoke("image", image, "--plain-http", registry.host)
    assert table.exit_code == 0 and "cuda>=12.6" in table.stdout


def test_bad_input_exits_2() -> None:
    result = invoke("image", "Not An Image")
    assert result.exit_code == 2 and "invalid image" in result.output
    result = invoke("image", "busybox", "--platform", "amd64")
    assert result.exit_code == 2 and "invalid platform" in result.output


def test_explain_and_mutate_constrain_the_in_house_image(
    registry: Registry, tmp_path: Path
) -> None:
    workload = gpu_deployment(f"{registry.host}/ml/llm:7", tmp_path / "llm.json")
    before = invoke("explain", "--workload", str(workload), "-o", "json")
    assert before.exit_code == 0, before.output
    assert json.loads(before.stdout)["summary"]["requirementStatus"] == "unknown"
    flags = ("--resolve-images", "--plain-http", registry.host)
    after = invoke("explain", "--workload", str(workload), "-o", "json", *flags)
    assert after.exit_code == 0, after.output
    summary = json.loads(after.stdout)["summary"]
    assert (summary["requirementStatus"], summary["requirement"]) == ("known", "cuda>=12.6")
    # Only nodes whose driver runs CUDA 12.6 (R560 and newer in the sample) are eligible.
    assert 0 < summary["eligible"] < summary["total"]
    mutated = invoke("mutate", str(workload), *flags)
    assert mutated.exit_code == 0, mutated.output
    patch = json.loads(base64.b64decode(json.loads(mutated.stdout)["response"]["patch"]))
    annotation = [op for op in patch if "requirement" in op["path"] or "annotations" in op["path"]]
    assert any("cuda>=12.6" in json.dumps(op) for op in annotation), patch


def test_registry_config_gives_credentials(tmp_path: Path, monkeypatch: Any) -> None:
    with run_registry(tls=True, basic={"bob": "pw"}) as tls:
        tls.push_image("team/model", "1", IN_HOUSE_ENV)
        (tmp_path / "ca.pem").write_bytes(tls.ca_pem)
        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
        auth = base64.b64encode(b"bob:pw").decode()
        config = tmp_path / "config.json"
        config.write_text(json.dumps({"auths": {tls.host: {"auth": auth}}}))
        image = f"{tls.host}/team/model:1"
        refused = invoke("image", image, "-o", "json")
        denied = json.loads(refused.stdout)["images"][0]
        assert denied["status"] == "unknown" and "needs credentials" in denied["error"]
        assert refused.exit_code == 1  # issue 27 item 12: the registry did not answer
        result = invoke("image", image, "--registry-config", str(config), "-o", "json")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["images"][0]["requirement"] == "cuda>=12.6"


def test_layers_answer_when_the_config_names_no_cuda(registry: Registry) -> None:
    image = f"{registry.host}/ml/ollama:0.12"
    result = invoke("image", image, "--plain-http", registry.host, "-o", "json")
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["images"]
    assert (row["requirement"], row["status"]) == ("cuda>=12.8", "known")
    assert row["source"].startswith(f"contents of image {image}: CUDA 12.8, runners cuda_v12")
    facts = row["contents"]["facts"]
    assert sorted((f["path"], f["cuda"]) for f in facts) == [
        ("usr/lib/ollama/cuda_v12/libcudart.so.12.8.90", "12.8"),
        ("usr/lib/ollama/cuda_v13/libcudart.so.13.0.96", "13.0"),
    ]
    assert {f["layer"] for f in facts} == {row["contents"]["facts"][0]["layer"]}
    # The text output names each fact with its layer and path.
    text = invoke("image", image, "--plain-http", registry.host)
    assert text.exit_code == 0, text.output
    assert "at /usr/lib/ollama/cuda_v13/libcudart.so.13.0.96 in sha256:" in text.stdout
    assert "read: 1 of 2 layers" in text.stdout
    # Without layers the image is unknown, and the exit code says so.
    never = invoke("image", image, "--plain-http", registry.host, "--layers", "never", "-o", "json")
    assert never.exit_code == 1 and json.loads(never.stdout)["images"][0]["contents"] is None


def test_missing_tags_and_unreachable_registries_exit_1(registry: Registry) -> None:
    missing = f"{registry.host}/ml/llm:404"
    result = invoke("image", missing, "--plain-http", registry.host, "-o", "json")
    assert result.exit_code == 1, result.output
    (row,) = json.loads(result.stdout)["images"]
    assert row["status"] == "unknown" and "not found" in row["error"]
    closed = f"127.0.0.1:{free_port()}"
    down = invoke("image", f"{closed}/ml/llm:7", "--plain-http", closed)
    assert down.exit_code == 1 and "ConnectError" in down.stdout
    # A registry failure exits 1 even where the image table still answers.
    table_known = invoke(
        "image",
        "127.0.0.1:9/nvidia/cuda:12.4.1-base-ubuntu22.04",
        "--plain-http",
        "127.0.0.1:9",
        "-o",
        "json",
    )
    (known,) = json.loads(table_known.stdout)["images"]
    assert table_known.exit_code == 1 and known["status"] == "known" and known["error"]
