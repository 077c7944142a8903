"""The placer's patch of a spec's affinity is the diff of the merge (issue 22).

``Placer.merge_ops`` hands the pod path the JSON patch of ``spec.affinity`` straight from the
merge memo, its values already written as JSON (``orjson.Fragment``), instead of decoding the
merged affinity and diffing it against the pod's own. These tests hold it to the patch the diff
of ``Placer.merge`` gives, byte for byte once written: for arbitrary affinities (including
malformed ones, which must fail the same way), on a miss, on a hit, with the memo off, and for
affinities too large to remember.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cudasched.knowledge import KnowledgeBase
from cudasched.settings.config import WebhookConfig
from cudasched.vocab.errors import InputError
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.vocab.versions import parse_cuda
from cudasched.webhook.admission.patch import Scope, diff
from cudasched.webhook.admission.placer import Compiled, Placer
from cudasched.webhook.memo.bounded import ENTRY_OVERHEAD
from cudasched.webhook.state.clusterstate import ClusterState
from tests.support.admission import nodes_state

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"

_KEYS = ("nvidia.com/gpu.product", "cudasched.io/injected", "example.com/rack", "zone")
_OPS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Bogus")


def _expression() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"key": st.sampled_from(_KEYS), "operator": st.sampled_from(_OPS)},
        optional={"values": st.lists(st.sampled_from(("1", "a", "b-2", "600")), max_size=3)},
    )


_TERM = st.fixed_dictionaries(
    {}, optional={"matchExpressions": st.lists(_expression(), max_size=3)}
)
_NODE_AFFINITY = st.fixed_dictionaries(
    {},
    optional={
        REQUIRED: st.one_of(
            st.fixed_dictionaries({"nodeSelectorTerms": st.lists(_TERM, max_size=3)}),
            st.none(),
        ),
        PREFERRED: st.lists(
            st.fixed_dictionaries({"weight": st.integers(1, 100), "preference": _TERM}),
            max_size=2,
        ),
    },
)
_AFFINITY = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "nodeAffinity": st.one_of(_NODE_AFFINITY, st.none(), st.just("odd")),
            "podAntiAffinity": st.just({"requiredDuringSchedulingIgnoredDuringExecution": []}),
        },
    ),
    st.none(),
    st.just([]),
)
SPECS = st.one_of(
    st.just({"containers": [{"name": "c"}]}),
    _AFFINITY.map(lambda a: {"containers": [{"name": "c"}], "affinity": a}),
)


@pytest.fixture(scope="module")
def state(kb: KnowledgeBase) -> ClusterState:
    return nodes_state(kb)


def _compiled(placer: Placer, state: ClusterState, cuda: str) -> Compiled:
    requirement = Requirement(cuda=parse_cuda(cuda), source="test")
    return placer.compile(requirement, Policy.STRICT, state)


def _expected(placer: Placer, spec: dict[str, Any], compiled: Compiled, at: str) -> bytes:
    """What the pod path wrote before: the diff of the merge, written out."""
    merged = placer.merge(spec, compiled)
    return orjson.dumps(diff(spec, merged, (Scope(("affinity",)),), at))


def _outcome(call: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "ok", call(*args)
    except InputError as exc:
        return "error", str(exc)


def _written(placer: Placer, spec: dict[str, Any], compiled: Compiled, at: str) -> bytes:
    return orjson.dumps(placer.merge_ops(spec, compiled, at))


@given(
    spec=SPECS,
    cuda=st.sampled_from(("11.8", "12.4", "12.8")),
    mode=st.sampled_from(("required", "preferred")),
)
def test_the_remembered_patch_is_the_diff_of_the_merge(
    kb: KnowledgeBase, state: ClusterState, spec: dict[str, Any], cuda: str, mode: str
) -> None:
    """A miss (computed and stored), a hit, and a placer whose memo is off all write the same
    bytes as the diff of the merge, or fail with the same error."""
    compared = []
    for budget in (8 * 1024 * 1024, 0):
        config = WebhookConfig.from_mapping({"affinityCacheBytes": budget, "mode": mode})
        placer = Placer(config, kb)
        reference = Placer(config, kb)
        compiled = _compiled(placer, state, cuda)
        expected = _outcome(_expected, reference, spec, compiled, "/spec")
        for _ in range(2):  # the first call stores the merge, the second finds it
            found = _outcome(_written, placer, spec, compiled, "/spec")
            assert found == expected
            compared.append(found)
    assert len(compared) == 4


def test_an_affinity_too_large_to_remember_is_diffed_in_full(
    kb: KnowledgeBase, state: ClusterState
) -> None:
    """A pod whose own affinity is over the memo's key limit gets the diff itself (plain
    values), the same bytes."""
    placer = Placer(WebhookConfig(), kb)
    compiled = _compiled(placer, state, "12.4")
    values = [f"rack-{i:05d}" for i in range(2_000)]
    term = {"matchExpressions": [{"key": "example.com/rack", "operator": "In", "values": values}]}
    spec = {"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [term]}}}}
    ops = placer.merge_ops(spec, compiled, "/spec/template/spec")
    assert len(placer.merged) == 0  # not remembered
    assert orjson.dumps(ops) == _expected(
        Placer(WebhookConfig(), kb), spec, compiled, "/spec/template/spec"
    )
    assert [op["path"] for op in ops] == ["/spec/template/spec/affinity/nodeAffinity"]


def test_a_remembered_patch_keeps_the_merged_affinity_once(
    kb: KnowledgeBase, state: ClusterState
) -> None:
    """The memo counts a merge at about its merged affinity's size: the patch's values are
    read out of it (a pod with its own affinity gets ``replace .../nodeAffinity`` with a run
    of the merged affinity's bytes), not kept a second time."""
    placer = Placer(WebhookConfig(), kb)
    compiled = _compiled(placer, state, "12.8")
    assert compiled.terms  # some nodes of the fleet cannot run it
    term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    own = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [term]}}}
    spec = {"affinity": own, "containers": []}
    ops = placer.merge_ops(spec, compiled, "/spec")
    merged = orjson.dumps(placer.merge(spec, compiled)["affinity"])
    key = len(orjson.dumps([True, own])) + len(compiled.tag)
    assert len(placer.merged) == 1
    assert placer.merged.bytes_used <= key + len(merged) + 64 + ENTRY_OVERHEAD
    assert [(op["op"], op["path"]) for op in ops] == [("replace", "/spec/affinity/nodeAffinity")]
    assert b'"value":' + merged[len(b'{"nodeAffinity":') : -1] in orjson.dumps(ops)


def test_the_class_bound_setting_reaches_the_compiled_terms(
    kb: KnowledgeBase, state: ClusterState
) -> None:
    """``placement.boundCudaClass`` makes the webhook inject the CUDA class bound (what Kueue's
    flavors declare); without it the terms are as before."""
    on = Placer(WebhookConfig.from_mapping({"placement": {"boundCudaClass": True}}), kb)
    off = Placer(WebhookConfig.from_mapping({}), kb)
    bounded, plain = (_compiled(p, state, "12.8").terms or [] for p in (on, off))

    def class_exprs(terms: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            e for t in terms for e in t["matchExpressions"] if e["key"] == "cudasched.io/cuda.code"
        ]

    assert {"key": "cudasched.io/cuda.code", "operator": "Gt", "values": ["12079"]} in (
        class_exprs(bounded)
    )
    assert class_exprs(plain) == []
