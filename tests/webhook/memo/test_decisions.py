"""The decision memo: a repeated request (a replica of a template) gets exactly the answer a
fresh decision would give, with its own uid, and nothing is ever answered from a snapshot other
than the current one.

The reference for every check is an Admitter with the memo turned off (``decisionCacheBytes:
0``) deciding the same bytes: the memo may only ever change how fast an answer comes.
"""

from __future__ import annotations

import copy
import gc
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cudasched.cluster.snapshot import ClusterSnapshot, bundled_snapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.settings.config import WebhookConfig
from cudasched.webhook.admission.review import creation_review
from cudasched.webhook.memo.decisions import Answer, DecisionMemo
from cudasched.webhook.server.serving import serve_in_thread
from cudasched.webhook.state.clusterstate import ClusterState
from tests.support.admission import (
    admitter,
    api_server_body,
    kind_of,
    pod_reviews,
    state_of,
    with_uid,
)

DATA = Path(__file__).parents[2] / "data" / "admission"


# --------------------------------------------------------------------------- the memo alone


class Snap:
    """Something a memo can hold a weak reference to, like a ClusterState."""


def answer(text: str, outcome: str = "patched") -> Answer:
    return Answer(b'{"uid":', b',"x":"' + text.encode() + b'"}', outcome)


def test_get_returns_what_put_stored_for_the_same_snapshot() -> None:
    memo = DecisionMemo(1 << 20)
    s = Snap()
    assert memo.get(s, b"k") is None  # adopts s
    assert memo.put(s, b"k", answer("a"))
    assert memo.get(s, b"k") == answer("a")
    assert answer("a").render(b'"u-1"') == b'{"uid":"u-1","x":"a"}'


def test_a_new_snapshot_drops_every_entry() -> None:
    memo = DecisionMemo(1 << 20)
    old, new = Snap(), Snap()
    memo.get(old, b"k")
    memo.put(old, b"k", answer("a"))
    assert memo.get(new, b"k") is None
    assert len(memo) == 0 and memo.bytes_used == 0
    assert memo.get(old, b"k") is None  # and the old entries do not come back


def test_an_answer_from_a_replaced_snapshot_is_not_stored() -> None:
    """A slow review thread finishing after the cache published a new snapshot."""
    memo = DecisionMemo(1 << 20)
    old, new = Snap(), Snap()
    memo.get(old, b"k")
    memo.get(new, b"k")
    assert not memo.put(old, b"k", answer("stale"))
    assert memo.get(new, b"k") is None


def test_a_collected_snapshot_is_never_matched() -> None:
    memo = DecisionMemo(1 << 20)
    s = Snap()
    memo.get(s, b"k")
    memo.put(s, b"k", answer("a"))
    del s
    gc.collect()
    assert memo.get(Snap(), b"k") is None


def _key(i: int) -> bytes:
    return f"key-{i:03d}".encode() + b"x" * 2_000  # a pod-sized key: only its digest is kept


def _replay(memo: DecisionMemo, s: Snap, keys: list[int], *, distinct: bool = True) -> int:
    """Look every key up and store it on a miss, like the Admitter; the number of hits."""
    hits = 0
    for i in keys:
        if memo.get(s, _key(i)) is not None:
            hits += 1
        else:
            memo.put(s, _key(i), answer(f"{i:03d}" if distinct else "same"))
        assert memo.bytes_used <= memo.entry_budget <= memo.max_bytes
    return hits


def test_memory_is_bounded_and_accounted() -> None:
    memo = DecisionMemo(16_000)
    s = Snap()
    memo.get(s, b"")
    _replay(memo, s, list(range(200)) * 3)
    assert 0 < len(memo) < 200
    assert memo.bytes_used == memo._accounted()


def test_a_cycle_larger_than_the_memo_keeps_a_part_of_it() -> None:
    """Issue 22: templates arriving in a cycle longer than the memo holds. First-in-first-out
    (or least-recently-used) eviction drops each entry just before its next request, so nothing
    is ever found again; here the memo keeps a part of the cycle and keeps answering it."""
    memo = DecisionMemo(64_000)
    s = Snap()
    memo.get(s, b"")
    cycle = list(range(360))  # about three times what the budget holds
    _replay(memo, s, cycle)
    held = len(memo)
    assert 0 < held < len(cycle) // 2
    for _ in range(6):
        assert _replay(memo, s, cycle) >= held // 2


def test_a_request_asked_for_more_often_replaces_rarer_ones() -> None:
    """Once full, a request seen once more is not stored over entries as frequent as it; one
    asked for repeatedly (a template with many replicas) is."""
    memo = DecisionMemo(64_000)
    s = Snap()
    memo.get(s, b"")
    _replay(memo, s, list(range(300)))
    held = len(memo)
    assert 0 < held < 300
    rare, hot = 500, 501
    assert memo.get(s, _key(rare)) is None
    assert not memo.put(s, _key(rare), answer("rare"))
    for _ in range(5):
        assert memo.get(s, _key(hot)) is None
    assert memo.put(s, _key(hot), answer("hot"))
    assert memo.get(s, _key(hot)) == answer("hot")
    assert memo.bytes_used == memo._accounted()


def test_an_entry_in_use_gets_a_second_chance() -> None:
    """The oldest entry, asked for since it was stored, is passed over for the next one."""
    memo = DecisionMemo(64_000)
    s = Snap()
    memo.get(s, b"")
    _replay(memo, s, list(range(300)))
    first = next(i for i in range(300) if memo.get(s, _key(i)) is not None)  # now in use
    for _ in range(5):
        memo.get(s, _key(700))
    assert memo.put(s, _key(700), answer("new"))
    assert memo.get(s, _key(first)) is not None


def test_keys_are_kept_as_digests_and_equal_answers_once() -> None:
    """Two keys of one request and other requests with the same answer share one copy of it:
    the bytes used do not grow with the keys' size nor with the number of sharers."""
    memo = DecisionMemo(1 << 20)
    s = Snap()
    memo.get(s, b"")
    assert memo.put(s, [b"a" * 50_000, b"b" * 50_000], answer("z" * 3_000))
    one = memo.bytes_used
    assert one < 3_000 + 1_000
    for i in range(10):
        assert memo.put(s, _key(i), answer("z" * 3_000))
    assert memo.bytes_used - one < 10 * 500
    assert memo.bytes_used == memo._accounted()
    assert memo.get(s, b"a" * 50_000) == memo.get(s, b"b" * 50_000) == answer("z" * 3_000)
    assert len(memo) == 11


def test_entries_larger_than_an_eighth_of_the_budget_are_not_stored() -> None:
    memo = DecisionMemo(8_000)
    s = Snap()
    memo.get(s, b"big")
    assert not memo.put(s, b"big", answer("z" * 2_000))
    assert memo.get(s, b"big") is None


def test_zero_bytes_disables_the_memo() -> None:
    memo = DecisionMemo(0)
    s = Snap()
    assert memo.get(s, b"k") is None
    assert not memo.put(s, b"k", answer("a"))
    assert memo.get(s, b"k") is None
    with pytest.raises(ValueError, match="max_bytes"):
        DecisionMemo(-1)


def test_a_retired_snapshot_never_becomes_current_again() -> None:
    """A review thread still holding the previous snapshot neither evicts the current one's
    entries nor stores its own answers."""
    memo = DecisionMemo(1 << 20)
    old, new = Snap(), Snap()
    memo.get(old, b"k")
    memo.get(new, b"k")
    assert memo.put(new, b"k", answer("fresh"))
    assert memo.get(old, b"k") is None
    assert not memo.put(old, b"k", answer("stale"))
    assert memo.get(new, b"k") == answer("fresh")


def test_a_lookup_reads_one_generation_even_when_another_thread_switches_it() -> None:
    """The event loop is paused inside ``get`` after it found its snapshot current; another
    thread makes a different snapshot current and stores an answer for it; the paused lookup
    must still answer from its own snapshot's entries."""
    import sys
    import threading

    memo = DecisionMemo(1 << 20)
    mine, other = Snap(), Snap()
    memo.get(mine, b"k")
    memo.put(mine, b"k", answer("mine"))
    in_get, go_on = threading.Event(), threading.Event()
    code = DecisionMemo.get.__code__

    def trace(frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code is not code:
            return None

        def lines(f: Any, ev: str, a: Any) -> Any:
            # Pause on the last line executed by a hit: after the ownership check.
            if ev == "line" and "entries.get" in _source_line(f):
                in_get.set()
                go_on.wait(10)
            return lines

        return lines

    found: list[Answer | None] = []

    def lookup() -> None:
        sys.settrace(trace)
        try:
            found.append(memo.get(mine, b"k"))
        finally:
            sys.settrace(None)

    t = threading.Thread(target=lookup)
    t.start()
    assert in_get.wait(10)
    memo.get(other, b"k")
    assert memo.put(other, b"k", answer("other"))
    go_on.set()
    t.join(10)
    assert found == [answer("mine")]


def _source_line(frame: Any) -> str:
    import linecache

    return linecache.getline(frame.f_code.co_filename, frame.f_lineno)


def test_concurrent_stores_and_snapshot_switches_keep_the_accounting() -> None:
    """Review threads store (some with snapshots already replaced) while the event loop reads
    and moves to new snapshots: no exception, the byte count matches the entries, the budget
    is never exceeded, and every entry found belongs to the snapshot it was stored for."""
    import threading

    memo = DecisionMemo(20_000)
    snaps = [Snap() for _ in range(30)]
    current = [0]
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer(n: int) -> None:
        try:
            i = 0
            while not stop.is_set():
                # the current snapshot, or one a slow thread captured a while ago
                snap = snaps[max(0, current[0] - i % 3)]
                memo.put(snap, f"{id(snap)}-{n}-{i % 50}".encode(), answer(str(id(snap))))
                i += 1
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    try:
        for i in range(3_000):
            current[0] = i // 100
            snap = snaps[current[0]]
            key = f"{id(snap)}-{i % 3}-{i % 50}".encode()
            found = memo.get(snap, key)
            if found is not None:
                assert found == answer(str(id(snap)))
            assert 0 <= memo.bytes_used <= memo.max_bytes
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert errors == []
    assert memo.bytes_used == memo._accounted()
    assert all(v.answer == answer(str(id(snaps[-1]))) for v in memo._gen.entries.values())


# --------------------------------------------------------------------------- with the Admitter


@pytest.fixture(scope="module")
def snapshot() -> ClusterSnapshot:
    return bundled_snapshot()


@pytest.fixture(scope="module")
def state(snapshot: ClusterSnapshot, kb: KnowledgeBase) -> ClusterState:
    return state_of(snapshot, kb)


_uids = st.text(min_size=1, max_size=24).filter(lambda u: u.strip() != "") | st.sampled_from(
    ['quote"d', "back\\slash", "\x00cudasched-uid\x00", "ünï-cødé", "</script>"]
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data(), first=_uids, second=_uids)
def test_a_repeat_gets_the_fresh_answer_with_its_own_uid(
    kb: KnowledgeBase,
    snapshot: ClusterSnapshot,
    state: ClusterState,
    data: st.DataObject,
    first: str,
    second: str,
) -> None:
    review = data.draw(st.sampled_from(pod_reviews(snapshot)))
    policy = data.draw(st.sampled_from(["strict", "minor-compat", "forward-compat"]))
    mode = data.draw(st.sampled_from(["required", "preferred"]))
    remembering = admitter(kb, policy=policy, mode=mode)
    fresh = admitter(kb, policy=policy, mode=mode, decisionCacheBytes=0)
    kind = kind_of(review)
    remembering.review(kind, with_uid(review, first), state)  # type: ignore[arg-type]
    again = remembering.review(kind, with_uid(review, second), state)  # type: ignore[arg-type]
    assert again == fresh.review(kind, with_uid(review, second), state)  # type: ignore[arg-type]
    assert orjson.loads(again)["response"]["uid"] == second


def test_repeats_are_remembered(
    kb: KnowledgeBase, snapshot: ClusterSnapshot, state: ClusterState
) -> None:
    adm = admitter(kb)
    reviews = pod_reviews(snapshot)
    assert len(reviews) >= 15  # the sample's 9 pods and the recorded reviews
    for review in reviews:
        prepared = adm.prepare(kind_of(review), with_uid(review, "a"))  # type: ignore[arg-type]
        assert adm.recall(prepared, state) is None
        adm.answer(prepared, state)
    recalled = decided_again = 0
    for review in reviews:
        prepared = adm.prepare(kind_of(review), with_uid(review, "b"))  # type: ignore[arg-type]
        found = adm.recall(prepared, state)
        if kind_of(review) == "isvc":
            # InferenceService decisions report where the service can run (NoCompatibleNode
            # Events, nofit.py), so a repeat is decided again rather than recalled.
            assert found is None
            decided_again += 1
            continue
        assert found is not None
        assert found == adm.answer(prepared, state)
        recalled += 1
    assert recalled + decided_again == len(reviews)
    assert recalled >= 14 and decided_again >= 1


def test_a_new_snapshot_is_decided_afresh(
    kb: KnowledgeBase, snapshot: ClusterSnapshot, state: ClusterState
) -> None:
    """The same pod, first on the sample cluster, then on one whose only GPU nodes are too old
    for it: the second answer warns, as a fresh decision does."""
    adm = admitter(kb)
    review = creation_review(
        next(p for p in snapshot.pods if p["metadata"].get("generateName", "").startswith("qwen2")),
        uid="x",
    )
    body = orjson.dumps(review)
    first = orjson.loads(adm.review("pod", body, state))["response"]
    old_nodes = [
        n
        for n in snapshot.nodes
        if n["metadata"]["labels"].get("nvidia.com/gpu.product") == "Tesla-K80"
    ]
    assert old_nodes
    older = state_of(snapshot, kb, old_nodes)
    second = orjson.loads(adm.review("pod", body, older))["response"]
    fresh = orjson.loads(admitter(kb, decisionCacheBytes=0).review("pod", body, older))
    assert second == fresh["response"]
    assert second != first and second.get("warnings")


# --------------------------------------------------------------------------- over HTTPS


def _metric(text: str, prefix: str) -> float:
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.fixture()
def client_for() -> Iterator[Any]:
    clients: list[httpx.Client] = []

    def make(srv: Any) -> httpx.Client:
        tls = ssl.create_default_context(cadata=srv.ca_pem.decode())
        c = httpx.Client(base_url=srv.url, verify=tls, timeout=10.0)
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.close()


@pytest.mark.parametrize("cache_bytes", [16 << 20, 0], ids=["memo", "no-memo"])
def test_server_answers_replicas_from_the_memo(
    kb: KnowledgeBase,
    snapshot: ClusterSnapshot,
    state: ClusterState,
    client_for: Any,
    cache_bytes: int,
) -> None:
    """Every predictor pod of the sample cluster twice, as two replicas: each answer carries its
    own uid, the second is the first's answer, and the metric counts the remembered ones."""
    cfg = WebhookConfig.from_mapping({"decisionCacheBytes": cache_bytes})
    reviews = [creation_review(pod, uid="r") for pod in snapshot.pods]
    with serve_in_thread(state, config=cfg) as srv:
        c = client_for(srv)
        answers = []
        for replica in ("a", "b"):
            for i, review in enumerate(reviews):
                uid = f"{replica}-{i}"
                resp = c.post("/mutate/pods", content=with_uid(review, uid))
                assert resp.status_code == 200
                body = resp.json()["response"]
                assert body["uid"] == uid
                body.pop("uid")
                answers.append(body)
        metrics = c.get("/metrics").text
    half = len(reviews)
    assert answers[:half] == answers[half:]
    remembered = _metric(
        metrics, 'cudasched_webhook_remembered_answers_total{endpoint="/mutate/pods"}'
    )
    assert remembered == (half if cache_bytes else 0)


@pytest.mark.parametrize("mode", ["required", "preferred"])
def test_admission_never_changes_the_decoded_request(
    kb: KnowledgeBase, snapshot: ClusterSnapshot, state: ClusterState, mode: str
) -> None:
    """Admission shares subtrees of the decoded request between the object it resolves, the
    mutated copy and the patch: it must never write into the request itself (the patch would
    then be computed against a changed original)."""
    adm = admitter(kb, mode=mode, decisionCacheBytes=0)
    reviews = pod_reviews(snapshot)
    assert len(reviews) >= 15  # the sample's 9 pods and the recorded reviews
    for review in reviews:
        kind = kind_of(review)
        prepared = adm.prepare(kind, with_uid(review, "u"))  # type: ignore[arg-type]
        before = copy.deepcopy(prepared.request.obj)
        adm.answer(prepared, state)
        assert prepared.request.obj == before


def test_server_decides_large_bodies_every_time(
    snapshot: ClusterSnapshot, state: ClusterState, client_for: Any
) -> None:
    """Bodies over MEMO_MAX_BODY_BYTES are decoded and decided in a review thread each time
    (never on the event loop) and never remembered; answers are still right."""
    from cudasched.webhook.admission.recall import MEMO_MAX_BODY_BYTES

    pod = copy.deepcopy(snapshot.pods[0])
    pod["metadata"].setdefault("annotations", {})["example.com/blob"] = "x" * MEMO_MAX_BODY_BYTES
    review = creation_review(pod, uid="r")
    with serve_in_thread(state) as srv:
        c = client_for(srv)
        answers = []
        for uid in ("big-1", "big-2"):
            body = api_server_body(review, uid)
            assert len(body) > MEMO_MAX_BODY_BYTES
            resp = c.post("/mutate/pods", content=body)
            assert resp.status_code == 200
            answer_ = resp.json()["response"]
            assert answer_.pop("uid") == uid
            answers.append(answer_)
        metrics = c.get("/metrics").text
        assert len(srv.app.admission.memo) == 0  # type: ignore[attr-defined]
    assert answers[0] == answers[1] and "patch" in answers[0]
    prefix = 'cudasched_webhook_remembered_answers_total{endpoint="/mutate/pods"}'
    assert _metric(metrics, prefix) == 0
