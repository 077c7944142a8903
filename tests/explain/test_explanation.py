"""explain's lazy per-node answers: the same answers, counts and behaviour as eager ones.

``explain`` keeps one decision per group of alike nodes and builds ``Explanation.nodes`` only
when it is read; the summary counts from the groups. These tests hold the lazy answers to an
eager reference: every node explained on its own (a one-node fleet: no grouping, no sharing,
reasons computed for that node) and the materialised tuple wrapped in a plain ``Explanation``.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.cluster.fleet import Fleet
from cudasched.cluster.snapshot import bundled_snapshot
from cudasched.explain.eligibility import explain, explain_many
from cudasched.explain.explanation import Explanation, NodeAnswers
from cudasched.knowledge import KnowledgeBase
from cudasched.vocab.labels import LabelScheme
from cudasched.vocab.nodeaffinity import Node

POLICIES = ["strict", "minor-compat", "forward-compat"]


ZONES = ["us-west-2a", "us-west-2b", None]
CUDAS = ["11.8", "12.2", "12.4", "12.8", "13.0", "13.2"]


def _copies(count: int) -> list[dict[str, Any]]:
    """The sample cluster's nodes, ``count`` copies each, renamed, zones varied."""
    out = []
    for i in range(count):
        for number, node in enumerate(bundled_snapshot().nodes):
            node = copy.deepcopy(dict(node))
            name = f"{node['metadata']['name']}-{i}"
            labels = dict(node["metadata"].get("labels") or {})
            labels["kubernetes.io/hostname"] = name
            zone = ZONES[(i + number) % len(ZONES)]
            if zone is None:
                labels.pop("topology.kubernetes.io/zone", None)
            else:
                labels["topology.kubernetes.io/zone"] = zone
            node["metadata"] = {**node["metadata"], "name": name, "labels": labels}
            out.append(node)
    return out


def _workloads() -> list[dict[str, Any]]:
    """Sample pods, then pods with varied requirements and selectors (quoting node names in
    their reasons, sharing answers, excluded by their own constraints)."""
    pods = [copy.deepcopy(dict(p)) for p in bundled_snapshot().pods]
    for i in range(len(pods) * 12):
        pod = copy.deepcopy(pods[i % len(pods)])
        meta = dict(pod["metadata"])
        meta["name"] = f"{meta['name']}-{i}"
        annotations = dict(meta.get("annotations") or {})
        if i % 5:
            annotations["cudasched.io/cuda-version"] = CUDAS[i % len(CUDAS)]
        if i % 7 == 0:
            annotations["cudasched.io/min-compute-capability"] = "9.0"
        if i % 4 == 1:
            annotations["cudasched.io/policy"] = "minor-compat"
        meta["annotations"] = annotations
        pod["metadata"] = meta
        spec = dict(pod["spec"])
        if i % 3 == 0:
            spec["nodeSelector"] = {"topology.kubernetes.io/zone": ZONES[i % 2]}
        pod["spec"] = spec
        pods.append(pod)
    return pods


@pytest.fixture(scope="module")
def nodes() -> list[Node]:
    return [Node.from_k8s(n) for n in _copies(3)]


@pytest.fixture(scope="module")
def fleet(nodes: list[Node], kb: KnowledgeBase) -> Fleet:
    return Fleet(nodes, kb)


@pytest.fixture(scope="module")
def workloads() -> list[Any]:
    return _workloads()


def _lazy(exp: Explanation) -> bool:
    return not exp.nodes.built


def _eager_copy(exp: Explanation) -> Explanation:
    """The same explanation with its per-node tuple built up front."""
    return dataclasses.replace(exp, nodes=tuple(exp.nodes))


def _check_counts_then_nodes(exp: Explanation) -> None:
    # Counts first: they must not need the per-node answers.
    lazy = _lazy(exp)
    eligible, total, summary = exp.eligible_count, exp.total, exp.summary()
    assert _lazy(exp) == lazy
    eager = _eager_copy(exp)
    assert not _lazy(eager)
    assert (eligible, total) == (len(exp.eligible), len(exp.nodes))
    assert (eager.eligible_count, eager.total) == (eligible, total)
    assert summary == eager.summary() == exp.summary()
    assert summary["eligible"] == eligible and summary["total"] == total
    assert exp == eager and eager == exp and hash(exp) == hash(eager)
    assert exp.to_dict() == eager.to_dict()
    assert repr(exp) == repr(eager)
    assert exp.eligible == eager.eligible
    assert exp.nodes is exp.nodes  # built once, then cached


def test_lazy_by_default_and_counts_without_building(
    fleet: Fleet, workloads: list[Any], kb: KnowledgeBase
) -> None:
    answers = explain_many(workloads, fleet, "strict", kb)
    assert len(answers) == len(workloads) == 117
    assert all(_lazy(a) for a in answers)
    for exp in answers:
        _check_counts_then_nodes(exp)


@settings(max_examples=25, deadline=None)
@given(
    picks=st.lists(st.integers(0, 116), min_size=1, max_size=4),
    policy=st.sampled_from(POLICIES),
    scheme=st.sampled_from([LabelScheme.CUDASCHED, LabelScheme.GFD, LabelScheme.AUTO]),
)
def test_lazy_equals_per_node_reference(
    nodes: list[Node],
    fleet: Fleet,
    workloads: list[Any],
    kb: KnowledgeBase,
    picks: list[int],
    policy: str,
    scheme: LabelScheme,
) -> None:
    """Each node explained in a one-node fleet gives that node's answer in the grouped, shared,
    lazy explanation (the label scheme and GFD keys fixed to what the whole fleet resolves)."""
    chosen = [workloads[i] for i in picks]
    answers = explain_many(chosen, fleet, policy, kb, scheme)
    resolved = fleet.resolve_scheme(scheme)
    compared = 0
    for workload, exp in zip(chosen, answers, strict=True):
        assert exp == explain(workload, fleet, policy, kb, scheme)
        _check_counts_then_nodes(exp)
        for node, answer in zip(nodes, exp.nodes, strict=True):
            alone = Fleet([node], kb)
            alone._gfd_keys = fleet.gfd_keys  # what the whole fleet resolved, not one node
            single = explain(workload, alone, policy, kb, resolved)
            assert single.nodes == (answer,), node.name
            assert single.nodes[0].facts.products == answer.facts.products
            compared += 1
    assert compared == len(picks) * 63  # the sample's 21 nodes, three copies each


@pytest.mark.parametrize("policy", POLICIES)
def test_sample_cluster_lazy_equals_eager(kb: KnowledgeBase, policy: str) -> None:
    sample = bundled_snapshot()
    fleet = Fleet(sample.nodes, kb)
    pods = _workloads()
    shared = explain_many(pods, fleet, policy, kb)
    assert len(shared) == len(pods) == 117
    for workload, exp in zip(pods, shared, strict=True):
        _check_counts_then_nodes(exp)
        assert exp == explain(workload, sample.nodes, policy, kb)


def test_replace_keeps_answers_lazy(fleet: Fleet, workloads: list[Any], kb: KnowledgeBase) -> None:
    exp = explain(workloads[0], fleet, "strict", kb)
    renamed = dataclasses.replace(exp, workload="ns/InferenceService/x")
    assert _lazy(renamed) and _lazy(exp)
    assert renamed.nodes is exp.nodes
    assert renamed.workload == "ns/InferenceService/x"
    assert renamed.summary() == {**exp.summary(), "workload": "ns/InferenceService/x"}
    assert _lazy(renamed)


def test_explanation_stays_a_frozen_dataclass(
    fleet: Fleet, workloads: list[Any], kb: KnowledgeBase
) -> None:
    exp = explain(workloads[1], fleet, "strict", kb)
    assert [f.name for f in dataclasses.fields(exp)] == [
        "workload",
        "nodes",
        "requirement",
        "policy",
        "scheme",
        "terms",
        "gfd_keys",
        "skipped",
        "score_error",
        "requirement_error",
        "unknown",
        "no_pods",
    ]
    for name in ("nodes", "workload"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(exp, name, ())
    built = Explanation(
        workload="w",
        nodes=list(exp.nodes),
        requirement=exp.requirement,
        policy=exp.policy,
        scheme=exp.scheme,
    )
    assert isinstance(built.nodes, NodeAnswers) and built.nodes == exp.nodes
    assert built.nodes == tuple(exp.nodes) and built.nodes.built
    assert built.total == exp.total and built.eligible_count == exp.eligible_count
