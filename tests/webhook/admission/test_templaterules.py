"""Workload controllers judged by their pod templates (issue 27 item 2): a Deployment,
StatefulSet, Job, CronJob or LeaderWorkerSet whose pods no node can run is told so at
``kubectl apply``, warn-only (never patched, never refused), with the words its pods get, and
reported for the NoCompatibleNode Event on the controller. Before, the workload endpoint did
not exist: such a controller was admitted silently and its pods went Pending.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import pytest

from cudasched.knowledge import KnowledgeBase
from cudasched.settings.config import WebhookConfig
from cudasched.webhook.admission.admitter import Admitter
from cudasched.webhook.admission.review import Placement, creation_review
from cudasched.webhook.state.clusterstate import ClusterState
from tests.support import builders
from tests.support.admission import ask, nodes_state

#: The fleet's newest driver is R570 (CUDA 12.8): CUDA 13.0 runs nowhere, 12.4 on most nodes.
NO_NODE = {"cudasched.io/cuda-version": "13.0"}
SOME_NODES = {"cudasched.io/cuda-version": "12.4"}


@functools.cache
def state() -> ClusterState:
    return nodes_state(KnowledgeBase.load())


def _admitter(**settings: Any) -> Admitter:
    return Admitter.from_config(WebhookConfig.from_mapping(settings), kb=KnowledgeBase.load())


def _template(annotations: dict[str, str]) -> dict[str, Any]:
    pod = builders.pod(None, None, labels={"app": "train"}, annotations=annotations)
    return {"metadata": pod["metadata"], "spec": pod["spec"]}


def _controller(kind: str, annotations: dict[str, str], name: str = "train") -> dict[str, Any]:
    template = _template(annotations)
    meta = {"name": name, "namespace": "ml"}
    if kind == "CronJob":
        spec: dict[str, Any] = {
            "schedule": "0 * * * *",
            "jobTemplate": {"spec": {"template": template}},
        }
        return {"apiVersion": "batch/v1", "kind": kind, "metadata": meta, "spec": spec}
    if kind == "LeaderWorkerSet":
        spec = {"leaderWorkerTemplate": {"size": 2, "workerTemplate": template}}
        return {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": kind,
            "metadata": meta,
            "spec": spec,
        }
    group = "batch/v1" if kind == "Job" else "apps/v1"
    spec = {"selector": {"matchLabels": {"app": "train"}}, "template": template}
    return {"apiVersion": group, "kind": kind, "metadata": meta, "spec": spec}


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet", "Job", "CronJob"])
def test_a_controller_whose_pods_no_node_can_run_is_warned_unchanged(kind: str) -> None:
    adm = _admitter()
    review = creation_review(_controller(kind, NO_NODE))
    resp = ask(adm, "workload", review, state())
    # The words its pods get, at kubectl apply, and nothing changed.
    pod_review = creation_review(builders.pod("train-1", "ml", annotations=NO_NODE))
    pod_warnings = ask(adm, "pod", pod_review, state())["warnings"]
    assert resp["allowed"] and "patch" not in resp
    assert resp["warnings"] == pod_warnings
    assert resp["warnings"][0].startswith("cudasched: no node can run CUDA 13.0")


def test_a_controller_whose_pods_some_node_can_run_gets_no_word() -> None:
    resp = ask(
        _admitter(), "workload", creation_review(_controller("Deployment", SOME_NODES)), state()
    )
    assert resp["allowed"] and "patch" not in resp and "warnings" not in resp


def test_deny_refuses_the_pods_never_the_controller() -> None:
    adm = _admitter(onNoFit="deny")
    resp = ask(adm, "workload", creation_review(_controller("Deployment", NO_NODE)), state())
    pod_review = creation_review(builders.pod("train-1", "ml", annotations=NO_NODE))
    pod = ask(adm, "pod", pod_review, state())
    assert not pod["allowed"]
    assert resp["allowed"] and resp["warnings"] == [pod["status"]["message"]]


def test_a_leader_worker_set_says_which_template() -> None:
    resp = ask(
        _admitter(), "workload", creation_review(_controller("LeaderWorkerSet", NO_NODE)), state()
    )
    assert resp["allowed"] and "patch" not in resp
    assert resp["warnings"][0].startswith("cudasched: workerTemplate: no node can run CUDA 13.0"), (
        resp["warnings"]
    )


def test_the_controller_is_reported_for_its_event() -> None:
    adm = _admitter()
    seen: list[Placement] = []
    adm.on_placement = seen.append
    ask(adm, "workload", creation_review(_controller("Deployment", NO_NODE, "nofit")), state())
    ask(adm, "workload", creation_review(_controller("Deployment", SOME_NODES, "fits")), state())
    reported = {(p.kind, p.name, p.api_version): p.no_fit for p in seen}
    assert reported[("Deployment", "fits", "apps/v1")] is None
    assert str(reported[("Deployment", "nofit", "apps/v1")]).startswith(
        "cudasched: no node can run CUDA 13.0"
    )
    (nofit,) = (p for p in seen if p.name == "nofit")
    # The gauge re-checks it against later snapshots with the pods' own rule.
    assert nofit.check is not None and not state().fits(*nofit.check)


def test_updates_are_judged_deletes_and_skipped_ones_are_not() -> None:
    adm = _admitter()
    update = creation_review(_controller("Deployment", NO_NODE))
    update["request"]["operation"] = "UPDATE"
    delete = copy.deepcopy(update)
    delete["request"]["operation"] = "DELETE"
    skipped = creation_review(_controller("Deployment", {**NO_NODE, "cudasched.io/skip": "true"}))
    assert ask(adm, "workload", update, state())["warnings"]
    assert "warnings" not in ask(adm, "workload", delete, state())
    assert "warnings" not in ask(adm, "workload", skipped, state())


def test_the_workload_endpoint_decides_only_controllers() -> None:
    pod = creation_review(builders.pod("train-1", "ml", annotations=NO_NODE))
    resp = ask(_admitter(), "workload", pod, state())
    assert resp["allowed"] and "warnings" not in resp and "patch" not in resp


def test_an_unreadable_template_is_said_never_refused() -> None:
    broken = _controller("Deployment", NO_NODE)
    broken["spec"]["template"]["spec"] = "not a spec"
    resp = ask(_admitter(onNoFit="deny"), "workload", creation_review(broken), state())
    assert resp["allowed"] and resp["warnings"][0].startswith("cudasched: pods not judged:")


def _owned_pod(annotations: dict[str, str]) -> dict[str, Any]:
    pod = builders.pod(None, "ml", generate_name="train-6d9f-", annotations=annotations)
    pod["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": "train-6d9f",
            "uid": "rs-uid-1",
            "controller": True,
        }
    ]
    return pod


def test_a_pod_no_node_can_run_reports_the_controller_that_made_it() -> None:
    """The pod has no name at admission (generateName): its ReplicaSet gets the Event."""
    adm = _admitter()
    seen: list[Placement] = []
    adm.on_placement = seen.append
    ask(adm, "pod", creation_review(_owned_pod(NO_NODE)), state())
    ask(adm, "pod", creation_review(_owned_pod(SOME_NODES)), state())
    ask(adm, "pod", creation_review(builders.pod("loose", "ml", annotations=NO_NODE)), state())
    (owner,) = seen
    assert (owner.api_version, owner.kind, owner.namespace, owner.name, owner.uid) == (
        "apps/v1",
        "ReplicaSet",
        "ml",
        "train-6d9f",
        "rs-uid-1",
    )
    assert str(owner.no_fit).startswith("cudasched: no node can run CUDA 13.0")
    assert owner.check is not None and not state().fits(*owner.check)


def test_every_replica_reports_its_controller_even_when_its_answer_is_remembered() -> None:
    """The replicas of a ReplicaSet are one request but for the uid: the first is decided,
    the rest are answered from memory, and each must still report the controller, so that
    the pods made later (a scale-up) are swept for their Events; a dry run never reports."""
    adm = _admitter()
    seen: list[Placement] = []
    adm.on_placement = seen.append
    replica = creation_review(_owned_pod(NO_NODE))
    answers = [
        ask(adm, "pod", {**replica, "request": {**replica["request"], "uid": f"r{i}"}}, state())
        for i in range(3)
    ]
    assert len(adm.memo) == 1  # one decision, two answers remembered
    assert [p.name for p in seen] == ["train-6d9f"] * 3
    dry = {**replica, "request": {**replica["request"], "uid": "dry", "dryRun": True}}
    assert ask(adm, "pod", dry, state()) == {**answers[0], "uid": "dry"}
    assert len(seen) == 3
    # A dry run decided first is remembered by its raw bytes, which a repeat is found by.
    fresh = _admitter()
    fresh.on_placement = seen.append
    again = {**dry, "request": {**dry["request"], "uid": "dry-2"}}
    assert ask(fresh, "pod", dry, state()) == ask(fresh, "pod", again, state()) | {"uid": "dry"}
    assert len(seen) == 3
