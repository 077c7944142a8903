"""Workload controllers judged at ``kubectl apply`` through the real API server (issue 27
item 2): a Deployment or CronJob whose pods no node can run gets the pods' warning, the
template is left as applied, and a NoCompatibleNode Event is recorded on the controller.
Before, the API server never sent such objects to the webhook: kubectl printed nothing and the
pods went Pending with the scheduler's generic message.

The fleet is the harness's: its newest drivers run CUDA 12.8, so CUDA 13.2 runs nowhere.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.harness.controlplane.plane import ControlPlane
from tests.harness.kube import Api
from tests.harness.webhook import LiveWebhook, registered
from tests.harness.workloads import gpu_pod

NS = "e2e-templates"
NOWHERE = {"cudasched.io/cuda-version": "13.2"}


@pytest.fixture(scope="module")
def templates(plane: ControlPlane, api: Api, webhook: LiveWebhook) -> Iterator[ControlPlane]:
    api.ensure_namespace(NS)
    config = webhook.registration(name="cudasched-webhook-templates", only_namespaces=[NS])
    with registered(api, config):
        yield plane


def _template(annotations: dict[str, str]) -> dict[str, Any]:
    pod = gpu_pod("unused", NS, "registry.local/team/train:3", annotations=annotations)
    meta = {"labels": {"app": "train"}, "annotations": pod["metadata"].get("annotations", {})}
    return {"metadata": meta, "spec": pod["spec"]}


def _deployment(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": 0,  # judged by its template; no pod is needed
            "selector": {"matchLabels": {"app": "train"}},
            "template": _template(annotations),
        },
    }


def _cronjob(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    template = _template(annotations)
    template["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "schedule": "0 0 1 1 *",
            "suspend": True,
            "jobTemplate": {"spec": {"template": template}},
        },
    }


def test_a_deployment_no_node_can_run_is_warned_left_as_applied_and_evented(
    templates: ControlPlane, api: Api
) -> None:
    applied = templates.kubectl(
        "apply", "-f", "-", input=yaml.safe_dump(_deployment("nofit", NOWHERE))
    )
    assert "Warning: cudasched: no node can run CUDA 13.2" in applied.stderr, applied.stderr
    stored = api.get(f"/apis/apps/v1/namespaces/{NS}/deployments/nofit")
    template_annotations = stored["spec"]["template"]["metadata"]["annotations"]
    assert template_annotations == NOWHERE
    assert "affinity" not in stored["spec"]["template"]["spec"]
    seen = ""

    def event_listed() -> bool:
        nonlocal seen
        seen = templates.kubectl("events", "-n", NS, "--for", "deployment/nofit").stdout
        return "NoCompatibleNode" in seen

    api.wait_for("a NoCompatibleNode event on the Deployment", event_listed, timeout=60, interval=1)


def test_the_replica_set_of_pods_no_node_can_run_gets_the_event(
    templates: ControlPlane, api: Api
) -> None:
    """The pods have no name at admission (generateName): the ReplicaSet that makes them is
    what their NoCompatibleNode Event is recorded on."""
    running = _deployment("pending", NOWHERE)
    running["spec"]["replicas"] = 1
    running["spec"]["selector"] = {"matchLabels": {"app": "pending"}}
    running["spec"]["template"]["metadata"]["labels"] = {"app": "pending"}
    templates.kubectl("apply", "-f", "-", input=yaml.safe_dump(running))
    regarding: list[str] = []

    def replica_set_evented() -> bool:
        events = api.get(f"/apis/events.k8s.io/v1/namespaces/{NS}/events")["items"]
        regarding[:] = [
            f"{e['regarding']['kind']}/{e['regarding']['name']}"
            for e in events
            if e.get("reason") == "NoCompatibleNode"
        ]
        return any(r.startswith("ReplicaSet/pending-") for r in regarding)

    api.wait_for("a NoCompatibleNode event on the ReplicaSet", replica_set_evented, timeout=90)


def test_a_cronjob_is_judged_by_its_jobs_template(templates: ControlPlane) -> None:
    applied = templates.kubectl(
        "apply", "-f", "-", input=yaml.safe_dump(_cronjob("nightly", NOWHERE))
    )
    assert "Warning: cudasched: no node can run CUDA 13.2" in applied.stderr, applied.stderr


def test_a_deployment_some_node_can_run_gets_no_word(templates: ControlPlane) -> None:
    fits = _deployment("fits", {"cudasched.io/cuda-version": "12.4"})
    applied = templates.kubectl("apply", "-f", "-", input=yaml.safe_dump(fits))
    assert "cudasched" not in applied.stderr, applied.stderr
