"""``operations.pools`` and ``operations.matrix``: pools by product, driver and OS, their CUDA
ceilings from the engine, and runtime × pool cells that are the engine's verdicts."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.cluster.fleet import Fleet
from cudasched.cluster.snapshot import ClusterSnapshot, bundled_snapshot, load_snapshot
from cudasched.compat.engine import check
from cudasched.knowledge import KnowledgeBase, ReleaseKind
from cudasched.knowledge.images import ImageTable
from cudasched.nodes.facts import facts_from_labels
from cudasched.operations.pools import cuda_ceiling, node_pools
from cudasched.operations.report.matrix import CellStatus, compatibility_matrix
from cudasched.operations.runtimes import runtime_rows
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.vocab.versions import CudaVersion, parse_cuda
from cudasched.workloads.sources import resolve_runtime

DATA = Path(__file__).parents[1] / "data" / "audit"


@pytest.fixture(scope="module")
def sample() -> ClusterSnapshot:
    return bundled_snapshot()


def test_sample_cluster_pools(sample: ClusterSnapshot, kb: KnowledgeBase) -> None:
    pools = node_pools(sample, Fleet.from_snapshot(sample, kb))
    by_name = {p.name: p for p in pools}
    # 20 GPU nodes in 13 pools; the CPU node is in none.
    assert sum(len(p.nodes) for p in pools) == 20
    assert len(pools) == 13
    assert all("ip-10-42-1-12.us-west-2.compute.internal" not in p.nodes for p in pools)
    # One readable name per pool: <gpu>-r<branch>-<os tag>.
    assert [p.name for p in pools] == [
        "a100-sxm4-80gb-r535-ubuntu22.04",
        "a10g-r550-amzn2023",
        "b200-r570-amzn2023",
        "b200-r580-amzn2023",
        "geforce-rtx-4090-r550-ubuntu22.04",
        "h100-80gb-hbm3-r550-amzn2023",
        "h100-80gb-hbm3-r570-amzn2023",
        "h200-r570-amzn2023",
        "l4-r550-amzn2023",
        "k80-r470-ubuntu20.04",
        "t4-r470-ubuntu20.04",
        "t4-r550-ubuntu22.04",
        "v100-sxm2-16gb-r535-ubuntu22.04",
    ]
    # Same product, different driver: two pools (the H100s on R550 and R570; T4 on R470 and R550).
    h100 = [p for p in pools if p.product == "NVIDIA-H100-80GB-HBM3"]
    assert [str(p.driver) for p in h100] == ["550.127.05", "570.124.06"]
    t4 = by_name["t4-r470-ubuntu20.04"]
    assert t4.nodes == ("dc1-t4-r470-01", "dc1-t4-r470-02")
    assert t4.os_image == "Ubuntu 20.04.6 LTS"
    # The L4 that joined without cudasched.io/ labels is in its product's pool, with its own facts.
    l4 = by_name["l4-r550-amzn2023"]
    assert len(l4.nodes) == 2 and len(l4.facts) == 2
    assert (l4.manager.kind.value, l4.manager.group) == ("node-image", "g6-l4")
    k80 = by_name["k80-r470-ubuntu20.04"]
    assert (str(k80.ceiling.native), str(k80.ceiling.minor_compat)) == ("11.4", "11.8")
    b200_580 = by_name["b200-r580-amzn2023"]
    assert str(b200_580.ceiling.native) == "13.0"
    assert b200_580.ceiling.minor_compat is not None
    assert b200_580.ceiling.minor_compat.major == 13


def test_pools_split_by_os_and_driver_manager(sample: ClusterSnapshot, kb: KnowledgeBase) -> None:
    nodes = [copy.deepcopy(n) for n in sample.nodes]
    a100 = next(n for n in nodes if n["metadata"]["name"] == "dc1-a100-02")
    a100["metadata"]["labels"]["feature.node.kubernetes.io/system-os_release.ID"] = "rhel"
    a100["metadata"]["labels"]["feature.node.kubernetes.io/system-os_release.VERSION_ID"] = "9.4"
    t4 = next(n for n in nodes if n["metadata"]["name"] == "dc1-t4-02")
    t4["metadata"]["labels"]["nvidia.com/gpu.deploy.driver"] = "true"
    snapshot = ClusterSnapshot(nodes=tuple(nodes))
    pools = node_pools(snapshot, Fleet.from_snapshot(snapshot, kb))
    a100_pools = [p for p in pools if p.product == "NVIDIA-A100-SXM4-80GB"]
    assert [(p.name, p.nodes) for p in a100_pools] == [
        ("a100-sxm4-80gb-r535-rhel9", ("dc1-a100-02",)),
        ("a100-sxm4-80gb-r535-ubuntu22.04", ("dc1-a100-01",)),
    ]
    # Same GPU, driver, OS and kernel, another driver manager: two pools, told apart by it.
    t4_pools = [p for p in pools if p.product == "Tesla-T4" and str(p.driver) == "550.90.07"]
    assert sorted(p.name for p in t4_pools) == [
        "t4-550.90.07-ubuntu22.04-host",
        "t4-550.90.07-ubuntu22.04-operator",
    ]


def test_rhel_minor_releases_are_pools_named_apart(kb: KnowledgeBase) -> None:
    """GPU Operator releases before v26.7 pull driver:<version>-rhel9.2 and -rhel9.4 for these
    nodes: two pools, named by their VERSION_ID when the OS tag (rhel9) does not tell them apart."""
    from tests.support.planning_cluster import cluster, gpu_node

    kernel = "5.14.0-427.13.1.el9_4.x86_64"
    snapshot = cluster(
        gpu_node("a", "NVIDIA-A100-SXM4-80GB", "535.216.01", os=("rhel", "9.2"), kernel=kernel),
        gpu_node("b", "NVIDIA-A100-SXM4-80GB", "535.216.01", os=("rhel", "9.4"), kernel=kernel),
        gpu_node("c", "NVIDIA-A100-SXM4-80GB", "535.216.01", os=("rhel", "9.4"), kernel=kernel),
    )
    pools = node_pools(snapshot, Fleet.from_snapshot(snapshot, kb))
    assert [(p.name, p.nodes, str(p.os)) for p in pools] == [
        ("a100-sxm4-80gb-535.216.01-rhel9.2", ("a",), "rhel9"),
        ("a100-sxm4-80gb-535.216.01-rhel9.4", ("b", "c"), "rhel9"),
    ]


def test_pool_names_are_unique_and_deterministic(kb: KnowledgeBase) -> None:
    from cudasched.operations.pools import pool_names
    from tests.support.planning_cluster import cluster, gpu_node

    snapshot = cluster(
        gpu_node("a", "Tesla-T4", "550.90.07"),
        gpu_node("b", "Tesla-T4", "550.90.07", kernel="6.8.0-48-generic"),
        gpu_node("c", "Tesla-T4", "550.127.05"),
        gpu_node("d", "Tesla-T4", None),
    )
    first = [p.name for p in node_pools(snapshot, Fleet.from_snapshot(snapshot, kb))]
    again = [p.name for p in node_pools(snapshot, Fleet.from_snapshot(snapshot, kb))]
    assert first == again and len(set(first)) == 4
    assert "t4-nodriver-ubuntu22.04" in first
    assert "t4-550.127.05-ubuntu22.04" in first
    # The same driver on two kernels: the pool order decides which is -2.
    assert {"t4-550.90.07-ubuntu22.04-operator", "t4-550.90.07-ubuntu22.04-operator-2"} <= set(
        first
    )
    assert callable(pool_names)
    assert all(len(n) <= 63 for n in first)


def test_gpu_node_without_facts_is_a_pool_with_no_ceiling(kb: KnowledgeBase) -> None:
    snapshot = load_snapshot(DATA / "labels.yaml")
    pools = node_pools(snapshot, Fleet.from_snapshot(snapshot, kb))
    bare = next(p for p in pools if p.nodes == ("gpu-bare-1",))
    assert bare.product is None and bare.driver is None
    assert bare.ceiling.native is None and bare.ceiling.describe() == "none"
    assert "cpu-1" not in {n for p in pools for n in p.nodes}


_RELEASES = sorted(
    {t.cuda.release for t in KnowledgeBase.load().toolkits() if t.kind is ReleaseKind.GA}
)


@settings(max_examples=40)
@given(
    driver=st.sampled_from(
        ["470.256.02", "525.147.05", "535.216.01", "550.127.05", "570.124.06", "580.65.06"]
    ),
    product=st.sampled_from(["Tesla-K80", "Tesla-T4", "NVIDIA-A100-SXM4-80GB", "NVIDIA-B200"]),
    policy=st.sampled_from([Policy.STRICT, Policy.MINOR_COMPAT]),
)
def test_ceiling_is_the_newest_release_the_engine_accepts(
    kb: KnowledgeBase, driver: str, product: str, policy: Policy
) -> None:
    facts = facts_from_labels(
        "n",
        {"nvidia.com/cuda.driver-version.full": driver, "nvidia.com/gpu.product": product},
        kb,
    )
    ceiling = cuda_ceiling((facts,), policy, kb)

    def runs(cuda: CudaVersion) -> bool:
        return check(facts, Requirement(cuda=cuda), policy, kb).compatible

    newer = [c for c in _RELEASES if ceiling is None or c > ceiling]
    assert not any(runs(c) for c in newer)
    if ceiling is not None:
        assert runs(ceiling)


def test_matrix_cells_are_engine_verdicts(
    sample: ClusterSnapshot, kb: KnowledgeBase, images: ImageTable
) -> None:
    fleet = Fleet.from_snapshot(sample, kb)
    pools = node_pools(sample, fleet)
    rows = runtime_rows(fleet, images)
    matrix = compatibility_matrix(rows, pools, Policy.STRICT, kb)
    assert [r.ref for r in matrix.rows] == [
        "ServingRuntime/team-nlp/vllm-custom",
        "ClusterServingRuntime/aml-mindie-cann-8.3",
        "ClusterServingRuntime/aml-vllm-cuda-12.8",
        "ClusterServingRuntime/aml-vllm-cuda-13.0",
        "ClusterServingRuntime/kserve-huggingfaceserver",
        "ClusterServingRuntime/kserve-sklearnserver",
        "ClusterServingRuntime/kserve-torchserve",
        "ClusterServingRuntime/kserve-tritonserver",
    ]
    for row, cells in zip(matrix.rows, matrix.cells, strict=True):
        assert len(cells) == len(pools)
        req = row.requirement
        assert req is not None
        for pool, cell in zip(pools, cells, strict=True):
            if row.unknown is not None:
                assert req.is_empty and cell.status is CellStatus.UNKNOWN
                continue
            if req.is_empty:
                assert cell.status in (CellStatus.NO_REQUIREMENT, CellStatus.NOT_NVIDIA)
                continue
            verdicts = [check(f, req, Policy.STRICT, kb) for f in pool.facts]
            if len({v.status for v in verdicts}) == 1:
                assert cell.status.value == verdicts[0].status.value
                assert cell.codes == verdicts[0].codes or len(verdicts) > 1
            else:
                assert cell.status is CellStatus.MIXED
    cells = dict(zip((r.ref for r in matrix.rows), matrix.cells, strict=True))
    b200_580 = next(i for i, p in enumerate(pools) if str(p.driver) == "580.65.06")
    k80 = next(i for i, p in enumerate(pools) if p.product == "Tesla-K80")
    cuda13 = cells["ClusterServingRuntime/aml-vllm-cuda-13.0"]
    assert (
        cuda13[b200_580].status is CellStatus.COMPATIBLE and cuda13[b200_580].headline == "native"
    )
    assert cuda13[k80].status is CellStatus.INCOMPATIBLE
    assert "arch-dropped" in cuda13[k80].codes and "arch-dropped" in cuda13[k80].detail
    assert cells["ClusterServingRuntime/aml-mindie-cann-8.3"][0].status is CellStatus.NOT_NVIDIA
    # The GPU runtime whose tag's CUDA is not recorded is unknown, never "no requirement"
    # (what explain and admission say of its predictors); the CPU runtime has none.
    torchserve = cells["ClusterServingRuntime/kserve-torchserve"][0]
    assert torchserve.status is CellStatus.UNKNOWN and torchserve.headline == "CUDA unknown"
    sklearn = cells["ClusterServingRuntime/kserve-sklearnserver"][0]
    assert sklearn.status is CellStatus.NO_REQUIREMENT
    doc = matrix.to_dict()
    assert doc["pools"] == [p.name for p in pools]
    assert doc["runtimes"][3]["cells"][pools[b200_580].name] == {
        "status": "compatible",
        "codes": ["native"],
    }


def test_policy_of_the_matrix_and_of_a_runtime(
    sample: ClusterSnapshot, kb: KnowledgeBase, images: ImageTable
) -> None:
    # aml-vllm-cuda-12.8 runs the upstream vllm/vllm-openai:v0.9.0, built on nvidia/cuda 12.8.1:
    # its NVIDIA_REQUIRE_CUDA admits R535 through a brand/driver alternative. A copy on
    # v0.10.2, whose CUDA the table knows only as a floor, is claimed to carry cuda>=12.8
    # alone (the stricter reading), which the container toolkit enforces under every policy;
    # a third copy turns the check off on its container, so minor-version compatibility alone
    # decides there.
    runtime = next(
        r for r in sample.cluster_serving_runtimes if r["metadata"]["name"] == "aml-vllm-cuda-12.8"
    )
    floor = copy.deepcopy(runtime)
    floor["metadata"]["name"] = "aml-vllm-cuda-12.8-floor"
    floor["spec"]["containers"][0]["image"] = "docker.io/vllm/vllm-openai:v0.10.2"
    ungated = copy.deepcopy(floor)
    ungated["metadata"]["name"] = "aml-vllm-cuda-12.8-ungated"
    ungated["spec"]["containers"][0]["env"].append(
        {"name": "NVIDIA_DISABLE_REQUIRE", "value": "true"}
    )
    snapshot = dataclasses.replace(
        sample, cluster_serving_runtimes=(*sample.cluster_serving_runtimes, floor, ungated)
    )
    fleet = Fleet.from_snapshot(snapshot, kb)
    pools = node_pools(snapshot, fleet)
    a100 = next(i for i, p in enumerate(pools) if p.product == "NVIDIA-A100-SXM4-80GB")
    rows = runtime_rows(fleet, images)
    upstream = next(i for i, r in enumerate(rows) if r.name == "aml-vllm-cuda-12.8")
    gated = next(i for i, r in enumerate(rows) if r.name == "aml-vllm-cuda-12.8-floor")
    index = next(i for i, r in enumerate(rows) if r.name == "aml-vllm-cuda-12.8-ungated")
    strict = compatibility_matrix(rows, pools, Policy.STRICT, kb)
    relaxed = compatibility_matrix(rows, pools, Policy.MINOR_COMPAT, kb)
    strict_cells = [strict.cells[row][a100] for row in (upstream, gated, index)]
    assert {(c.status, c.headline) for c in strict_cells} == {
        (CellStatus.INCOMPATIBLE, "driver-too-old")
    }
    assert relaxed.cells[gated][a100].status is CellStatus.INCOMPATIBLE
    assert relaxed.cells[gated][a100].headline == "require-cuda-unmet"
    assert relaxed.cells[index][a100].status is CellStatus.CAVEATS
    assert relaxed.cells[index][a100].headline == "minor-version-compat"
    assert relaxed.cells[upstream][a100].status is CellStatus.CAVEATS
    assert "admits driver branch R535" in relaxed.cells[upstream][a100].detail


def _jetson(name: str, cuda_minor: str) -> dict[str, Any]:
    """A Jetson Orin as GFD labels it: the Tegra driver reads ``unknown``, the CUDA version
    is the JetPack's (cuDriverGetVersion), so the CUDA label is the only CUDA fact."""
    labels = {
        "nvidia.com/cuda.driver-version.full": "unknown.unknown.unknown",
        "nvidia.com/cuda.driver-version.major": "unknown",
        "nvidia.com/cuda.driver-version.minor": "unknown",
        "nvidia.com/cuda.driver-version.revision": "unknown",
        "nvidia.com/cuda.runtime-version.full": f"12.{cuda_minor}",
        "nvidia.com/cuda.runtime-version.major": "12",
        "nvidia.com/cuda.runtime-version.minor": cuda_minor,
        "nvidia.com/gpu.compute.major": "8",
        "nvidia.com/gpu.compute.minor": "7",
        "nvidia.com/gpu.family": "ampere",
        "nvidia.com/gpu.product": "Orin",
        "nvidia.com/gpu.present": "true",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {
            "capacity": {"nvidia.com/gpu": "1"},
            "nodeInfo": {"osImage": "Ubuntu 22.04.5 LTS"},
        },
    }


def test_mixed_and_unreadable_cells(kb: KnowledgeBase, images: ImageTable) -> None:
    snapshot = load_snapshot(DATA / "labels.yaml")
    # A twin of gpu-drift-1 (A100, R550, Ubuntu: the same pool) whose new GFD keys say CUDA
    # 12.2: a node's CUDA is its driver's (NVIDIA Table 3), so the label splits nothing.
    twin = copy.deepcopy(next(n for n in snapshot.nodes if n["metadata"]["name"] == "gpu-drift-1"))
    twin["metadata"]["name"] = "gpu-drift-twin"
    twin["metadata"]["labels"]["nvidia.com/cuda.runtime-version.minor"] = "2"
    # Two Jetson Orins whose driver GFD cannot read, on JetPack 6.0 (CUDA 12.2) and 6.1
    # (CUDA 12.6): one pool (same product, unknown driver, same OS) whose nodes disagree.
    jetsons = (_jetson("orin-jp60", "2"), _jetson("orin-jp61", "6"))
    runtime = {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "ClusterServingRuntime",
        "metadata": {"name": "needs-12-4", "annotations": {"cudasched.io/cuda-version": "12.4"}},
        "spec": {"containers": [{"name": "kserve-container", "image": "x"}]},
    }
    broken = {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "ClusterServingRuntime",
        "metadata": {"name": "broken", "annotations": {"cudasched.io/cuda-version": "new"}},
        "spec": {"containers": [{"name": "kserve-container", "image": "x"}]},
    }
    snapshot = ClusterSnapshot(
        nodes=(*snapshot.nodes, twin, *jetsons), cluster_serving_runtimes=(runtime, broken)
    )
    fleet = Fleet.from_snapshot(snapshot, kb)
    pools = node_pools(snapshot, fleet)
    drift = next(i for i, p in enumerate(pools) if "gpu-drift-twin" in p.nodes)
    assert pools[drift].nodes == ("gpu-drift-1", "gpu-drift-2", "gpu-drift-twin")
    orin = next(i for i, p in enumerate(pools) if p.product == "Orin")
    assert pools[orin].nodes == ("orin-jp60", "orin-jp61") and pools[orin].driver is None
    matrix = compatibility_matrix(runtime_rows(fleet, images), pools, Policy.STRICT, kb)
    broken_row, needs_row = matrix.cells  # sorted by name
    assert needs_row[drift].status is CellStatus.COMPATIBLE
    assert needs_row[orin].status is CellStatus.MIXED
    assert "orin-jp61: compatible" in needs_row[orin].detail
    assert "orin-jp60: incompatible" in needs_row[orin].detail
    assert {c.status for c in broken_row} == {CellStatus.UNREADABLE}
    assert "'new'" in broken_row[0].detail


def test_resolve_runtime_reads_the_runtime_like_an_isvc_naming_it(
    sample: ClusterSnapshot, kb: KnowledgeBase, images: ImageTable
) -> None:
    by_name = {r["metadata"]["name"]: r for r in sample.cluster_serving_runtimes}
    triton = resolve_runtime(by_name["kserve-tritonserver"], images, kb)
    assert triton.cuda == parse_cuda("12.4")
    assert triton.source == "image nvcr.io/nvidia/tritonserver:24.05-py3"
    alauda = resolve_runtime(by_name["aml-vllm-cuda-13.0"], images, kb)
    assert alauda.cuda == parse_cuda("13.0")
    assert alauda.source == "ClusterServingRuntime aml-vllm-cuda-13.0, label cpaas.io/cuda-version"
    npu = resolve_runtime(by_name["aml-mindie-cann-8.3"], images, kb)
    assert npu.is_empty and "not an NVIDIA runtime" in npu.source
    # spec.annotations reach the pods, so they win over the image (as on a predictor).
    annotated = copy.deepcopy(by_name["kserve-tritonserver"])
    annotated["spec"]["annotations"] = {"cudasched.io/cuda-version": "12.8"}
    assert resolve_runtime(annotated, images, kb).cuda == parse_cuda("12.8")
