"""The webhook's pod path with ``dra.mode`` on: a pod's ``nvidia.com/gpu: N`` is asked through
the CUDA-aware DeviceClass ``cudasched device-classes`` names for its requirement, the patch
applies and gives a valid pod, nothing else changes, and ``off`` answers as before."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import yaml

from cudasched.knowledge import KnowledgeBase
from cudasched.placement.deviceclass import device_class
from cudasched.settings.config import DraMode, WebhookConfig
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.vocab.kserve import MANAGED_DRA_CEL_SELECTOR, MANAGED_DRA_DEVICE_CLASS
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.vocab.versions import parse_cuda
from cudasched.webhook.admission.review import creation_review
from cudasched.webhook.state.clusterstate import ClusterState
from tests.support import builders
from tests.support.admission import admitter, applied, ask, nodes_state, ops_of, readmit
from tests.support.k8s_schema import assert_valid_pod

IMAGE = "nvidia/cuda:12.8.1-runtime-ubuntu22.04"
CLASS = "gpu-cuda-12-8.cudasched.io"
KEY = f"deviceclass.resource.kubernetes.io/{CLASS}"


@functools.cache
def kb() -> KnowledgeBase:
    return KnowledgeBase.load()


@functools.cache
def state() -> ClusterState:
    return nodes_state(kb())


def _answer(
    mode: str, obj: dict[str, Any], kind: str = "pod"
) -> tuple[dict[str, Any], dict[str, Any], Any]:
    adm = admitter(kb(), dra={"mode": mode})
    review = creation_review(obj, uid="uid-dra1")
    resp = ask(adm, kind, review, state())
    return review, resp, adm


def _two_containers() -> dict[str, Any]:
    return builders.pod(
        "llm",
        containers=[
            {"name": "main", "image": IMAGE, "resources": {"limits": {"nvidia.com/gpu": "2"}}},
            {"name": "side", "image": "busybox", "resources": {"limits": {"cpu": "1"}}},
        ],
    )


def test_the_class_is_the_one_device_classes_names() -> None:
    req = Requirement(cuda=parse_cuda("12.8"), source="test")
    assert device_class(req, Policy.STRICT, kb()).name == CLASS


def test_extended_resource_mode_asks_the_class_instead_of_node_affinity() -> None:
    review, resp, adm = _answer("extended-resource", _two_containers())
    pod = applied(review, resp)
    assert_valid_pod(pod)
    main, side = pod["spec"]["containers"]
    assert main["resources"] == {"limits": {KEY: "2"}}
    assert side == review["request"]["object"]["spec"]["containers"][1]
    assert "affinity" not in pod["spec"]
    assert pod["metadata"]["annotations"][L.ANN_REQUIREMENT].startswith("cuda>=12.8")
    assert [w for w in resp["warnings"] if CLASS in w and "must exist" in w]
    # Said once per class: the next replica gets the patch, not the words.
    again = ask(adm, "pod", creation_review(_two_containers(), uid="uid-dra2"), state())
    assert ops_of(again) == ops_of(resp) and "warnings" not in again
    # Reinvocation adds nothing.
    assert ops_of(readmit(adm, "pod", review, pod, state())) == []


def test_claim_mode_gives_the_gpu_container_a_claim_from_the_class_template() -> None:
    review, resp, _ = _answer("claim", _two_containers())
    pod = applied(review, resp)
    assert_valid_pod(pod)
    assert pod["spec"]["resourceClaims"] == [
        {"name": "cudasched-gpu-0", "resourceClaimTemplateName": f"x2.{CLASS}"}
    ]
    assert pod["spec"]["containers"][0]["resources"] == {
        "limits": {},
        "claims": [{"name": "cudasched-gpu-0"}],
    }
    assert "affinity" not in pod["spec"]


def test_off_is_the_default_and_answers_as_before() -> None:
    adm_default = admitter(kb())
    review, resp, _ = _answer("off", _two_containers())
    default = ask(adm_default, "pod", review, state())
    pod = applied(review, resp)
    assert ops_of(default) == ops_of(resp)
    assert pod["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "2"}}
    assert "affinity" in pod["spec"]


def test_a_request_that_cannot_be_moved_keeps_the_pod_on_node_affinity() -> None:
    asks = {"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "1"}}
    pod = builders.pod("llm", containers=[{"name": "main", "image": IMAGE, "resources": asks}])
    review, resp, _ = _answer("extended-resource", pod)
    after = applied(review, resp)
    assert after["spec"]["containers"][0]["resources"] == asks
    assert "affinity" in after["spec"]
    assert [w for w in resp["warnings"] if "node affinity kept" in w and "differ" in w]


def test_pods_without_nvidia_gpu_or_a_known_cuda_are_untouched() -> None:
    cpu = builders.pod("cpu", image=IMAGE, gpus=None)
    unknown = builders.pod("unknown", image="registry.local/mystery:1")
    answers = [_answer("extended-resource", p) for p in (cpu, unknown)]
    resources = [
        applied(review, resp)["spec"]["containers"][0].get("resources")
        for review, resp, _ in answers
    ]
    assert resources == [None, {"limits": {"nvidia.com/gpu": "1"}}]


def test_the_setting_is_off_by_default_and_names_its_modes() -> None:
    assert WebhookConfig().dra.mode is DraMode.OFF
    assert WebhookConfig.from_mapping({"dra": {"mode": "Claim"}}).dra.mode is DraMode.CLAIM
    with pytest.raises(InputError, match=r"dra\.mode: .*'extended-resource'"):
        WebhookConfig.from_mapping({"dra": {"mode": "plugin"}})


def _llmisvc(device_class: str | None, selectors: str | None = None) -> dict[str, Any]:
    obj = yaml.safe_load_all(Path("examples/qwen-llmisvc.yaml").read_text())
    service = next(d for d in obj if d)
    annotations = {L.ANN_CUDA_VERSION: "12.8"}
    if device_class is not None:
        annotations[MANAGED_DRA_DEVICE_CLASS] = device_class
    if selectors is not None:
        annotations[MANAGED_DRA_CEL_SELECTOR] = selectors
    service["metadata"]["annotations"] = annotations
    return service


def _selectors_after(mode: str, service: dict[str, Any]) -> str | None:
    review, resp, _ = _answer(mode, service, kind="llmisvc")
    after = applied(review, resp)["metadata"]["annotations"]
    return after.get(MANAGED_DRA_CEL_SELECTOR)


def test_an_llmisvc_managed_dra_claim_gets_the_class_selectors_added() -> None:
    theirs = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"'
    ours = device_class(
        Requirement(cuda=parse_cuda("12.8"), source="test"), Policy.STRICT, kb()
    ).obj["spec"]["selectors"]
    expected = "\n".join([theirs, *(s["cel"]["expression"] for s in ours)])
    added = _selectors_after("extended-resource", _llmisvc("gpu.nvidia.com", theirs))
    again = _selectors_after("claim", _llmisvc("gpu.nvidia.com", expected))
    untouched = [
        _selectors_after("off", _llmisvc("gpu.nvidia.com", theirs)),
        _selectors_after("claim", _llmisvc("mig.nvidia.com", theirs)),
        _selectors_after("claim", _llmisvc(None)),
    ]
    assert added == expected  # theirs kept first, every selector of the class added
    assert again == expected  # nothing added twice
    assert untouched == [theirs, theirs, None]


@pytest.mark.parametrize("mode", ["extended-resource", "claim"])
def test_a_declared_pod_admitted_again_keeps_its_class_and_gets_no_affinity(mode: str) -> None:
    pod = builders.pod(
        "llm", image="registry.local/own:1", annotations={L.ANN_CUDA_VERSION: "12.8"}
    )
    review, resp, adm = _answer(mode, pod)
    first = applied(review, resp)
    again = readmit(adm, "pod", review, first, state())
    other = builders.pod(
        "other", image="registry.local/own:1", annotations={L.ANN_CUDA_VERSION: "13.0"}
    )
    # Another requirement's class is not this pod's: node affinity as usual through the
    # extended resource; through a template's claims, none (each claim made for it is
    # narrowed to this pod's class too, claimrules).
    moved = applied(*_answer(mode, other)[:2])
    moved["metadata"]["annotations"][L.ANN_CUDA_VERSION] = "12.8"
    elsewhere = ask(adm, "pod", creation_review(moved, uid="uid-dra3"), state())
    assert "affinity" not in first["spec"] and ops_of(again) == []
    placed = applied(creation_review(moved, uid="uid-dra3"), elsewhere)
    assert ("affinity" in placed["spec"]) is (mode == "extended-resource")
    assert placed["metadata"]["annotations"][L.ANN_REQUIREMENT].startswith("cuda>=12.8")
