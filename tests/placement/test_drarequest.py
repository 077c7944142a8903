"""A pod's ``nvidia.com/gpu: N`` asked through a CUDA-aware class: the patch applies as the API
server applies it, keeps N, changes nothing else, and adds nothing the second time."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cudasched.cli import app
from cudasched.placement.deviceclass import EXTENDED_RESOURCE_PREFIX
from cudasched.placement.drarequest import (
    claim_rewrite,
    claim_template_name,
    class_claim_template,
    extended_resource_rewrite,
)
from cudasched.vocab.kserve import NVIDIA_GPU

CLASS = "gpu-cuda-12-8.cudasched.io"
KEY = EXTENDED_RESOURCE_PREFIX + CLASS
OTHER = ("cpu", "memory", "nvidia.com/mig-1g.10gb", "example.com/fpga")

_gpu = st.one_of(
    st.integers(1, 8), st.sampled_from(["1", "2", " 4", "0", "1.5", "x", "100m"]), st.just(True)
)
_other = st.dictionaries(st.sampled_from(OTHER), st.sampled_from(["1", "2Gi", 3]), max_size=2)


@st.composite
def _resources(draw: st.DrawFn) -> dict[str, Any]:
    out: dict[str, Any] = {}
    gpu = draw(st.one_of(st.none(), _gpu))
    for part in ("limits", "requests"):
        if draw(st.booleans()):
            values = dict(draw(_other))
            if gpu is not None and draw(st.integers(0, 3)):
                values[NVIDIA_GPU] = gpu if draw(st.integers(0, 5)) else draw(_gpu)
            if draw(st.integers(0, 9)) == 0:
                values[KEY] = 1
            out[part] = values
    if draw(st.integers(0, 4)) == 0:
        out["claims"] = [{"name": "mine"}]
    return out


@st.composite
def _spec(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    for field, most in (("initContainers", 2), ("containers", 3)):
        n = draw(st.integers(0 if field == "initContainers" else 1, most))
        if n:
            spec[field] = [
                {"name": f"{field[:4]}{i}", "image": "x", "resources": draw(_resources())}
                for i in range(n)
            ]
    if draw(st.booleans()):
        spec["resourceClaims"] = [{"name": "cudasched-gpu-0", "resourceClaimName": "theirs"}]
    return spec


def _pod(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod["spec"]
    return [*spec.get("initContainers", ()), *spec["containers"]]


def _without_gpu_keys(container: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(container)
    for part in ("limits", "requests"):
        for key in (NVIDIA_GPU, KEY):
            out.get("resources", {}).get(part, {}).pop(key, None)
    out.get("resources", {}).pop("claims", None)
    return out


@settings(max_examples=300, deadline=None)
@given(_spec())
def test_extended_resource_moves_exactly_the_gpus_and_is_idempotent(spec: dict[str, Any]) -> None:
    pod = _pod(spec)
    before = copy.deepcopy(pod)
    rewrite = extended_resource_rewrite(spec, CLASS)
    after = jsonpatch.apply_patch(pod, list(rewrite.ops))
    assert pod == before  # the reviewed object is never changed in place
    again = extended_resource_rewrite(after["spec"], CLASS)
    moved = [
        (old, new)
        for old, new in zip(_containers(before), _containers(after), strict=True)
        if old != new
    ]
    # Nothing but the GPU keys changes; each moved container asks as many GPUs as before, by
    # the class's name, in the same parts, and no longer asks nvidia.com/gpu.
    assert all(_without_gpu_keys(o) == _without_gpu_keys(n) for o, n in moved)
    assert all(
        {p: v[NVIDIA_GPU] for p, v in o["resources"].items() if p != "claims" and NVIDIA_GPU in v}
        == {p: v[KEY] for p, v in n["resources"].items() if p != "claims" and KEY in v}
        for o, n in moved
    )
    assert len(moved) == len(rewrite.moved)
    assert {k: v for k, v in after.items() if k != "spec"} == {
        k: v for k, v in before.items() if k != "spec"
    }
    assert again.ops == () and again.moved == ()


@settings(max_examples=300, deadline=None)
@given(_spec())
def test_claim_mode_gives_each_container_its_own_claim_of_its_count(spec: dict[str, Any]) -> None:
    pod = _pod(spec)
    before = copy.deepcopy(pod)
    rewrite = claim_rewrite(spec, CLASS)
    after = jsonpatch.apply_patch(pod, list(rewrite.ops))
    again = claim_rewrite(after["spec"], CLASS)
    claims = {c["name"]: c for c in after["spec"].get("resourceClaims", ())}
    ours = {n: c for n, c in claims.items() if c not in before["spec"].get("resourceClaims", [])}
    moved = [
        (old, new)
        for old, new in zip(_containers(before), _containers(after), strict=True)
        if old != new
    ]
    asked = sorted(
        claim_template_name(CLASS, int(str(next(iter(gpus))).strip()))
        for o, _ in moved
        for gpus in [
            {v[NVIDIA_GPU] for p, v in o["resources"].items() if p != "claims" and NVIDIA_GPU in v}
        ]
    )
    consumed = [c["name"] for _, n in moved for c in n["resources"]["claims"] if c["name"] in ours]
    assert all(_without_gpu_keys(o) == _without_gpu_keys(n) for o, n in moved)
    assert sorted(c["resourceClaimTemplateName"] for c in ours.values()) == asked
    assert sorted(consumed) == sorted(ours)  # one container per claim, every claim consumed
    assert len(claims) == len(before["spec"].get("resourceClaims", ())) + len(ours)
    assert again.ops == ()


def test_a_pod_without_nvidia_gpu_is_left_alone() -> None:
    spec = {
        "containers": [
            {"name": "a", "resources": {"limits": {"nvidia.com/mig-1g.10gb": 1, "cpu": "2"}}},
            {"name": "b"},
        ]
    }
    assert extended_resource_rewrite(spec, CLASS).ops == ()
    assert claim_rewrite(spec, CLASS).ops == ()


def test_the_extended_resource_patch_in_full() -> None:
    spec = {
        "initContainers": [{"name": "warm", "resources": {"limits": {NVIDIA_GPU: "1"}}}],
        "containers": [
            {"name": "main", "resources": {"limits": {NVIDIA_GPU: 2, "cpu": "4"}}},
            {"name": "odd", "resources": {"limits": {NVIDIA_GPU: "0.5"}}},
        ],
    }
    rewrite = extended_resource_rewrite(spec, CLASS)
    key = "deviceclass.resource.kubernetes.io~1gpu-cuda-12-8.cudasched.io"
    assert list(rewrite.ops) == [
        {"op": "remove", "path": "/spec/initContainers/0/resources/limits/nvidia.com~1gpu"},
        {"op": "add", "path": f"/spec/initContainers/0/resources/limits/{key}", "value": "1"},
        {"op": "remove", "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu"},
        {"op": "add", "path": f"/spec/containers/0/resources/limits/{key}", "value": 2},
    ]
    assert rewrite.moved == ("initContainers/warm", "containers/main")
    assert rewrite.left == (
        "containers/odd: nvidia.com/gpu: '0.5' is not a whole number of GPUs above zero",
    )


def test_claim_template_names_carry_the_count() -> None:
    assert claim_template_name(CLASS, 1) == CLASS
    assert claim_template_name(CLASS, 8) == f"x8.{CLASS}"
    with pytest.raises(ValueError):
        claim_template_name("Not A Name", 1)


def test_claim_templates_are_valid_and_name_what_claim_mode_refers_to() -> None:
    templates = [class_claim_template(CLASS, n) for n in (1, 4)]
    for template in templates:
        kubernetes_validate.validate(template, "1.37", strict=True)
    spec = {"containers": [{"name": "m", "resources": {"limits": {NVIDIA_GPU: "4"}}}]}
    referred = claim_rewrite(spec, CLASS).ops[-1]["value"][0]["resourceClaimTemplateName"]
    assert [t["metadata"]["name"] for t in templates] == [CLASS, referred]
    assert templates[1]["spec"]["spec"]["devices"]["requests"] == [
        {"name": "gpu", "exactly": {"deviceClassName": CLASS, "count": 4}}
    ]


def test_device_classes_prints_the_claim_templates_asked() -> None:
    done = CliRunner().invoke(app, ["device-classes", "--cuda", "12.8", "--claim-templates", "1,2"])
    as_json = CliRunner().invoke(
        app, ["device-classes", "--cuda", "12.8", "--claim-templates", "2", "-o", "json"]
    )
    wrong = CliRunner().invoke(app, ["device-classes", "--cuda", "12.8", "--claim-templates", "0"])
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("DeviceClass", CLASS),
        ("ResourceClaimTemplate", CLASS),
        ("ResourceClaimTemplate", f"x2.{CLASS}"),
    ]
    entry = json.loads(as_json.stdout)["deviceClasses"][0]
    assert entry["claimTemplates"] == [class_claim_template(CLASS, 2)]
    assert wrong.exit_code == 2 and "--claim-templates" in wrong.output
