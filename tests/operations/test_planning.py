"""``operations.drivers.planning``: driver plans on clusters built from real label sets, with
known answers; who installs a pool's driver decides what the plan writes; no object names an
image NVIDIA does not publish; the keep-a-home invariant; rollout waves."""

from __future__ import annotations

from collections import Counter
from datetime import date
from typing import Any, cast

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cudasched.cluster.snapshot import ClusterSnapshot, bundled_snapshot
from cudasched.compat.branches import Lifecycle, LifecycleState, parse_os_tag
from cudasched.compat.containers import container_release, precompiled_problem
from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.images import ImageTable
from cudasched.operations.drivers.plan import DriverPlan
from cudasched.operations.drivers.planoptions import Option, PoolOptions, choose
from cudasched.operations.drivers.waves import WaveInput, plan_waves, wave_capacity
from cudasched.operations.pools import Pool
from cudasched.vocab import labels as L
from cudasched.vocab.requirements import Policy
from cudasched.vocab.versions import DriverVersion, parse_cuda
from tests.support.nvidiadriver_schema import validation_errors
from tests.support.planning_cluster import (
    HOST_DRIVER,
    OPERATOR_DRIVER,
    cluster,
    eks_node,
    gpu_node,
    isvc,
    plan_of,
    runtime,
)


def pools_by_node(plan: DriverPlan) -> dict[str, dict[str, Any]]:
    return {n: p for p in plan.to_dict()["pools"] for n in p["nodes"]}  # type: ignore[union-attr]


def assert_publishable(plan: DriverPlan, kb: KnowledgeBase, snapshot: ClusterSnapshot) -> int:
    """Every object of the plan names an image NVIDIA publishes for its nodes' OS (a pin: the
    image its nodes run now), or a precompiled one inside NVIDIA's matrix; returns how many
    objects were checked."""
    by_pool = {d.pool.name: d for d in plan.decisions}
    checked = 0
    for obj in plan.objects:
        for pool_name in obj.pools:
            d = by_pool[pool_name]
            assert d.operator, pool_name
            assert d.chosen is not None
            if obj.precompiled:
                assert precompiled_problem(kb, d.pool.os, d.pool.kernel, obj.branch) is None
                assert obj.version == str(obj.branch)
            elif obj.pin:
                assert obj.version == str(d.pool.current)
            else:
                assert container_release(kb, obj.branch, d.pool.os, plan.today, plan.operator) == (
                    d.chosen.release
                )
                assert obj.version == str(d.chosen.release)
            checked += 1
    return checked


def assert_no_object_selects_a_host_node(plan: DriverPlan, snapshot: ClusterSnapshot) -> None:
    host = {n for d in plan.decisions if not d.operator for n in d.pool.nodes}
    for node in snapshot.nodes:
        name = node["metadata"]["name"]
        labels = {**node["metadata"].get("labels", {}), **plan.node_labels.get(name, {})}
        for driver in plan.drivers:
            selector = driver["spec"]["nodeSelector"]
            if all(labels.get(k) == v for k, v in selector.items()):
                assert name not in host, (name, driver["metadata"]["name"])


def assert_one_driver_per_node(plan: DriverPlan, snapshot: ClusterSnapshot) -> None:
    count: Counter[str] = Counter()
    for node in snapshot.nodes:
        name = node["metadata"]["name"]
        labels = {**node["metadata"].get("labels", {}), **plan.node_labels.get(name, {})}
        for driver in plan.drivers:
            selector = driver["spec"]["nodeSelector"]
            if all(labels.get(k) == v for k, v in selector.items()):
                count[name] += 1
    assert all(c == 1 for c in count.values()), count
    assert set(count) == set(plan.node_labels)


# --------------------------------------------------------------------------- known answers


def known_answers_cluster() -> ClusterSnapshot:
    """Kepler on R470 (Ubuntu 20.04), Volta on R535, Blackwell on R570, a node without any GPU
    labels, a node without driver labels, a CPU node, every GPU node the operator's; runtimes
    for CUDA 11.4, 12.4 and 13.0 (the last one runs nowhere today: only an upgrade can serve
    it) and an InferenceService on the 13.0 one."""
    cpu = gpu_node("cpu-1", None, None)
    cpu["metadata"]["labels"] = {"kubernetes.io/hostname": "cpu-1"}
    cpu["status"] = {"capacity": {"cpu": "16"}}
    old = {"os": ("ubuntu", "20.04"), "kernel": "5.4.0-200-generic", "extra": OPERATOR_DRIVER}
    return cluster(
        gpu_node("k80-a", "Tesla-K80", "470.256.02", **old),  # type: ignore[arg-type]
        gpu_node("k80-b", "Tesla-K80", "470.256.02", **old),  # type: ignore[arg-type]
        gpu_node("v100-a", "Tesla-V100-SXM2-16GB", "535.216.01", extra=OPERATOR_DRIVER),
        gpu_node("b200-a", "NVIDIA-B200", "570.133.20", extra=OPERATOR_DRIVER),
        gpu_node("b200-b", "NVIDIA-B200", "570.133.20", extra=OPERATOR_DRIVER),
        gpu_node("bare", None, None),
        gpu_node("nodrv", "NVIDIA-L4", None, extra=OPERATOR_DRIVER),
        cpu,
        runtime("legacy-11", "11.4"),
        runtime("triton-12-4", "12.4"),
        runtime("vllm-13", "13.0"),
        isvc("chat", "team", "vllm-13"),
    )


def test_known_answers(kb: KnowledgeBase, images: ImageTable) -> None:
    snapshot = known_answers_cluster()
    plan = plan_of(snapshot, kb, images)
    by_node = pools_by_node(plan)
    assert "cpu-1" not in by_node  # CPU nodes are never planned

    kepler = by_node["k80-a"]
    assert (kepler["change"], kepler["targetBranch"], kepler["currentDriver"]) == (
        "keep",
        "470",
        "470.256.02",
    )
    assert kepler["name"] == "k80-r470-ubuntu20.04" and kepler["nodes"] == ["k80-a", "k80-b"]
    assert "Kepler GPUs end at R470" in kepler["why"]
    # Kept, and pinned: without an object of its own the default NVIDIADriver would take it.
    assert kepler["nvidiaDriver"] == "k80-ubuntu20.04-r470"
    # The note names each pin's object and the pool it keeps (two names, each for its thing).
    [pinned] = [n for n in plan.notes if n.startswith("pools that keep their driver")]
    assert "NVIDIADriver k80-ubuntu20.04-r470 for pool k80-r470-ubuntu20.04" in pinned

    volta = by_node["v100-a"]
    assert (volta["change"], volta["targetBranch"], volta["kernelModuleType"]) == (
        "upgrade",
        "580",
        "proprietary",
    )
    assert volta["targetVersion"] == "580.178.04"  # the newest R580 container for ubuntu22.04
    assert "ClusterServingRuntime/triton-12-4" in volta["gains"]

    blackwell = by_node["b200-a"]
    assert (blackwell["change"], blackwell["kernelModuleType"]) == ("upgrade", "open")
    # R580 and R595 serve the same workloads: the long-term branch wins, and it is said.
    assert blackwell["targetBranch"] == "580"
    assert any("long-term support branch" in w and "R595" in w for w in blackwell["why"])
    assert {"ClusterServingRuntime/vllm-13", "InferenceService/team/chat"} <= set(
        blackwell["gains"]
    )
    assert plan.unservable == ()

    bare = by_node["bare"]
    assert (bare["gpu"], bare["targetBranch"], bare["change"]) == (None, None, "keep")
    assert bare["why"][0].startswith("not planned: the nodes report no GPU product")
    assert "bare" not in plan.node_labels

    no_driver = by_node["nodrv"]
    assert (no_driver["currentDriver"], no_driver["change"]) == (None, "upgrade")
    assert no_driver["targetBranch"] == "580" and no_driver["kernelModuleType"] == "open"

    names = {d["metadata"]["name"] for d in plan.drivers}
    assert names == {
        "k80-ubuntu20.04-r470",
        "v100-sxm2-16gb-ubuntu22.04-r580",
        "b200-ubuntu22.04-r580",
        "l4-ubuntu22.04-r580",
    }
    assert set(plan.node_labels) == {"k80-a", "k80-b", "v100-a", "b200-a", "b200-b", "nodrv"}
    assert any("useNvidiaDriverCRD=true" in n for n in plan.notes)
    assert assert_publishable(plan, kb, snapshot) == 4
    assert_one_driver_per_node(plan, snapshot)


# --------------------------------------------------------------------------- who installs it


def test_host_installed_and_node_image_pools_get_actions_not_objects(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    """On-premises nodes where k8s-driver-manager found a host driver, EKS AL2023 managed node
    groups (with and without the operator's label) and nodes whose operator driver is turned
    off: none can be changed by an NVIDIADriver, each gets its own action."""
    snapshot = cluster(
        gpu_node("a100-host", "NVIDIA-A100-SXM4-80GB", "535.216.01", extra=HOST_DRIVER),
        gpu_node(
            "t4-off", "Tesla-T4", "550.90.07", extra={"nvidia.com/gpu.deploy.driver": "false"}
        ),
        eks_node("p5-a", "NVIDIA-H100-80GB-HBM3", "550.127.05", "p5-h100"),
        eks_node("p5-b", "NVIDIA-H100-80GB-HBM3", "550.127.05", "p5-h100", deploy=None),
        runtime("vllm-13", "13.0"),
    )
    plan = plan_of(snapshot, kb, images)
    by_node = pools_by_node(plan)
    assert plan.drivers == () and plan.node_labels == {} and plan.waves == ()
    host = by_node["a100-host"]
    assert (host["driverManager"], host["change"], host["targetBranch"]) == (
        "host",
        "upgrade",
        "580",
    )
    assert host["action"].startswith("install an R580 driver >= 580.65.06")
    assert "nvidia.com/gpu.deploy.driver=pre-installed" in host["action"]
    assert by_node["t4-off"]["driverManager"] == "host"
    # The two EKS nodes are one node group: with or without the operator's label, one pool
    # each (the evidence differs), both told to move the node group's image.
    eks = [by_node["p5-a"], by_node["p5-b"]]
    assert {p["driverManager"] for p in eks} == {"node-image"}
    assert all(p["nodeGroup"] == "p5-h100" for p in eks)
    assert all(
        p["action"].startswith("move EKS node group p5-h100 to a node image with an R580 driver")
        for p in eks
    )
    assert {a["pool"] for a in plan.to_dict()["hostActions"]} == {  # type: ignore[union-attr]
        p["name"] for p in (host, by_node["t4-off"], *eks)
    }
    assert any("get their driver from the host or a node image" in n for n in plan.notes)


def test_the_sample_cluster_writes_no_object_for_its_host_installed_nodes(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    snapshot = bundled_snapshot()
    plan = plan_of(snapshot, kb, images)
    by_node = pools_by_node(plan)
    assert len(by_node) == 20  # every GPU node, never the CPU node
    managers = Counter(p["driverManager"] for p in by_node.values())
    assert managers == {"host": 6, "node-image": 10, "operator": 4}
    assert_no_object_selects_a_host_node(plan, snapshot)
    # The four Ubuntu 20.04 nodes without the operator's label are the operator's: pinned to
    # the driver they run (no supported branch has an Ubuntu 20.04 container any more).
    assert {d["metadata"]["name"] for d in plan.drivers} == {
        "k80-ubuntu20.04-r470",
        "t4-ubuntu20.04-r470",
    }
    t4 = by_node["dc1-t4-r470-01"]
    assert t4["change"] == "keep" and t4["blocked"] is not None
    assert "ubuntu20.04" in t4["blocked"] and "would serve 12 of 12 workloads" in t4["blocked"]
    # nemotron-nano-fp4 (CUDA 13.2, strict) runs nowhere today; new node images give it a home.
    homes = {w for p in by_node.values() for w in p["gains"]}
    assert "InferenceService/team-nlp/nemotron-nano-fp4" in homes
    assert plan.unservable == ()
    workloads = {w for g in plan.demand.groups for w in g.workloads}
    assert {
        "InferenceService/team-vision/resnet50",
        "InferenceService/team-nlp/qwen2-7b",
        "ServingRuntime/team-nlp/vllm-custom",
        "ClusterServingRuntime/aml-vllm-cuda-13.0",
        "Pod/ml-batch/cuda-smoke-test",
    } <= workloads
    assert not any("iris" in w for w in workloads)  # sklearn on CPU asks nothing
    assert assert_publishable(plan, kb, snapshot) == 2


@pytest.mark.parametrize(
    ("os", "kernel", "branch", "version"),
    [
        (("ubuntu", "22.04"), "5.15.0-124-generic", "580", "580.178.04"),
        (("ubuntu", "24.04"), "6.8.0-48-generic", "580", "580.178.04"),
        (("rhel", "9.4"), "5.14.0-427.13.1.el9_4.x86_64", "580", "580.178.04"),
        (("rocky", "9.7"), "5.14.0-611.5.1.el9_7.x86_64", "580", "580.178.04"),
    ],
)
def test_operator_pools_on_supported_oses_get_published_containers(
    kb: KnowledgeBase,
    images: ImageTable,
    os: tuple[str, str],
    kernel: str,
    branch: str,
    version: str,
) -> None:
    snapshot = cluster(
        gpu_node("a100", "NVIDIA-A100-SXM4-80GB", "535.216.01", os=os, kernel=kernel,
                 extra=OPERATOR_DRIVER),
        runtime("vllm-13", "13.0"),
    )  # fmt: skip
    plan = plan_of(snapshot, kb, images)
    [pool] = plan.to_dict()["pools"]
    assert (pool["targetBranch"], pool["targetVersion"]) == (branch, version)
    [driver] = plan.drivers
    tag = str(parse_os_tag(f"{os[0]}{os[1]}"))
    assert driver["metadata"]["name"] == f"a100-sxm4-80gb-{tag}-r{branch}"
    assert assert_publishable(plan, kb, snapshot) == 1


@pytest.mark.parametrize(
    ("operator", "version_id", "image", "refused"),
    [
        ("26.7", "9.2", "nvcr.io/nvidia/driver:580.178.04-rhel9", None),
        ("26.3", "9.4", "nvcr.io/nvidia/driver:580.178.04-rhel9.4", None),
        ("25.10", "9.6", "nvcr.io/nvidia/driver:580.178.04-rhel9.6", None),
        ("26.3", "9.2", None, "stopped pushing rhel9.2 driver containers on 2024-10-23"),
    ],
)
def test_rhel_pools_name_the_image_tag_their_operator_release_pulls(
    kb: KnowledgeBase,
    images: ImageTable,
    operator: str,
    version_id: str,
    image: str | None,
    refused: str | None,
) -> None:
    """Before v26.7 the GPU Operator tags RHEL 8 and 9 driver images with the minor version
    (rhel9.4), and NVIDIA pushes only some minor versions: the plan moves a pool only to a
    container published under the tag its operator release pulls."""
    from cudasched.compat.containers import operator_version

    snapshot = cluster(
        gpu_node("a100", "NVIDIA-A100-SXM4-80GB", "535.216.01", os=("rhel", version_id),
                 kernel="5.14.0-427.13.1.el9_4.x86_64", extra=OPERATOR_DRIVER),
        runtime("vllm-13", "13.0"),
    )  # fmt: skip
    plan = plan_of(snapshot, kb, images, operator=operator_version(kb, operator))
    [pool] = plan.to_dict()["pools"]
    assert pool["driverImage"] == (image if image is not None else (
        f"nvcr.io/nvidia/driver:535.216.01-rhel{version_id}"  # the pin of today's driver
    ))  # fmt: skip
    minor_why = [w for w in pool["why"] if "tag RHEL 8 and 9 driver images" in w]
    assert len(minor_why) == (0 if operator == "26.7" else 1)
    if refused is None:
        assert (pool["change"], pool["targetVersion"]) == ("upgrade", "580.178.04")
        assert assert_publishable(plan, kb, snapshot) == 1
    else:
        assert pool["change"] == "keep"
        assert any(refused in w for w in pool["why"] if w.startswith("left out")), pool["why"]


@pytest.mark.parametrize(
    ("os", "kernel", "refused"),
    [
        (("ubuntu", "20.04"), "5.4.0-200-generic", "NVIDIA stopped building ubuntu20.04"),
        (("debian", "12"), "6.1.0-26-amd64", "no driver containers for debian12"),
    ],
)
def test_operator_pools_on_oses_without_containers_are_never_moved(
    kb: KnowledgeBase, images: ImageTable, os: tuple[str, str], kernel: str, refused: str
) -> None:
    snapshot = cluster(
        gpu_node("t4", "Tesla-T4", "550.90.07", os=os, kernel=kernel, extra=OPERATOR_DRIVER),
        runtime("vllm-13", "13.0"),
    )
    plan = plan_of(snapshot, kb, images)
    [pool] = plan.to_dict()["pools"]
    assert pool["change"] == "keep"
    assert refused in pool["blocked"] and "would serve 1 of 1" in pool["blocked"]
    assert any(refused in w for w in pool["why"] if w.startswith("left out"))
    assert all(d["spec"]["version"] == "550.90.07" for d in plan.drivers)  # only the pin


def test_target_cuda_moves_every_pool_that_can_reach_it(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    snapshot = cluster(
        gpu_node("t4-a", "Tesla-T4", "580.65.06", extra=OPERATOR_DRIVER),
        gpu_node("k80-a", "Tesla-K80", "470.256.02", extra=OPERATOR_DRIVER),
        runtime("triton-12-4", "12.4"),
    )
    plain = pools_by_node(plan_of(snapshot, kb, images))
    assert plain["t4-a"]["change"] == "keep"  # R580 runs everything asked: no change
    targeted = plan_of(snapshot, kb, images, target_cuda=parse_cuda("13.2"))
    by_node = pools_by_node(targeted)
    assert (by_node["t4-a"]["change"], by_node["t4-a"]["targetBranch"]) == ("upgrade", "595")
    assert "reaches CUDA 13.2 natively (--target-cuda)" in by_node["t4-a"]["why"]
    assert by_node["k80-a"]["change"] == "keep"
    assert any("cannot reach CUDA 13.2" in w for w in by_node["k80-a"]["why"])


def test_a_runtime_only_forward_compatibility_can_serve(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    """An A100 pool on R535 with a 4.4 kernel can take no newer branch (R555+ needs 4.15) and
    R535 itself has ended: it keeps (and pins) its driver, with a warning. CUDA 12.8 runs there
    only through forward compatibility; strictly, nowhere."""
    old = {"kernel": "4.4.0-210-generic", "extra": OPERATOR_DRIVER}
    snapshot = cluster(
        gpu_node("a100-a", "NVIDIA-A100-SXM4-80GB", "535.216.01", **old),  # type: ignore[arg-type]
        gpu_node("a100-b", "NVIDIA-A100-SXM4-80GB", "535.216.01", **old),  # type: ignore[arg-type]
        runtime("fc-12-8", "12.8", policy="forward-compat", ships_cuda_compat=True),
        runtime("strict-12-8", "12.8"),
    )
    plan = plan_of(snapshot, kb, images)
    [pool] = plan.to_dict()["pools"]
    assert (pool["change"], pool["targetBranch"]) == ("keep", "535")
    assert any("fc-12-8" in w and "only through forward compatibility" in w for w in pool["why"])
    assert any("older than 4.15" in w for w in pool["why"] if w.startswith("left out"))
    unservable = dict(plan.unservable)
    assert set(unservable) == {"ClusterServingRuntime/strict-12-8"}
    assert "no pool can run it" in unservable["ClusterServingRuntime/strict-12-8"]
    [pin] = plan.objects
    assert pin.pin and pin.version == "535.216.01"
    assert any("R535" in w and "end of life" in w for w in plan.warnings)


def test_a_pool_above_its_architectures_ceiling_is_downgraded(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    """A Volta node on R590 (past Volta's last branch, R580) runs nothing: back to R580."""
    snapshot = cluster(
        gpu_node("v100-new", "Tesla-V100-SXM2-16GB", "590.48.01", extra=OPERATOR_DRIVER),
        runtime("triton-12-4", "12.4"),
    )
    [pool] = plan_of(snapshot, kb, images).to_dict()["pools"]
    assert (pool["change"], pool["targetBranch"], pool["kernelModuleType"]) == (
        "downgrade",
        "580",
        "proprietary",
    )
    assert pool["gains"] == ["ClusterServingRuntime/triton-12-4"]


def test_releases_are_judged_on_the_plans_date(kb: KnowledgeBase, images: ImageTable) -> None:
    """On 2025-06-01 no R580 existed: an H100 that needs CUDA 12.8 gets the newest R570
    container of that day, not a later one."""
    snapshot = cluster(
        gpu_node("h100", "NVIDIA-H100-80GB-HBM3", "550.127.05", extra=OPERATOR_DRIVER),
        runtime("vllm-12-8", "12.8"),
    )
    [pool] = plan_of(snapshot, kb, images, today=date(2025, 6, 1)).to_dict()["pools"]
    assert (pool["targetBranch"], pool["targetVersion"]) == ("570", "570.148.08")
    assert any("R580" in w and "published yet" in w for w in pool["why"] if "left out" in w)


def test_geforce_pools_the_operator_drives_are_warned_about(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    snapshot = cluster(
        gpu_node("rtx", "NVIDIA-GeForce-RTX-4090", "550.120", extra=OPERATOR_DRIVER),
        runtime("vllm-13", "13.0"),
    )
    plan = plan_of(snapshot, kb, images)
    assert plan.drivers  # still planned, but not silently
    assert any("is not a GPU the GPU Operator supports" in w for w in plan.warnings)


def test_a_target_that_ends_soon_is_warned_about(kb: KnowledgeBase, images: ImageTable) -> None:
    """CUDA 13.2 needs R595 (PB, ends 2027-03), within 12 months of 2026-12: the plan takes it
    and says so, naming the branch supported longer and what it would serve."""
    snapshot = cluster(
        gpu_node("h100", "NVIDIA-H100-80GB-HBM3", "550.127.05", extra=OPERATOR_DRIVER),
        runtime("vllm-13-2", "13.2"),
        runtime("vllm-12-8", "12.8"),
    )
    plan = plan_of(snapshot, kb, images)
    [ending] = [w for w in plan.warnings if "ends within 12 months" in w]
    assert "R595" in ending and "R580 (LTSB" in ending
    quiet = plan_of(snapshot, kb, images, min_support_months=3)
    assert not any("ends within" in w for w in quiet.warnings)


def test_pools_that_take_one_ending_branch_share_one_warning(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    """Issue 27 item 10: the same branch ending soon on three pools is one warning that names
    them, not three (on the bundled sample it was ten)."""
    snapshot = cluster(
        gpu_node("h100", "NVIDIA-H100-80GB-HBM3", "550.127.05", extra=OPERATOR_DRIVER),
        gpu_node("l40s", "NVIDIA-L40S", "550.127.05", extra=OPERATOR_DRIVER),
        gpu_node("a100", "NVIDIA-A100-SXM4-80GB", "550.127.05", extra=OPERATOR_DRIVER),
        runtime("vllm-13-2", "13.2"),
        runtime("vllm-12-8", "12.8"),
    )
    plan = plan_of(snapshot, kb, images)
    taking = sorted(d.pool.name for d in plan.decisions if d.chosen and d.chosen.branch == 595)
    [ending] = [w for w in plan.warnings if "ends within 12 months" in w]
    assert len(taking) == 3
    assert ending.startswith(f"pools {', '.join(taking)}: R595 (PB")
    assert "R580 (LTSB" in ending


# --------------------------------------------------------------------------- invariants


def _option(branch: int, serves: set[int], keep: bool = False) -> Option:
    return Option(
        branch=branch,
        release=DriverVersion(branch, 1, 1),
        keep=keep,
        lifecycle=Lifecycle(branch, "LTSB", "2030-01", LifecycleState.SUPPORTED),
        serves=frozenset(serves),
        weight=len(serves),
    )


def test_repair_keeps_a_home_for_what_runs_today() -> None:
    """Pool 0 serves workload group 0 today and nothing else does; its best option by weight
    drops it. The repair pins pool 0 to an option that still serves group 0."""
    from cudasched.operations.drivers.demand import Demand, DemandGroup
    from cudasched.vocab.requirements import Requirement

    demand = Demand(
        tuple(
            DemandGroup(i, Requirement(cuda=parse_cuda(f"12.{i}")), Policy.STRICT, (f"w{i}",))
            for i in range(4)
        )
    )
    keeps = [_option(535, {0, 1}, keep=True), _option(535, {1}, keep=True)]
    options = [(_option(580, {1, 2, 3}),), (_option(580, {1, 2}),)]
    pool = cast("Pool", None)  # the choice never looks at the pool
    offers = [PoolOptions(pool, k, o, ()) for k, o in zip(keeps, options, strict=True)]
    first, second = choose(offers, demand, with_target=False)
    assert first.chosen is keeps[0]  # the only home of group 0
    assert second.chosen is options[1][0]
    assert "w0" in first.pinned[0]
    assert second.pinned == ()


_GPUS = [
    "Tesla-K80",
    "Tesla-V100-SXM2-16GB",
    "Tesla-T4",
    "NVIDIA-A100-SXM4-80GB",
    "NVIDIA-H100-80GB-HBM3",
    "NVIDIA-B200",
    "NVIDIA-GeForce-RTX-4090",
]
_OSES = [
    (("ubuntu", "20.04"), "5.4.0-200-generic"),
    (("ubuntu", "22.04"), "5.15.0-124-generic"),
    (("ubuntu", "24.04"), "6.8.0-48-generic"),
    (("rhel", "9.4"), "5.14.0-427.13.1.el9_4.x86_64"),
    (("amzn", "2023"), "6.1.115-126.197.amzn2023.x86_64"),
    (("ubuntu", "22.04"), "4.4.0-210-generic"),
]
_MANAGERS = [OPERATOR_DRIVER, HOST_DRIVER, {}, {"eks.amazonaws.com/nodegroup": "ng"}]


@settings(max_examples=25, deadline=None)
@given(
    pools=st.lists(
        st.tuples(
            st.sampled_from(_GPUS),
            st.sampled_from(
                ["470.256.02", "535.216.01", "550.127.05", "570.133.20", "580.65.06", "595.91.07"]
            ),
            st.sampled_from(_OSES),
            st.sampled_from(_MANAGERS),
            st.integers(1, 3),
        ),
        min_size=1,
        max_size=5,
    ),
    cudas=st.lists(
        st.tuples(
            st.sampled_from(["11.4", "12.2", "12.4", "12.8", "13.0", "13.2"]),
            st.sampled_from([None, "minor-compat", "forward-compat"]),
        ),
        min_size=1,
        max_size=5,
    ),
    target=st.sampled_from([None, "12.8", "13.0"]),
    precompiled=st.booleans(),
    release=st.sampled_from(["24.9", "25.3", "25.10", "26.3", "26.7"]),
)
def test_plans_keep_every_home_and_write_only_what_exists(
    kb: KnowledgeBase,
    images: ImageTable,
    pools: list,
    cudas: list,
    target: str | None,
    precompiled: bool,
    release: str,
) -> None:
    nodes = []
    for i, (product, driver, (os, kernel), manager, count) in enumerate(pools):
        info = kb.gpu(product)
        assert info is not None
        cap = kb.arch(info.compute).last_driver_branch  # type: ignore[union-attr]
        if cap is not None and int(driver.split(".")[0]) > cap:
            driver = "470.256.02"
        nodes += [
            gpu_node(f"n{i}-{j}", product, driver, os=os, kernel=kernel, extra=dict(manager))
            for j in range(count)
        ]
    runtimes = [
        runtime(f"rt{i}", cuda, policy=policy, ships_cuda_compat=policy == "forward-compat")
        for i, (cuda, policy) in enumerate(cudas)
    ]
    snapshot = cluster(*nodes, *runtimes)
    op = kb.operator.version(release)
    plan = plan_of(
        snapshot,
        kb,
        images,
        target_cuda=parse_cuda(target) if target else None,
        precompiled=precompiled,
        operator=op,
    )
    before: dict[str, set[str]] = {}
    for d in plan.decisions:
        for g in d.current:
            for w in plan.demand.groups[g].workloads:
                before.setdefault(w, set()).add(d.pool.name)
    after = {
        w
        for d in plan.decisions
        if d.chosen is not None
        for g in d.chosen.serves
        for w in plan.demand.groups[g].workloads
    }
    assert set(before) <= after
    # Every node an object takes is in exactly one wave; no wave is over the capacity.
    waved = [n for w in plan.waves for n in w]
    assert sorted(waved) == sorted(plan.node_labels)
    assert all(len(w) <= plan.wave_capacity for w in plan.waves)
    for driver in plan.drivers:
        assert validation_errors(release, driver) == []
    assert_one_driver_per_node(plan, snapshot)
    assert_no_object_selects_a_host_node(plan, snapshot)
    assert assert_publishable(plan, kb, snapshot) == sum(len(o.pools) for o in plan.objects)


# --------------------------------------------------------------------------- waves


@settings(max_examples=200, deadline=None)
@given(
    pools=st.lists(
        st.tuples(
            st.integers(0, 6),  # nodes
            st.frozensets(st.integers(0, 4)),  # groups before
            st.frozensets(st.integers(0, 4)),  # groups after
            st.booleans(),  # changes
        ),
        min_size=1,
        max_size=6,
    ),
    percent=st.integers(1, 100),
)
# A plan that drops group 1 (its only pool moves to {0}): once that pool has changed, no
# later wave can be asked to keep group 1.
@example(
    pools=[(1, frozenset([1]), frozenset([0]), True), (1, frozenset([0]), frozenset(), True)],
    percent=1,
)
def test_waves_never_strand_a_workload_and_respect_the_capacity(
    pools: list[tuple[int, frozenset[int], frozenset[int], bool]], percent: int
) -> None:
    inputs = [
        WaveInput(
            name=f"p{i}",
            nodes=tuple(f"p{i}-{j}" for j in range(n)),
            before=before,
            after=after if changes else before,
            changes=changes,
        )
        for i, (n, before, after, changes) in enumerate(pools)
    ]
    total = sum(len(p.nodes) for p in inputs)
    capacity = wave_capacity(f"{percent}%", total)
    needed = frozenset().union(*(p.before for p in inputs if p.nodes))
    result = plan_waves(inputs, capacity, needed)
    changing = [n for p in inputs if p.changes for n in p.nodes]
    waved = [n for w in result.waves for n in w]
    assert sorted(waved) == sorted(changing) and len(waved) == len(set(waved))
    stranded = {n for n, _ in result.stranded}
    pool_of = {n: p for p in inputs for n in p.nodes}
    done: set[str] = set()

    def homes(group: int, down: frozenset[str] = frozenset()) -> int:
        return sum(
            1
            for p in inputs
            for n in p.nodes
            if n not in down and group in (p.after if n in done else p.before)
        )

    for wave in result.waves:
        assert len(wave) <= capacity
        if set(wave) & stranded:
            assert len(wave) == 1
            done |= set(wave)
            continue
        for group in needed:
            if homes(group) >= 1:
                assert homes(group, frozenset(wave)) >= 1, (group, wave)
        done |= set(wave)
    assert all(pool_of[n].changes for n in done)


def test_wave_capacity_rounds_up_like_the_gpu_operator() -> None:
    assert wave_capacity("25%", 20) == 5
    assert wave_capacity("25%", 7) == 2
    assert wave_capacity("1%", 7) == 1
    assert wave_capacity(3, 100) == 3


def test_sample_cluster_waves(kb: KnowledgeBase, images: ImageTable) -> None:
    plan = plan_of(bundled_snapshot(), kb, images, max_unavailable="10%")
    assert plan.wave_capacity == 2
    assert all(len(w) <= 2 for w in plan.waves)
    # Only the operator's four Ubuntu 20.04 nodes move (to their pins).
    assert sum(len(w) for w in plan.waves) == len(plan.node_labels) == 4


# --------------------------------------------------------------------------- warnings, contract


def test_existing_nvidia_drivers_that_would_select_a_relabelled_node_are_reported(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    base = known_answers_cluster()
    existing = [
        {
            "apiVersion": "nvidia.com/v1alpha1",
            "kind": "NVIDIADriver",
            "metadata": {"name": "volta-pinned"},
            "spec": {
                "default": False,
                "driverType": "gpu",
                "image": "driver",
                "nodeSelector": {"nvidia.com/gpu.product": "Tesla-V100-SXM2-16GB"},
            },
        },
        {
            "apiVersion": "nvidia.com/v1alpha1",
            "kind": "NVIDIADriver",
            "metadata": {"name": "default"},
            "spec": {"default": True, "driverType": "gpu", "image": "driver"},
        },
    ]
    snapshot = ClusterSnapshot.from_objects([*base.objects(), *existing])
    assert len(snapshot.nvidia_drivers) == 2
    plan = plan_of(snapshot, kb, images)
    conflicts = [w for w in plan.warnings if "ConflictingNodeSelector" in w]
    assert len(conflicts) == 1
    assert "NVIDIADriver/volta-pinned" in conflicts[0] and "v100-a" in conflicts[0]


def test_pools_without_nfd_os_labels_are_warned_about(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    snapshot = cluster(
        gpu_node("v100-x", "Tesla-V100-SXM2-16GB", "535.216.01", os=None, extra=OPERATOR_DRIVER),
        runtime("triton-12-4", "12.4"),
    )
    plan = plan_of(snapshot, kb, images)
    assert any("no NFD system-os_release labels" in w for w in plan.warnings)


def test_driver_upgrades_in_flight_are_warned_about(kb: KnowledgeBase, images: ImageTable) -> None:
    busy = {"nvidia.com/gpu-driver-upgrade-state": "pod-restart-required", **OPERATOR_DRIVER}
    done = {"nvidia.com/gpu-driver-upgrade-state": "upgrade-done", **OPERATOR_DRIVER}
    snapshot = cluster(
        gpu_node("t4-a", "Tesla-T4", "550.90.07", extra=busy),
        gpu_node("t4-b", "Tesla-T4", "550.90.07", extra=done),
        runtime("triton-12-4", "12.4"),
    )
    warnings = plan_of(snapshot, kb, images).warnings
    [flight] = [w for w in warnings if "in flight" in w]
    assert "t4-a" in flight and "t4-b" not in flight


def test_object_names_are_valid_whatever_the_os_id(kb: KnowledgeBase, images: ImageTable) -> None:
    snapshot = cluster(
        gpu_node("t4-a", "Tesla-T4", "550.90.07", os=("my_distro", "1.2"), extra=OPERATOR_DRIVER),
        runtime("needs-13-0", "13.0"),
    )
    plan = plan_of(snapshot, kb, images)
    [driver] = plan.drivers  # a pin: NVIDIA publishes no container for that OS
    assert driver["metadata"]["name"] == "t4-my-distro1.2-r550"
    assert validation_errors("26.7", driver) == []
    assert any("do not list as published" in w for w in plan.warnings)


def test_json_contract(kb: KnowledgeBase, images: ImageTable) -> None:
    doc = plan_of(known_answers_cluster(), kb, images).to_dict()
    assert {
        "pools",
        "nvidiaDrivers",
        "hostActions",
        "nodeLabels",
        "waves",
        "replaced",
        "defaultDriver",
        "gpuOperatorVersion",
        "unservable",
        "minSupportMonths",
    } <= set(doc)
    pools = doc["pools"]
    assert isinstance(pools, list) and len(pools) == 5
    for pool in pools:
        assert set(pool) >= {
            "name",
            "nodes",
            "gpu",
            "arch",
            "os",
            "kernel",
            "currentDriver",
            "driverManager",
            "nodeGroup",
            "targetBranch",
            "targetVersion",
            "targetFloor",
            "kernelModuleType",
            "usePrecompiled",
            "lifecycle",
            "eol",
            "change",
            "action",
            "nvidiaDriver",
            "driverImage",
            "blocked",
            "gains",
            "loses",
            "why",
        }
        assert pool["change"] in ("upgrade", "downgrade", "keep")
    # Every pool an object drives names the image the operator pulls for it, and only those.
    images_named = [
        (p["driverImage"], p["targetVersion"] or p["currentDriver"], p["os"])
        for p in pools  # type: ignore[union-attr]
        if p["nvidiaDriver"] is not None
    ]
    assert images_named and all(
        image == f"nvcr.io/nvidia/driver:{version}-{os}" for image, version, os in images_named
    ), images_named
    assert all(p["driverImage"] is None for p in pools if p["nvidiaDriver"] is None)  # type: ignore[union-attr]
    assert all(set(v) == {L.DRIVER_POOL} for v in doc["nodeLabels"].values())  # type: ignore[union-attr]


def test_the_label_note_names_where_each_objects_nodes_come_from(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    """Nodes created later lack the pool label unless it is declared where they come from: the
    note names, per object, the Karpenter NodePool or the managed node group its nodes' labels
    name, else the nodes."""
    karpenter = {**OPERATOR_DRIVER, "karpenter.sh/nodepool": "gpu-a100"}
    eks_ubuntu = {**OPERATOR_DRIVER, "eks.amazonaws.com/nodegroup": "l4-ubuntu"}
    snapshot = cluster(
        gpu_node("a100-1", "NVIDIA-A100-SXM4-80GB", "535.216.01", extra=karpenter),
        gpu_node("l4-1", "NVIDIA-L4", "550.127.05", extra=eks_ubuntu),
        gpu_node("t4-1", "Tesla-T4", "550.90.07", extra=OPERATOR_DRIVER),
        runtime("vllm-13", "13.0"),
    )
    plan = plan_of(snapshot, kb, images)
    by_node = {n: labels[L.DRIVER_POOL] for n, labels in plan.node_labels.items()}
    [note] = [n for n in plan.notes if n.startswith(f"the pool label ({L.DRIVER_POOL})")]
    where = note.split("--node-labels): ", 1)[1].split("; ")
    assert sorted(where) == sorted(
        [
            f"{L.DRIVER_POOL}={by_node['a100-1']} on Karpenter NodePool gpu-a100",
            f"{L.DRIVER_POOL}={by_node['l4-1']} on EKS node group l4-ubuntu",
            f"{L.DRIVER_POOL}={by_node['t4-1']} on the node group or template of t4-1 (their "
            "labels name none)",
        ]
    )


# ---- every cluster shape: defaults, re-owned pins, OLM, short-lived branches -------------------


def _volta_and_l40s() -> ClusterSnapshot:
    return cluster(
        gpu_node("l40s-1", "NVIDIA-L40S", "570.172.08", extra=OPERATOR_DRIVER),
        gpu_node("l40s-2", "NVIDIA-L40S", "570.172.08", extra=OPERATOR_DRIVER),
        gpu_node("v100", "Tesla-V100-SXM2-32GB", "570.172.08", extra=OPERATOR_DRIVER),
        runtime("vllm-132", "13.2"),
        runtime("vllm-124", "12.4"),
    )


def test_a_default_object_that_cannot_drive_a_pools_gpus_is_warned_about(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    """R595 no longer drives Volta, which the operator still lists: a default R595 object
    strands V100 nodes that join without the pool label."""
    plan = plan_of(_volta_and_l40s(), kb, images)
    assert plan.default_driver is not None and plan.default_driver.startswith("595.")
    [stranded] = [w for w in plan.warnings if "cannot drive its Volta GPUs" in w]
    assert "the default NVIDIADriver's R595" in stranded and "Volta GPUs end at R580" in stranded


def test_a_short_lived_branch_says_which_workloads_force_it(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    plan = plan_of(_volta_and_l40s(), kb, images)
    l40s = pools_by_node(plan)["l40s-1"]
    assert l40s["targetBranch"] == "595"
    [short] = [w for w in l40s["why"] if "is short-lived" in w]
    assert "ClusterServingRuntime/vllm-132 need it" in short and "--prefer-lts takes R580" in short
    lts = plan_of(_volta_and_l40s(), kb, images, prefer_lts=True)
    assert pools_by_node(lts)["l40s-1"]["targetBranch"] == "580"
    assert [w for w, _ in lts.unservable] == ["ClusterServingRuntime/vllm-132"]


def test_before_v26_7_there_is_no_fallback_object(kb: KnowledgeBase, images: ImageTable) -> None:
    plan = plan_of(_volta_and_l40s(), kb, images, operator="26.3")
    assert plan.default_driver is None
    assert not [n for n in plan.notes if "drives every GPU node no other NVIDIADriver" in n]
    [fallback] = [n for n in plan.notes if "has no fallback NVIDIADriver" in n]
    assert "deployDefaultCR=false" in fallback


def test_a_pin_is_labelled_re_owned(kb: KnowledgeBase, images: ImageTable) -> None:
    """A pool that keeps its driver but moves to another NVIDIADriver: its driver pods restart
    (issue 27 item 10); from v26.3 without a drain, before with one."""
    snapshot = cluster(
        gpu_node("t4", "Tesla-T4", "580.105.08", extra=OPERATOR_DRIVER), runtime("rt", "12.4")
    )
    [pool] = plan_of(snapshot, kb, images).to_dict()["pools"]
    assert pool["change"] == "keep" and pool["reOwn"] is True
    assert pool["action"].startswith("re-own: driver pod restarts (pin driver 580.105.08")
    [older] = plan_of(snapshot, kb, images, operator="25.10").to_dict()["pools"]
    assert older["action"].startswith("re-own: driver pod restarts, drained")


def test_an_olm_install_is_told_the_objects_to_edit_not_helm_values(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    from tests.support.gpu_operator import cluster_policy

    snapshot = cluster(
        gpu_node("t4", "Tesla-T4", "550.90.07", extra=OPERATOR_DRIVER),
        runtime("rt", "12.8"),
        cluster_policy(None, name="gpu-cluster-policy", driver={"enabled": True}),
    )
    plan = plan_of(snapshot, kb, images)
    said = " ".join(plan.notes)
    assert "an OLM install has no Helm values" in said and "Helm driver." not in said


def test_a_pool_leaving_precompiled_drivers_is_told(kb: KnowledgeBase, images: ImageTable) -> None:
    existing = {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "NVIDIADriver",
        "metadata": {"name": "t4-pre"},
        "spec": {
            "version": "550",
            "usePrecompiled": True,
            "nodeSelector": {L.DRIVER_POOL: "t4-pre"},
        },
    }
    snapshot = cluster(
        gpu_node("t4", "Tesla-T4", "550.90.07", extra={**OPERATOR_DRIVER, L.DRIVER_POOL: "t4-pre"}),
        runtime("rt", "12.8"),
        existing,
    )
    [pool] = plan_of(snapshot, kb, images).to_dict()["pools"]
    assert any(
        w.startswith("moves off precompiled drivers (NVIDIADriver/t4-pre") for w in pool["why"]
    )


def test_a_blocked_pool_is_pointed_only_to_oses_its_operator_supports(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    """GPU Operator 25.10 supports neither RHEL 10 nor Rocky Linux nor Ubuntu 26.04."""
    snapshot = cluster(
        gpu_node("t4", "Tesla-T4", "570.195.03", os=("ubuntu", "20.04"), kernel="5.4.0-200-generic",
                 extra=OPERATOR_DRIVER),
        runtime("vllm-13", "13.0"),
    )  # fmt: skip
    [pool] = plan_of(snapshot, kb, images, operator="25.10").to_dict()["pools"]
    assert "ubuntu22.04" in pool["blocked"]
    assert not [os for os in ("rhel10", "rocky9", "ubuntu26.04") if os in pool["blocked"]]


def test_a_driver_the_operators_matrix_does_not_list_is_noted(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    """GPU Operator v26.7's component matrix lists 610.57.04, 595.91.07, 580.173.02 and
    535.309.01; the newest R580 container (580.178.04) is published but not listed."""
    snapshot = cluster(
        gpu_node("t4", "Tesla-T4", "550.90.07", extra=OPERATOR_DRIVER), runtime("rt", "12.8")
    )
    plan = plan_of(snapshot, kb, images)
    [noted] = [n for n in plan.notes if "component matrix lists" in n]
    assert "610.57.04, 595.91.07, 580.173.02, 535.309.01" in noted and "580.178.04 is" in noted
    assert not [n for n in plan_of(snapshot, kb, images, operator="26.3").notes if "matrix" in n]
