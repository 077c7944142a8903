"""Requirement resolution: each source wins over the later ones, Alauda runtime labels,
non-NVIDIA runtimes, bad annotation values, GPU detection and who gets constrained."""

from __future__ import annotations

import copy
import dataclasses
import functools
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.knowledge.images import ImageTable
from cudasched.vocab.errors import InputError
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.vocab.versions import ComputeCapability, CudaVersion
from cudasched.workloads.declared import (
    declared_by_annotation,
    misspelt_keys,
    requirement_from_annotations,
)
from cudasched.workloads.gpu import read_gpu_use, uses_gpu
from cudasched.workloads.kserve import RuntimeChoice, select_runtime
from cudasched.workloads.resolution import wants_constraint
from cudasched.workloads.sources import (
    resolve_isvc,
    resolve_llmisvc,
    resolve_llmisvc_pod,
    resolve_pod,
)
from cudasched.workloads.view import view_pod
from tests.support import builders

DATA = Path(__file__).parents[1] / "data" / "kserve"
TABLE = ImageTable.builtin()


def load(name: str) -> list[dict[str, Any]]:
    return yaml.safe_load((DATA / name).read_text())["items"]


def by_name(items: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(i for i in items if i["metadata"]["name"] == name)


def pod(
    *,
    annotations: dict[str, str] | None = None,
    image: str = "nvidia/cuda:12.2.2-runtime-ubuntu22.04",
    env: list[dict[str, Any]] | None = None,
    gpu: str | None = "1",
    component: str | None = "predictor",
    name: str = "kserve-container",
) -> dict[str, Any]:
    """A pod of InferenceService ``svc`` (its predictor unless ``component`` says otherwise)."""
    labels = {"serving.kserve.io/inferenceservice": "svc"}
    if component:
        labels["component"] = component
    return builders.pod(
        "p",
        None,
        image=image,
        env=env,
        gpus=gpu,
        container=name,
        labels=labels,
        annotations=annotations or {},
    )


def runtime(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None):
    return builders.runtime(
        "rt",
        image="nvidia/cuda:11.8.0-base",
        formats=(),
        labels=labels or {},
        annotations=annotations or {},
    )


REQUIRE = [
    {"name": "NVIDIA_REQUIRE_CUDA", "value": "cuda>=12.6 brand=tesla,driver>=535,driver<536"}
]
UNKNOWN_IMAGE = "registry.example.com/team/server:1"  # not in the image table


# --------------------------------------------------------------------------- order of sources


def test_annotation_wins_over_everything() -> None:
    p = pod(annotations={"cudasched.io/cuda-version": "12.8"}, env=REQUIRE)
    rt = runtime(labels={"cudasched.io/cuda-version": "12.1", "cpaas.io/cuda-version": "11.8"})
    req = resolve_pod(view_pod(p), rt, TABLE, None)
    assert req.cuda == CudaVersion(12, 8)
    assert req.source == "annotation cudasched.io/cuda-version"
    assert declared_by_annotation(req)


def test_runtime_cudasched_label_wins_over_alauda_label() -> None:
    rt = runtime(labels={"cudasched.io/cuda-version": "12.1", "cpaas.io/cuda-version": "11.8"})
    req = resolve_pod(view_pod(pod(image=UNKNOWN_IMAGE)), rt, TABLE, None)
    assert req.cuda == CudaVersion(12, 1)
    assert req.source == "ClusterServingRuntime rt, label cudasched.io/cuda-version"
    assert not declared_by_annotation(req) and not req.disagreement


def test_runtime_label_and_container_disagree_the_stricter_is_used() -> None:
    """Issue 12 item 8: a runtime's label below what its container needs is not trusted."""
    rt = runtime(labels={"cudasched.io/cuda-version": "12.1", "cpaas.io/cuda-version": "11.8"})
    req = resolve_pod(view_pod(pod(env=REQUIRE)), rt, TABLE, None)
    assert req.cuda == CudaVersion(12, 6)
    assert req.source.startswith("ClusterServingRuntime rt, label cudasched.io/cuda-version")
    assert "says cuda>=12.1" in req.disagreement and "cuda>=12.6" in req.disagreement


def test_runtime_annotation_wins_over_runtime_label() -> None:
    rt = runtime(
        labels={"cudasched.io/cuda-version": "12.1"},
        annotations={"cudasched.io/cuda-version": "12.3"},
    )
    req = resolve_pod(view_pod(pod(image=UNKNOWN_IMAGE)), rt, TABLE, None)
    assert (req.cuda, req.source) == (
        CudaVersion(12, 3),
        "ClusterServingRuntime rt, annotation cudasched.io/cuda-version",
    )


def test_alauda_label_is_the_runtimes_requirement() -> None:
    rt = runtime(labels={"cpaas.io/accelerator-type": "nvidia", "cpaas.io/cuda-version": "11.8"})
    req = resolve_pod(view_pod(pod(image=UNKNOWN_IMAGE)), rt, TABLE, None)
    assert req.cuda == CudaVersion(11, 8)
    assert req.source == "ClusterServingRuntime rt, label cpaas.io/cuda-version"
    # A container that needs more wins, and the disagreement is reported.
    stricter = resolve_pod(view_pod(pod(env=REQUIRE)), rt, TABLE, None)
    assert stricter.cuda == CudaVersion(12, 6) and stricter.disagreement


def test_alauda_cuda_version_without_accelerator_type_is_used() -> None:
    rt = runtime(labels={"cpaas.io/cuda-version": "12.1"})
    req = resolve_pod(view_pod(pod(image=UNKNOWN_IMAGE)), rt, TABLE, None)
    assert req.cuda == CudaVersion(12, 1)


def test_env_wins_over_image() -> None:
    req = resolve_pod(view_pod(pod(env=REQUIRE)), None, TABLE, None)
    assert req.cuda == CudaVersion(12, 6)
    assert req.source == "env NVIDIA_REQUIRE_CUDA of container kserve-container"


def test_image_used_when_nothing_else() -> None:
    req = resolve_pod(view_pod(pod()), None, TABLE, None)
    assert req.cuda == CudaVersion(12, 2)
    assert req.source == "image nvidia/cuda:12.2.2-runtime-ubuntu22.04"


def test_env_without_cuda_floor_falls_through_to_image() -> None:
    env = [
        {"name": "NVIDIA_REQUIRE_CUDA", "value": "brand=tesla,driver>=535,driver<536"},
        {"name": "OTHER", "value": "x"},
    ]
    req = resolve_pod(view_pod(pod(env=env)), None, TABLE, None)
    assert req.source.startswith("image ")
    from_field = [{"name": "NVIDIA_REQUIRE_CUDA", "valueFrom": {"configMapKeyRef": {"name": "c"}}}]
    assert resolve_pod(view_pod(pod(env=from_field)), None, TABLE, None).source.startswith("image ")


def test_nothing_gives_empty_requirement() -> None:
    req = resolve_pod(view_pod(pod(image="python:3.12")), None, TABLE, None)
    assert req.is_empty and req.source == ""
    assert req == Requirement()


def test_runtime_without_facts_falls_through() -> None:
    req = resolve_pod(view_pod(pod()), runtime(labels={"team": "ml"}), TABLE, None)
    assert req.source.startswith("image ")


def test_image_override_through_table() -> None:
    table = TABLE.with_overrides([{"pattern": "registry.example.com/llm:*", "cuda": "12.4"}])
    req = resolve_pod(view_pod(pod(image="registry.example.com/llm:v7")), None, table, None)
    assert (req.cuda, req.source) == (CudaVersion(12, 4), "image registry.example.com/llm:v7")


def test_knowledge_base_passed_through_to_the_table() -> None:
    class KB:
        def ngc_release(self, product: str, release: str):
            return type("R", (), {"cuda": CudaVersion(12, 4, 1), "source": "notes"})()

        def framework(self, spec: str):
            return None

    p = pod(image="nvcr.io/nvidia/tritonserver:24.05-py3")
    assert resolve_pod(view_pod(p), None, TABLE, None).is_empty
    assert resolve_pod(view_pod(p), None, TABLE, KB()).cuda == CudaVersion(12, 4)


# --------------------------------------------------------------------------- non-NVIDIA runtimes


def test_other_accelerator_type_gets_no_nvidia_requirement() -> None:
    npu = by_name(load("cluster-runtimes.yaml"), "aml-mindie-cann-8.3")
    req = resolve_pod(
        view_pod(pod(image="nvcr.io/nvidia/tritonserver:24.05-py3", env=REQUIRE)), npu, TABLE, None
    )
    assert req.is_empty
    assert "cpaas.io/accelerator-type=npu" in req.source and "not an NVIDIA runtime" in req.source
    assert not wants_constraint(view_pod(pod()), req)


def test_annotation_still_wins_over_a_non_nvidia_runtime() -> None:
    npu = runtime(labels={"cpaas.io/accelerator-type": "ascend"})
    req = resolve_pod(
        view_pod(pod(annotations={"cudasched.io/cuda-version": "12.4"})), npu, TABLE, None
    )
    assert req.cuda == CudaVersion(12, 4)


def test_accelerator_type_is_case_insensitive() -> None:
    rt = runtime(labels={"cpaas.io/accelerator-type": "NVIDIA", "cpaas.io/cuda-version": "12.2"})
    assert resolve_pod(view_pod(pod()), rt, TABLE, None).cuda == CudaVersion(12, 2)


# --------------------------------------------------------------------------- modifiers


def test_misspelt_keys_name_the_key_meant() -> None:
    annotations = {
        "cudasched.io/cuda-verison": "12.4",
        "cudasched.io/min-compute": "8.0",
        "cudasched.io/zzz": "1",
        "cudasched.io/skip": "true",
        "cudasched.io/requirement": "cuda>=12.4",
        "example.com/cuda-verison": "12.4",
    }
    assert dict(misspelt_keys(annotations)) == {
        "cudasched.io/cuda-verison": "cudasched.io/cuda-version",
        "cudasched.io/min-compute": "cudasched.io/min-compute-capability",
        "cudasched.io/zzz": None,
    }
    assert list(misspelt_keys({"cudasched.io/cuda-version": "12.4"})) == []


def test_all_annotations_parsed() -> None:
    p = pod(
        annotations={
            "cudasched.io/cuda-version": "12.4.1",
            "cudasched.io/min-compute-capability": "sm_80",
            "cudasched.io/policy": "forward-compat",
            "cudasched.io/ships-cuda-compat": "true",
        }
    )
    req = resolve_pod(view_pod(p), None, TABLE, None)
    assert req.cuda == CudaVersion(12, 4)
    assert req.min_compute == ComputeCapability(8, 0)
    assert req.policy is Policy.FORWARD_COMPAT
    assert req.ships_cuda_compat is True
    assert req.source == (
        "annotation cudasched.io/cuda-version, cudasched.io/min-compute-capability"
    )


def test_min_compute_alone_is_a_requirement_from_annotation() -> None:
    req = resolve_pod(
        view_pod(pod(annotations={"cudasched.io/min-compute-capability": "8.6"})), None, TABLE, None
    )
    assert req.cuda is None and req.min_compute == ComputeCapability(8, 6)
    assert declared_by_annotation(req)


def test_policy_annotation_modifies_requirement_from_later_source() -> None:
    p = pod(
        annotations={"cudasched.io/policy": "strict", "cudasched.io/ships-cuda-compat": "False"}
    )
    rt = runtime(
        labels={"cudasched.io/policy": "minor-compat", "cudasched.io/cuda-version": "12.1"}
    )
    req = resolve_pod(view_pod(p), rt, TABLE, None)
    assert req.cuda == CudaVersion(12, 2)  # the stricter of the label and the image
    assert req.disagreement
    assert req.policy is Policy.STRICT and req.ships_cuda_compat is False
    assert req.source.startswith("ClusterServingRuntime rt")


def test_runtime_policy_used_when_object_has_none() -> None:
    rt = runtime(
        annotations={
            "cudasched.io/policy": "minor-compat",
            "cudasched.io/ships-cuda-compat": "true",
        }
    )
    req = resolve_pod(view_pod(pod()), rt, TABLE, None)
    assert req.policy is Policy.MINOR_COMPAT and req.ships_cuda_compat
    assert req.source.startswith("image ")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("cudasched.io/cuda-version", "twelve"),
        ("cudasched.io/cuda-version", ""),
        ("cudasched.io/min-compute-capability", "ampere"),
        ("cudasched.io/policy", "lenient"),
        ("cudasched.io/ships-cuda-compat", "yes"),
        ("cudasched.io/ships-cuda-compat", "1"),
    ],
)
def test_bad_annotation_values_name_the_annotation(key: str, value: str) -> None:
    with pytest.raises(InputError, match=key.replace(".", r"\.")):
        resolve_pod(view_pod(pod(annotations={key: value})), None, TABLE, None)


@pytest.mark.parametrize(
    "labels",
    [
        {"cpaas.io/cuda-version": "11.8-beta"},
        {"cudasched.io/cuda-version": "x"},
        {"cudasched.io/policy": "whatever", "cudasched.io/cuda-version": "12.1"},
    ],
)
def test_bad_runtime_label_values_name_label_and_runtime(labels: dict[str, str]) -> None:
    with pytest.raises(InputError, match="ClusterServingRuntime rt"):
        resolve_pod(view_pod(pod()), runtime(labels=labels), TABLE, None)


def test_bad_env_value_names_container() -> None:
    env = [{"name": "NVIDIA_REQUIRE_CUDA", "value": "cuda>=abc"}]
    with pytest.raises(InputError, match="kserve-container"):
        resolve_pod(view_pod(pod(env=env)), None, TABLE, None)


# --------------------------------------------------------------------------- InferenceServices


def test_resolve_isvc_alauda_runtime() -> None:
    cluster = load("cluster-runtimes.yaml")
    obj = by_name(load("isvcs.yaml"), "qwen-alauda")
    choice = select_runtime(obj, [], cluster)
    assert isinstance(choice, RuntimeChoice)
    req = resolve_isvc(obj, choice, TABLE, None)
    assert req.cuda == CudaVersion(12, 6)
    assert req.source == "ClusterServingRuntime aml-vllm-cuda-12.6, label cpaas.io/cuda-version"
    # the plain object works too
    assert resolve_isvc(obj, choice.obj, TABLE, None) == req


def test_resolve_isvc_reads_the_predictor_image() -> None:
    cluster = load("cluster-runtimes.yaml")
    legacy = by_name(load("isvcs.yaml"), "triton-legacy")
    triton = by_name(cluster, "kserve-tritonserver")

    class KB:
        def ngc_release(self, product: str, release: str):
            cuda = {"23.05": CudaVersion(12, 1, 1), "24.05": CudaVersion(12, 4, 1)}[release]
            return type("R", (), {"cuda": cuda, "source": "notes"})()

        def framework(self, spec: str):
            return None

    req = resolve_isvc(legacy, triton, TABLE, KB())
    # runtimeVersion 23.05-py3 replaced the runtime's 24.05-py3 tag
    assert (req.cuda, req.source) == (
        CudaVersion(12, 1),
        "image nvcr.io/nvidia/tritonserver:23.05-py3",
    )


def test_resolve_isvc_annotation_sources_follow_kserve_union() -> None:
    rt = runtime()
    rt["spec"]["annotations"] = {"cudasched.io/cuda-version": "11.8"}
    obj = {
        "metadata": {"name": "m", "annotations": {"cudasched.io/cuda-version": "12.1"}},
        "spec": {
            "predictor": {
                "model": {"modelFormat": {"name": "x"}},
                "annotations": {"cudasched.io/cuda-version": "12.4"},
            }
        },
    }
    assert resolve_isvc(obj, rt, TABLE, None).cuda == CudaVersion(12, 4)
    del obj["spec"]["predictor"]["annotations"]
    assert resolve_isvc(obj, rt, TABLE, None).cuda == CudaVersion(12, 1)
    del obj["metadata"]["annotations"]
    req = resolve_isvc(obj, rt, TABLE, None)
    assert req.cuda == CudaVersion(11, 8) and declared_by_annotation(req)


def test_resolve_isvc_without_runtime_uses_custom_container() -> None:
    obj = {
        "metadata": {"name": "c"},
        "spec": {
            "predictor": {
                "containers": [
                    {
                        "name": "kserve-container",
                        "image": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
                    }
                ]
            }
        },
    }
    req = resolve_isvc(obj, None, TABLE, None)
    assert req.cuda == CudaVersion(12, 4)


def test_resolution_does_not_mutate_inputs() -> None:
    cluster = load("cluster-runtimes.yaml")
    objs = load("isvcs.yaml")
    pods = load("pods.yaml")
    before = copy.deepcopy((cluster, objs, pods))
    for obj in objs:
        resolve_isvc(obj, select_runtime(obj, [], cluster), TABLE, None)
    for p in pods:
        resolve_pod(view_pod(p), None, TABLE, None)
    assert (cluster, objs, pods) == before


# --------------------------------------------------------------------------- GPU detection


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}, True),
        ({"containers": [{"name": "a", "resources": {"requests": {"nvidia.com/gpu": 2}}}]}, True),
        ({"containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "0"}}}]}, False),
        (
            {
                "containers": [
                    {"name": "a", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}
                ]
            },
            True,
        ),
        (
            {
                "containers": [
                    {"name": "a", "resources": {"limits": {"nvidia.com/gpu.shared": "1"}}}
                ]
            },
            True,
        ),
        ({"containers": [{"name": "a", "resources": {"limits": {"amd.com/gpu": "1"}}}]}, False),
        (
            {
                "containers": [{"name": "a"}],
                "initContainers": [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            },
            True,
        ),
        (
            {
                "containers": [{"name": "a"}],
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}],
            },
            True,
        ),
        ({"containers": [{"name": "a", "resources": {"limits": {"cpu": "4"}}}]}, False),
        ({}, False),
    ],
)
def test_uses_gpu(spec: dict, expected: bool) -> None:
    assert uses_gpu(spec) is expected


def test_uses_gpu_rejects_garbage_quantities() -> None:
    with pytest.raises(InputError, match=r"nvidia\.com/gpu"):
        uses_gpu(
            {"containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "lots"}}}]}
        )
    with pytest.raises(InputError):
        uses_gpu({"containers": "nope"})


def test_the_cuda_container_choice() -> None:
    spec = {
        "containers": [
            {"name": "kserve-container", "image": "a"},
            {"name": "llm", "image": "b", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
        ]
    }
    assert read_gpu_use(spec).container["name"] == "llm"  # type: ignore[index]
    spec["containers"][1]["resources"] = {}
    assert read_gpu_use(spec).container["name"] == "kserve-container"  # type: ignore[index]
    worker = read_gpu_use({"containers": [{"name": "worker-container"}]}).container
    assert worker is not None and worker["name"] == "worker-container"
    assert read_gpu_use({"containers": [{"name": "app"}]}).container is None


def test_recorded_pods() -> None:
    predictor, transformer, worker, knative = load("pods.yaml")
    assert uses_gpu(predictor["spec"]) and uses_gpu(worker["spec"])
    assert not uses_gpu(transformer["spec"]) and not uses_gpu(knative["spec"])
    # kserve/huggingfaceserver:v0.15.0-gpu is built on nvidia/cuda 12.4.1 (its Dockerfile at
    # the tag, issue 19), and carries its NVIDIA_REQUIRE_CUDA.
    req = resolve_pod(view_pod(predictor), None, TABLE, None)
    assert req.cuda == CudaVersion(12, 4, 1) and req.gate is not None
    assert req.gate.cuda_floor() == CudaVersion(12, 4)


# --------------------------------------------------------------------------- wants_constraint

CUDA_REQ = Requirement(cuda=CudaVersion(12, 4), source="image nvidia/cuda:12.4.1")
ANNOTATED = Requirement(cuda=CudaVersion(12, 4), source="annotation cudasched.io/cuda-version")


@pytest.mark.parametrize(
    ("p", "req", "expected"),
    [
        (pod(), CUDA_REQ, True),  # GPU predictor
        (pod(gpu=None), CUDA_REQ, False),  # CPU-only predictor of a GPU-capable runtime
        (pod(gpu="0"), CUDA_REQ, False),
        (pod(gpu=None), ANNOTATED, True),  # declared by annotation
        (pod(component="transformer"), CUDA_REQ, False),
        (pod(component="transformer"), ANNOTATED, True),
        (pod(component="explainer", gpu=None), ANNOTATED, True),
        (pod(component="explainer"), CUDA_REQ, False),
        (pod(component=None), CUDA_REQ, True),  # any GPU pod
        (pod(), Requirement(), False),  # nothing to constrain
        (pod(), Requirement(policy=Policy.STRICT, source="annotation cudasched.io/policy"), False),
    ],
)
def test_wants_constraint(p: dict, req: Requirement, expected: bool) -> None:
    assert wants_constraint(view_pod(p), req) is expected


@settings(max_examples=60)
@given(
    ann=st.sampled_from([None, "11.8", "12.4"]),
    rt_label=st.sampled_from([None, "12.1"]),
    env=st.sampled_from([None, "cuda>=12.6"]),
    image=st.sampled_from(["nvidia/cuda:12.2.2-base", "python:3.12"]),
)
def test_first_source_present_wins(ann, rt_label, env, image) -> None:
    p = pod(
        annotations={"cudasched.io/cuda-version": ann} if ann else {},
        env=[{"name": "NVIDIA_REQUIRE_CUDA", "value": env}] if env else None,
        image=image,
    )
    rt = runtime(labels={"cudasched.io/cuda-version": rt_label} if rt_label else {})
    req = resolve_pod(view_pod(p), rt, TABLE, None)
    container = [
        (env and env.removeprefix("cuda>="), "env"),
        ("12.2" if image.startswith("nvidia/cuda") else None, "image"),
    ]
    from_container = next(((v, s) for v, s in container if v), (None, ""))
    if ann:
        expected = (ann, "annotation")
    elif rt_label:
        # A runtime's label is the answer unless its container needs more (item 8).
        higher = from_container[0] is not None and CudaVersion(
            *map(int, from_container[0].split("."))
        ) > CudaVersion(12, 1)
        expected = (from_container[0] if higher else rt_label, "ClusterServingRuntime")
        assert bool(req.disagreement) == (from_container[0] not in (None, rt_label))
    else:
        expected = from_container
    assert (str(req.cuda.release) if req.cuda else None) == expected[0]
    assert req.source.startswith(expected[1])


def test_image_facts_from_the_knowledge_base_reach_the_requirement() -> None:
    from cudasched.knowledge import KnowledgeBase

    kb = KnowledgeBase.load()
    table = ImageTable.builtin(kb)
    triton = resolve_pod(
        view_pod(pod(image="nvcr.io/nvidia/tritonserver:25.08-py3")), None, table, kb
    )
    release = kb.ngc_release("tritonserver", "25.08")
    assert release is not None
    assert (triton.cuda, triton.min_compute) == (release.cuda, release.min_compute)
    vllm = resolve_pod(view_pod(pod(image="vllm/vllm-openai:v0.23.0")), None, table, kb)
    assert vllm.framework == kb.framework("vllm 0.23.0")
    assert vllm.source == "image vllm/vllm-openai:v0.23.0"
    # an explicit env floor says nothing about the framework
    env = resolve_pod(view_pod(pod(image="vllm/vllm-openai:v0.23.0", env=REQUIRE)), None, table, kb)
    assert env.framework is None and env.cuda == CudaVersion(12, 6)


def test_unparsable_image_is_just_unknown() -> None:
    assert resolve_pod(view_pod(pod(image="Registry/Foo:{{.Name}}")), None, TABLE, None).is_empty
    req = resolve_pod(view_pod(pod(image="Bad Image", env=REQUIRE)), None, TABLE, None)
    assert req.cuda == CudaVersion(12, 6)


# --------------------------------------------------------------------------- one reader

ANNOTATION_VALUES = {
    "cudasched.io/cuda-version": ["12.4", " 12.8 ", "12.4.1", "cu124", "13", "twelve", "", 12.4],
    "cudasched.io/min-compute-capability": ["8.0", "sm_90", "86", "fast", " "],
    "cudasched.io/policy": ["strict", "Minor-Compat", "forward-compat", "lax"],
    "cudasched.io/ships-cuda-compat": ["true", "FALSE", "True", "yes", "1", "no", "", True],
}


def _outcome(read: Any) -> tuple[str, Any]:
    try:
        return "ok", read()
    except InputError as exc:
        # The object is named differently (explain: ns/Kind/name; the webhook: pod name), the
        # rest of the message (annotation, value, what was expected) must be the same.
        return "error", str(exc).replace("ns/Pod/p", "pod p")


@settings(max_examples=120)
@given(
    st.fixed_dictionaries(
        {},
        optional={key: st.sampled_from(values) for key, values in ANNOTATION_VALUES.items()},
    )
)
def test_explain_and_the_webhook_read_annotations_alike(annotations: dict[str, Any]) -> None:
    """``cudasched explain`` and the webhook's resolution give the same requirement, the same
    source and the same error for the same annotations."""
    from cudasched.explain.eligibility import requirement_from_annotations as explain_reads

    workload = pod(annotations=annotations)
    workload["metadata"]["namespace"] = "ns"
    webhook = _outcome(lambda: resolve_pod(view_pod(workload), None, TABLE, None))
    explained = _outcome(lambda: explain_reads(workload))
    if webhook[0] == "error":
        assert explained == webhook
        return
    req = webhook[1]
    if declared_by_annotation(req):
        # The container toolkit's gate comes from the container, which explain's annotation
        # reader does not look at (cudasched explain resolves workloads as the webhook does).
        assert explained == ("ok", dataclasses.replace(req, gate=None))
        assert explained[1].source == req.source
    else:  # nothing declared: the webhook went on to the image; explain has no requirement
        assert explained == ("ok", None)
        assert not req.source.startswith("annotation")


def test_requirement_from_annotations_is_resolutions_first_step() -> None:
    annotations = {
        "cudasched.io/cuda-version": "12.8",
        "cudasched.io/min-compute-capability": "sm_80",
        "cudasched.io/policy": "minor-compat",
    }
    req = requirement_from_annotations(annotations, "pod p")
    resolved = resolve_pod(view_pod(pod(annotations=annotations)), None, TABLE, None)
    assert req == dataclasses.replace(resolved, gate=None)  # the gate is the container's
    assert resolved.gate is not None and resolved.gate.cuda_floor() == CudaVersion(12, 2)
    assert req is not None and req.source == (
        "annotation cudasched.io/cuda-version, cudasched.io/min-compute-capability"
    )
    assert requirement_from_annotations({"cudasched.io/policy": "strict"}, "pod p") is None
    assert requirement_from_annotations({}, "pod p") is None
    with pytest.raises(InputError, match=r"invalid cudasched\.io/ships-cuda-compat 'yes' on pod p"):
        requirement_from_annotations(
            {"cudasched.io/cuda-version": "12.8", "cudasched.io/ships-cuda-compat": "yes"},
            "pod p",
        )


# --------------------------------------------------------------------------- issue 12


def _runtime_pod(rt: dict[str, Any]) -> dict[str, Any]:
    container = rt["spec"]["containers"][0]
    return pod(image=container["image"], name=container["name"])


def test_kserve_and_vllm_default_images_are_constrained() -> None:
    """Issue 12 item 7: KServe's own GPU server, vLLM and Triton images resolve to a CUDA and
    carry the container toolkit's gate."""
    runtimes = load("runtimes-issue12.yaml")
    table = ImageTable.builtin(kb=_kb())
    hf = resolve_pod(
        view_pod(_runtime_pod(by_name(runtimes, "kserve-huggingfaceserver"))), None, table, _kb()
    )
    assert hf.cuda == CudaVersion(13, 3, 0) and hf.gate is not None  # its Dockerfile at v0.20.0
    vllm = resolve_pod(view_pod(_runtime_pod(by_name(runtimes, "vllm-openai"))), None, table, _kb())
    assert vllm.cuda == CudaVersion(13, 0) and "at least" in vllm.source
    triton = resolve_pod(
        view_pod(_runtime_pod(by_name(runtimes, "kserve-tritonserver"))), None, table, _kb()
    )
    assert triton.cuda == CudaVersion(11, 1) and triton.ships_cuda_compat


def test_runtime_label_below_its_image_uses_the_image() -> None:
    """Issue 12 item 8: an Alauda runtime labelled CUDA 12.1 that runs Triton 25.02 (CUDA 12.8,
    compute capability >= 7.5) from a mirror: the stricter image wins, the disagreement is
    reported, and a V100 node is no longer admitted."""
    from cudasched.compat.engine import check
    from cudasched.nodes.facts import facts_from_parts

    runtimes = load("runtimes-issue12.yaml")
    rt = by_name(runtimes, "aml-triton-cuda-12.1")
    table = ImageTable.builtin(kb=_kb())
    req = resolve_pod(view_pod(_runtime_pod(rt)), rt, table, _kb())
    assert req.cuda == CudaVersion(12, 8) and req.min_compute == ComputeCapability(7, 5)
    assert "cpaas.io/cuda-version" in req.source
    assert "says cuda>=12.1" in req.disagreement and "cc>=7.5" in req.disagreement
    v100 = facts_from_parts("v100", gpu="V100", driver="570.124.06", kb=_kb())
    verdict = check(v100, req, "strict", _kb())
    assert not verdict.compatible and "compute-capability-too-low" in verdict.codes


def test_why_unknown_is_reported() -> None:
    req = resolve_pod(view_pod(pod(image="registry.example.com/team/llm:7")), None, TABLE, None)
    assert req.is_empty and "not in the image table" in req.unknown_reason
    # the why is the fact; the fix is said once, in unknown_fix's words, by whoever reports it
    assert "cudasched.io/cuda-version" not in req.unknown_reason
    latest = resolve_pod(
        view_pod(pod(image="kserve/huggingfaceserver:latest-gpu")), None, TABLE, None
    )
    assert latest.is_empty and "latest-gpu" in latest.unknown_reason


def test_disabled_gate_and_env_override() -> None:
    disabled = [{"name": "NVIDIA_DISABLE_REQUIRE", "value": "true"}]
    req = resolve_pod(
        view_pod(pod(image="nvidia/cuda:12.8.1-runtime-ubuntu22.04", env=disabled)),
        None,
        TABLE,
        None,
    )
    assert req.cuda == CudaVersion(12, 8) and req.gate is None
    own = [{"name": "NVIDIA_REQUIRE_CUDA", "value": "cuda>=12.4"}]
    req = resolve_pod(
        view_pod(pod(image="nvidia/cuda:12.8.1-runtime-ubuntu22.04", env=own)), None, TABLE, None
    )
    assert (
        req.gate is not None and req.gate.text == "cuda>=12.4"
    )  # the pod's value replaces the image's


@functools.cache
def _kb() -> Any:
    from cudasched.knowledge import KnowledgeBase

    return KnowledgeBase.load()


# --------------------------------------------------------------------------- LLMInferenceService

LLMISVC = """
apiVersion: serving.kserve.io/v1alpha2
kind: LLMInferenceService
metadata:
  name: qwen
  namespace: llm
  annotations:
    cudasched.io/policy: minor-compat
spec:
  model:
    uri: hf://Qwen/Qwen3-0.6B
    name: Qwen/Qwen3-0.6B
  replicas: 1
  router:
    route: {}
    gateway: {}
    scheduler: {}
"""

# A decode pod as the controller creates it (workload_single_node.go labels; container main
# from kserve-config-llm-template with KServe v0.20.0's llm-d image).
LLMISVC_POD = """
apiVersion: v1
kind: Pod
metadata:
  name: qwen-kserve-6f7c9d8b5-x2k4q
  namespace: llm
  labels:
    app.kubernetes.io/component: llminferenceservice-workload
    app.kubernetes.io/name: qwen
    app.kubernetes.io/part-of: llminferenceservice
    kserve.io/component: workload
    llm-d.ai/role: both
spec:
  containers:
  - name: main
    image: ghcr.io/llm-d/llm-d-cuda:v0.8.0
    resources:
      limits: {nvidia.com/gpu: "1"}
"""


def test_llmisvc_pods_are_recognised() -> None:
    from cudasched.workloads.kserve.llm import is_llmisvc_pod, llmisvc_name_of, llmisvc_role

    decode = yaml.safe_load(LLMISVC_POD)
    assert is_llmisvc_pod(decode) and llmisvc_name_of(decode) == "qwen"
    assert llmisvc_role(decode) == "decode"
    worker = copy.deepcopy(decode)
    worker["metadata"]["labels"] = {
        "app.kubernetes.io/component": "llminferenceservice-workload-worker",
        "app.kubernetes.io/name": "qwen",
        "app.kubernetes.io/part-of": "llminferenceservice",
    }  # no kserve.io/component on workers with a leader template
    assert is_llmisvc_pod(worker) and llmisvc_role(worker) == "worker"
    scheduler = copy.deepcopy(decode)
    scheduler["metadata"]["labels"]["app.kubernetes.io/component"] = (
        "llminferenceservice-router-scheduler"
    )
    assert not is_llmisvc_pod(scheduler)


def test_llmisvc_pod_is_judged_by_its_main_image_and_the_services_annotations() -> None:
    table = ImageTable.builtin(kb=_kb())
    llmisvc = yaml.safe_load(LLMISVC)
    decode = yaml.safe_load(LLMISVC_POD)
    req = resolve_llmisvc_pod(view_pod(decode), llmisvc, table, _kb())
    assert req.cuda == CudaVersion(13, 0) and req.policy is Policy.MINOR_COMPAT
    assert req.source.startswith("image ghcr.io/llm-d/llm-d-cuda:v0.8.0")
    declared = copy.deepcopy(llmisvc)
    declared["metadata"]["annotations"]["cudasched.io/cuda-version"] = "13.2"
    assert resolve_llmisvc_pod(view_pod(decode), declared, table, _kb()).cuda == CudaVersion(13, 2)
    assert wants_constraint(view_pod(decode), req)


def test_llmisvc_object_needs_its_image_or_annotations() -> None:
    table = ImageTable.builtin(kb=_kb())
    llmisvc = yaml.safe_load(LLMISVC)
    req = resolve_llmisvc(llmisvc, table, _kb())
    assert req.is_empty and "kserve-config-llm-template" in req.unknown_reason
    # The image the configs give (KServe v0.20.0's default), or one in the template.
    assert resolve_llmisvc(
        llmisvc, table, _kb(), config_image="ghcr.io/llm-d/llm-d-cuda:v0.7.0"
    ).cuda == CudaVersion(13, 0)
    with_template = copy.deepcopy(llmisvc)
    with_template["spec"]["template"] = {
        "containers": [{"name": "main", "image": "vllm/vllm-openai:v0.23.0"}]
    }
    assert resolve_llmisvc(with_template, table, _kb()).cuda == CudaVersion(13, 0)


def test_resolve_workload_knows_llmisvc() -> None:
    from cudasched.cluster.fleet import Fleet
    from cudasched.workloads.resolution import resolve_workload

    fleet = Fleet([], _kb())
    table = ImageTable.builtin(kb=_kb())
    llmisvc = yaml.safe_load(LLMISVC)
    llmisvc["metadata"]["annotations"]["cudasched.io/cuda-version"] = "13.0"
    target, req, choice = resolve_workload(llmisvc, fleet, table)
    assert target["spec"]["containers"][0]["name"] == "main" and choice is None
    assert req.cuda == CudaVersion(13, 0)
    _, req, _ = resolve_workload(yaml.safe_load(LLMISVC_POD), fleet, table)
    assert req.cuda == CudaVersion(13, 0)


def test_requirement_needs_covers_every_rule_relevant_field() -> None:
    """Caches of compiled terms key on ``Requirement.needs``: a field that decides placement
    but is missing from it would let two different requirements share an answer (a gate once
    was)."""
    import dataclasses

    from cudasched.vocab.requirecuda import gate_from_env
    from cudasched.vocab.requirements import (
        CompatLibrary,
        FrameworkBuild,
        Policy,
        Requirement,
        ToolkitMode,
    )
    from cudasched.vocab.versions import ComputeCapability, CudaVersion, DriverVersion

    base = Requirement(cuda=CudaVersion(12, 4), source="a")
    changed = {
        "cuda": CudaVersion(12, 8),
        "min_compute": ComputeCapability(8, 0),
        "policy": Policy.MINOR_COMPAT,
        "ships_cuda_compat": True,
        "framework": FrameworkBuild("torch", "2.5.1+cu124", CudaVersion(12, 4)),
        "gate": gate_from_env({"NVIDIA_REQUIRE_CUDA": "cuda>=12.4"}, "test"),
        "compat": CompatLibrary(DriverVersion(550, 54, 15), CudaVersion(12, 4)),
        "toolkit": ToolkitMode.CDI,
    }
    compared = {f.name for f in dataclasses.fields(Requirement) if f.compare} - {"source"}
    assert compared == set(changed)
    for name, value in changed.items():
        assert dataclasses.replace(base, **{name: value}).needs != base.needs, name
    assert dataclasses.replace(base, source="b" * 10_000).needs == base.needs


def test_llmisvc_pods_of_a_service_leave_router_and_other_namespaces_out() -> None:
    from cudasched.workloads.kserve.llm import llmisvc_of_pod, llmisvc_pods

    decode = yaml.safe_load(LLMISVC_POD)
    scheduler = copy.deepcopy(decode)
    scheduler["metadata"]["labels"]["app.kubernetes.io/component"] = (
        "llminferenceservice-router-scheduler"
    )
    elsewhere = copy.deepcopy(decode)
    elsewhere["metadata"]["namespace"] = "other"
    odd = copy.deepcopy(decode)
    odd["metadata"]["labels"] = {"app.kubernetes.io/part-of": 7}  # read leniently: no such pod
    assert llmisvc_of_pod(decode) == "qwen"
    assert llmisvc_of_pod(scheduler) is None and llmisvc_of_pod(odd) is None
    assert llmisvc_pods([decode, scheduler, elsewhere, odd], "llm", "qwen") == [decode]


def test_llmisvc_multi_node_without_a_leader_template_is_read_from_its_worker() -> None:
    from cudasched.workloads.kserve.llm import llmisvc_uses_gpu

    table = ImageTable.builtin(kb=_kb())
    worker_only = yaml.safe_load(LLMISVC)
    worker_only["spec"]["worker"] = {
        "containers": [
            {
                "name": "main",
                "image": "vllm/vllm-openai:v0.23.0",
                "resources": {"limits": {"nvidia.com/gpu": "8"}},
            }
        ]
    }
    assert resolve_llmisvc(worker_only, table, _kb()).cuda == CudaVersion(13, 0)
    assert llmisvc_uses_gpu(worker_only)
    # With a leader template, the template is the decode pod the service asks for.
    led = copy.deepcopy(worker_only)
    led["spec"]["template"] = {"containers": [{"name": "main", "image": "x"}]}
    assert resolve_llmisvc(led, table, _kb()).is_empty
    # A GPU asked for only by the prefill workers is a GPU the service uses.
    prefill = yaml.safe_load(LLMISVC)
    assert not llmisvc_uses_gpu(prefill)
    prefill["spec"]["prefill"] = {
        "template": {
            "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
        }
    }
    assert llmisvc_uses_gpu(prefill)


def test_a_skipped_workload_needs_nothing_and_is_not_read() -> None:
    """``cudasched.io/skip`` leaves a workload alone at admission, before its requirement is
    read: ``workload_need`` (what ``explain``, the audit and planning take) says the same
    instead of refusing a value it cannot read (found by tests/test_pod_agreement.py)."""
    from cudasched.cluster.fleet import Fleet
    from cudasched.workloads.resolution import NeedStatus, workload_need

    fleet = Fleet([builders.node("n1")], _kb())
    odd = pod(annotations={"cudasched.io/cuda-version": "twelve", "cudasched.io/skip": "true"})
    _, need = workload_need(odd, fleet, TABLE)
    assert need.status is NeedStatus.NONE and need.resolved.is_empty
    del odd["metadata"]["annotations"]["cudasched.io/skip"]
    with pytest.raises(InputError, match="twelve"):
        workload_need(odd, fleet, TABLE)
