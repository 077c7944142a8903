"""The pod key in CEL is the pod key in Python: the MutatingAdmissionPolicy finds a pod's
placement under the key the controller wrote it. Checked with a CEL interpreter (celpy, with the
three Kubernetes string and list functions the key uses) on generated pods, as the API server
sees them after its defaulting (a GPU limit is also the request). The real API server agrees
too (``tests/e2e/k8s137``)."""

from __future__ import annotations

import copy
from typing import Any

import celpy
from celpy import celtypes
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.vocab import labels as L
from cudasched.workloads.policykey import (
    ANNOTATION_KEYS,
    LABEL_KEYS,
    key_expression,
    key_pod,
    pod_key,
)

JSON = dict[str, Any]

_FUNCTIONS = {
    "replace": lambda s, a, b: celtypes.StringType(str(s).replace(str(a), str(b))),
    "sort": lambda items: celtypes.ListType(sorted(items)),
    "join": lambda items, sep: celtypes.StringType(str(sep).join(str(x) for x in items)),
}
_ENV = celpy.Environment()
_KEY = _ENV.program(_ENV.compile(key_expression()), functions=_FUNCTIONS)

# Values with every separator the key escapes, and the escape character itself.
_TEXT = st.text(alphabet="ab1.-/|&;,=%~ ", min_size=0, max_size=8)
_QUANTITY = st.sampled_from(["0", "1", "2", "10", "00"])
_GPU = st.sampled_from(["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/gpu.shared"])


@st.composite
def _containers(draw: st.DrawFn, init: bool = False) -> list[JSON]:
    out = []
    for i in range(draw(st.integers(0 if init else 1, 3))):
        container: JSON = {"name": f"c{i}" if init else draw(_TEXT) or f"c{i}"}
        if draw(st.booleans()):
            container["image"] = draw(_TEXT) or "img"
        limits = draw(st.dictionaries(_GPU, _QUANTITY, max_size=2))
        extra = draw(st.dictionaries(_GPU, _QUANTITY, max_size=1))
        if draw(st.booleans()):
            limits["cpu"] = "100m"
        resources: JSON = {}
        if limits:
            resources["limits"] = limits
        requests = {**{k: v for k, v in limits.items() if k != "cpu"}, **extra}
        if requests:
            resources["requests"] = requests
        if resources:
            container["resources"] = resources
        names = st.sampled_from(
            ["NVIDIA_REQUIRE_CUDA", "NVIDIA_REQUIRE_DRIVER", "CUDA_VERSION", "PATH"]
        )
        env = draw(st.lists(st.tuples(names, st.one_of(st.none(), _TEXT)), max_size=3))
        if env:
            container["env"] = [{"name": n, **({"value": v} if v else {})} for n, v in env]
        out.append(container)
    return out


@st.composite
def _pods(draw: st.DrawFn) -> JSON:
    keys = [*LABEL_KEYS, "app"]
    labels = draw(st.dictionaries(st.sampled_from(keys), _TEXT, max_size=3))
    notes = [*ANNOTATION_KEYS, L.ANN_SKIP, L.ANN_REQUIREMENT, "cudasched.io/other", "x"]
    annotations = draw(st.dictionaries(st.sampled_from(notes), _TEXT, max_size=3))
    spec: JSON = {
        "serviceAccountName": draw(st.sampled_from(["default", "sa-1"])),
        "containers": draw(_containers()),
    }
    inits = draw(_containers(init=True))
    if inits:
        spec["initContainers"] = inits
    secrets = draw(st.lists(st.one_of(st.none(), st.sampled_from(["s1", "s2"])), max_size=2))
    if secrets:
        spec["imagePullSecrets"] = [{"name": s} if s else {} for s in secrets]
    if draw(st.booleans()):
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "c"}]
    meta: JSON = {"name": "p"}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _cel_key(pod: JSON, namespace: str) -> str:
    activation = {
        "object": celpy.json_to_cel(pod),
        "request": celpy.json_to_cel({"namespace": namespace}),
    }
    return str(_KEY.evaluate(activation))


@settings(max_examples=300, deadline=None)
@given(_pods(), st.sampled_from(["ns", "team|a", "x=y"]))
def test_the_cel_key_is_the_python_key(pod: JSON, namespace: str) -> None:
    assert _cel_key(pod, namespace) == pod_key(pod, namespace)


@settings(max_examples=200, deadline=None)
@given(_pods())
def test_the_key_pod_has_the_pods_key(pod: JSON) -> None:
    rebuilt = key_pod(pod, "ns")
    assert pod_key(rebuilt, "ns") == pod_key(pod, "ns")


def test_a_template_gets_the_key_its_pods_will_have() -> None:
    """Before admission the API server defaults a GPU limit into the request and names the
    ServiceAccount; a template read from a controller has neither, and the same key."""
    template = {
        "metadata": {"labels": {"app": "x"}},
        "spec": {
            "containers": [
                {"name": "m", "image": "i:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ]
        },
    }
    admitted = copy.deepcopy(template)
    admitted["spec"]["serviceAccountName"] = "default"
    admitted["spec"]["containers"][0]["resources"]["requests"] = {"nvidia.com/gpu": "1"}
    assert pod_key(template, "ns") == pod_key(admitted, "ns") == _cel_key(admitted, "ns")
