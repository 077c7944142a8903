"""One answer to "can any node run it", through the real API server (issue 27 item 3): a GPU pod
whose own nodeSelector excludes every node that can run it is warned at ``kubectl create``,
reported by ``cudasched audit --live``, and counted on no node by ``cudasched explain --live``.
Before, kubectl printed nothing and the audit said nothing, while explain said 0 of 63.

The fleet is the harness's: the sample cluster's label sets three times, its K80 nodes on R470
(CUDA 11.4), its newer nodes on drivers that run CUDA 12.8.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest
import yaml

from tests.harness.controlplane.plane import ControlPlane
from tests.harness.fleet import cudasched_command
from tests.harness.kube import Api
from tests.harness.webhook import LiveWebhook, registered
from tests.harness.workloads import gpu_pod

NS = "e2e-fit"
NEEDS = {"cudasched.io/cuda-version": "12.8"}
K80 = {"nvidia.com/gpu.product": "Tesla-K80"}


@pytest.fixture(scope="module")
def fit(plane: ControlPlane, api: Api, webhook: LiveWebhook) -> Iterator[ControlPlane]:
    api.ensure_namespace(NS)
    config = webhook.registration(name="cudasched-webhook-fit", only_namespaces=[NS])
    with registered(api, config):
        yield plane


def _cudasched(plane: ControlPlane, *args: str) -> str:
    env = {**plane.env(), "KUBECONFIG": str(plane.kubeconfig)}
    done = subprocess.run(
        [*cudasched_command(), *args], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode in (0, 1), done.stderr  # 1: the audit found errors
    return done.stdout


def test_a_pod_its_own_selector_keeps_off_every_node_that_can_run_it(fit: ControlPlane) -> None:
    pod = gpu_pod(
        "k80-only", NS, "registry.local/team/train:3", annotations=NEEDS, node_selector=K80
    )
    created = fit.kubectl("create", "-f", "-", input=yaml.safe_dump(pod))
    assert (
        "Warning: cudasched: the pod's own nodeSelector or node affinity excludes every node "
        "that can run CUDA 12.8"
    ) in created.stderr, created.stderr
    # A pod of the same need without the selector is placed, with no word.
    free = gpu_pod("anywhere", NS, "registry.local/team/train:3", annotations=NEEDS)
    assert "cudasched" not in fit.kubectl("create", "-f", "-", input=yaml.safe_dump(free)).stderr

    explained = json.loads(
        _cudasched(fit, "explain", "pod/k80-only", "-n", NS, "--live", "-o", "json")
    )
    assert explained["summary"]["eligible"] == 0 and explained["summary"]["total"] > 0

    report = json.loads(_cudasched(fit, "audit", "--live", "-n", NS, "-o", "json"))
    findings = {(f["code"], f["object"]) for f in report["findings"]}
    assert ("no-compatible-node", f"Pod/{NS}/k80-only") in findings, findings
    assert not any(obj == f"Pod/{NS}/anywhere" for _code, obj in findings), findings
