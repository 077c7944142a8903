"""One configuration everywhere (issue 12 item 10): ``explain``, ``audit``, ``report`` and
``plan-drivers`` take the webhook's ``--config``, so its image overrides, mirrors and policy
give the answers admission gives. The cluster is the bundled sample; the workloads are files.
"""

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
from cudasched.vocab.nodeaffinity import Node, RequiredNodeAffinity
from tests.support import builders

runner = CliRunner()

#: An in-house image the built-in table cannot know.
IN_HOUSE = "registry.local/team/llm:7"


def write(path: Path, doc: Any) -> Path:
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def gpu_pod(image: str) -> dict[str, Any]:
    return builders.pod("team-llm", "default", container="llm", image=image)


@pytest.fixture()
def config(tmp_path: Path) -> Path:
    return write(
        tmp_path / "webhook.yaml",
        {
            "imageOverrides": [{"pattern": "registry.local/team/*", "cuda": "12.8"}],
            "imageMirrors": {"ngc/tritonserver": "nvidia/tritonserver"},
        },
    )


def explained(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["explain", *args, "-o", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def eligible_by_explain(doc: dict[str, Any]) -> set[str]:
    return {n["node"] for n in doc["nodes"] if n["eligible"]}


def eligible_by_mutate(pod_file: Path, *args: str) -> set[str]:
    """The nodes the pod may use once ``cudasched mutate`` (the webhook's code) patched it."""
    result = runner.invoke(app, ["mutate", str(pod_file), *args])
    assert result.exit_code == 0, result.output
    response = json.loads(result.stdout)["response"]
    pod = yaml.safe_load(pod_file.read_text(encoding="utf-8"))
    if "patch" in response:
        pod = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
    affinity = RequiredNodeAffinity.from_pod_spec(pod["spec"])
    nodes = [Node.from_k8s(n) for n in bundled_snapshot().nodes]
    return {n.name for n in nodes if affinity.match(n)}


def test_explain_with_the_configs_override_constrains_as_mutate_does(
    tmp_path: Path, config: Path
) -> None:
    pod_file = write(tmp_path / "pod.yaml", gpu_pod(IN_HOUSE))
    everything = {n["metadata"]["name"] for n in bundled_snapshot().nodes}

    without = explained("--workload", str(pod_file))
    assert without["summary"]["requirement"] is None
    assert eligible_by_mutate(pod_file) == everything  # unknown: admitted unchanged

    with_config = explained("--workload", str(pod_file), "--config", str(config))
    assert with_config["summary"]["requirement"] == "cuda>=12.8"
    nodes = eligible_by_explain(with_config)
    assert nodes == eligible_by_mutate(pod_file, "--config", str(config))
    assert nodes and nodes < everything


def test_explain_follows_the_configs_mirrors(tmp_path: Path, config: Path) -> None:
    pod_file = write(
        tmp_path / "pod.yaml", gpu_pod("harbor.example.com/ngc/tritonserver:25.02-py3")
    )
    assert explained("--workload", str(pod_file))["summary"]["requirement"] is None
    doc = explained("--workload", str(pod_file), "--config", str(config))
    assert doc["summary"]["requirement"] == "cuda>=12.8, cc>=7.5"
    assert eligible_by_explain(doc) == eligible_by_mutate(pod_file, "--config", str(config))


def test_explain_takes_the_configs_policy_and_scheme_unless_given(tmp_path: Path) -> None:
    pod_file = write(tmp_path / "pod.yaml", gpu_pod("nvidia/cuda:12.8.1-runtime-ubuntu22.04"))
    relaxed = write(tmp_path / "relaxed.yaml", {"policy": "minor-compat", "labelScheme": "gfd"})
    strict = explained("--workload", str(pod_file))
    from_config = explained("--workload", str(pod_file), "--config", str(relaxed))
    assert from_config["summary"]["policy"] == "minor-compat"
    assert from_config["summary"]["scheme"] == "gfd"
    assert eligible_by_explain(from_config) > eligible_by_explain(strict)
    assert eligible_by_explain(from_config) == eligible_by_mutate(
        pod_file, "--config", str(relaxed)
    )
    given = explained("--workload", str(pod_file), "--config", str(relaxed), "--policy", "strict")
    assert given["summary"]["policy"] == "strict"
    assert eligible_by_explain(given) == eligible_by_explain(strict)


def test_audit_report_and_plan_take_the_configs_policy(tmp_path: Path) -> None:
    """``--config``'s policy gives the same answers as ``--policy`` with that value."""
    relaxed = write(tmp_path / "relaxed.yaml", {"policy": "minor-compat"})
    for command in (
        ["audit", "-o", "json"],
        ["plan-drivers", "-o", "json", "--as-of", "2026-12-01"],
    ):
        by_option = runner.invoke(app, [*command, "--policy", "minor-compat"])
        by_config = runner.invoke(app, [*command, "--config", str(relaxed)])
        assert by_config.exit_code == by_option.exit_code, by_config.output
        assert json.loads(by_config.stdout) == json.loads(by_option.stdout)
    report = runner.invoke(app, ["report", "--config", str(relaxed), "-o", "html"])
    assert report.exit_code == 0 and report.stdout.startswith("<!DOCTYPE html>")


def test_audit_judges_an_in_house_pod_by_the_configs_override(tmp_path: Path, config: Path) -> None:
    """A GPU pod of an in-house image: its requirement is unknown to the table (a finding),
    known with the webhook's configuration (none)."""
    pending = {**gpu_pod(IN_HOUSE), "status": {"phase": "Pending"}}
    dump = write(tmp_path / "cluster.yaml", [*bundled_snapshot().objects(), pending])

    def codes(*args: str) -> set[str]:
        result = runner.invoke(app, ["audit", "--cluster", str(dump), "-o", "json", *args])
        assert result.exit_code in (0, 1), result.output
        found = json.loads(result.stdout)["findings"]
        return {f["code"] for f in found if f["object"].endswith("team-llm")}

    assert "requirement-unknown" in codes()
    assert "requirement-unknown" not in codes("--config", str(config))


@pytest.mark.parametrize("command", ["explain", "audit", "report", "plan-drivers"])
def test_a_bad_config_is_one_line_exit_2(tmp_path: Path, command: str) -> None:
    bad = write(tmp_path / "bad.yaml", {"onUnknownRequirement": "guess"})
    result = runner.invoke(app, [command, "--config", str(bad)])
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"cudasched: error: invalid config file '{bad}': onUnknownRequirement")


def test_the_record_of_mutate_and_explain_agree(tmp_path: Path, config: Path) -> None:
    pod_file = write(tmp_path / "pod.yaml", gpu_pod(IN_HOUSE))
    result = runner.invoke(app, ["mutate", str(pod_file), "--config", str(config), "--explain"])
    record = next(
        line.removeprefix("requirement: ")
        for line in result.stderr.splitlines()
        if line.startswith("requirement: ")
    )
    summary = explained("--workload", str(pod_file), "--config", str(config))["summary"]
    assert record.startswith(summary["requirement"] + " (")
