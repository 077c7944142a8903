"""An explanation read by node pool: every node in exactly one group, a group's nodes answer
alike, and the summary's counts are the explanation's."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.cluster.fleet import Fleet
from cudasched.cluster.snapshot import bundled_snapshot
from cudasched.explain.eligibility import explain
from cudasched.explain.grouping import NO_POOL, by_pool, summarise
from cudasched.knowledge import KnowledgeBase
from cudasched.operations.pools import node_pools
from cudasched.vocab.labels import LabelScheme
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.vocab.versions import parse_cuda

SAMPLE = bundled_snapshot()
KB = KnowledgeBase.load()
FLEET = Fleet.from_snapshot(SAMPLE, KB)
POOLS = {n: p.name for p in node_pools(SAMPLE, FLEET) for n in p.nodes}
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "default"},
    "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
}


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from(["11.8", "12.0", "12.4", "12.8", "13.0", "13.2"]),
    st.sampled_from(list(Policy)),
)
def test_groups_partition_the_nodes_and_the_counts_add_up(cuda: str, policy: Policy) -> None:
    requirement = Requirement(cuda=parse_cuda(cuda), source="test")
    exp = explain(POD, FLEET, policy, KB, LabelScheme.AUTO, requirement=requirement)
    groups = by_pool(exp, POOLS)
    seen = [n.node for g in groups for n in g.nodes]
    assert sorted(seen) == sorted(n.node for n in exp.nodes) and len(seen) == 21
    for group in groups:
        assert {n.eligible for n in group.nodes} == {group.eligible}
        assert {POOLS.get(n.node, NO_POOL) for n in group.nodes} == {group.pool}
    summary = summarise(groups)
    assert summary.nodes == exp.total
    assert summary.eligible_nodes + summary.unpooled_eligible == exp.eligible_count
    assert summary.pools == len(set(POOLS.values())) == 13
    assert summary.eligible_pools + summary.blocked_pools - summary.mixed_pools == summary.pools
    assert [g.eligible for g in groups] == sorted((g.eligible for g in groups), reverse=True)
