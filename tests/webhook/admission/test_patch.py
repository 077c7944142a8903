"""The JSON patch builder: escaping, parents, minimality, and "always applies" (property)."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.webhook.admission.patch import Scope, diff, escape, pointer, unescape

ANN = Scope(("metadata", "annotations"))
AFF = Scope(("spec", "affinity"))


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("plain", "plain"),
        ("nvidia.com/gpu", "nvidia.com~1gpu"),
        ("a~b", "a~0b"),
        ("~/", "~0~1"),
        ("/~1", "~1~01"),
        ("", ""),
    ],
)
def test_escape_round_trip(raw: str, escaped: str) -> None:
    assert escape(raw) == escaped
    assert unescape(escaped) == raw


def test_pointer() -> None:
    assert pointer(()) == ""
    assert pointer(("metadata", "annotations", "cudasched.io/requirement")) == (
        "/metadata/annotations/cudasched.io~1requirement"
    )
    assert pointer(("spec", "containers", 0)) == "/spec/containers/0"


def test_missing_parent_is_added_whole() -> None:
    original = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
    mutated = copy.deepcopy(original)
    mutated["metadata"]["annotations"] = {"cudasched.io/requirement": "cuda>=12.4"}
    mutated["spec"]["affinity"] = {"nodeAffinity": {"x": 1}}
    ops = diff(original, mutated, [ANN, AFF])
    assert ops == [
        {
            "op": "add",
            "path": "/metadata/annotations",
            "value": {"cudasched.io/requirement": "cuda>=12.4"},
        },
        {"op": "add", "path": "/spec/affinity", "value": {"nodeAffinity": {"x": 1}}},
    ]
    assert jsonpatch.apply_patch(original, ops) == mutated


def test_missing_grandparent_is_added_whole() -> None:
    original: dict[str, Any] = {"spec": {}}
    mutated = {"spec": {"predictor": {"affinity": {"nodeAffinity": {}}}}}
    ops = diff(original, mutated, [Scope(("spec", "predictor", "affinity"))])
    assert ops == [{"op": "add", "path": "/spec/predictor", "value": mutated["spec"]["predictor"]}]
    assert jsonpatch.apply_patch(original, ops) == mutated


def test_existing_affinity_replaces_only_node_affinity() -> None:
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}}
    original = {"spec": {"affinity": {**anti, "nodeAffinity": {"old": True}}}}
    mutated = {"spec": {"affinity": {**anti, "nodeAffinity": {"new": True}}}}
    ops = diff(original, mutated, [AFF])
    assert ops == [{"op": "replace", "path": "/spec/affinity/nodeAffinity", "value": {"new": True}}]
    original2 = {"spec": {"affinity": anti}}
    ops2 = diff(original2, mutated, [AFF])
    assert ops2 == [{"op": "add", "path": "/spec/affinity/nodeAffinity", "value": {"new": True}}]
    assert jsonpatch.apply_patch(original2, ops2) == mutated


def test_annotation_ops_are_per_key_and_escaped() -> None:
    original = {"metadata": {"annotations": {"a/b": "1", "x~y": "2", "gone": "3"}}}
    mutated = {"metadata": {"annotations": {"a/b": "1", "x~y": "22", "n/new": "v"}}}
    ops = diff(original, mutated, [ANN])
    assert ops == [
        {"op": "remove", "path": "/metadata/annotations/gone"},
        {"op": "add", "path": "/metadata/annotations/n~1new", "value": "v"},
        {"op": "replace", "path": "/metadata/annotations/x~0y", "value": "22"},
    ]
    assert jsonpatch.apply_patch(original, ops) == mutated


def test_null_parent_is_replaced_not_walked_into() -> None:
    original = {"spec": {"affinity": None}}
    mutated = {"spec": {"affinity": {"nodeAffinity": {}}}}
    ops = diff(original, mutated, [AFF])
    assert ops == [{"op": "replace", "path": "/spec/affinity", "value": {"nodeAffinity": {}}}]
    assert jsonpatch.apply_patch(original, ops) == mutated


def test_no_change_no_ops_and_untouched_fields_ignored() -> None:
    original = {"metadata": {"annotations": {"k": "v"}}, "spec": {"nodeSelector": {"a": "b"}}}
    mutated = copy.deepcopy(original)
    mutated["spec"]["nodeSelector"] = {"changed": "outside scope"}
    assert diff(original, mutated, [ANN, AFF]) == []


def test_type_change_is_replaced() -> None:
    original = {"metadata": {"annotations": {"k": 1}}}
    mutated = {"metadata": {"annotations": {"k": "1"}}}
    assert diff(original, mutated, [ANN]) == [
        {"op": "replace", "path": "/metadata/annotations/k", "value": "1"}
    ]


def test_removed_scope_root() -> None:
    original = {"spec": {"affinity": {"nodeAffinity": {}}}}
    mutated: dict[str, Any] = {"spec": {}}
    ops = diff(original, mutated, [AFF])
    assert ops == [{"op": "remove", "path": "/spec/affinity"}]
    assert jsonpatch.apply_patch(original, ops) == mutated


# --------------------------------------------------------------------------- properties

_keys = st.text(alphabet="ab/~.-_", min_size=1, max_size=6)
_scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=4))
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_keys, inner, max_size=3)),
    max_leaves=8,
)
_maybe_map = st.one_of(st.none(), _scalars, st.dictionaries(_keys, _values, max_size=4))


def _doc(annotations: Any, affinity: Any, with_spec: bool, with_meta: bool) -> dict[str, Any]:
    doc: dict[str, Any] = {"kind": "Pod"}
    if with_meta:
        doc["metadata"] = {} if annotations is None else {"annotations": annotations}
    if with_spec:
        doc["spec"] = {"containers": []} if affinity is None else {"affinity": affinity}
    return doc


@settings(max_examples=100, deadline=None)
@given(
    a1=_maybe_map,
    a2=st.dictionaries(_keys, _values, max_size=4),
    f1=_maybe_map,
    f2=st.dictionaries(_keys, _values, max_size=4),
    s1=st.booleans(),
    m1=st.booleans(),
)
def test_patch_always_applies_and_reaches_target(
    a1: Any, a2: dict[str, Any], f1: Any, f2: dict[str, Any], s1: bool, m1: bool
) -> None:
    original = _doc(a1, f1, s1, m1)
    mutated = copy.deepcopy(original)
    mutated.setdefault("metadata", {})
    if not isinstance(mutated["metadata"], dict):
        mutated["metadata"] = {}
    mutated["metadata"]["annotations"] = a2
    mutated.setdefault("spec", {})
    mutated["spec"]["affinity"] = f2
    ops = diff(original, mutated, [ANN, AFF])
    patched = jsonpatch.apply_patch(original, ops)  # raises if any op does not apply
    assert patched == mutated
    # Deterministic, and applying the result again yields nothing to do.
    assert diff(original, mutated, [ANN, AFF]) == ops
    assert diff(patched, mutated, [ANN, AFF]) == []


def test_json_types_are_compared_strictly() -> None:
    original = {"metadata": {"annotations": {"k": {"x": 1}}}}
    mutated = {"metadata": {"annotations": {"k": {"x": True}}}}
    ops = diff(original, mutated, [ANN])
    assert ops == [{"op": "replace", "path": "/metadata/annotations/k", "value": {"x": True}}]
