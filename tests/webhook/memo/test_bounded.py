"""The placer's and snapshot's memos under more keys than they hold (issue 22, item 3).

Requests choose these keys (a pod's own affinity, a requirement's annotations), so a cluster or
a caller can cycle through more of them than a memo holds. Evicting the oldest entry would then
keep nothing: each entry is evicted just before it is asked for again. The memos admit by
frequency instead (:mod:`cudasched.webhook.memo.bounded`), so a steady part of the cycle is found on
every pass. Nothing here is timed: the checks count what the memos found.
"""

from __future__ import annotations

import orjson
import pytest

from cudasched.cluster.snapshot import bundled_snapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.settings.config import WebhookConfig
from cudasched.webhook.admission.admitter import Admitter
from cudasched.webhook.memo.bounded import ENTRY_OVERHEAD, BoundedMemo
from cudasched.webhook.state.clusterstate import ClusterState
from tests.support.builders import expr, pod, required, review, term


@pytest.fixture(scope="module")
def state(kb: KnowledgeBase) -> ClusterState:
    return ClusterState.from_snapshot(bundled_snapshot(), kb=kb)


def _replay(memo: BoundedMemo[bytes, bytes], keys: list[int]) -> int:
    """Look every key up and store it on a miss, as the placer does; the number of hits."""
    hits = 0
    for i in keys:
        key = b"key-%04d" % i
        if memo.get(key) is not None:
            hits += 1
        else:
            memo.put(key, b"v" * 800, 800)
    return hits


def test_a_cycle_larger_than_the_memo_keeps_a_part_of_it() -> None:
    memo: BoundedMemo[bytes, bytes] = BoundedMemo(64 * 1024)
    capacity = memo.entry_budget // (800 + ENTRY_OVERHEAD)
    cycle = list(range(3 * capacity))
    _replay(memo, cycle)
    held = len(memo)
    assert 0 < held <= capacity
    passes = [_replay(memo, cycle) for _ in range(6)]
    assert min(passes) >= held // 2  # oldest-first eviction: 0 on every pass
    assert memo.bytes_used <= memo.entry_budget


def test_an_entry_in_use_gets_a_second_chance() -> None:
    memo: BoundedMemo[bytes, bytes] = BoundedMemo(64 * 1024)
    capacity = memo.entry_budget // (800 + ENTRY_OVERHEAD)
    _replay(memo, list(range(capacity)))  # full
    first = b"key-0000"
    assert memo.get(first) is not None  # the oldest entry, used since it was stored
    for _ in range(10):
        memo.get(b"newcomer")
    assert memo.put(b"newcomer", b"v" * 800, 800)
    assert memo.get(first) is not None  # the next unused entry went instead
    assert memo.get(b"key-0001") is None


def _pod_with_affinity(i: int) -> bytes:
    """A predictor pod of its own InferenceService-less kind with a distinct own affinity
    (so a distinct merge-memo key): with the sample cluster's terms, an entry of about 10 KB."""
    racks = [f"rack-{i}-{j}" for j in range(100)]
    obj = pod(
        None,
        generate_name=f"p{i}-",
        image="nvcr.io/nvidia/tritonserver:24.05-py3",
        affinity=required(term(expr("example.com/rack", "In", *racks))),
    )
    return orjson.dumps(review(obj, uid=f"uid-{i}"))


def test_the_merge_memo_answers_part_of_a_cycle_larger_than_it(
    kb: KnowledgeBase, state: ClusterState
) -> None:
    """Pods whose own affinities are more than the merge memo holds, cycled: later passes
    still find a part of them merged, and every answer is the one a fresh Admitter gives."""
    config = WebhookConfig.from_mapping({"decisionCacheBytes": 0, "affinityCacheBytes": 200_000})
    admitter = Admitter.from_config(config, kb=kb)
    fresh = Admitter.from_config(WebhookConfig.from_mapping({"decisionCacheBytes": 0}), kb=kb)
    bodies = [_pod_with_affinity(i) for i in range(60)]
    first = [admitter.review("pod", body, state) for body in bodies]
    merged = admitter.placer.merged
    held = len(merged)
    assert 0 < held < len(bodies) // 2  # the cycle is more than the memo holds
    hits = []
    for _ in range(3):
        before = merged.hits
        answers = [admitter.review("pod", body, state) for body in bodies]
        hits.append(merged.hits - before)
        assert answers == first
    assert min(hits) >= held // 2  # oldest-first eviction found none of them
    assert first == [fresh.review("pod", body, state) for body in bodies]
    assert merged.bytes_used <= merged.entry_budget
