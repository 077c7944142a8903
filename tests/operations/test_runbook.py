"""``operations.drivers.runbook``: the rollout script of a plan works with the GPU Operator's
controllers: per wave cordon, drain GPU pods through the Eviction API, label, create or touch the
object, wait for owner, driver pod, driver version, GPUs and the object's ready state, uncordon;
valid bash."""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from cudasched.cluster.fleet import Fleet
from cudasched.cluster.snapshot import ClusterSnapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.images import ImageTable
from cudasched.operations.drivers.plan import DriverPlan
from cudasched.operations.drivers.planning import plan_drivers
from cudasched.operations.drivers.runbook import render_script
from tests.support.planning_cluster import OPERATOR_DRIVER, cluster, gpu_node, runtime

TODAY = date(2026, 12, 1)


def _cluster(extra: tuple[dict[str, Any], ...] = ()) -> ClusterSnapshot:
    """Three T4 nodes on R550 and one A100 on R535, all the operator's, for CUDA 13.0."""
    return cluster(
        *(gpu_node(f"t4-{i}", "Tesla-T4", "550.90.07", extra=OPERATOR_DRIVER) for i in range(3)),
        gpu_node("a100-0", "NVIDIA-A100-SXM4-80GB", "535.216.01", extra=OPERATOR_DRIVER),
        runtime("vllm-13", "13.0"),
        *extra,
    )


def _plan(kb: KnowledgeBase, release: str = "26.7", **options: Any) -> DriverPlan:
    snapshot = options.pop("snapshot", None) or _cluster()
    return plan_drivers(
        snapshot,
        Fleet.from_snapshot(snapshot, kb),
        ImageTable.builtin(kb),
        today=TODAY,
        operator=kb.operator.version(release),
        **options,
    )


def _waves(script: str) -> list[list[str]]:
    """The script's lines, wave by wave (the preamble dropped)."""
    out: list[list[str]] = []
    for line in script.splitlines():
        if line.startswith("# ---- wave ") or line.startswith("# ----"):
            out.append([])
        elif out:
            out[-1].append(line)
    return out


def _first(lines: list[str], needle: str) -> int:
    return next(i for i, line in enumerate(lines) if needle in line)


def test_each_wave_works_with_the_operators_controllers(kb: KnowledgeBase) -> None:
    plan = _plan(kb, max_unavailable=2)
    script = render_script(plan, "test cluster")
    waves = _waves(script)
    assert len(waves) == len(plan.waves) == 2
    for lines in waves:
        order = [
            _first(lines, "kubectl cordon"),
            _first(lines, "drain_gpu_pods"),
            _first(lines, "kubectl label node"),
            _first(lines, "wait_for 'owner of"),
            _first(lines, "wait_for 'driver pod on"),
            _first(lines, "wait_for 'driver on"),
            _first(lines, "wait_for 'GPUs on"),
            _first(lines, "kubectl wait nvidiadriver/"),
            _first(lines, "kubectl uncordon"),
        ]
        assert order == sorted(order), lines
    # The T4 object is created in its first wave and touched (a new generation) in the next,
    # with maxParallelUpgrades counting its nodes labelled so far.
    t4 = "t4-ubuntu22.04-r580"
    assert sum("kubectl apply -f - <<'EOF'" in line for w in waves for line in w) == 2
    [touch] = [line for w in waves for line in w if f"kubectl patch nvidiadriver {t4}" in line]
    assert json.loads(touch.split(" -p ")[1].split("   #")[0].strip("'")) == {
        "spec": {"upgradePolicy": {"maxParallelUpgrades": 3}}
    }
    # The manifest applied is the plan's object (and names the pool label it selects).
    assert '"cudasched.io/driver-pool": "t4-ubuntu22.04-r580"' in script
    assert "cudasched.io/driver-pool=t4-ubuntu22.04-r580" in script


def test_before_26_7_the_label_is_the_trigger_and_there_is_no_owner_label(
    kb: KnowledgeBase,
) -> None:
    script = render_script(_plan(kb, "26.3", max_unavailable=2), "test cluster")
    assert "kubectl patch nvidiadriver" not in script
    assert "wait_for 'owner of" not in script
    assert "upgradePolicy" not in script.split("say()")[1]


def test_replaced_objects_are_deleted_after_the_last_wave(kb: KnowledgeBase) -> None:
    old = {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "NVIDIADriver",
        "metadata": {"name": "t4-ubuntu22.04-r580", "labels": {}},
        "spec": {"driverType": "gpu", "image": "driver", "usePrecompiled": True},
    }
    plan = _plan(kb, snapshot=_cluster((old,)))
    script = render_script(plan, "test cluster")
    last_wave = script.rindex("# ---- wave ")
    delete = script.index("kubectl delete nvidiadriver t4-ubuntu22.04-r580")
    assert delete > last_wave
    assert "t4-ubuntu22.04-r580-2" in script


def test_a_plan_without_operator_pools_rolls_out_nothing(kb: KnowledgeBase) -> None:
    host = cluster(
        gpu_node("t4", "Tesla-T4", "550.90.07", extra={"nvidia.com/gpu.deploy.driver": "false"}),
        runtime("vllm-13", "13.0"),
    )
    script = render_script(_plan(kb, snapshot=host), "test cluster")
    assert "nothing to roll out" in script and "kubectl cordon" not in script


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
@pytest.mark.parametrize("release", ["26.7", "25.10"])
def test_the_script_is_valid_bash(kb: KnowledgeBase, tmp_path: Path, release: str) -> None:
    path = tmp_path / "rollout.sh"
    path.write_text(render_script(_plan(kb, release, max_unavailable=1), "test cluster"))
    result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
