"""A pod's ResourceClaim narrowed to its CUDA-aware class: the patch applies as the API server
applies it, only adds selectors (never removes, replaces or recounts), touches only GPU
requests of another class, and adds nothing the second time."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import kubernetes_validate
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.placement.claimnarrow import MAX_SELECTORS, narrow_claim, narrowed_class

OWN = "gpu-cuda-12-8.cudasched.io"
SELECTORS = (
    'device.driver == "gpu.nvidia.com"',
    'device.attributes["gpu.nvidia.com"].cudaDriverVersion.isGreaterThan(semver("12.8.0"))',
)
CLASSES = ("gpu.nvidia.com", OWN, "gpu-cuda-12-4.cudasched.io", "mig.nvidia.com", "x.example.com")

_selector = st.sampled_from([*SELECTORS, "device.driver != ''", "true"]).map(
    lambda e: {"cel": {"expression": e}}
)
_selectors = st.one_of(st.none(), st.lists(_selector, max_size=3))


@st.composite
def _body(draw: st.DrawFn, sub: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": draw(st.sampled_from(CLASSES))}
    selectors = draw(_selectors)
    if selectors is not None:
        body["selectors"] = selectors
    if draw(st.booleans()):
        body["count"] = draw(st.integers(1, 4))
    if sub:
        body["name"] = draw(st.sampled_from(["a", "b"]))
    return body


@st.composite
def _spec(draw: st.DrawFn) -> dict[str, Any]:
    requests = []
    for i in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            requests.append({"name": f"r{i}", "exactly": draw(_body(False))})
        else:
            subs = draw(st.lists(_body(True), min_size=1, max_size=3))
            requests.append({"name": f"r{i}", "firstAvailable": subs})
    return {"devices": {"requests": requests}}


def _bodies(spec: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for request in spec["devices"]["requests"]:
        if "exactly" in request:
            found.append(request["exactly"])
        found.extend(request.get("firstAvailable", ()))
    return found


def _applied(spec: dict[str, Any]) -> dict[str, Any]:
    claim = {"spec": spec}
    ops = list(narrow_claim(spec, SELECTORS, OWN).ops)
    return jsonpatch.apply_patch(claim, ops)["spec"]  # type: ignore[no-any-return]


@settings(max_examples=200, deadline=None)
@given(_spec())
def test_the_patch_applies_only_adds_selectors_and_is_idempotent(spec: dict[str, Any]) -> None:
    before = copy.deepcopy(spec)
    after = _applied(spec)
    pairs = list(zip(_bodies(before), _bodies(after), strict=True))
    kept = [
        {k: v for k, v in a.items() if k != "selectors"}
        == {k: v for k, v in b.items() if k != "selectors"}
        and (b.get("selectors") or [])[: len(a.get("selectors") or [])]
        == (a.get("selectors") or [])
        for a, b in pairs
    ]
    narrowed_right = [
        {s["cel"]["expression"] for s in b.get("selectors") or []} >= set(SELECTORS)
        if narrowed_class(a["deviceClassName"], OWN)
        else a == b
        for a, b in pairs
    ]
    assert all(kept), "a selector, count or class changed"
    assert all(narrowed_right)
    assert spec == before, "the reviewed object itself is not changed"
    assert narrow_claim(after, SELECTORS, OWN).ops == ()
    assert len(after["devices"]["requests"]) == len(before["devices"]["requests"])


def test_the_narrowed_claim_is_valid_kubernetes_1_37() -> None:
    spec = {
        "devices": {
            "requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}},
                {
                    "name": "any",
                    "firstAvailable": [
                        {"name": "big", "deviceClassName": "gpu.nvidia.com", "selectors": []},
                        {"name": "mig", "deviceClassName": "mig.nvidia.com"},
                    ],
                },
            ]
        }
    }
    after = _applied(spec)
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "p-gpu-abcde", "namespace": "default"},
        "spec": after,
    }
    kubernetes_validate.validate(claim, "1.37", strict=True)
    gpu = after["devices"]["requests"][0]["exactly"]
    big, mig = after["devices"]["requests"][1]["firstAvailable"]
    assert [s["cel"]["expression"] for s in gpu["selectors"]] == list(SELECTORS)
    assert [s["cel"]["expression"] for s in big["selectors"]] == list(SELECTORS)
    assert gpu["count"] == 2
    assert "selectors" not in mig


def test_a_request_of_the_pods_own_class_or_another_vendors_is_untouched() -> None:
    spec = {
        "devices": {
            "requests": [
                {"name": "own", "exactly": {"deviceClassName": OWN}},
                {"name": "fpga", "exactly": {"deviceClassName": "fpga.example.com"}},
            ]
        }
    }
    assert narrow_claim(spec, SELECTORS, OWN).ops == ()


def test_a_request_that_would_pass_the_api_limit_is_left_with_a_reason() -> None:
    full = [{"cel": {"expression": f"true || {i} > 0"}} for i in range(MAX_SELECTORS - 1)]
    spec = {
        "devices": {
            "requests": [
                {"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "selectors": full}}
            ]
        }
    }
    result = narrow_claim(spec, SELECTORS, OWN)
    assert result.ops == ()
    assert result.left == (f"g: more than {MAX_SELECTORS} selectors with the class's",)
