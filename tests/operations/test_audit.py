"""``operations.audit``: every finding code on small clusters with known answers, the true
negatives next to them (each shown able to fail by changing the one fact that protects it), and
the bundled sample cluster's reviewed findings."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.cluster.fleet import Fleet
from cudasched.cluster.scope import Scope
from cudasched.cluster.snapshot import ClusterSnapshot, bundled_snapshot, load_snapshot
from cudasched.compat.engine import check
from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.images import ImageTable
from cudasched.nodes.facts import facts_from_labels
from cudasched.operations.audit import CODES, AuditReport, Severity, audit
from cudasched.operations.audit.findings import Finding
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.vocab.selectors import parse_selector
from cudasched.vocab.versions import parse_cuda
from tests.support import builders, planning_cluster

DATA = Path(__file__).parents[1] / "data" / "audit"

Key = tuple[str, str, str, str | None]


def run(
    snapshot: ClusterSnapshot, kb: KnowledgeBase, images: ImageTable, policy: Policy = Policy.STRICT
) -> AuditReport:
    return audit(snapshot, Fleet.from_snapshot(snapshot, kb), images, policy)


def keys(report: AuditReport) -> set[Key]:
    return {(f.severity.value, f.code, f.object, f.node) for f in report.findings}


def load(name: str) -> ClusterSnapshot:
    return load_snapshot(DATA / name)


def edited(snapshot: ClusterSnapshot, bucket: str, name: str, change: Any) -> ClusterSnapshot:
    """A copy of ``snapshot`` with ``change(obj)`` applied to the object ``name`` of ``bucket``."""
    objects = [copy.deepcopy(o) for o in getattr(snapshot, bucket)]
    target = next(o for o in objects if o["metadata"]["name"] == name)
    change(target)
    return ClusterSnapshot(
        **{
            **{b: getattr(snapshot, b) for b in _BUCKETS},
            bucket: tuple(objects),
        },
        source=snapshot.source,
    )


_BUCKETS = (
    "nodes",
    "inference_services",
    "serving_runtimes",
    "cluster_serving_runtimes",
    "llm_inference_services",
    "nvidia_drivers",
    "pods",
    "workloads",
    "other",
)


# --------------------------------------------------------------------------- codes


def test_every_code_has_its_issue_severity() -> None:
    assert CODES == {
        "pod-on-incompatible-node": Severity.ERROR,
        "no-compatible-node": Severity.ERROR,
        "driver-upgrade-failed": Severity.ERROR,
        "webhook-not-registered": Severity.ERROR,
        "webhook-unreachable": Severity.ERROR,
        "runtime-without-node": Severity.WARNING,
        "labels-missing": Severity.WARNING,
        "labels-conflict": Severity.WARNING,
        "driver-upgrade-in-progress": Severity.WARNING,
        "stale-requirement": Severity.WARNING,
        "requirement-invalid": Severity.WARNING,
        "driver-branch-ended": Severity.WARNING,
        "driver-branch-legacy": Severity.WARNING,
        "labels-deprecated-only": Severity.INFO,
        "requirement-unknown": Severity.INFO,
        "driver-branch-ending": Severity.INFO,
        "knowledge-stale": Severity.WARNING,
        "gpu-unknown": Severity.WARNING,
        "placement-moved": Severity.WARNING,
        "dra-extended-resource-shared": Severity.WARNING,
        "dra-device-without-cuda-attributes": Severity.WARNING,
        "dra-extended-resource-both-sources": Severity.WARNING,
        "kueue-flavor-without-cuda-key": Severity.WARNING,
        "kueue-flavor-spans-cuda-classes": Severity.WARNING,
        "driver-release-unknown": Severity.INFO,
    }


def test_healthy_cluster_has_no_findings(kb: KnowledgeBase, images: ImageTable) -> None:
    report = run(load("healthy.yaml"), kb, images)
    assert report.findings == ()
    assert report.summary() == {"error": 0, "warning": 0, "info": 0}
    assert not report.has_errors


@pytest.mark.parametrize(
    ("bucket", "name", "change", "expected"),
    [
        # The finished pod needed CUDA 12.8 on a 12.4 node: only its phase protects it.
        (
            "pods",
            "cuda-12-8-smoke",
            lambda o: o["status"].update(phase="Running"),
            ("error", "pod-on-incompatible-node", "Pod/ml/cuda-12-8-smoke", "gpu-4090-1"),
        ),
        # The opted-out pod: only cudasched.io/skip protects it.
        (
            "pods",
            "legacy-manual",
            lambda o: o["metadata"]["annotations"].pop("cudasched.io/skip"),
            ("error", "pod-on-incompatible-node", "Pod/ml/legacy-manual", "gpu-t4-1"),
        ),
        # The CPU pod on a GPU node: only the missing GPU request protects it.
        (
            "pods",
            "web-5d8b7-xk2lp",
            lambda o: o["spec"]["containers"][0]["resources"].update(
                limits={"nvidia.com/gpu": "1"}
            ),
            ("info", "requirement-unknown", "Pod/web/web-5d8b7-xk2lp", None),
        ),
        # The GPU Operator finished the upgrade on gpu-t4-1.
        (
            "nodes",
            "gpu-t4-1",
            lambda o: o["metadata"]["labels"].update(
                {"nvidia.com/gpu-driver-upgrade-state": "pod-restart-required"}
            ),
            ("warning", "driver-upgrade-in-progress", "Node/gpu-t4-1", "gpu-t4-1"),
        ),
        # Both GFD generations agree on gpu-4090-1 (two-part driver, empty revision).
        (
            "nodes",
            "gpu-4090-1",
            lambda o: o["metadata"]["labels"].update({"nvidia.com/cuda.driver.minor": "107"}),
            ("warning", "labels-conflict", "Node/gpu-4090-1", "gpu-4090-1"),
        ),
        # The disabled runtime needs a CUDA no node has.
        (
            "cluster_serving_runtimes",
            "vllm-cuda-13.0-retired",
            lambda o: o["spec"].pop("disabled"),
            (
                "warning",
                "runtime-without-node",
                "ClusterServingRuntime/vllm-cuda-13.0-retired",
                "gpu-4090-1",  # both nodes run CUDA 12.4: the newer driver is nearer
            ),
        ),
        # The bound GPU pod's record is current.
        (
            "pods",
            "embedder-7c9f4-abcde",
            lambda o: o["metadata"]["annotations"].update({"cudasched.io/cuda-version": "12.2"}),
            ("warning", "stale-requirement", "Pod/ml/embedder-7c9f4-abcde", "gpu-t4-1"),
        ),
    ],
)
def test_true_negatives_can_fail(
    kb: KnowledgeBase, images: ImageTable, bucket: str, name: str, change: Any, expected: Key
) -> None:
    snapshot = edited(load("healthy.yaml"), bucket, name, change)
    assert keys(run(snapshot, kb, images)) == {expected}


def test_pods_bound_to_nodes_that_cannot_run_them(kb: KnowledgeBase, images: ImageTable) -> None:
    report = run(load("bound.yaml"), kb, images)
    assert keys(report) == {  # vllm-0 is its StatefulSet's: said of the StatefulSet
        ("error", "pod-on-incompatible-node", "StatefulSet/llm/vllm", "gpu-h100-1"),
        ("error", "pod-on-incompatible-node", "Pod/llm/vllm-next-0", "gpu-h100-1"),
        ("error", "pod-on-incompatible-node", "Pod/llm/vllm-gated-0", "gpu-h100-1"),
    }
    by_object = {f.object: f for f in report.findings}
    # Its own policy minor-compat does not save it: the image's NVIDIA_REQUIRE_CUDA stops the
    # container on R550 whatever the policy.
    gated = by_object["Pod/llm/vllm-gated-0"]
    assert "[minor-compat]" in gated.message and "(require-cuda-unmet)" in gated.message
    assert "NVIDIA_REQUIRE_CUDA (image docker.io/vllm/vllm-openai:v0.10.2)" in gated.message
    assert "gpu-h100-2" in (gated.fix or "") and "install R580 >= 580.65.06" in (gated.fix or "")
    moved = by_object["StatefulSet/llm/vllm"]
    assert moved.message.startswith("1 of 1 pods on nodes that cannot run them (vllm-0)")
    assert "cuda>=12.8 [strict]" in moved.message
    assert "driver 550.127.05, CUDA 12.4" in moved.message
    assert "(driver-too-old)" in moved.message
    assert "gpu-h100-2" in (moved.fix or "")
    assert (moved.fix or "").startswith(
        "restart StatefulSet vllm (kubectl rollout restart statefulset/vllm -n llm)"
    )
    stuck = by_object["Pod/llm/vllm-next-0"]
    assert (stuck.fix or "").startswith("no other node it may use")
    assert "580.65.06" in (stuck.fix or "")


def test_default_policy_applies_only_where_the_workload_names_none(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    # Under minor-compat R550 runs CUDA 12.8 (12.x floor 525.60.13) but not 13.0, and not the
    # upstream vLLM image, whose NVIDIA_REQUIRE_CUDA asks for a driver of CUDA 12.8.
    report = run(load("bound.yaml"), kb, images, Policy.MINOR_COMPAT)
    assert keys(report) == {
        ("error", "pod-on-incompatible-node", "Pod/llm/vllm-next-0", "gpu-h100-1"),
        ("error", "pod-on-incompatible-node", "Pod/llm/vllm-gated-0", "gpu-h100-1"),
    }
    # A workload's own policy wins over the default: strict on vllm-relaxed-0 makes it fail.
    snapshot = edited(
        load("bound.yaml"),
        "pods",
        "vllm-relaxed-0",
        lambda o: o["metadata"]["annotations"].update({"cudasched.io/policy": "strict"}),
    )
    assert ("error", "pod-on-incompatible-node", "Pod/llm/vllm-relaxed-0", "gpu-h100-1") in keys(
        run(snapshot, kb, images, Policy.MINOR_COMPAT)
    )


def test_workloads_and_runtimes_no_node_can_run(kb: KnowledgeBase, images: ImageTable) -> None:
    report = run(load("pending.yaml"), kb, images)
    assert keys(report) == {
        ("error", "no-compatible-node", "Pod/ml/cuda-smoke", "gpu-l4-1"),
        ("error", "no-compatible-node", "InferenceService/llm/qwen", "gpu-l4-1"),
        ("error", "no-compatible-node", "LLMInferenceService/llm/llama-d", "gpu-l4-1"),
        ("warning", "runtime-without-node", "ClusterServingRuntime/vllm-cuda-12.8", "gpu-l4-1"),
    }
    by_object = {f.object: f for f in report.findings}
    isvc = by_object["InferenceService/llm/qwen"]
    assert "pending pods: qwen-predictor-6d5c7b9f8-q2w7x" in isvc.message
    assert "nearest node gpu-l4-1" in isvc.message and "lacks a newer driver" in isvc.message
    assert "install R580 >= 580.65.06 (LTSB)" in (isvc.fix or "")
    # R550 runs 12.8 under minor-version compatibility, but the vLLM image's
    # NVIDIA_REQUIRE_CUDA (cuda>=12.8) refuses it unless the check is turned off; the CUDA
    # 12.8.1 base image of cuda-smoke admits R550 through its brand/driver alternatives.
    assert "minor-compat) and set NVIDIA_DISABLE_REQUIRE=true" in (isvc.fix or "")
    smoke = by_object["Pod/ml/cuda-smoke"].fix or ""
    assert "minor-compat), which 1 node(s)" in smoke and "NVIDIA_DISABLE_REQUIRE" not in smoke
    assert "used by llm/qwen" in by_object["ClusterServingRuntime/vllm-cuda-12.8"].message
    # CUDA 13 has no floor an R550 driver meets: no minor-compat suggestion there.
    assert "minor-compat" not in (by_object["LLMInferenceService/llm/llama-d"].fix or "")


def test_nearest_node_names_what_it_lacks(kb: KnowledgeBase, images: ImageTable) -> None:
    # Without the L4, the K80 is the nearest: it lacks a driver AND an architecture.
    snapshot = load("pending.yaml")
    snapshot = ClusterSnapshot(
        nodes=tuple(n for n in snapshot.nodes if n["metadata"]["name"] != "gpu-l4-1"),
        pods=tuple(p for p in snapshot.pods if p["metadata"]["name"] == "cuda-smoke"),
        source=snapshot.source,
    )
    (finding,) = run(snapshot, kb, images).findings
    assert finding.node == "gpu-k80-1"
    assert (
        "nearest node gpu-k80-1 (driver 470.256.02, CUDA 11.4, cc 3.7, Tesla-K80) lacks a GPU "
        "architecture the workload's CUDA and kernels support and a newer driver: CUDA 12.8 no "
        "longer supports Kepler" in finding.message
    )
    fix = finding.fix or ""
    assert "upgrade the driver" not in fix  # no driver brings CUDA 12.8 to a Kepler GPU
    assert "run it on GPUs its CUDA and kernels support" in fix
    assert "CUDA 11.4 or older" in fix


def test_gate_under_minor_compat_names_what_turns_it_off(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    report = run(load("pending.yaml"), kb, images, Policy.MINOR_COMPAT)
    qwen = next(f for f in report.findings if f.object == "InferenceService/llm/qwen")
    assert "lacks a driver the image's NVIDIA_REQUIRE_CUDA accepts" in qwen.message
    assert "upgrade the driver of gpu-l4-1: install R580 >= 580.65.06 (LTSB)" in (qwen.fix or "")
    assert "set NVIDIA_DISABLE_REQUIRE=true on its container" in (qwen.fix or "")
    assert "1 node(s) would run under minor-compat" in (qwen.fix or "")


def _gfd_node(name: str, product: str, driver: str) -> dict[str, Any]:
    return builders.node(name, gpu=product, driver=driver, scheme=builders.GFD)


def _pending(cuda: str) -> dict[str, Any]:
    annotations = {"cudasched.io/cuda-version": cuda}
    return builders.pod(
        "p", "t", image="x", container="c", annotations=annotations, phase="Pending"
    )


def test_a_gpu_its_driver_cannot_drive_needs_the_gpus_first_driver(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    # R535 runs CUDA 12.2 but cannot drive an H200 (first driver 550.90.07): the fix is a
    # branch from that driver on (R550 ended, so the long-term R580), not CUDA 12.2's minimum
    # (535.54.03), which the node already has.
    snapshot = ClusterSnapshot(
        nodes=(_gfd_node("h200", "NVIDIA-H200", "535.216.01"),), pods=(_pending("12.2"),)
    )
    (finding,) = run(snapshot, kb, images).findings
    assert finding.node == "h200"
    assert "lacks a driver branch that supports its GPU" in finding.message
    assert "upgrade the driver of h200: install R580 >= 580.65.06 (LTSB)" in (finding.fix or "")
    bound = copy.deepcopy(snapshot.pods[0])
    bound["spec"]["nodeName"] = "h200"
    bound["status"]["phase"] = "Running"
    (finding,) = run(ClusterSnapshot(nodes=snapshot.nodes, pods=(bound,)), kb, images).findings
    assert "(driver-branch-unsupported-gpu)" in finding.message
    assert "upgrade the driver of h200: install R580 >= 580.65.06 (LTSB)" in (finding.fix or "")


def test_nearest_node_is_one_a_driver_upgrade_fixes(kb: KnowledgeBase, images: ImageTable) -> None:
    # For CUDA 13.0 a V100 on R580 has the newest CUDA but no driver brings Volta to CUDA 13
    # (arch-dropped); the L4 on R550 only needs a newer driver.
    snapshot = ClusterSnapshot(
        nodes=(
            _gfd_node("v100", "Tesla-V100-SXM2-16GB", "580.65.06"),
            _gfd_node("l4", "NVIDIA-L4", "550.127.05"),
        ),
        pods=(_pending("13.0"),),
    )
    (finding,) = run(snapshot, kb, images).findings
    assert finding.node == "l4"
    assert "upgrade the driver of l4: install R580 >= 580.65.06 (LTSB)" in (finding.fix or "")


@pytest.mark.parametrize(
    ("extra", "fix"),
    [
        (
            planning_cluster.OPERATOR_DRIVER,
            "upgrade the driver of l4: install R580 >= 580.65.06 (LTSB)",
        ),
        (
            planning_cluster.HOST_DRIVER,
            "for l4: install an R580 driver >= 580.65.06 (newest known: 580.178.04) on the hosts "
            "or their image (nvidia.com/gpu.deploy.driver=pre-installed: the GPU Operator does not "
            "install this driver)",
        ),
        (
            {
                "nvidia.com/gpu.deploy.driver": "pre-installed",
                "eks.amazonaws.com/nodegroup": "g6-l4",
            },
            "for l4: move EKS node group g6-l4 to a node image with an R580 driver >= 580.65.06 "
            "(newest known: 580.178.04)",
        ),
    ],
    ids=["operator", "host", "eks"],
)
def test_the_driver_fix_is_said_the_way_the_node_gets_its_driver(
    kb: KnowledgeBase, images: ImageTable, extra: dict[str, str], fix: str
) -> None:
    """No NVIDIADriver reaches a host-installed driver or a node image's: the audit's fix is the
    action plan-drivers gives the same pool (compat.containers.driver_change decides both)."""
    from datetime import date

    from cudasched.operations.drivers.planning import plan_drivers

    node = planning_cluster.gpu_node("l4", "NVIDIA-L4", "550.127.05", extra=extra)
    snapshot = ClusterSnapshot(nodes=(node,), pods=(_pending("13.0"),))
    (finding,) = run(snapshot, kb, images).findings
    assert (finding.fix or "").split("; or ")[0] == fix
    fleet = Fleet.from_snapshot(snapshot, kb)
    plan = plan_drivers(snapshot, fleet, images, today=date(2026, 12, 1))
    (decision,) = plan.decisions
    if decision.operator:
        assert decision.driver_object is not None  # the operator's pools get an object
    else:
        # The same words up to the floor (the plan's is the oldest release serving its pool).
        assert decision.action.split(" >= ")[0] == fix.removeprefix("for l4: ").split(" >= ")[0]


def test_pending_workload_with_a_home_is_fine(kb: KnowledgeBase, images: ImageTable) -> None:
    # The L4 runs CUDA 12.4: give cuda-smoke 12.4 and it has a home.
    snapshot = edited(
        load("pending.yaml"),
        "pods",
        "cuda-smoke",
        lambda o: o["metadata"]["annotations"].update({"cudasched.io/cuda-version": "12.4"}),
    )
    assert "Pod/ml/cuda-smoke" not in {f.object for f in run(snapshot, kb, images).findings}


def test_node_labels(kb: KnowledgeBase, images: ImageTable) -> None:
    report = run(load("labels.yaml"), kb, images)
    assert keys(report) == {
        ("warning", "labels-missing", "Node/gpu-bare-1", "gpu-bare-1"),
        ("warning", "labels-missing", "Node/gpu-present-1", "gpu-present-1"),
        ("warning", "labels-missing", "Node/gpu-unknown-1", "gpu-unknown-1"),
        ("info", "labels-deprecated-only", "Node/gpu-old-gfd-1", "gpu-old-gfd-1"),
        ("warning", "labels-conflict", "Node/gpu-drift-1", "gpu-drift-1"),
        ("warning", "labels-conflict", "Node/gpu-drift-2", "gpu-drift-2"),
    }
    by_object = {f.object: f for f in report.findings}
    drift = by_object["Node/gpu-drift-1"].message
    assert "550.127.05" in drift and "535.216.01" in drift
    assert "decisions use 550.127.05 (nvidia.com/cuda.driver-version.*)" in drift
    cuda = by_object["Node/gpu-drift-2"].message
    assert cuda.startswith("label sources disagree: CUDA:")
    assert "decisions use 12.4 (cudasched.io/cuda.*)" in cuda
    assert "driver" not in cuda.split(";")[0]  # the driver sources agree
    assert "v0.15.0" in by_object["Node/gpu-old-gfd-1"].message
    assert "v0.15.0" in (by_object["Node/gpu-old-gfd-1"].fix or "")
    assert "unknown" in by_object["Node/gpu-unknown-1"].message


def test_driver_upgrades(kb: KnowledgeBase, images: ImageTable) -> None:
    report = run(load("upgrade.yaml"), kb, images)
    assert keys(report) == {
        ("warning", "driver-upgrade-in-progress", "Node/gpu-a1", "gpu-a1"),
        ("warning", "driver-upgrade-in-progress", "Node/gpu-a2", "gpu-a2"),
        ("error", "driver-upgrade-failed", "Node/gpu-a3", "gpu-a3"),
        ("error", "pod-on-incompatible-node", "Pod/llm/vllm-128", "gpu-a1"),
        ("info", "requirement-unknown", "Pod/research/notebook", None),
    }
    by_object = {f.object: f for f in report.findings}
    draining = by_object["Node/gpu-a1"]
    # Homes exclude every node in an upgrade: gpu-a4 (done) and gpu-a5 (no state) remain.
    assert "vision/triton (2 other node(s) can run it)" in draining.message
    assert "llm/vllm-128 (no other node can run cuda>=12.8)" in draining.message
    assert "research/notebook (no CUDA requirement)" in draining.message
    assert "web/web" not in draining.message and "done-job" not in draining.message
    assert "llm/vllm-128 has no other compatible node" in (draining.fix or "")
    assert by_object["Node/gpu-a2"].fix is None
    assert "vision/triton-b" in by_object["Node/gpu-a3"].message
    # The upgrading gpu-a2 is not offered as a home for the misplaced pod either.
    assert (by_object["Pod/llm/vllm-128"].fix or "").startswith("no other node it may use")


def test_stale_requirements(kb: KnowledgeBase, images: ImageTable) -> None:
    report = run(load("stale.yaml"), kb, images)
    assert keys(report) == {
        ("warning", "stale-requirement", "InferenceService/llm/chat", None),
        ("warning", "stale-requirement", "ReplicaSet/llm/chat-predictor-7f8d9c6b5", "gpu-570-1"),
        ("warning", "stale-requirement", "Pod/ml/dropped", "gpu-570-1"),
        ("info", "requirement-unknown", "Pod/ml/dropped", None),
    }
    pod = next(f for f in report.findings if f.object.startswith("ReplicaSet/llm/"))
    assert "'cuda>=12.4 (ClusterServingRuntime vllm-alauda" in pod.message
    assert "'cuda>=12.8 (ClusterServingRuntime vllm-alauda" in pod.message
    assert "kubectl delete pod -n llm chat-predictor-7f8d9c6b5-h4k2m; its ReplicaSet" in (
        pod.fix or ""
    )


def test_policy_only_difference_is_reported_when_the_workload_names_its_policy(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    # ml/relaxed records [minor-compat] without naming a policy: not reported (webhook default).
    # Once it names strict itself, the record is really stale.
    snapshot = edited(
        load("stale.yaml"),
        "pods",
        "relaxed",
        lambda o: o["metadata"]["annotations"].update({"cudasched.io/policy": "strict"}),
    )
    assert ("warning", "stale-requirement", "Pod/ml/relaxed", "gpu-570-1") in keys(
        run(snapshot, kb, images)
    )


def test_an_unknown_record_is_stale_only_once_the_workload_is_known(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    """Admission records ``unknown (why)`` on a GPU pod whose CUDA it cannot tell; the audit
    reads it as current while the pod is still unknown (its reason may be worded otherwise:
    the webhook may have read the image's config), and as stale once the pod resolves."""

    def recorded(text: str) -> Any:
        return lambda o: (
            o["metadata"].setdefault("annotations", {}).update({"cudasched.io/requirement": text})
        )

    still = edited(
        load("unknown.yaml"), "pods", "notebook", recorded("unknown (image config names no CUDA)")
    )
    assert not any(f.code == "stale-requirement" for f in run(still, kb, images).findings)
    known = edited(
        still,
        "pods",
        "notebook",
        lambda o: o["metadata"]["annotations"].update({"cudasched.io/cuda-version": "12.4"}),
    )
    stale = [f for f in run(known, kb, images).findings if f.code == "stale-requirement"]
    assert [f.object for f in stale] == ["Pod/research/notebook"]
    assert "'unknown (image config names no CUDA)'" in stale[0].message


def test_unknown_and_invalid_requirements(kb: KnowledgeBase, images: ImageTable) -> None:
    report = run(load("unknown.yaml"), kb, images)
    assert keys(report) == {
        ("info", "requirement-unknown", "InferenceService/vision/detector", None),
        ("info", "requirement-unknown", "Pod/research/notebook", None),
        ("warning", "requirement-invalid", "Pod/ml/typo", None),
    }
    by_object = {f.object: f for f in report.findings}
    detector = by_object["InferenceService/vision/detector"]
    # The words admission warns with (WorkloadNeed.unknown), naming the image.
    assert (
        "its CUDA is unknown (image not in the image table: "
        "registry.example.com/vision/triton-custom:7)" in detector.message
    )
    assert (detector.fix or "").startswith(
        "label ServingRuntime custom-triton with cudasched.io/cuda-version: kubectl label "
        "servingruntime -n vision custom-triton cudasched.io/cuda-version="
    )
    assert "'twelve'" in by_object["Pod/ml/typo"].message


def test_skip_annotation_on_a_service(kb: KnowledgeBase, images: ImageTable) -> None:
    snapshot = edited(
        load("pending.yaml"),
        "llm_inference_services",
        "llama-d",
        lambda o: o["metadata"]["annotations"].update({"cudasched.io/skip": "yes"}),
    )
    objects = {f.object for f in run(snapshot, kb, images).findings}
    assert "LLMInferenceService/llm/llama-d" not in objects


def test_a_skipped_workload_gets_no_finding_even_when_unreadable(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    """``cudasched.io/skip`` leaves a workload out, as at admission, where a skipped pod or
    service is never read further: a value the audit cannot read on a skipped workload is no
    ``requirement-invalid`` finding (it used to be one)."""
    snapshot = edited(
        load("unknown.yaml"),
        "pods",
        "typo",
        lambda o: o["metadata"]["annotations"].update({"cudasched.io/skip": "true"}),
    )
    snapshot = edited(
        snapshot,
        "inference_services",
        "detector",
        lambda o: (
            o["metadata"]
            .setdefault("annotations", {})
            .update({"cudasched.io/skip": "true", "cudasched.io/cuda-version": "twelve"})
        ),
    )
    objects = {f.object for f in run(snapshot, kb, images).findings}
    assert "Pod/ml/typo" not in objects
    assert "InferenceService/vision/detector" not in objects
    assert "Pod/research/notebook" in objects  # the others are still reported


# --------------------------------------------------------------------------- sample cluster


def test_bundled_sample_cluster_findings_are_the_reviewed_ones(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    """Reviewed: the sample's one workload no node can run (nemotron needs CUDA 13.2, the
    newest driver is R580 = 13.0), its four old-GFD nodes, and bert-legacy on TorchServe,
    whose image the table does not know. Every other object has a home."""
    report = run(bundled_snapshot(), kb, images)
    assert [(f.severity.value, f.code, f.object, f.node) for f in report.findings] == [
        (
            "error",
            "no-compatible-node",
            "InferenceService/team-nlp/nemotron-nano-fp4",
            "ip-10-42-32-66.us-west-2.compute.internal",
        ),
        ("info", "labels-deprecated-only", "Node/dc1-k80-01", "dc1-k80-01"),
        ("info", "labels-deprecated-only", "Node/dc1-k80-02", "dc1-k80-02"),
        ("info", "labels-deprecated-only", "Node/dc1-t4-r470-01", "dc1-t4-r470-01"),
        ("info", "labels-deprecated-only", "Node/dc1-t4-r470-02", "dc1-t4-r470-02"),
        ("info", "requirement-unknown", "InferenceService/team-vision/bert-legacy", None),
    ]
    (error,) = [f for f in report.findings if f.severity is Severity.ERROR]
    # The branch the fix names is the one recommend-driver and plan-drivers would take on the
    # day (the knowledge base's date here: R610 is still supported), from its minimum: Table
    # 3's 610.43.02 (CUDA 13.3) is the oldest R610 version the sources name.
    assert "an R610 driver >= 610.43.02" in (error.fix or "")
    assert "nemotron-nano-fp4-predictor-b17093d8bd-6f518" in error.message


# --------------------------------------------------------------------------- report


def test_report_orders_counts_and_dedupes() -> None:
    a = Finding("requirement-unknown", "Pod/a/x", "m")
    b = Finding("no-compatible-node", "Pod/a/y", "m", node="n1")
    c = Finding("labels-conflict", "Node/n1", "m", node="n1")
    report = AuditReport.of([a, b, c, a])
    assert [f.code for f in report.findings] == [
        "no-compatible-node",
        "labels-conflict",
        "requirement-unknown",
    ]
    assert report.summary() == {"error": 1, "warning": 1, "info": 1}
    doc = report.to_dict()
    assert set(doc) == {"findings", "summary"}
    assert set(doc["findings"][0]) == {
        "severity",
        "code",
        "object",
        "kind",
        "namespace",
        "name",
        "node",
        "nodes",
        "message",
        "fix",
    }


def test_progress_reaches_the_total(kb: KnowledgeBase, images: ImageTable) -> None:
    snapshot = load("upgrade.yaml")
    calls: list[tuple[int, int]] = []
    audit(
        snapshot,
        Fleet.from_snapshot(snapshot, kb),
        images,
        progress=lambda d, t: calls.append((d, t)),
    )
    assert calls and calls[-1][0] == calls[-1][1] == len(snapshot.nodes) + len(snapshot.pods)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


# --------------------------------------------------------------------------- invariants

_IMAGES = st.sampled_from(
    [
        "nvcr.io/nvidia/cuda:12.8.1-base-ubuntu22.04",
        "nvcr.io/nvidia/cuda:13.0.0-runtime-ubuntu24.04",
        "nvcr.io/nvidia/tritonserver:24.05-py3",
        "docker.io/vllm/vllm-openai:v0.23.0",
        "registry.example.com/web/frontend:2.0",
    ]
)


@settings(max_examples=40)
@given(
    image=_IMAGES,
    bound=st.booleans(),
    phase=st.sampled_from(["Pending", "Running"]),
    cpu=st.sampled_from(["", "500m", "4"]),
)
def test_cpu_pods_never_get_workload_findings(
    kb: KnowledgeBase, images: ImageTable, image: str, bound: bool, phase: str, cpu: str
) -> None:
    """A pod that requests no GPU and declares nothing is never constrained, so never reported,
    whatever CUDA image it runs and wherever it sits."""
    snapshot = load("bound.yaml")
    resources = {"requests": {"cpu": cpu}} if cpu else {}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cpu-pod", "namespace": "t"},
        "spec": {
            **({"nodeName": "gpu-h100-1"} if bound else {}),
            "containers": [{"name": "c", "image": image, "resources": resources}],
        },
        "status": {"phase": phase},
    }
    snapshot = ClusterSnapshot(nodes=snapshot.nodes, pods=(pod,), source="t")
    assert run(snapshot, kb, images).findings == ()


@settings(max_examples=60)
@given(
    driver=st.sampled_from(["470.256.02", "535.216.01", "550.127.05", "570.124.06", "580.65.06"]),
    cuda=st.sampled_from(["11.8", "12.2", "12.4", "12.8", "13.0"]),
    policy=st.sampled_from(list(Policy)),
)
def test_bound_gpu_pod_is_reported_exactly_when_the_engine_refuses_its_node(
    kb: KnowledgeBase, images: ImageTable, driver: str, cuda: str, policy: Policy
) -> None:
    major, minor, rev = driver.split(".")
    labels = {
        "nvidia.com/cuda.driver-version.full": driver,
        "nvidia.com/cuda.driver-version.major": major,
        "nvidia.com/cuda.driver-version.minor": minor,
        "nvidia.com/cuda.driver-version.revision": rev,
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.present": "true",
    }
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": labels}}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "t",
            "annotations": {"cudasched.io/cuda-version": cuda},
        },
        "spec": {
            "nodeName": "n1",
            "containers": [
                {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ],
        },
        "status": {"phase": "Running"},
    }
    snapshot = ClusterSnapshot(nodes=(node,), pods=(pod,), source="t")
    codes = {f.code for f in run(snapshot, kb, images, policy).findings}
    verdict = check(
        facts_from_labels("n1", labels, kb), Requirement(cuda=parse_cuda(cuda)), policy, kb
    )
    assert ("pod-on-incompatible-node" in codes) == (not verdict.compatible)


def test_a_deployments_replicas_are_one_finding_with_the_fix_at_its_level(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    """Issue 27 item 9: eight near-identical blocks for one Deployment were one per replica.
    Its ReplicaSet's pods (named by the pod-template-hash, as the Deployment controller names
    them) are one finding about the Deployment, counted, with kubectl rollout restart."""
    base = load("bound.yaml")
    replica = next(p for p in base.pods if p["metadata"]["name"] == "vllm-next-0")

    def owned(name: str, node: str | None) -> dict[str, Any]:
        out = copy.deepcopy(replica)
        out["metadata"]["name"] = f"chat-5d8f7c9b6d-{name}"
        out["metadata"]["labels"] = {"app": "chat", "pod-template-hash": "5d8f7c9b6d"}
        out["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": "chat-5d8f7c9b6d",
                "controller": True,
                "uid": "u",
            }
        ]
        out["metadata"]["annotations"] = {"cudasched.io/cuda-version": "12.8"}
        out["spec"]["nodeName"] = node
        return out

    pods = [owned("a", "gpu-h100-1"), owned("b", "gpu-h100-1"), owned("c", "gpu-h100-2")]
    snapshot = dataclasses.replace(base, pods=(*base.pods, *pods))
    report = run(snapshot, kb, images)
    (deployment,) = [f for f in report.findings if f.object == "Deployment/llm/chat"]
    assert deployment.code == "pod-on-incompatible-node"
    assert deployment.message.startswith(
        "2 of 3 pods on nodes that cannot run them (chat-5d8f7c9b6d-a, chat-5d8f7c9b6d-b)"
    )
    assert deployment.nodes == ("gpu-h100-1",)
    assert (deployment.fix or "").startswith(
        "restart Deployment chat (kubectl rollout restart deployment/chat -n llm) so the webhook "
        "places them on one of the 1 node(s) that can run it and that its own node selection, "
        "tolerations and GPU count allow (gpu-h100-2); or upgrade the driver of gpu-h100-1: "
        "install R580 >= 580.65.06 (LTSB)"
    )
    assert not [f for f in report.findings if "chat-5d8f7c9b6d-" in f.object]
    # -l matches the Deployment's finding by its pods' labels (the read holds no Deployment)
    objects = snapshot.objects()
    chosen = report.within(Scope("llm", parse_selector("app=chat")), objects)
    assert [f.object for f in chosen.findings if f.kind != "Pool"] == ["Deployment/llm/chat"]
    other = report.within(Scope("llm", parse_selector("app=web")), objects)
    assert [f.object for f in other.findings if f.kind == "Deployment"] == []


def _registration(failure: str = "Ignore", by_url: bool = False) -> dict[str, Any]:
    """cudasched's MutatingWebhookConfiguration, as ``cudasched manifests`` names its hooks."""
    client = (
        {"url": "https://10.0.0.1:8443/mutate"}
        if by_url
        else {"service": {"namespace": "cudasched", "name": "cudasched-webhook"}}
    )
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "cudasched-webhook"},
        "webhooks": [
            {"name": "pods.cudasched.io", "failurePolicy": failure, "clientConfig": client}
        ],
    }


def _endpoints(*ready: bool | None) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "cudasched-webhook-x1",
            "namespace": "cudasched",
            "labels": {"kubernetes.io/service-name": "cudasched-webhook"},
        },
        "endpoints": [
            {"addresses": [f"10.1.0.{i}"], "conditions": {} if r is None else {"ready": r}}
            for i, r in enumerate(ready)
        ],
    }


def test_the_likeliest_cause_of_misplaced_pods_is_a_missing_or_unreachable_webhook(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    """Issue 27 item 11: pods on nodes that cannot run them, and no webhook to place them: the
    audit says so, where the cluster read holds the registrations (a live read that may list
    them; a dump that holds one)."""
    base = load("bound.yaml")

    def codes(*other: dict[str, Any], read: bool = True) -> set[tuple[str, str]]:
        snapshot = dataclasses.replace(base, other=other, admission_read=read)
        found = run(snapshot, kb, images).findings
        return {(f.code, f.object) for f in found if f.code.startswith("webhook-")}

    assert codes() == {("webhook-not-registered", "MutatingWebhookConfiguration/cudasched-webhook")}
    assert codes(read=False) == set()  # nothing said of registrations not read
    other = {**_registration(), "metadata": {"name": "other"}, "webhooks": [{"name": "x.io"}]}
    assert codes(other, read=False) == {  # a dump with registrations holds them all
        ("webhook-not-registered", "MutatingWebhookConfiguration/cudasched-webhook")
    }
    down = {("webhook-unreachable", "Service/cudasched/cudasched-webhook")}
    assert codes(_registration()) == down  # no EndpointSlice at all
    assert codes(_registration(), _endpoints(False, False)) == down
    assert codes(_registration(), _endpoints(False, None)) == set()  # unset ready is ready
    assert codes(_registration(by_url=True)) == set()  # by URL: not the cluster's to tell
    snapshot = dataclasses.replace(base, other=(_registration("Fail"),), admission_read=True)
    (finding,) = [f for f in run(snapshot, kb, images).findings if f.code == "webhook-unreachable"]
    assert "GPU pods are refused" in finding.message
    healthy = dataclasses.replace(load("healthy.yaml"), admission_read=True)
    assert run(healthy, kb, images).findings == ()  # no misplaced pod: no webhook finding


def test_the_webhook_finding_follows_the_misplaced_pods_into_a_scope(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    """Issue 27 item 9: the webhook's Service is in its own namespace and its registration in
    none, so narrowing the findings by object dropped it from ``audit -n llm``, though it is the
    likeliest cause of llm's misplaced pods; :func:`scoped` says it again for what is left."""
    from cudasched.operations.audit.admission import scoped

    snapshot = dataclasses.replace(load("bound.yaml"), other=(_registration(),))
    report = run(snapshot, kb, images)
    objects = list(snapshot.objects())
    down = "Service/cudasched/cudasched-webhook"
    llm = scoped(report, Scope("llm"), objects, namespaced=True)
    (cause,) = [f for f in llm.findings if f.object == down]
    assert cause.code == "webhook-unreachable" and "StatefulSet/llm/vllm" in cause.message
    assert [f for f in report.within(Scope("llm"), objects).findings if f.object == down] == []
    assert not [f for f in llm.findings if f.namespace is None]  # pools stay the cluster's
    elsewhere = scoped(report, Scope("team-x"), objects, namespaced=True)
    assert elsewhere.findings == ()  # nothing misplaced there: no webhook finding either


def test_the_audit_knows_cudasched_webhooks_by_the_names_the_install_gives_them() -> None:
    """The audit finds cudasched's registration by its webhooks' names: every webhook
    ``cudasched manifests`` registers ends with the suffix the audit looks for, and names the
    Service whose EndpointSlices the live read lists."""
    from cudasched.install.naming import APP
    from cudasched.install.registration import webhook_configuration
    from cudasched.operations.audit.admission import WEBHOOK_NAME_SUFFIX

    config = webhook_configuration("cudasched")
    hooks = config["webhooks"]
    assert len(hooks) >= 3  # pods, InferenceServices, LLMInferenceServices (and controllers)
    assert all(h["name"].endswith(WEBHOOK_NAME_SUFFIX) for h in hooks)
    assert {h["clientConfig"]["service"]["name"] for h in hooks} == {APP}


# ---- fixes name only nodes the workload could use (its own selection, taints, GPU count) ----


def _rack_node(name: str, driver: str, rack: str, gpus: int, **extra: Any) -> dict[str, Any]:
    return builders.node(
        name,
        gpu="NVIDIA-L40S",
        driver=driver,
        count=gpus,
        scheme="gfd",
        labels={"rack": rack},
        **extra,
    )


def _bound_pod(**extra: Any) -> dict[str, Any]:
    pod = builders.pod(
        "train",
        "research",
        image="x",
        gpus=4,
        annotations={"cudasched.io/cuda-version": "13.0"},
        node_selector={"rack": "ws"},
        node_name="old",
        phase="Running",
    )
    pod["spec"] |= extra
    return pod


TAINT = {"key": "dedicated", "value": "inference", "effect": "NoSchedule"}


def test_a_recreate_fix_names_no_node_the_pod_itself_rules_out(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    """Three nodes run CUDA 13.0 but the pod's nodeSelector excludes one, a taint it does not
    tolerate the second and its 4 GPUs do not fit the third: none may be named."""
    nodes = (
        _rack_node("old", "570.172.08", "ws", 4),
        _rack_node("elsewhere", "580.105.08", "other", 8),
        _rack_node("tainted", "580.105.08", "ws", 8, taints=[TAINT]),
        _rack_node("small", "580.105.08", "ws", 2),
    )
    report = run(ClusterSnapshot(nodes=nodes, pods=(_bound_pod(),)), kb, images)
    (finding,) = [f for f in report.findings if f.code == "pod-on-incompatible-node"]
    fix = finding.fix or ""
    assert fix.startswith("no other node it may use")
    assert not {"elsewhere", "tainted", "small"} & set(fix.replace(",", " ").split())
    tolerating = _bound_pod(tolerations=[{"key": "dedicated", "operator": "Exists"}])
    report = run(ClusterSnapshot(nodes=nodes, pods=(tolerating,)), kb, images)
    (finding,) = [f for f in report.findings if f.code == "pod-on-incompatible-node"]
    assert "(tainted)" in (finding.fix or "") and "elsewhere" not in (finding.fix or "")


def test_an_unplaceable_fix_says_when_no_node_fits_the_workload(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    """An 8-GPU pod on 4-GPU nodes: no driver upgrade helps, and the fix says why."""
    nodes = (_rack_node("ws-1", "570.172.08", "ws", 4),)
    pod = _bound_pod()
    del pod["spec"]["nodeName"]
    pod["status"]["phase"] = "Pending"
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "8"
    report = run(ClusterSnapshot(nodes=nodes, pods=(pod,)), kb, images)
    (finding,) = [f for f in report.findings if f.code == "no-compatible-node"]
    fix = finding.fix or ""
    assert "no GPU node fits its own node selection" in fix
    assert "asks for 8 GPUs and the node has 4 allocatable" in fix
    assert "upgrade the driver" not in fix
