"""Remembered answers found from review bodies: the raw-body fast path (a body laid out like the
API server's is looked up by the bytes after its uid, without decoding) is only ever taken when
it gives exactly the answer a fresh decision gives, and the answer template splices each
request's own uid.

The reference for every Admitter check is an Admitter with the memo turned off
(``decisionCacheBytes: 0``) deciding the same bytes.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cudasched.cluster.snapshot import ClusterSnapshot, bundled_snapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.webhook.admission.recall import (
    MEMO_MAX_BODY_BYTES,
    RememberedAnswers,
    canonical_split,
)
from cudasched.webhook.admission.review import (
    BadReviewError,
    Decision,
    creation_review,
    parse_review,
)
from cudasched.webhook.memo.decisions import DecisionMemo
from cudasched.webhook.state.clusterstate import ClusterState
from tests.support import builders
from tests.support.admission import (
    admitter,
    api_server_body,
    kind_of,
    pod_reviews,
    state_of,
    with_uid,
)

GO_HEAD = b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"'
PY_HEAD = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"'


@pytest.fixture(scope="module")
def snapshot() -> ClusterSnapshot:
    return bundled_snapshot()


@pytest.fixture(scope="module")
def state(snapshot: ClusterSnapshot, kb: KnowledgeBase) -> ClusterState:
    return state_of(snapshot, kb)


# --------------------------------------------------------------------------- the pieces


@pytest.mark.parametrize("head", [GO_HEAD, PY_HEAD], ids=["go-order", "python-order"])
def test_canonical_split_cuts_after_the_uid(head: bytes) -> None:
    body = head + b'5a0f6c1e-0000-4000-8000-00000000000a","operation":"CREATE"}}'
    assert canonical_split(body) == (
        b"5a0f6c1e-0000-4000-8000-00000000000a",
        b'"operation":"CREATE"}}',
    )


@pytest.mark.parametrize(
    "body",
    [
        (GO_HEAD + b'u-1","operation":"CREATE"}}').decode(),  # text, not bytes
        GO_HEAD.replace(b",", b", ") + b'u-1","operation":"CREATE"}}',  # whitespace
        GO_HEAD + b'u\\u0031","operation":"CREATE"}}',  # an escape inside the uid
        GO_HEAD + b"x" * 129 + b'","operation":"CREATE"}}',  # longer than a uid
        GO_HEAD + b'","operation":"CREATE"}}',  # empty uid
        b'{"request":{"uid":"u-1","operation":"CREATE"},"kind":"AdmissionReview"}',
    ],
)
def test_canonical_split_refuses_other_layouts(body: bytes | str) -> None:
    assert canonical_split(body) is None


def test_raw_rest_only_when_the_head_carries_the_decoded_uid() -> None:
    body = GO_HEAD + b'head","operation":"CREATE"}}'
    assert RememberedAnswers.raw_rest(body, "head") == b'"operation":"CREATE"}}'
    assert RememberedAnswers.raw_rest(body, "other") is None
    assert RememberedAnswers.raw_rest(body.decode(), "head") is None


def test_stored_answers_are_found_with_each_requests_uid() -> None:
    snap = ClusterState.from_objects([], [], [], [])
    remembered = RememberedAnswers(DecisionMemo(1 << 20))
    body = GO_HEAD + b'first","operation":"CREATE","object":{}}}'
    request = parse_review(body)
    key = remembered.request_key("pod", request, body)
    rest = remembered.raw_rest(body, request.uid)
    assert key is not None and rest is not None
    assert remembered.find(key, "first", snap) is None  # the memo adopts the snapshot
    decision = Decision("first", warnings=("w",), outcome="unchanged")
    remembered.store("pod", key, rest, decision, snap)
    found = remembered.find(key, 'quote"d', snap)
    assert found == (Decision('quote"d', warnings=("w",)).render(), "unchanged")
    second = GO_HEAD + b'second","operation":"CREATE","object":{}}}'
    assert remembered.find_by_body("pod", second, snap) == (
        Decision("second", warnings=("w",)).render(),
        "unchanged",
    )
    assert remembered.find_by_body("isvc", second, snap) is None


def test_request_keys_are_only_made_for_small_bodies_with_the_memo_on() -> None:
    body = orjson.dumps(builders.review(builders.pod(), uid="u"))
    request = parse_review(body)
    assert RememberedAnswers(DecisionMemo(1 << 20)).request_key("pod", request, body)
    assert RememberedAnswers(DecisionMemo(0)).request_key("pod", request, body) is None
    big = body + b" " * MEMO_MAX_BODY_BYTES
    assert RememberedAnswers(DecisionMemo(1 << 20)).request_key("pod", request, big) is None


# --------------------------------------------------------------------------- with the Admitter


def test_api_server_bodies_are_recalled_without_decoding(
    kb: KnowledgeBase, snapshot: ClusterSnapshot, state: ClusterState
) -> None:
    adm, fresh = admitter(kb), admitter(kb, decisionCacheBytes=0)
    reviews = [creation_review(pod, uid="r") for pod in snapshot.pods]
    assert len(reviews) == 9  # the sample cluster's pods
    first = "5a0f6c1e-0000-4000-8000-00000000000a"
    second = "5a0f6c1e-0000-4000-8000-00000000000b"
    for review in reviews:
        assert adm.recall_body("pod", api_server_body(review, first), state) is None
        adm.review("pod", api_server_body(review, first), state)
    for review in reviews:
        body = api_server_body(review, second)
        found = adm.recall_body("pod", body, state)
        assert found is not None
        assert found[0] == fresh.review("pod", body, state)
        # the same bytes under the other admission path are a different request
        assert adm.recall_body("isvc", body, state) is None


def test_a_duplicate_uid_key_is_never_recalled_by_its_head(
    kb: KnowledgeBase, snapshot: ClusterSnapshot, state: ClusterState
) -> None:
    """A body whose request repeats "uid" after the head: the decoder keeps the later one, so
    the head cannot stand for the request; the answer echoes the uid the decoder kept."""
    adm = admitter(kb)
    review = creation_review(snapshot.pods[0], uid="r")

    def body(head_uid: str) -> bytes:
        text = api_server_body(review, head_uid)
        assert text.endswith(b"}}")
        return text[:-2] + b',"uid":"kept-uid"}}'

    for head_uid in ("head-1", "head-2"):
        assert adm.recall_body("pod", body(head_uid), state) is None
        answer = orjson.loads(adm.review("pod", body(head_uid), state))
        assert answer["response"]["uid"] == "kept-uid"


@pytest.mark.parametrize("variant", ["plain", "escaped", "repeated-request"])
def test_a_later_uid_equal_to_the_head_does_not_make_the_head_authoritative(
    kb: KnowledgeBase, snapshot: ClusterSnapshot, state: ClusterState, variant: str
) -> None:
    """The first body repeats its own uid later on (so the decoder agrees with the head); a
    second body with another head uid and the same rest must still echo the later uid."""
    adm, fresh = admitter(kb), admitter(kb, decisionCacheBytes=0)
    review = creation_review(snapshot.pods[0], uid="r")
    later = {
        "plain": b',"uid":"same-uid"}}',
        "escaped": b',"uid":"\\u0073ame-uid"}}',
        "repeated-request": b'},"request":'
        + orjson.dumps({**review["request"], "uid": "same-uid"})
        + b"}",
    }[variant]

    def body(head_uid: str) -> bytes:
        text = api_server_body(review, head_uid)
        return text[:-2] + later

    adm.review("pod", body("same-uid"), state)
    second = adm.review("pod", body("other-uid"), state)
    assert second == fresh.review("pod", body("other-uid"), state)
    assert orjson.loads(second)["response"]["uid"] == "same-uid"


def test_a_broken_body_with_a_canonical_head_is_refused_every_time(
    kb: KnowledgeBase, state: ClusterState
) -> None:
    adm = admitter(kb)
    body = b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"u1",'
    for _ in range(2):
        assert adm.recall_body("pod", body + b"oops", state) is None
        with pytest.raises(BadReviewError):
            adm.review("pod", body + b"oops", state)


def test_requests_that_cannot_be_cut_around_the_uid_are_answered_but_not_remembered(
    kb: KnowledgeBase, snapshot: ClusterSnapshot, state: ClusterState
) -> None:
    """An object quoting the placeholder verbatim in a field the answer repeats."""
    adm = admitter(kb)
    review = copy.deepcopy(pod_reviews(snapshot)[0])
    annotations = review["request"]["object"]["metadata"].setdefault("annotations", {})
    annotations["cudasched.io/cuda-version"] = "\x00cudasched-uid\x00"
    kind = kind_of(review)
    answers = [adm.review(kind, with_uid(review, u), state) for u in ("u1", "u2")]  # type: ignore[arg-type]
    fresh = admitter(kb, decisionCacheBytes=0)
    assert answers[1] == fresh.review(kind, with_uid(review, "u2"), state)  # type: ignore[arg-type]


def test_objects_too_deep_to_key_are_decided_every_time(
    kb: KnowledgeBase, state: ClusterState
) -> None:
    adm = admitter(kb)
    deep: Any = "leaf"
    for _ in range(300):
        deep = {"d": deep}
    pod = builders.pod(
        None, generate_name="deep-", image="busybox", container="c", gpus=None, annotations={}
    )
    review = builders.review(pod, uid="d1")
    review["request"]["object"]["spec"]["x"] = deep  # past orjson's depth: json writes it
    prepared = adm.prepare("pod", json.dumps(review).encode())
    assert prepared.key is None
    out = orjson.loads(adm.answer(prepared, state)[0])
    assert out["response"]["uid"] == "d1"
    assert len(adm.memo) == 0


_EXTRA_MEMBERS = st.lists(
    st.sampled_from(
        [
            b'"uid":"later-uid"',
            b'"operation":"UPDATE"',
            b'"namespace":"other"',
            b'"object":{"metadata":{"name":"swapped"},"spec":{"containers":[]}}',
            b'"subResource":"status"',
            b'"kind":{"group":"","version":"v1","kind":"Secret"}',
            b'"dryRun":true',
        ]
    ),
    max_size=3,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data(), extra=_EXTRA_MEMBERS, spaces=st.booleans())
def test_bodies_with_the_api_server_head_never_get_another_requests_answer(
    kb: KnowledgeBase,
    snapshot: ClusterSnapshot,
    state: ClusterState,
    data: st.DataObject,
    extra: list[bytes],
    spaces: bool,
) -> None:
    """Members appended after the head (duplicate keys win in the decoder) or whitespace
    inside the rest: whatever the body, a remembering Admitter answers exactly like a fresh
    one, for the first body and for the same body under another head uid."""
    pod = data.draw(st.sampled_from(snapshot.pods))
    base = api_server_body(creation_review(pod, uid="r"), "head-uid-1")
    assert base.endswith(b"}}")
    rest = base[:-2] + b"".join(b"," + member for member in extra) + b"}}"
    if spaces:
        rest = rest.replace(b'"operation":', b'"operation": ')
    adm, fresh = admitter(kb), admitter(kb, decisionCacheBytes=0)
    for head_uid in ("head-uid-1", "head-uid-2"):
        body = rest.replace(b'"uid":"head-uid-1"', b'"uid":"' + head_uid.encode() + b'"', 1)
        assert adm.review("pod", body, state) == fresh.review("pod", body, state)
