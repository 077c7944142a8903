"""``cudasched recommend-driver`` and ``cudasched plan-drivers`` as users run them: exit codes,
output formats, one-line errors."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import kmock as kmock_lib
import pytest
import yaml
from typer.testing import CliRunner

from cudasched.cli import app
from cudasched.cluster.snapshot import bundled_snapshot, to_yaml
from tests.support.kube_api import ClusterApi, write_kubeconfig
from tests.support.outputs import without_source
from tests.support.planning_cluster import OPERATOR_DRIVER, cluster, eks_node, gpu_node, runtime

AS_OF = ["--as-of", "2026-12-01"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from cudasched.cli import main; main()", *args],
        capture_output=True,
        text=True,
        check=False,
    )


# --------------------------------------------------------------------------- recommend-driver


def test_recommend_json_for_volta() -> None:
    out = run("recommend-driver", "--gpu", "V100", "--cuda", "12.4", "-o", "json", *AS_OF)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert (doc["branch"], doc["version"], doc["kernelModuleType"]) == (
        "580",
        "580.178.04",
        "proprietary",
    )
    assert doc["usePrecompiled"] is False and doc["lifecycle"] == "LTSB"
    assert doc["released"] == "2026-08-03" and doc["installer"] == "host"


def test_recommend_kepler_with_cuda_12_exits_1_with_the_reason() -> None:
    out = run("recommend-driver", "--gpu", "K80", "--cuda", "12.0", *AS_OF)
    assert out.returncode == 1
    assert "no driver branch drives K80 and runs CUDA 12.0 [strict]" in out.stdout
    assert "no longer supports Kepler" in out.stdout
    assert out.stderr == ""
    as_json = run("recommend-driver", "--gpu", "K80", "--cuda", "12.0", "-o", "json", *AS_OF)
    assert as_json.returncode == 1 and json.loads(as_json.stdout)["branch"] is None


def test_recommend_every_cuda_must_be_covered() -> None:
    one = run("recommend-driver", "--gpu", "V100", "--cuda", "12.8", "-o", "json", *AS_OF)
    both = run(
        "recommend-driver", "--gpu", "V100", "--cuda", "12.8", "--cuda", "13.0", "-o", "json"
    )
    assert one.returncode == 0 and both.returncode == 1


def test_recommend_precompiled_and_kernel() -> None:
    out = run(
        "recommend-driver",
        "--gpu",
        "A100",
        "--cuda",
        "12.8",
        "--os",
        "ubuntu22.04",
        "--kernel",
        "5.15.0-113-generic",
        "--precompiled",
        "-o",
        "json",
        *AS_OF,
    )
    doc = json.loads(out.stdout)
    assert out.returncode == 0 and doc["usePrecompiled"] is True
    assert any("meets the minimum 4.15" in r for r in doc["reasons"])


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--gpu", "Voodoo"], "unknown GPU 'Voodoo'"),
        (["--gpu", "A100", "--cuda", "twelve"], "invalid CUDA version 'twelve'"),
        (["--gpu", "A100", "--kernel", "new"], "invalid kernel release 'new'"),
        (["--gpu", "A100", "--os", "linux"], "invalid OS 'linux'"),
        (["--gpu", "A100", "--os", "windows11"], "unknown OS 'windows11': expected an OS tag"),
        (["--gpu", "A100", "--installer", "operator"], "--installer operator needs --os"),
        (["--gpu", "A100", "--driver", "five"], "invalid driver version 'five'"),
        (["--gpu", "A100", "--gpu-operator-version", "9"], "invalid --gpu-operator-version"),
        (["--gpu", "A100", "--policy", "lax"], "invalid policy 'lax'"),
        (["--gpu", "A100", "--as-of", "tomorrow"], "invalid --as-of 'tomorrow'"),
        ([], "Missing option '--gpu'"),
    ],
)
def test_recommend_bad_input_is_one_line_exit_2(args: list[str], fragment: str) -> None:
    out = run("recommend-driver", *args)
    assert out.returncode == 2
    assert out.stdout == ""
    [line] = out.stderr.splitlines()
    assert line.startswith("cudasched: error: ") and fragment in line


def test_recommend_table_prints_brackets_as_text() -> None:
    result = CliRunner().invoke(app, ["recommend-driver", "--gpu", "K80", "--cuda", "12.0", *AS_OF])
    assert result.exit_code == 1
    assert "[strict]" in result.output  # not eaten as console markup
    assert "R495..R620" in result.output  # one row for branches refused for one reason


# --------------------------------------------------------------------------- plan-drivers


@pytest.fixture()
def cluster_file(tmp_path: Path) -> Path:
    """GPU Operator nodes (Kepler on Ubuntu 20.04, two Volta, a Blackwell) and an EKS node
    group whose driver comes with its image."""
    op = {"extra": OPERATOR_DRIVER}
    snapshot = cluster(
        gpu_node("k80-a", "Tesla-K80", "470.256.02", os=("ubuntu", "20.04"), **op),  # type: ignore[arg-type]
        gpu_node("v100-a", "Tesla-V100-SXM2-16GB", "535.216.01", **op),  # type: ignore[arg-type]
        gpu_node("v100-b", "Tesla-V100-SXM2-16GB", "535.216.01", **op),  # type: ignore[arg-type]
        gpu_node("b200-a", "NVIDIA-B200", "570.133.20", **op),  # type: ignore[arg-type]
        eks_node("p5-a", "NVIDIA-H100-80GB-HBM3", "550.127.05", "p5-h100"),
        runtime("triton-12-4", "12.4"),
        runtime("vllm-13", "13.0"),
    )
    path = tmp_path / "cluster.yaml"
    path.write_text(
        to_yaml({"apiVersion": "v1", "kind": "List", "items": list(snapshot.objects())})
    )
    return path


def test_plan_json(cluster_file: Path) -> None:
    out = run("plan-drivers", "--cluster", str(cluster_file), "-o", "json", *AS_OF)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    by_node = {n: p for p in doc["pools"] for n in p["nodes"]}
    assert by_node["k80-a"]["change"] == "keep"
    assert by_node["v100-a"]["targetBranch"] == "580"
    # The Kepler pool is pinned; the two upgrades; never the EKS node group.
    assert len(doc["nvidiaDrivers"]) == 3
    assert by_node["p5-a"]["nvidiaDriver"] is None
    assert doc["hostActions"][0]["action"].startswith("move EKS node group p5-h100")
    assert doc["waves"] and doc["unservable"] == []
    assert doc["asOf"] == "2026-12-01" and doc["policy"] == "strict"


def test_plan_yaml_is_ready_to_apply(cluster_file: Path) -> None:
    out = run(
        "plan-drivers",
        "--cluster",
        str(cluster_file),
        "-o",
        "yaml",
        "--max-unavailable",
        "1",
        *AS_OF,
    )
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d is not None]
    assert [d["kind"] for d in docs] == ["NVIDIADriver"] * 3
    assert all(d["apiVersion"] == "nvidia.com/v1alpha1" for d in docs)
    comments = [line for line in out.stdout.splitlines() if line.startswith("#")]
    assert any("driver.nvidiaDriverCRD.enabled=true" in c for c in comments)
    assert any(c.startswith("# HOST: pool h100-80gb-hbm3-r550-amzn2023") for c in comments)
    # --max-unavailable 1: one node per wave, four nodes move to an object.
    waves = [c for c in comments if c.startswith("# wave ")]
    assert len(waves) == 4


def test_plan_script_rolls_out_wave_by_wave(cluster_file: Path, tmp_path: Path) -> None:
    out = run("plan-drivers", "--cluster", str(cluster_file), "-o", "script", *AS_OF)
    assert out.returncode == 0, out.stderr
    script = tmp_path / "rollout.sh"
    script.write_text(out.stdout)
    syntax = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    assert out.stdout.count("kubectl apply -f - <<'EOF'") == 3
    assert "kubectl uncordon" in out.stdout


def test_plan_table(cluster_file: Path) -> None:
    result = CliRunner().invoke(app, ["plan-drivers", "--cluster", str(cluster_file), *AS_OF])
    assert result.exit_code == 0, result.output
    assert "cudasched plan-drivers" in result.output
    assert "upgrade" in result.output and "keep" in result.output
    assert "proprietary modules" in result.output and "open modules" in result.output
    assert "useNvidiaDriverCRD=true" in result.output


def test_plan_on_the_sample_cluster_by_default() -> None:
    out = run("plan-drivers", "-o", "json", *AS_OF)
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)["pools"]) == 13


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--max-unavailable", "0"], "invalid --max-unavailable '0'"),
        (["--max-unavailable", "150%"], "invalid --max-unavailable '150%'"),
        (["--target-cuda", "99.1"], "invalid --target-cuda '99.1'"),
        (["--target-cuda", "x"], "invalid CUDA version 'x'"),
        (["--policy", "loose"], "invalid policy 'loose'"),
        (["--cluster", "/nonexistent/cluster.yaml"], "/nonexistent/cluster.yaml"),
        (["--cluster", "c.yaml", "--live"], "name two clusters"),
        (["-o", "xml"], "'xml' is not one of"),
    ],
)
def test_plan_bad_input_is_one_line_exit_2(args: list[str], fragment: str) -> None:
    out = run("plan-drivers", *args)
    assert out.returncode == 2
    assert out.stdout == ""
    [line] = out.stderr.splitlines()
    assert line.startswith("cudasched: error: ") and fragment in line


# --------------------------------------------------------------------------- --live


async def test_plan_of_the_live_cluster_is_the_plan_of_its_dump(
    kmock: kmock_lib.KubernetesEmulator, tmp_path: Path
) -> None:
    """The sample cluster served by the mock API server, plus an NVIDIADriver already there
    (as a v26.3 API server stores it) that selects the Kepler nodes: --live plans exactly what
    the dump plans, the conflict and the operator release read from the object included."""
    existing = {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "NVIDIADriver",
        "metadata": {"name": "kepler"},
        "spec": {
            "driverType": "gpu",
            "image": "driver",
            "kernelModuleType": "auto",
            "nodeSelector": {"nvidia.com/gpu.product": "Tesla-K80"},
        },
    }
    objects = [*bundled_snapshot().objects(), existing]
    dump = tmp_path / "cluster.yaml"
    dump.write_text(to_yaml({"apiVersion": "v1", "kind": "List", "items": objects}))
    ClusterApi.start(kmock, objects)
    kubeconfig = str(write_kubeconfig(tmp_path, kmock.url, namespace="default"))
    args = ["plan-drivers", "-o", "json", *AS_OF]
    from_file = await asyncio.to_thread(CliRunner().invoke, app, [*args, "--cluster", str(dump)])
    live = await asyncio.to_thread(CliRunner().invoke, app, [*args, "--kubeconfig", kubeconfig])
    assert from_file.exit_code == live.exit_code == 0, live.output
    assert without_source(live.stdout) == without_source(from_file.stdout)
    doc = json.loads(live.stdout)
    assert any("NVIDIADriver/kepler" in w and "dc1-k80-01" in w for w in doc["warnings"])
    assert doc["gpuOperatorVersion"] == "26.3"
    assert all("default" not in d["spec"] for d in doc["nvidiaDrivers"])


def test_report_audit_and_plan_name_the_same_pools() -> None:
    """One grouping, one name: the report's pools are plan-drivers' pools, and every pool the
    audit speaks of is one of them (the bundled sample cluster)."""
    import re

    plan = run("plan-drivers", "-o", "json", *AS_OF)
    report = run("report", "-o", "html", *AS_OF)
    audit = run("audit", "-o", "json", "--sample", *AS_OF)
    assert plan.returncode == report.returncode == 0 and audit.returncode == 1
    planned = [p["name"] for p in json.loads(plan.stdout)["pools"]]
    reported = list(dict.fromkeys(re.findall(r'<tr data-pool="([^"]+)"', report.stdout)))
    assert reported == planned and len(planned) == 13
    assert "a100-sxm4-80gb-r535-ubuntu22.04" in planned
    audited = {
        f["object"].removeprefix("Pool/")
        for f in json.loads(audit.stdout)["findings"]
        if f["object"].startswith("Pool/")
    }
    assert len(audited) == 12 and audited <= set(planned)


@pytest.mark.parametrize(
    ("scope", "said", "allowed"),
    [
        (["-n", "team-vision"], "namespace team-vision", "InferenceService/team-vision/"),
        (
            ["-l", "app.kubernetes.io/name=cuda-smoke-test"],
            "selector app.kubernetes.io/name=cuda-smoke-test",
            "Pod/ml-batch/cuda-smoke-test",
        ),
    ],
    ids=["namespace", "selector"],
)
def test_plan_drivers_is_scoped_by_namespace_and_selector(
    scope: list[str], said: str, allowed: str
) -> None:
    """Issue 20 item 1: plan-drivers takes kubectl's -n and -l. The demand is the workloads
    in scope (and the runtimes they may use: the cluster's, and their namespace's); every
    pool is still planned, and the JSON says the scope."""
    whole = json.loads(CliRunner().invoke(app, ["plan-drivers", "-o", "json", *AS_OF]).stdout)
    result = CliRunner().invoke(app, ["plan-drivers", "-o", "json", *AS_OF, *scope])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["cluster"]["scope"] == said
    assert len(doc["pools"]) == len(whole["pools"]) == 13

    def workloads(plan: dict[str, Any]) -> set[str]:
        demand = {w for p in plan["pools"] for w in (*p["gains"], *p["loses"])}
        return {w for w in demand if "Runtime/" not in w}

    scoped = workloads(doc)
    assert scoped and all(w.startswith(allowed) for w in scoped), scoped
    assert scoped < workloads(whole)


def test_audit_plan_check_and_recommend_name_one_minimum_for_the_b200_pool() -> None:
    """One minimum per branch everywhere (docs/design.md): for the sample's B200 pool on R580
    and the FP4 service that needs CUDA 13.2, the audit's refusal and fix, the plan's node-image
    action and ``check`` all name Table 3's 595.45.04, and the plan, the audit and
    ``recommend-driver`` name the same release to take (595.91.07)."""
    import re

    audit = run("audit", "-o", "json", "--sample", *AS_OF)
    plan = run("plan-drivers", "-o", "json", *AS_OF)
    check = run("check", "--gpu", "B200", "--driver", "580.65.06", "--cuda", "13.2", "-o", "json")
    recommend = run("recommend-driver", "--gpu", "B200", "--cuda", "13.2", "-o", "json", *AS_OF)
    assert (audit.returncode, plan.returncode, check.returncode, recommend.returncode) == (
        1,
        0,
        1,
        0,
    )
    (finding,) = [
        f
        for f in json.loads(audit.stdout)["findings"]
        if f["name"] == "nemotron-nano-fp4" and f["code"] == "no-compatible-node"
    ]
    (pool,) = [p for p in json.loads(plan.stdout)["pools"] if p["name"] == "b200-r580-amzn2023"]
    checked = json.loads(check.stdout)["reasons"][0]
    minimums = {
        "audit why": re.findall(r"driver >= ([\d.]+)", finding["message"]),
        "audit fix": re.findall(r"R595 driver >= ([\d.]+)", finding["fix"]),
        "plan floor": [pool["targetFloor"]],
        "plan action": re.findall(r"R595 driver >= ([\d.]+)", pool["action"]),
        "check why": re.findall(r"driver >= ([\d.]+)", checked["message"]),
        "check fix": re.findall(r"needs driver >= ([\d.]+)", checked["fix"]),
    }
    assert minimums == {key: ["595.45.04"] for key in minimums}
    newest = {
        "audit": re.findall(r"newest known: ([\d.]+)", finding["fix"]),
        "plan": [pool["targetVersion"]],
        "recommend-driver": [json.loads(recommend.stdout)["version"]],
    }
    assert newest == {key: ["595.91.07"] for key in newest}
