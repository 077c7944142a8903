"""Cluster snapshot loading, and the internal consistency of the bundled sample cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.cluster.snapshot import (
    ClusterSnapshot,
    bundled_snapshot,
    load_nodes,
    load_snapshot,
    parse_objects,
)
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.vocab.versions import CudaVersion, parse_driver
from tests.support.k8s_schema import assert_valid

DATA = Path(__file__).parents[1] / "data"

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"a": "b"}}}
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}
ISVC = {
    "apiVersion": "serving.kserve.io/v1beta1",
    "kind": "InferenceService",
    "metadata": {"name": "isvc", "namespace": "ns"},
}
SR = {
    "apiVersion": "serving.kserve.io/v1alpha1",
    "kind": "ServingRuntime",
    "metadata": {"name": "sr", "namespace": "ns"},
}
CSR = {
    "apiVersion": "serving.kserve.io/v1alpha1",
    "kind": "ClusterServingRuntime",
    "metadata": {"name": "csr"},
}
DEPLOY = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}
JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}}
CM = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}
ALL = [NODE, POD, ISVC, SR, CSR, DEPLOY, JOB, CM]


def _check_buckets(snap: ClusterSnapshot) -> None:
    assert snap.nodes == (NODE,)
    assert snap.pods == (POD,)
    assert snap.inference_services == (ISVC,)
    assert snap.serving_runtimes == (SR,)
    assert snap.cluster_serving_runtimes == (CSR,)
    assert snap.workloads == (DEPLOY, JOB)
    assert snap.other == (CM,)
    assert len(snap) == len(ALL)


# --------------------------------------------------------------------------- input shapes


def test_kubectl_list_yaml() -> None:
    text = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": ALL, "metadata": {}})
    _check_buckets(load_snapshot(text))


def test_multi_document_yaml_ignores_empty_documents() -> None:
    text = "---\n" + "\n---\n".join(yaml.safe_dump(o) for o in ALL) + "\n---\n"
    _check_buckets(load_snapshot(text))


def test_json_list_and_array_and_single_object() -> None:
    _check_buckets(load_snapshot(json.dumps({"apiVersion": "v1", "kind": "List", "items": ALL})))
    _check_buckets(load_snapshot(json.dumps(ALL)))
    snap = load_snapshot(json.dumps(DEPLOY, indent=2))
    assert snap.workloads == (DEPLOY,)
    assert snap.nodes == ()


def test_single_yaml_object_and_bytes_and_path(tmp_path: Path) -> None:
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(DEPLOY))
    assert load_snapshot(path).workloads == (DEPLOY,)
    assert load_snapshot(str(path)).workloads == (DEPLOY,)
    assert load_snapshot(path.read_bytes()).workloads == (DEPLOY,)
    assert load_snapshot(path).source == str(path)


def test_typed_list_items_without_kind_get_it_from_the_list() -> None:
    raw = {
        "apiVersion": "v1",
        "kind": "NodeList",
        "items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}],
    }
    snap = load_snapshot(json.dumps(raw))
    assert [n["metadata"]["name"] for n in snap.nodes] == ["a", "b"]
    assert all(n["kind"] == "Node" and n["apiVersion"] == "v1" for n in snap.nodes)


def test_empty_list_is_an_empty_snapshot() -> None:
    snap = load_snapshot(
        'apiVersion: v1\nitems: []\nkind: List\nmetadata:\n  resourceVersion: ""\n'
    )
    assert len(snap) == 0


def test_kserve_objects_of_other_versions_are_not_misfiled() -> None:
    odd = {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "InferenceService", "metadata": {}}
    graph = {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "InferenceGraph", "metadata": {}}
    snap = ClusterSnapshot.from_objects([odd, graph])
    assert snap.inference_services == ()
    assert snap.other == (odd, graph)


def test_workload_kinds() -> None:
    kinds = [
        ("apps/v1", "StatefulSet"),
        ("apps/v1", "DaemonSet"),
        ("apps/v1", "ReplicaSet"),
        ("batch/v1", "CronJob"),
        ("v1", "ReplicationController"),
    ]
    objs = [{"apiVersion": a, "kind": k, "metadata": {"name": k.lower()}} for a, k in kinds]
    assert len(ClusterSnapshot.from_objects(objs).workloads) == len(kinds)


def test_with_nodes() -> None:
    snap = ClusterSnapshot.from_objects(ALL)
    other_node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2"}}
    swapped = snap.with_nodes([other_node])
    assert swapped.nodes == (other_node,)
    assert swapped.pods == snap.pods


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "kind": st.sampled_from(["Node", "Pod", "ConfigMap", "Secret"]),
                "name": st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True),
                "labels": st.dictionaries(
                    st.from_regex(r"[a-z]{1,8}(\.io/[a-z]{1,8})?", fullmatch=True),
                    st.from_regex(r"[A-Za-z0-9]{0,8}", fullmatch=True),
                    max_size=4,
                ),
            }
        ),
        max_size=8,
    )
)
def test_every_serialisation_loads_the_same_snapshot(specs: list[dict[str, object]]) -> None:
    objs = [
        {
            "apiVersion": "v1",
            "kind": s["kind"],
            "metadata": {"name": s["name"], "labels": s["labels"]},
        }
        for s in specs
    ]
    as_list = {"apiVersion": "v1", "kind": "List", "items": objs, "metadata": {}}
    forms = [
        yaml.safe_dump(as_list),
        json.dumps(as_list),
        json.dumps(objs, indent=1),
    ]
    if objs:
        forms.append("\n---\n".join(yaml.safe_dump(o) for o in objs) + "\n")
    snaps = [load_snapshot(f) for f in forms]
    assert all(s == snaps[0] for s in snaps)
    rank = {"Node": 0, "Pod": 1}
    assert list(snaps[0].objects()) == sorted(objs, key=lambda o: rank.get(o["kind"], 2))


# --------------------------------------------------------------------------- errors


def _error(source: Path | str | bytes) -> str:
    with pytest.raises(InputError) as info:
        load_snapshot(source)
    return str(info.value)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    assert _error(missing) == f"{missing}: no such file"
    assert str(tmp_path) in _error(tmp_path) and "directory" in _error(tmp_path)


def test_invalid_yaml_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("apiVersion: v1\nkind: Node\nmetadata:\n  name: [unclosed\n")
    message = _error(path)
    assert message.startswith(f"{path}: invalid YAML at line")


def test_invalid_json_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"apiVersion": "v1",\n "kind": }')
    message = _error(path)
    assert message.startswith(f"{path}: invalid JSON at line 2")


def test_documents_that_are_not_objects(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("just a string\n")
    assert _error(path) == (
        f"{path}: the document is a string, expected a Kubernetes object "
        "(a mapping with apiVersion and kind)"
    )
    path.write_text(yaml.safe_dump(NODE) + "---\nfoo: 1\nbar: 2\n")
    assert _error(path) == (
        f"{path}: document 2 has no apiVersion or kind: not a Kubernetes object (keys: bar, foo)"
    )
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [NODE, 3]}))
    assert "item 2 of the List is a number" in _error(path)
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": {"a": 1}}))
    assert "items is not a list" in _error(path)
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": "x"}))
    assert "metadata of type string" in _error(path)
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Node", "metadata": {}}))
    assert _error(path) == f"{path}: a Node has no metadata.name"


def test_empty_inputs_and_binary(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("\n\n")
    assert "empty file" in _error(path)
    path.write_text("---\n# only a comment\n---\n")
    assert "no YAML documents" in _error(path)
    path.write_bytes(b"\xff\xfe\x00garbage")
    assert f"{path}: not UTF-8 text" in _error(path)


def test_parse_objects_labels_errors() -> None:
    with pytest.raises(InputError, match=r"^stdin: invalid YAML"):
        parse_objects("a: [\n", "stdin")


def test_load_nodes(tmp_path: Path) -> None:
    nodes = load_nodes(DATA / "nodes-gfd-old.yaml")
    assert [n["metadata"]["name"] for n in nodes] == ["gpu-t4-07", "gpu-a100-02"]
    path = tmp_path / "pods.yaml"
    path.write_text(yaml.safe_dump(POD))
    with pytest.raises(InputError, match=r"pods\.yaml: no Node objects \(found only Pod\)"):
        load_nodes(path)


def test_recorded_workload_files_load() -> None:
    assert load_snapshot(DATA / "deployment-vllm.yaml").workloads[0]["kind"] == "Deployment"
    assert load_snapshot(DATA / "job-cuda-compat.json").workloads[0]["kind"] == "Job"
    assert load_snapshot(DATA / "cronjob-gpu.yaml").workloads[0]["kind"] == "CronJob"


# --------------------------------------------------------------------------- the sample cluster

# NVIDIA CUDA release notes, Table 3: minimum Linux driver of each GA toolkit release (an excerpt
# covering the branches in the sample; see reference/cuda-compat-facts.yaml).
TABLE3 = [
    ("11.4", "470.42.01"),
    ("11.5", "495.29.05"),
    ("12.0", "525.60.13"),
    ("12.2", "535.54.03"),
    ("12.3", "545.23.06"),
    ("12.4", "550.54.14"),
    ("12.5", "555.42.02"),
    ("12.8", "570.26"),
    ("12.9", "575.51.03"),
    ("13.0", "580.65.06"),
    ("13.1", "590.44.01"),
]


def _table3_max_cuda(driver: str) -> str:
    d = parse_driver(driver)
    return max(
        (c for c, m in TABLE3 if parse_driver(m) <= d),
        key=lambda c: CudaVersion(*map(int, c.split("."))),
    )


@pytest.fixture(scope="module")
def sample() -> ClusterSnapshot:
    return bundled_snapshot()


def _labels(node: dict[str, object]) -> dict[str, str]:
    return node["metadata"]["labels"]  # type: ignore[index, return-value]


def test_sample_cluster_shape(sample: ClusterSnapshot) -> None:
    assert sample.source == "bundled sample cluster"
    assert len(sample.nodes) == 21
    gpu = [n for n in sample.nodes if "nvidia.com/gpu" in n["status"]["capacity"]]
    assert len(gpu) == 20
    assert len(sample.inference_services) == 8
    assert len(sample.pods) == 9
    assert {r["metadata"]["name"] for r in sample.cluster_serving_runtimes} >= {
        "kserve-tritonserver",
        "kserve-huggingfaceserver",
        "kserve-sklearnserver",
        "kserve-torchserve",
    }
    old_only = [n for n in gpu if L.GFD_DRIVER_MAJOR not in _labels(n)]
    without_ours = [n for n in gpu if L.CUDA_CODE not in _labels(n)]
    assert len(old_only) >= 2 and len(without_ours) >= 1
    for node in sample.nodes:
        info = node["status"]["nodeInfo"]
        for key in ("kernelVersion", "osImage", "containerRuntimeVersion", "kubeletVersion"):
            assert info[key]
        assert node["metadata"]["uid"] and node["metadata"]["creationTimestamp"]


def test_sample_gpu_labels_are_consistent(sample: ClusterSnapshot) -> None:
    compared = {"cpu": 0, "gpu": 0, "gfd new keys": 0, "ours": 0}
    for node in sample.nodes:
        labels = _labels(node)
        name = node["metadata"]["name"]
        if "nvidia.com/gpu" not in node["status"]["capacity"]:
            assert not any(k.startswith(("nvidia.com/", "cudasched.io/")) for k in labels), name
            compared["cpu"] += 1
            continue
        compared["gpu"] += 1
        assert node["status"]["capacity"]["nvidia.com/gpu"] == labels[L.GFD_COUNT], name
        major, minor, rev = (
            labels[k]
            for k in (
                "nvidia.com/cuda.driver.major",
                "nvidia.com/cuda.driver.minor",
                "nvidia.com/cuda.driver.rev",
            )
        )
        driver_text = ".".join(p for p in (major, minor, rev) if p)
        cuda_text = f"{labels[L.GFD_OLD_CUDA_MAJOR]}.{labels[L.GFD_OLD_CUDA_MINOR]}"
        assert _table3_max_cuda(driver_text) == cuda_text, name
        if L.GFD_DRIVER_MAJOR in labels:  # new GFD keys mirror the deprecated ones
            compared["gfd new keys"] += 1
            assert labels[L.GFD_DRIVER_FULL] == driver_text, name
            assert labels[L.GFD_DRIVER_MAJOR] == major
            assert labels[L.GFD_DRIVER_MINOR] == minor
            assert labels[L.GFD_DRIVER_REVISION] == rev
            assert labels[L.GFD_CUDA_FULL] == cuda_text
            assert labels[L.GFD_CUDA_MAJOR] == labels[L.GFD_OLD_CUDA_MAJOR]
            assert labels[L.GFD_CUDA_MINOR] == labels[L.GFD_OLD_CUDA_MINOR]
        if L.CUDA_CODE in labels:  # our codes equal what GFD says
            compared["ours"] += 1
            driver = parse_driver(driver_text)
            cuda = CudaVersion(*map(int, cuda_text.split(".")))
            assert labels[L.DRIVER_VERSION] == driver_text, name
            assert labels[L.DRIVER_CODE] == str(driver.code), name
            assert labels[L.DRIVER_BRANCH] == major
            assert labels[L.CUDA_CODE] == str(cuda.code), name
            assert labels[L.CUDA_VERSION] == cuda_text
            cc = int(labels[L.GFD_COMPUTE_MAJOR]) * 10 + int(labels[L.GFD_COMPUTE_MINOR])
            assert labels[L.COMPUTE_CODE] == str(cc), name
            assert labels[L.GPU_PRODUCT] == labels[L.GFD_PRODUCT]
            assert labels[L.GPU_ARCH] == labels[L.GFD_FAMILY]
            geforce = "GeForce" in labels[L.GFD_PRODUCT]
            assert labels[L.GPU_DATACENTER] == ("false" if geforce else "true")
    assert compared == {"cpu": 1, "gpu": 20, "gfd new keys": 16, "ours": 19}


def test_sample_predictor_pods_are_pending_kserve_pods(sample: ClusterSnapshot) -> None:
    isvcs = {(i["metadata"]["namespace"], i["metadata"]["name"]) for i in sample.inference_services}
    predictors = [
        p for p in sample.pods if "serving.kserve.io/inferenceservice" in p["metadata"]["labels"]
    ]
    assert len(predictors) == len(isvcs)
    for pod in sample.pods:
        assert pod["status"]["phase"] == "Pending"
        assert "nodeName" not in pod["spec"]
    for pod in predictors:
        meta = pod["metadata"]
        assert meta["labels"]["component"] == "predictor"
        assert (meta["namespace"], meta["labels"]["serving.kserve.io/inferenceservice"]) in isvcs
        assert pod["spec"]["containers"][0]["name"] == "kserve-container"


def test_sample_labels_agree_with_the_knowledge_base(sample: ClusterSnapshot) -> None:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.nodes.facts import facts_from_labels

    kb = KnowledgeBase.load()
    gpu_nodes = 0
    for node in sample.nodes:
        labels = _labels(node)
        name = node["metadata"]["name"]
        if L.GFD_OLD_DRIVER_MAJOR not in labels:
            assert not facts_from_labels(name, labels, kb).has_gpu
            continue
        gpu_nodes += 1
        facts = facts_from_labels(name, labels, kb)
        assert facts.driver is not None and facts.cuda is not None, name
        assert kb.max_cuda_for_driver(facts.driver) == facts.cuda, name
        info = kb.gpu(labels[L.GFD_PRODUCT])
        assert info is not None, labels[L.GFD_PRODUCT]
        assert facts.compute == info.compute, name
        assert facts.datacenter == info.datacenter, name
        # GFD-only reading (strip our labels) gives the same facts as reading our labels.
        gfd_only = {k: v for k, v in labels.items() if not k.startswith(L.PREFIX)}
        plain = facts_from_labels(name, gfd_only, kb)
        assert (plain.driver, plain.cuda, plain.compute) == (
            facts.driver,
            facts.cuda,
            facts.compute,
        )
    assert gpu_nodes == 20 and len(sample.nodes) == 21


def test_sample_and_recorded_objects_are_valid_kubernetes_objects(sample: ClusterSnapshot) -> None:
    objects = list(sample.objects())
    for name in ("deployment-vllm.yaml", "job-cuda-compat.json", "cronjob-gpu.yaml"):
        objects.extend(load_snapshot(DATA / name).objects())
    objects.extend(load_nodes(DATA / "nodes-gfd-old.yaml"))
    for obj in objects:
        assert_valid(obj)


def test_unquoted_timestamps_stay_strings() -> None:
    text = (
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n"
        "  creationTimestamp: 2026-11-30T03:35:10Z\n"
    )
    snap = load_snapshot(text)
    assert snap.pods[0]["metadata"]["creationTimestamp"] == "2026-11-30T03:35:10Z"
