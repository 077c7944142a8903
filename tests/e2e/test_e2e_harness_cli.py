"""The harness as a person runs it (docs/guide/controlplane.md): ``python -m
tests.harness.controlplane up`` starts a working control plane in one command and prints the
exports; kubectl of the pinned version sees Ready GPU nodes; ``webhook`` runs cudasched's webhook
registered with it, and a GPU pod created with kubectl is mutated and bound to a node that can
run it; ``down`` stops everything, the webhook included, and leaves no process behind.

This is a second control plane beside the package's, in its own directory, on its own ports.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.harness.binaries import Binaries
from tests.harness.controlplane.processes import cmdline, exited
from tests.harness.controlplane.state import read_state
from tests.harness.fleet import cudasched_command
from tests.harness.workloads import gpu_pod

NODES = 21  # every sample label set once
#: The harness is ``tests.harness`` of the source tree: a person runs it from the repository root.
ROOT = Path(__file__).resolve().parents[2]
IMAGE = "nvcr.io/nvidia/tritonserver:24.05-py3"


def _processes_under(directory: Path) -> list[str]:
    """Command lines of running processes that name ``directory`` (every component, the
    keeper and the webhook do: their state, data and certificate paths are under it)."""
    pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
    return [
        f"{pid}: {cmdline(pid)}"
        for pid in pids
        if str(directory) in cmdline(pid) and not exited(pid) and pid != os.getpid()
    ]


def _wait(what: str, check: object, timeout: float) -> None:
    limit = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > limit:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.5)


def test_a_person_starts_uses_and_stops_a_control_plane(binaries: Binaries, tmp_path: Path) -> None:
    directory = tmp_path / "plane"
    harness = [sys.executable, "-m", "tests.harness.controlplane", "--dir", str(directory)]

    def run(
        *args: str, env: dict[str, str] | None = None, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*args],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=300,
            check=False,
            input=input,
        )

    hook: subprocess.Popen[str] | None = None
    try:
        up = run(*harness, "up", "--nodes", str(NODES))
        assert up.returncode == 0, up.stderr
        exports = dict(re.findall(r"^export (KUBECONFIG|PATH)=(.*)$", up.stdout, re.M))
        assert exports["KUBECONFIG"] == str(directory / "kubeconfig"), up.stdout
        assert exports["PATH"] == f"{binaries.directory}:$PATH", up.stdout
        # The interpreter as the person runs it from the checkout (.venv/bin/python...).
        exe = Path(sys.executable)
        python = str(exe.relative_to(ROOT)) if exe.is_relative_to(ROOT) else str(exe)
        assert f'eval "$({python} -m tests.harness.controlplane env)"' in up.stderr, up.stderr
        assert run(*harness, "env").stdout == up.stdout  # env prints the same exports
        status = run(*harness, "status")
        assert status.returncode == 0 and "webhook: not running" in status.stdout, status.stdout

        env = {
            **os.environ,
            "KUBECONFIG": exports["KUBECONFIG"],
            "PATH": exports["PATH"].replace("$PATH", os.environ["PATH"]),
        }
        version = json.loads(run("kubectl", "version", "-o", "json", env=env).stdout)
        assert version["clientVersion"]["gitVersion"] == binaries.kubernetes
        assert version["serverVersion"]["gitVersion"] == binaries.kubernetes
        nodes = json.loads(run("kubectl", "get", "nodes", "-o", "json", env=env).stdout)["items"]
        assert len(nodes) == NODES
        ready = [
            n
            for n in nodes
            if {c["type"]: c["status"] for c in n["status"]["conditions"]}["Ready"] == "True"
        ]
        gpus = [n for n in nodes if int(n["status"]["allocatable"].get("nvidia.com/gpu", 0))]
        assert len(ready) == NODES and len(gpus) == NODES - 1  # the sample's CPU node has none

        # the webhook, as the guide runs it (in the background of the person's shell)
        # with a settings file, as `cudasched webhook --config` takes it (here: refuse pods no
        # node can run)
        hook_log = tmp_path / "webhook.stderr"
        settings = tmp_path / "webhook.yaml"
        settings.write_text("onNoFit: deny\n")
        with hook_log.open("w") as log:
            hook = subprocess.Popen(
                [*harness, "webhook", "--config", str(settings), "--log-level", "debug"],
                stdout=subprocess.DEVNULL,
                stderr=log,
                text=True,
                env=env,
                cwd=ROOT,
            )
        _wait(
            "the webhook to be registered",
            lambda: (
                "registered as MutatingWebhookConfiguration" in hook_log.read_text()
                or hook.poll() is not None
            ),  # type: ignore[union-attr]
            timeout=180,
        )
        assert hook.poll() is None, hook_log.read_text()
        assert read_state(directory)["helpers"] == {"webhook": hook.pid}
        assert f"webhook: running (pid {hook.pid})" in run(*harness, "status").stdout

        nowhere = gpu_pod(
            "cuda13", "default", IMAGE, annotations={"cudasched.io/cuda-version": "13.2"}
        )
        refused = run("kubectl", "create", "-f", "-", env=env, input=yaml.safe_dump(nowhere))
        assert refused.returncode != 0 and "no node can run CUDA 13.2" in refused.stderr, (
            refused.stderr
        )

        pod = gpu_pod("triton", "default", IMAGE)
        pod_file = tmp_path / "triton.yaml"
        pod_file.write_text(yaml.safe_dump(pod))
        created = run("kubectl", "create", "-f", str(pod_file), "-o", "json", env=env)
        assert created.returncode == 0, created.stderr
        annotations = json.loads(created.stdout)["metadata"].get("annotations", {})
        assert annotations.get("cudasched.io/requirement", "").startswith("cuda>=12.4")
        # one line per decision at debug level, in the webhook's log
        decisions = (directory / "webhook" / "webhook.log").read_text()
        assert "decided CREATE Pod default/triton" in decisions, decisions[-2000:]
        assert "decided CREATE Pod default/cuda13" in decisions, decisions[-2000:]

        def bound() -> str:
            got = run("kubectl", "get", "pod", "triton", "-o", "json", env=env)
            return str(json.loads(got.stdout)["spec"].get("nodeName", ""))

        _wait("kube-scheduler to bind the pod", bound, timeout=120)
        explained = run(
            *cudasched_command(),
            "explain",
            "--workload",
            str(pod_file),
            "--kubeconfig",
            exports["KUBECONFIG"],
            "-o",
            "json",
            env=env,
        )
        assert explained.returncode == 0, explained.stderr
        report = json.loads(explained.stdout)
        eligible = {n["node"] for n in report["nodes"] if n["eligible"]}
        assert 0 < len(eligible) < NODES and bound() in eligible

        # the README's PolicyReports apply: the harness installs wgpolicyk8s.io's CRDs
        reports = run(*cudasched_command(), "audit", "--live", "-o", "policyreport", env=env)
        assert reports.returncode in (0, 1), reports.stderr  # 1: the audit found errors
        applied = run("kubectl", "apply", "-f", "-", env=env, input=reports.stdout)
        assert applied.returncode == 0 and "policyreport" in applied.stdout, applied.stderr

        # down ends the webhook first (it unregisters while the API server answers), then the
        # control plane: nothing is left running
        down = run(*harness, "down")
        assert down.returncode == 0, down.stderr
        assert "webhook" in down.stderr and "kube-apiserver" in down.stderr, down.stderr
        assert hook.wait(timeout=30) == 0, hook_log.read_text()
        assert "Traceback" not in hook_log.read_text(), hook_log.read_text()
        assert run(*harness, "status").returncode == 1
        assert _processes_under(directory) == []
    finally:
        if hook is not None and hook.poll() is None:
            hook.kill()
            hook.wait(10)
        if (directory / "state.json").exists():
            run(*harness, "down")
