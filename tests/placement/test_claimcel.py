"""The policy's claim rewrite in CEL is the webhook's ``claim_rewrite``: on generated pods as
the API server hands them to admission (canonical quantities, requests defaulted from limits),
the operations the CEL builds are the webhook's, one for one, applied through jsonpatch they
give the same pod, a pod the webhook would leave to node affinity is left whole, and the
rewritten pod asks nothing more when the policy is run again. Checked with a CEL interpreter
(``tests/support/claimcel``); the ``JSONPatch`` values and the real API server are checked in
``tests/e2e/k8s137/test_e2e_deviceclasses.py``."""

from __future__ import annotations

import copy
from typing import Any

import celpy
import jsonpatch
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.placement.claimcel import DRA_ASKED
from cudasched.placement.drarequest import claim_rewrite, extended_resource_rewrite
from tests.support.claimcel import claim_cel

JSON = dict[str, Any]
CLASS = "gpu-cuda-12-8.cudasched.io"

# Canonical quantities (as the API server writes them): whole counts, a seven-digit one,
# zero, and a thousand (which it writes 1k).
_COUNT = st.sampled_from(["1", "2", "4", "10", "999999", "1000001", "0", "1k"])
_CLAIM_NAMES = st.sampled_from(["cudasched-gpu-0", "cudasched-gpu-2", "gpu", "cudasched-gpu-1"])


@st.composite
def _container(draw: st.DrawFn, name: str) -> JSON:
    container: JSON = {"name": name, "image": "i:1"}
    resources: JSON = {}
    if draw(st.booleans()):
        count = draw(_COUNT)
        # Mostly the API server's defaulting (the limit is the request); sometimes a pod that
        # names only requests, or limits and requests that differ.
        shape = draw(st.sampled_from(["both", "both", "both", "requests", "differ"]))
        resources["limits"] = {"cpu": "1"} if shape == "requests" else {"nvidia.com/gpu": count}
        other = draw(_COUNT) if shape == "differ" else count
        resources["requests"] = {"nvidia.com/gpu": other, "cpu": "1"}
    elif draw(st.booleans()):
        resources["limits"] = {"nvidia.com/mig-1g.10gb": "1"}
    if draw(st.booleans()):
        resources["claims"] = [{"name": "own"}]
    if resources:
        container["resources"] = resources
    return container


@st.composite
def _pods(draw: st.DrawFn) -> JSON:
    spec: JSON = {"containers": [draw(_container(f"c{i}")) for i in range(draw(st.integers(1, 3)))]}
    inits = [draw(_container(f"i{i}")) for i in range(draw(st.integers(0, 2)))]
    if inits:
        spec["initContainers"] = inits
    names = draw(st.lists(_CLAIM_NAMES, max_size=3, unique=True))
    if names:
        spec["resourceClaims"] = [{"name": n, "resourceClaimName": "c"} for n in names]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


@settings(max_examples=250, deadline=None)
@given(_pods())
def test_the_cel_claims_are_the_webhooks(pod: JSON) -> None:
    rewrite = claim_rewrite(pod["spec"], CLASS)
    found = claim_cel(pod, {"requirement": "r", "claimClass": CLASS})
    left = bool(rewrite.left)
    assert found["claimLeft"] is left
    assert found["claimOps"] == ([] if left else list(rewrite.ops))
    after = jsonpatch.apply_patch(pod, found["claimOps"])
    assert after == jsonpatch.apply_patch(pod, [] if left else list(rewrite.ops))
    again = claim_cel(after, {"requirement": "r", "claimClass": CLASS})
    assert again["claimOps"] == [] and (left or again["claimAsks"] == [])


def test_claim_names_skip_the_pods_own_and_counts_pick_the_template() -> None:
    gpus = [{"name": f"c{n}", "resources": {"limits": {"nvidia.com/gpu": n}}} for n in "12"]
    for container in gpus:
        container["resources"]["requests"] = dict(container["resources"]["limits"])
    pod = {
        "spec": {
            "containers": gpus,
            "resourceClaims": [{"name": "cudasched-gpu-0", "resourceClaimName": "x"}],
        }
    }
    found = claim_cel(pod, {"claimClass": CLASS})
    claims = [op["value"] for op in found["claimOps"] if op["path"] == "/spec/resourceClaims/-"]
    assert claims == [
        {"name": "cudasched-gpu-1", "resourceClaimTemplateName": CLASS},
        {"name": "cudasched-gpu-2", "resourceClaimTemplateName": f"x2.{CLASS}"},
    ]


def test_a_placement_without_a_claim_class_claims_nothing() -> None:
    pod = {
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    }
    found = claim_cel(copy.deepcopy(pod), {"requirement": "r", "deviceClass": CLASS})
    assert found == {"claimAsks": [], "claimLeft": False, "claimNames": [], "claimOps": []}


def _asked(pod: JSON) -> bool:
    env = celpy.Environment()
    program = env.program(env.compile(DRA_ASKED))
    return bool(program.evaluate({"object": celpy.json_to_cel(pod)}))


def test_a_pod_cudasched_asked_through_a_class_is_recognised_for_reinvocation() -> None:
    """A pod either spelling rewrote (and annotated) is left alone when the policy runs again;
    a pod before its rewrite, one without cudasched's requirement, or one whose own claim
    merely has the name, is not."""
    gpu = {"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "2"}}
    fresh = {
        "metadata": {"annotations": {"cudasched.io/requirement": "cuda>=12.8"}},
        "spec": {"containers": [{"name": "c", "resources": gpu}]},
    }
    moved = {
        mode: jsonpatch.apply_patch(fresh, list(rewrite(fresh["spec"], CLASS).ops))
        for mode, rewrite in (("claim", claim_rewrite), ("extended", extended_resource_rewrite))
    }
    bare = {**moved["claim"], "metadata": {}}
    named = copy.deepcopy(fresh)
    named["spec"]["resourceClaims"] = [{"name": "cudasched-gpu-0", "resourceClaimName": "x"}]
    found = {
        "fresh": _asked(fresh),
        **{f"moved by {mode}": _asked(pod) for mode, pod in moved.items()},
        "not annotated": _asked(bare),
        "a claim of its own": _asked(named),
    }
    assert found == {
        "fresh": False,
        "moved by claim": True,
        "moved by extended": True,
        "not annotated": False,
        "a claim of its own": False,
    }
