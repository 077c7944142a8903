"""Work limits per admission request and the byte-bounded memos (issue 13, items 1 and 3).

Pure tests of the Admitter: each limit is crossed by the shape that exploits it and answered at
once by the failure mode (code 400 when failClosed denies), objects at realistic sizes are
decided as before, and the memos hold at most their budget in bytes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cudasched.cluster.snapshot import bundled_snapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.settings.config import ObjectLimits, WebhookConfig
from cudasched.webhook.admission.admitter import Admitter
from cudasched.webhook.admission.limits import (
    MAX_DEPTH,
    body_over_limits,
    nesting_bounded,
    over_limits,
    small_body_checks,
    too_deep,
)
from cudasched.webhook.admission.review import BadReviewError
from cudasched.webhook.memo.bounded import ENTRY_OVERHEAD, BoundedMemo
from cudasched.webhook.state.clusterstate import ClusterState

DATA = Path(__file__).parents[2] / "data" / "admission"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


@pytest.fixture(scope="module")
def state(kb: KnowledgeBase) -> ClusterState:
    return ClusterState.from_snapshot(bundled_snapshot(), kb=kb)


def review(change: Any = None) -> dict[str, Any]:
    doc = json.loads((DATA / "pod-predictor-triton.json").read_text(encoding="utf-8"))
    if change is not None:
        change(doc["request"]["object"])
    return doc


def encode(doc: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(doc)
    except orjson.JSONEncodeError:
        return json.dumps(doc, separators=(",", ":")).encode()


def _affinity(pod: dict[str, Any], terms: list[Any]) -> None:
    pod["spec"]["affinity"] = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": terms}}}


def _deep(pod: dict[str, Any]) -> None:
    value: Any = "x"
    for _ in range(300):
        value = {"a": value}
    pod["metadata"]["annotations"]["deep"] = value


def _containers(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"] *= 10_001


def _terms(pod: dict[str, Any]) -> None:
    term = {"matchExpressions": [{"key": "k", "operator": "Exists"}]}
    _affinity(pod, [term] * 1_001)


def _preferred(pod: dict[str, Any]) -> None:
    item = {"weight": 1, "preference": {"matchExpressions": [{"key": "k", "operator": "Exists"}]}}
    pod["spec"]["affinity"] = {"nodeAffinity": {PREFERRED: [item] * 1_001}}


def _expressions(pod: dict[str, Any]) -> None:
    _affinity(pod, [{"matchExpressions": [{"key": "k", "operator": "Exists"}] * 10_001}])


def _values(pod: dict[str, Any]) -> None:
    expr = {"key": "k", "operator": "In", "values": [str(i) for i in range(100_001)]}
    _affinity(pod, [{"matchExpressions": [expr]}])


def _many_values(pod: dict[str, Any]) -> None:
    pod["metadata"]["annotations"]["x"] = [{}] * 300_000 + [[]] * 300_001


OVER = {
    "depth": (_deep, "nested deeper than 254 levels"),
    "containers": (_containers, "containers (at most 10,000)"),
    "terms": (_terms, "node-selector terms (at most 1,000)"),
    "preferred": (_preferred, "node-selector terms (at most 1,000)"),
    "expressions": (_expressions, "selector expressions (at most 10,000)"),
    "values": (_values, "selector values (at most 100,000)"),
    "all-values": (_many_values, "more than 600,000 values"),
}


@pytest.mark.parametrize("name", sorted(OVER))
@pytest.mark.parametrize("fail_closed", [False, True])
def test_over_limit_objects_get_the_failure_answer(
    kb: KnowledgeBase, state: ClusterState, name: str, fail_closed: bool
) -> None:
    change, phrase = OVER[name]
    admitter = Admitter.from_config(WebhookConfig(failClosed=fail_closed), kb=kb)
    doc = review(change)
    decision = admitter.decide("pod", encode(doc), state)
    assert decision.reason == "over limits", decision
    assert phrase in decision.warnings[0]
    assert decision.allowed is not fail_closed
    if fail_closed:
        assert decision.code == 400
    response = orjson.loads(admitter.review("pod", encode(doc), state))["response"]
    assert response["uid"] == doc["request"]["uid"] and "patch" not in response


def test_small_bodies_are_judged_from_their_bytes() -> None:
    """An ordinary review needs no full count (its braces and commas bound every count), only
    the nesting check; a small body dense in braces gets the count."""
    limits = ObjectLimits()
    assert not small_body_checks(encode(review()), limits)
    dense = review(lambda pod: _affinity(pod, [{}] * 2_000))
    assert small_body_checks(encode(dense), limits)
    assert too_deep(review(_deep)["request"]["object"]) == "object nested deeper than 254 levels"
    assert too_deep(review()["request"]["object"]) is None


@pytest.mark.parametrize("memo", [True, False])
def test_deep_small_objects_are_refused_with_or_without_the_memo(
    kb: KnowledgeBase, state: ClusterState, memo: bool
) -> None:
    config = WebhookConfig.from_mapping({} if memo else {"decisionCacheBytes": 0})
    admitter = Admitter.from_config(config, kb=kb)
    body = encode(review(_deep))
    assert len(body) < 65_536 and not admitter.prepare("pod", body).full_count
    answer = orjson.loads(admitter.review("pod", body, state))["response"]
    assert "nested deeper than 254 levels" in answer["warnings"][0]


def test_objects_at_realistic_sizes_are_decided(kb: KnowledgeBase, state: ClusterState) -> None:
    admitter = Admitter.from_config(WebhookConfig(), kb=kb)
    doc = review(
        lambda pod: _affinity(
            pod, [{"matchExpressions": [{"key": "k", "operator": "Exists"}]}] * 20
        )
    )
    decision = admitter.decide("pod", encode(doc), state)
    assert decision.reason != "over limits" and decision.outcome == "patched"
    assert over_limits(doc["request"]["object"], ObjectLimits()) is None


def test_a_body_over_the_value_limit_is_answered_without_decoding(
    kb: KnowledgeBase, state: ClusterState
) -> None:
    """The raw body is judged first: written like the API server writes reviews, it is
    answered from its uid alone; in any other layout there is no uid to answer with (400)."""
    admitter = Admitter.from_config(WebhookConfig(), kb=kb)
    doc = review(_many_values)
    body = encode(doc)
    assert body_over_limits(body, ObjectLimits()) is not None
    prepared = admitter.prepare("pod", body)
    assert prepared.problem is not None and prepared.request.obj is None
    response = orjson.loads(admitter.answer(prepared, state)[0])["response"]
    assert response["uid"] == doc["request"]["uid"]
    reordered = json.dumps(
        {"request": doc["request"], **{k: v for k, v in doc.items() if k != "request"}}
    )
    with pytest.raises(BadReviewError, match="too complex"):
        admitter.prepare("pod", reordered.encode())


def test_limits_are_settings(kb: KnowledgeBase, state: ClusterState) -> None:
    tight = WebhookConfig.from_mapping({"limits": {"maxTerms": 10}})
    doc = review(
        lambda pod: _affinity(
            pod, [{"matchExpressions": [{"key": "k", "operator": "Exists"}]}] * 20
        )
    )
    assert (
        Admitter.from_config(tight, kb=kb).decide("pod", encode(doc), state).reason == "over limits"
    )
    with pytest.raises(Exception, match="maxTerms"):
        WebhookConfig.from_mapping({"limits": {"maxTerms": 1}})


def test_bounded_memo_holds_at_most_its_budget() -> None:
    memo: BoundedMemo[bytes, bytes | None] = BoundedMemo(64 * 1024)
    used = []
    for i in range(1_000):
        key = b"k%d" % i
        if memo.get(key) is None:  # looked up first, as every caller does
            memo.put(key, b"v" * 1000, 1000)
        used.append(memo.bytes_used)
    assert max(used) <= memo.entry_budget < 64 * 1024  # the sketch is part of the budget
    assert 0 < len(memo) <= 64 * 1024 // (1000 + ENTRY_OVERHEAD)
    for _ in range(10):  # a key asked for again and again gets in (issue 22's policy)
        memo.get(b"hot")
    assert memo.put(b"hot", b"v" * 1000, 1000)
    assert memo.get(b"hot") == (b"v" * 1000,)
    assert not memo.put(b"big", b"x", 64 * 1024 // 8)  # one entry never takes an eighth
    memo.put(b"none", None, 0)
    assert memo.get(b"none") == (None,)  # a remembered None is not a miss
    off: BoundedMemo[str, int] = BoundedMemo(0)
    assert not off.put("a", 1, 0) and off.get("a") is None


def test_admitter_memos_are_bounded_in_bytes(kb: KnowledgeBase, state: ClusterState) -> None:
    """Distinct pods with large affinities fill the merge memo up to its byte budget, never
    beyond (it used to keep 4,096 entries of any size)."""
    budget = 1024 * 1024
    config = WebhookConfig.from_mapping(
        {"affinityCacheBytes": budget, "selectorCacheBytes": budget}
    )
    admitter = Admitter.from_config(config, kb=kb)
    for i in range(120):
        expr = {
            "key": "example.com/rack",
            "operator": "In",
            "values": [f"r{i}-{j}" for j in range(600)],
        }
        doc = review(lambda pod, e=expr: _affinity(pod, [{"matchExpressions": [e]}]))
        doc["request"]["uid"] = f"u{i}"
        admitter.review("pod", encode(doc), state)
        assert admitter.placer.merged.bytes_used <= budget
        assert admitter.placer.compiled.bytes_used <= budget
    assert 0 < len(admitter.placer.merged) < 120


def _nested(depth: int, shape: str, text: str) -> Any:
    value: Any = text
    for level in range(depth):
        value = {"k": value} if shape[level % len(shape)] == "d" else [value]
    return value


@given(
    st.integers(min_value=0, max_value=2 * MAX_DEPTH),
    st.text(alphabet="dl", min_size=1, max_size=4),
    st.text(alphabet='{[]}",x', max_size=20),
)
def test_a_body_whose_brackets_bound_its_nesting_is_never_too_deep(
    depth: int, shape: str, text: str
) -> None:
    """Issue 22: a first-seen pod skips the serialisation that checks its nesting when its
    bytes prove it (brackets inside strings only make the count larger)."""
    obj = _nested(depth, shape, text)
    body = json.dumps(obj, separators=(",", ":")).encode()
    if nesting_bounded(body):
        assert too_deep(obj) is None
    if depth > MAX_DEPTH:
        assert not nesting_bounded(body)
