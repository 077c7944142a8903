"""Writing a snapshot as one kubectl ``List`` and reading it back, and what a shareable dump
keeps: no Secrets, no bulk, pods reduced to the fields cudasched reads, the same answers."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.cli.explain import explain_snapshot
from cudasched.cli.inputs import load_images, load_knowledge
from cudasched.cluster.fleet import Fleet
from cudasched.cluster.snapshot import (
    POD_FIELDS,
    ClusterSnapshot,
    DumpFormat,
    bundled_snapshot,
    dump_snapshot,
    load_snapshot,
    reduce_pod,
    to_yaml,
    without_bulk,
)
from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.images import ImageTable
from cudasched.vocab.errors import InputError
from cudasched.vocab.labels import LabelScheme
from cudasched.vocab.requirements import Policy
from cudasched.workloads.pods import workloads_of
from cudasched.workloads.resolution import resolve_workload

SAMPLE = bundled_snapshot()
BUCKETS = (
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


@pytest.mark.parametrize("fmt", list(DumpFormat))
def test_the_sample_round_trips_bucket_by_bucket(fmt: DumpFormat) -> None:
    back = load_snapshot(dump_snapshot(SAMPLE, fmt), name="dump")
    for bucket in BUCKETS:
        assert getattr(back, bucket) == getattr(SAMPLE, bucket), bucket
    assert back == SAMPLE


def test_the_dump_is_a_kubectl_list() -> None:
    text = dump_snapshot(SAMPLE, DumpFormat.JSON)
    import json

    doc = json.loads(text)
    assert (doc["apiVersion"], doc["kind"]) == ("v1", "List")
    assert len(doc["items"]) == len(SAMPLE)
    assert dump_snapshot(SAMPLE).startswith("apiVersion: v1\nkind: List\n")


# Values chosen to trip YAML: words it reads as booleans or null, numbers, timestamps, keys with
# dots and slashes, text over several lines.
_TRICKY = st.sampled_from(
    ["yes", "no", "on", "null", "~", "1.0", "0x1F", "12040", "2026-01-01T00:00:00Z", "", "a: b"]
)
_TEXT = st.one_of(_TRICKY, st.text(max_size=12))
_SCALAR = st.one_of(_TEXT, st.integers(-(2**40), 2**40), st.booleans(), st.none())
_VALUE = st.recursive(
    _SCALAR,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_TEXT, inner, max_size=3)),
    max_leaves=12,
)
_KINDS = st.sampled_from(
    [
        ("v1", "Node"),
        ("v1", "Pod"),
        ("serving.kserve.io/v1beta1", "InferenceService"),
        ("serving.kserve.io/v1alpha1", "ServingRuntime"),
        ("serving.kserve.io/v1alpha1", "ClusterServingRuntime"),
        ("serving.kserve.io/v1alpha2", "LLMInferenceService"),
        ("nvidia.com/v1alpha1", "NVIDIADriver"),
        ("apps/v1", "Deployment"),
        ("v1", "ConfigMap"),
    ]
)


@st.composite
def objects(draw: st.DrawFn) -> dict[str, Any]:
    api_version, kind = draw(_KINDS)
    labels = draw(st.dictionaries(st.sampled_from(["a/b", "x.y/z", "k"]), _TEXT, max_size=3))
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {
            "name": draw(st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True)),
            "labels": labels,
        },
        "spec": draw(st.dictionaries(_TEXT, _VALUE, max_size=4)),
    }


@settings(max_examples=60)
@given(st.lists(objects(), max_size=8), st.sampled_from(list(DumpFormat)))
def test_any_snapshot_round_trips(items: list[dict[str, Any]], fmt: DumpFormat) -> None:
    snapshot = ClusterSnapshot.from_objects(items)
    assert load_snapshot(dump_snapshot(snapshot, fmt).encode()) == snapshot


# --------------------------------------------------------------------------- shareable


def _pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "ml",
            "uid": "u",
            "resourceVersion": "9",
            "managedFields": [{"manager": "kubelet"}],
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{...HF_TOKEN...}",
                "cudasched.io/cuda-version": "12.4",
            },
        },
        "spec": {
            "nodeName": "n1",
            "serviceAccountName": "sa",
            "volumes": [{"name": "v"}],
            "containers": [
                {
                    "name": "main",
                    "image": "vllm/vllm-openai:v0.9.0",
                    "command": ["serve"],
                    "env": [
                        {"name": "HF_TOKEN", "value": "hf_secret"},
                        {"name": "NVIDIA_REQUIRE_CUDA", "value": "cuda>=12.4"},
                    ],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    "volumeMounts": [{"name": "v", "mountPath": "/v"}],
                }
            ],
        },
        "status": {"phase": "Running", "podIP": "10.0.0.1", "conditions": []},
    }


def test_a_pod_keeps_only_what_cudasched_reads() -> None:
    pod = _pod()
    before = copy.deepcopy(pod)
    reduced = reduce_pod(pod)
    assert pod == before  # the input is not changed
    assert reduced == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "ml",
            "uid": "u",
            "annotations": {"cudasched.io/cuda-version": "12.4"},
        },
        "spec": {
            "nodeName": "n1",
            "containers": [
                {
                    "name": "main",
                    "image": "vllm/vllm-openai:v0.9.0",
                    "env": [{"name": "NVIDIA_REQUIRE_CUDA", "value": "cuda>=12.4"}],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
        "status": {"phase": "Running"},
    }
    assert set(POD_FIELDS) == {"metadata", "spec", "status"}
    assert reduce_pod(reduced) == reduced  # reducing twice changes nothing


def test_a_broken_pod_stays_broken() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": "oops"}
    assert reduce_pod(pod)["spec"] == "oops"
    pod = {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": "oops"}}
    assert reduce_pod(pod)["spec"] == {"containers": "oops"}


def test_shareable_drops_secrets_and_bulk() -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s"},
        "data": {"k": "dg=="},
    }
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n", "managedFields": [{}], "labels": {"a": "b"}},
    }
    snapshot = ClusterSnapshot.from_objects([secret, config, node, _pod()])
    shared = snapshot.shareable()
    assert shared.other == (config,)
    assert shared.nodes == (
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": {"a": "b"}}},
    )
    assert shared.pods == (reduce_pod(_pod()),)
    text = dump_snapshot(shared)
    assert "hf_secret" not in text and "dg==" not in text and "managedFields" not in text
    assert without_bulk(node)["metadata"] == {"name": "n", "labels": {"a": "b"}}


@pytest.mark.parametrize("policy", [Policy.STRICT, Policy.MINOR_COMPAT])
def test_shareable_keeps_every_answer(policy: Policy) -> None:
    kb = load_knowledge()
    images = load_images(kb)

    def answers(snapshot: ClusterSnapshot) -> list[dict[str, Any]]:
        fleet = Fleet.from_snapshot(snapshot, kb)
        items = explain_snapshot(workloads_of(snapshot), fleet, policy, LabelScheme.AUTO, images)
        return [i.to_dict() for i in items]

    shared = SAMPLE.shareable()
    assert shared != SAMPLE  # something was dropped...
    assert answers(shared) == answers(SAMPLE)  # ...and nothing any answer reads


def test_yaml_is_written_without_aliases() -> None:
    shared = {"key": "a", "values": ["1"]}
    text = to_yaml({"first": shared, "second": shared})
    assert "&" not in text and "*" not in text
    assert yaml.safe_load(text) == {"first": shared, "second": shared}


# A reduced pod (a dump, a live read) must be judged as the full pod is. The env names are
# those the toolkit's gate reads, mixed with ones it ignores (credentials, settings).
_GATE_VALUES = {
    "NVIDIA_REQUIRE_CUDA": st.sampled_from(["cuda>=12.4", "cuda>=11.8 brand=tesla,driver>=470"]),
    "NVIDIA_REQUIRE_DRIVER": st.sampled_from(["driver>=535", "driver>=570"]),
    "NVIDIA_DISABLE_REQUIRE": st.sampled_from(["true", "false", "1"]),
    "CUDA_VERSION": st.sampled_from(["12.4.1", "11.8.0", "12.9"]),
    "HF_TOKEN": st.just("secret"),
    "VLLM_PORT": st.just("8000"),
}


@st.composite
def _gpu_pods(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(sorted(_GATE_VALUES)), unique=True, max_size=5))
    env = [{"name": n, "value": draw(_GATE_VALUES[n])} for n in names]
    image = draw(
        st.sampled_from(["vllm/vllm-openai:v0.7.2", "nvcr.io/nvidia/tritonserver:24.05-py3"])
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "default",
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
            "managedFields": [{"manager": "kubectl"}],
        },
        "spec": {
            "containers": [
                {
                    "name": "server",
                    "image": image,
                    "env": env,
                    "ports": [{"containerPort": 8000}],
                    "resources": {"limits": {"nvidia.com/gpu": 1}},
                }
            ]
        },
    }


@settings(max_examples=150)
@given(_gpu_pods())
def test_a_reduced_pod_resolves_as_the_full_pod(kb: KnowledgeBase, pod: dict[str, Any]) -> None:
    """The defect: only NVIDIA_REQUIRE_CUDA survived a reduction, so a pod that disabled the
    gate (NVIDIA_DISABLE_REQUIRE=true) got its image's gate back once dumped or read live."""
    snapshot = bundled_snapshot()
    fleet = Fleet.from_snapshot(snapshot, kb)
    images = ImageTable.builtin()

    def resolved(obj: Any) -> Any:
        try:
            return resolve_workload(obj, fleet, images)[1]
        except InputError as exc:
            return str(exc)

    reduced = reduce_pod(pod)
    assert resolved(reduced) == resolved(pod)
    kept = [v["name"] for v in reduced["spec"]["containers"][0].get("env", [])]
    assert "HF_TOKEN" not in kept
    assert len(kept) == sum(
        1 for v in pod["spec"]["containers"][0]["env"] if v["name"] not in ("HF_TOKEN", "VLLM_PORT")
    )
