"""``operations.planning``: driver plans on clusters with known answers, the keep-a-home
invariant, rollout waves, and the GPU Operator objects (valid against the NVIDIADriver CRD)."""

from __future__ import annotations

import copy
from collections import Counter
from datetime import date
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from cudasched.cluster.fleet import Fleet
from cudasched.cluster.snapshot import ClusterSnapshot, bundled_snapshot
from cudasched.compat.branches import Lifecycle, LifecycleState
from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.images import ImageTable
from cudasched.operations.drivers.planning import DriverPlan, plan_drivers
from cudasched.operations.drivers.planoptions import Option, choose
from cudasched.operations.drivers.planpools import plan_pools
from cudasched.operations.drivers.waves import WaveInput, plan_waves, wave_capacity
from cudasched.vocab import labels as L
from cudasched.vocab.requirements import Policy
from cudasched.vocab.versions import DriverVersion, parse_cuda
from tests.support.planning_cluster import cluster, gpu_node, isvc, runtime

TODAY = date(2026, 12, 1)
SCHEMA = yaml.safe_load(
    (Path(__file__).parents[1] / "data" / "planning" / "nvidiadriver-schema.yaml").read_text()
)
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"


@pytest.fixture(scope="module")
def images(kb: KnowledgeBase) -> ImageTable:
    return ImageTable.builtin(kb)


def plan_of(
    snapshot: ClusterSnapshot, kb: KnowledgeBase, images: ImageTable, **options: Any
) -> DriverPlan:
    options.setdefault("today", TODAY)
    return plan_drivers(snapshot, Fleet.from_snapshot(snapshot, kb), images, **options)


def pools_by_node(plan: DriverPlan) -> dict[str, dict[str, Any]]:
    return {n: p for p in plan.to_dict()["pools"] for n in p["nodes"]}  # type: ignore[union-attr]


# --------------------------------------------------------------------------- known answers


def known_answers_cluster() -> ClusterSnapshot:
    """Kepler on R470, Volta on R535, Blackwell on R570, a node without any GPU labels, a node
    without driver labels, a CPU node; runtimes for CUDA 11.4, 12.4 and 13.0 (the last one runs
    nowhere today: only an upgrade can serve it) and an InferenceService on the 13.0 one."""
    cpu = gpu_node("cpu-1", None, None)
    cpu["metadata"]["labels"] = {"kubernetes.io/hostname": "cpu-1"}
    cpu["status"] = {"capacity": {"cpu": "16"}}
    return cluster(
        gpu_node(
            "k80-a", "Tesla-K80", "470.256.02", os=("ubuntu", "20.04"), kernel="5.4.0-200-generic"
        ),
        gpu_node(
            "k80-b", "Tesla-K80", "470.256.02", os=("ubuntu", "20.04"), kernel="5.4.0-200-generic"
        ),
        gpu_node("v100-a", "Tesla-V100-SXM2-16GB", "535.216.01"),
        gpu_node("b200-a", "NVIDIA-B200", "570.133.20"),
        gpu_node("b200-b", "NVIDIA-B200", "570.133.20"),
        gpu_node("bare", None, None),
        gpu_node("nodrv", "NVIDIA-L4", None),
        cpu,
        runtime("legacy-11", "11.4"),
        runtime("triton-12-4", "12.4"),
        runtime("vllm-13", "13.0"),
        isvc("chat", "team", "vllm-13"),
    )


def test_known_answers(kb: KnowledgeBase, images: ImageTable) -> None:
    plan = plan_of(known_answers_cluster(), kb, images)
    by_node = pools_by_node(plan)
    assert "cpu-1" not in by_node  # CPU nodes are never planned

    kepler = by_node["k80-a"]
    assert (kepler["change"], kepler["targetBranch"], kepler["currentDriver"]) == (
        "keep",
        "470",
        "470.256.02",
    )
    assert kepler["nodes"] == ["k80-a", "k80-b"]
    assert "Kepler GPUs end at R470" in kepler["why"]

    volta = by_node["v100-a"]
    assert (volta["change"], volta["targetBranch"], volta["kernelModuleType"]) == (
        "upgrade",
        "580",
        "proprietary",
    )
    assert volta["targetVersion"] == "580.126.20"
    assert "ClusterServingRuntime/triton-12-4" in volta["gains"]

    blackwell = by_node["b200-a"]
    assert (blackwell["change"], blackwell["kernelModuleType"]) == ("upgrade", "open")
    # R580 and R595 serve the same workloads: the long-term branch wins, and it is said.
    assert blackwell["targetBranch"] == "580"
    assert any("long-term support branch" in w and "R595" in w for w in blackwell["why"])
    # Only an upgrade can serve the CUDA 13.0 runtime and its InferenceService.
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

    # One NVIDIADriver per pool that changes, each selecting its pool's label.
    changed = {p["name"] for p in plan.to_dict()["pools"] if p["change"] != "keep"}
    assert {d["metadata"]["name"] for d in plan.drivers} == changed
    assert set(plan.node_labels) == {"v100-a", "b200-a", "b200-b", "nodrv"}
    assert any("useNvidiaDriverCRD=true" in n for n in plan.notes)


def test_a_runtime_only_forward_compatibility_can_serve(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    """An A100 pool on R535 with a 4.4 kernel can take no newer branch (R555+ needs 4.15) and
    R535 itself has ended: it keeps its driver. CUDA 12.8 runs there only through forward
    compatibility (the image ships cuda-compat, the policy allows it); strictly, nowhere."""
    snapshot = cluster(
        gpu_node("a100-a", "NVIDIA-A100-SXM4-80GB", "535.216.01", kernel="4.4.0-210-generic"),
        gpu_node("a100-b", "NVIDIA-A100-SXM4-80GB", "535.216.01", kernel="4.4.0-210-generic"),
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
    assert plan.drivers == () and plan.waves == ()


def test_target_cuda_moves_every_pool_that_can_reach_it(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    snapshot = cluster(
        gpu_node("t4-a", "Tesla-T4", "580.65.06"),
        gpu_node("k80-a", "Tesla-K80", "470.256.02", os=("ubuntu", "20.04")),
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


def test_precompiled_where_nvidia_builds_it(kb: KnowledgeBase, images: ImageTable) -> None:
    snapshot = cluster(
        gpu_node("h100-ubuntu", "NVIDIA-H100-80GB-HBM3", "550.127.05"),
        gpu_node(
            "h100-amazon",
            "NVIDIA-H100-80GB-HBM3",
            "550.127.05",
            os=("amzn", "2023"),
            kernel="6.1.115-126.197.amzn2023.x86_64",
        ),
        runtime("needs-13-4", "13.4"),
        runtime("needs-13-2", "13.2"),
    )
    plan = plan_of(snapshot, kb, images, precompiled=True)
    by_node = pools_by_node(plan)
    ubuntu, amazon = by_node["h100-ubuntu"], by_node["h100-amazon"]
    # Precompiled containers need only the branch, so R620 (no release known) can be used.
    assert (ubuntu["usePrecompiled"], ubuntu["targetBranch"], ubuntu["targetVersion"]) == (
        True,
        "620",
        "620",
    )
    assert amazon["usePrecompiled"] is False and amazon["targetBranch"] == "595"
    assert any("usePrecompiled: false" in w and "amzn2023" in w for w in amazon["why"])
    # CUDA 13.4 needs R615+: only the precompiled R620 pool runs it.
    assert "ClusterServingRuntime/needs-13-4" in ubuntu["gains"]
    assert "ClusterServingRuntime/needs-13-4" not in amazon["gains"]
    versions = {d["metadata"]["name"]: d["spec"] for d in plan.drivers}
    assert versions[ubuntu["name"]]["usePrecompiled"] is True
    assert versions[ubuntu["name"]]["version"] == "620"
    assert versions[amazon["name"]]["usePrecompiled"] is False
    # Without --precompiled, R620 is left out: no release to install.
    without = pools_by_node(plan_of(snapshot, kb, images))["h100-ubuntu"]
    assert without["targetBranch"] == "595" and without["usePrecompiled"] is False


def test_sample_cluster_plan(kb: KnowledgeBase, images: ImageTable) -> None:
    plan = plan_of(bundled_snapshot(), kb, images)
    by_node = pools_by_node(plan)
    assert len(by_node) == 20  # every GPU node, never the CPU node
    assert by_node["dc1-k80-01"]["change"] == "keep"
    assert (by_node["dc1-v100-01"]["targetBranch"], by_node["dc1-v100-01"]["kernelModuleType"]) == (
        "580",
        "proprietary",
    )
    b200 = by_node["ip-10-42-31-8.us-west-2.compute.internal"]
    assert b200["kernelModuleType"] == "open"
    # nemotron-nano-fp4 (CUDA 13.2, strict) runs nowhere today; the plan gives it a home.
    homes = {w for p in plan.to_dict()["pools"] for w in p["gains"]}
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


def test_repair_keeps_a_home_for_what_runs_today(kb: KnowledgeBase) -> None:
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
    options = [[_option(580, {1, 2, 3})], [_option(580, {1, 2})]]
    chosen, pinned = choose(keeps, options, demand, with_target=False)
    assert chosen[0] is keeps[0]  # the only home of group 0
    assert chosen[1] is options[1][0]
    assert "w0" in pinned[0][0]


@settings(max_examples=25, deadline=None)
@given(
    pools=st.lists(
        st.tuples(
            st.sampled_from(
                [
                    "Tesla-K80",
                    "Tesla-V100-SXM2-16GB",
                    "Tesla-T4",
                    "NVIDIA-A100-SXM4-80GB",
                    "NVIDIA-H100-80GB-HBM3",
                    "NVIDIA-B200",
                    "NVIDIA-GeForce-RTX-4090",
                ]
            ),
            st.sampled_from(
                ["470.256.02", "535.216.01", "550.127.05", "570.133.20", "580.65.06", "595.91.07"]
            ),
            st.sampled_from(["5.15.0-124-generic", "4.4.0-210-generic"]),
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
)
def test_no_workload_that_runs_today_loses_every_home(
    kb: KnowledgeBase, images: ImageTable, pools: list, cudas: list, target: str | None
) -> None:
    nodes = []
    for i, (product, driver, kernel, count) in enumerate(pools):
        info = kb.gpu(product)
        assert info is not None
        cap = kb.arch(info.compute).last_driver_branch  # type: ignore[union-attr]
        if cap is not None and int(driver.split(".")[0]) > cap:
            driver = "470.256.02"
        nodes += [gpu_node(f"n{i}-{j}", product, driver, kernel=kernel) for j in range(count)]
    runtimes = [
        runtime(f"rt{i}", cuda, policy=policy, ships_cuda_compat=policy == "forward-compat")
        for i, (cuda, policy) in enumerate(cudas)
    ]
    snapshot = cluster(*nodes, *runtimes)
    plan = plan_of(snapshot, kb, images, target_cuda=parse_cuda(target) if target else None)
    doc = plan.to_dict()
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
    # Every changing node is in exactly one wave; no wave is over the capacity.
    changing = [n for p in doc["pools"] if p["change"] != "keep" for n in p["nodes"]]
    waved = [n for w in plan.waves for n in w]
    assert sorted(waved) == sorted(changing)
    assert all(len(w) <= plan.wave_capacity for w in plan.waves)
    for driver in plan.drivers:
        assert_valid_nvidia_driver(driver)
    assert_one_driver_per_node(plan, snapshot)


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
    # Replay the rollout: every needed group that still has a home keeps an available node in
    # every wave, except the groups a lone stranded node is the last home of. (A group the
    # plan itself drops, before on changing pools only and after nowhere, has no home once
    # its last pool has changed: nothing later can keep it.)
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
    assert sum(len(w) for w in plan.waves) == len(plan.node_labels) == 18


# --------------------------------------------------------------------------- GPU Operator objects


_ENV = celpy.Environment()  # built at import: the CEL parser raises the recursion limit
_RULE = _ENV.program(_ENV.compile(SCHEMA["properties"]["spec"]["x-cudasched-cel"]))


def _cel(spec: dict[str, Any]) -> bool:
    return bool(_RULE.evaluate({"self": celpy.json_to_cel(spec)}))


def assert_valid_nvidia_driver(obj: dict[str, Any]) -> None:
    errors = sorted(Draft202012Validator(SCHEMA).iter_errors(obj), key=str)
    assert not errors, [e.message for e in errors]
    assert _cel(obj["spec"]), "a default NVIDIADriver must not have a nodeSelector"
    import re

    for key, value in obj["spec"]["nodeSelector"].items():
        assert re.match(LABEL_VALUE, value) and len(value) <= 63, (key, value)
    assert len(obj["metadata"]["name"]) <= 63


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


@pytest.mark.parametrize("precompiled", [False, True])
def test_every_generated_nvidia_driver_is_valid(
    kb: KnowledgeBase, images: ImageTable, precompiled: bool
) -> None:
    for snapshot in (bundled_snapshot(), known_answers_cluster()):
        plan = plan_of(snapshot, kb, images, precompiled=precompiled)
        assert plan.drivers
        for driver in plan.drivers:
            assert_valid_nvidia_driver(driver)
            assert driver["spec"]["kernelModuleType"] in ("open", "proprietary")  # explicit
            assert driver["spec"]["default"] is False
        assert_one_driver_per_node(plan, snapshot)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda s: s.pop("image"), "'image' is a required property"),
        (lambda s: s.pop("driverType"), "'driverType' is a required property"),
        (lambda s: s.update(driverType="cuda"), "is not one of"),
        (lambda s: s.update(kernelModuleType="closed"), "is not one of"),
        (lambda s: s.update(useOpenModules=True), "Additional properties"),
        (lambda s: s.update(nodeSelector={"a": 1}), "is not of type 'string'"),
    ],
)
def test_the_schema_check_can_fail(
    kb: KnowledgeBase, images: ImageTable, change: Any, reason: str
) -> None:
    driver = copy.deepcopy(plan_of(known_answers_cluster(), kb, images).drivers[0])
    change(driver["spec"])
    errors = [e.message for e in Draft202012Validator(SCHEMA).iter_errors(driver)]
    assert any(reason in e for e in errors), errors


def test_the_cel_rule_refuses_a_default_object_with_a_node_selector() -> None:
    assert _cel({"default": True, "driverType": "gpu", "image": "driver"})
    assert _cel({"default": True, "driverType": "gpu", "image": "driver", "nodeSelector": {}})
    assert not _cel(
        {"default": True, "driverType": "gpu", "image": "driver", "nodeSelector": {"a": "b"}}
    )
    assert _cel({"default": False, "driverType": "gpu", "image": "d", "nodeSelector": {"a": "b"}})


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
        gpu_node("v100-x", "Tesla-V100-SXM2-16GB", "535.216.01", os=None),
        runtime("triton-12-4", "12.4"),
    )
    plan = plan_of(snapshot, kb, images)
    assert any("no NFD system-os_release labels" in w for w in plan.warnings)


def test_a_pool_above_its_architectures_ceiling_is_downgraded(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    """A Volta node on R590 (past Volta's last branch, R580) runs nothing: back to R580."""
    snapshot = cluster(
        gpu_node("v100-new", "Tesla-V100-SXM2-16GB", "590.48.01"),
        runtime("triton-12-4", "12.4"),
    )
    [pool] = plan_of(snapshot, kb, images).to_dict()["pools"]
    assert (pool["change"], pool["targetBranch"], pool["kernelModuleType"]) == (
        "downgrade",
        "580",
        "proprietary",
    )
    assert pool["gains"] == ["ClusterServingRuntime/triton-12-4"]


def test_driver_upgrades_in_flight_are_warned_about(kb: KnowledgeBase, images: ImageTable) -> None:
    busy = {"nvidia.com/gpu-driver-upgrade-state": "pod-restart-required"}
    done = {"nvidia.com/gpu-driver-upgrade-state": "upgrade-done"}
    snapshot = cluster(
        gpu_node("t4-a", "Tesla-T4", "550.90.07", extra=busy),
        gpu_node("t4-b", "Tesla-T4", "550.90.07", extra=done),
        runtime("triton-12-4", "12.4"),
    )
    warnings = plan_of(snapshot, kb, images).warnings
    [flight] = [w for w in warnings if "in flight" in w]
    assert "t4-a" in flight and "t4-b" not in flight


def test_pool_names_are_label_values_and_unique(kb: KnowledgeBase) -> None:
    import re

    snapshot = bundled_snapshot()
    pools = plan_pools(snapshot, Fleet.from_snapshot(snapshot, kb))
    names = [p.name for p in pools]
    assert len(names) == len(set(names)) == 13
    assert all(re.match(LABEL_VALUE, n) and len(n) <= 32 for n in names)
    assert "h100-80gb-hbm3-amzn2023" in names and "h100-80gb-hbm3-amzn2023-2" in names


def test_pool_names_are_valid_object_names_whatever_the_os_id(
    kb: KnowledgeBase, images: ImageTable
) -> None:
    snapshot = cluster(
        gpu_node("t4-a", "Tesla-T4", "550.90.07", os=("my_distro", "1.2")),
        runtime("needs-13-0", "13.0"),
    )
    plan = plan_of(snapshot, kb, images)
    [driver] = plan.drivers
    assert driver["metadata"]["name"] == "t4-my-distro1.2"
    assert_valid_nvidia_driver(driver)


def test_json_contract(kb: KnowledgeBase, images: ImageTable) -> None:
    doc = plan_of(known_answers_cluster(), kb, images).to_dict()
    assert {"pools", "nvidiaDrivers", "nodeLabels", "waves", "unservable"} <= set(doc)
    for pool in doc["pools"]:  # type: ignore[union-attr]
        assert set(pool) >= {
            "name",
            "nodes",
            "gpu",
            "arch",
            "os",
            "kernel",
            "currentDriver",
            "targetBranch",
            "targetVersion",
            "kernelModuleType",
            "usePrecompiled",
            "change",
            "gains",
            "loses",
            "why",
        }
        assert pool["change"] in ("upgrade", "downgrade", "keep")
    assert all(set(v) == {L.DRIVER_POOL} for v in doc["nodeLabels"].values())  # type: ignore[union-attr]
