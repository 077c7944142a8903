"""The policy's tables hold the webhook's answers: for every generated pod, the webhook's
decision on the pod rebuilt from its key (what the controller asks) merged into the pod as the
policy merges it gives the annotation and affinity the webhook gives the pod itself; the
tables are sharded within their bounds; the controller's pieces (sources, leases) keep their
rules. The CEL side is proven on the real API server (``tests/e2e/k8s137``)."""

from __future__ import annotations

import copy
import time
from typing import Any

import jsonpatch
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cudasched.knowledge import KnowledgeBase
from cudasched.placement.merge import REQUIRED_KEY, merge_required
from cudasched.settings.config import WebhookConfig
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.vocab.kinds import POD, REPLICA_SET
from cudasched.webhook.admission.admitter import Admitter
from cudasched.webhook.admission.review import creation_review
from cudasched.webhook.policy.controller import decide_all
from cudasched.webhook.policy.sources import SourceIndex, keys_of, may_need_gpu
from cudasched.webhook.policy.table import (
    MAX_TABLE_BYTES,
    Placement,
    held_placements,
    placement_of,
    probe_pod,
    storable,
    table_keys,
    tables,
)
from cudasched.webhook.state.clusterstate import ClusterState
from cudasched.workloads.policykey import KEY_VERSION, key_pod, pod_key
from tests.harness.workloads import generate, runtimes
from tests.support.admission import nodes
from tests.support.claimcel import claim_cel

NS = "team"
JSON = dict[str, Any]


@pytest.fixture(scope="module")
def admitter(kb: KnowledgeBase) -> Admitter:
    return Admitter.from_config(WebhookConfig(), kb=kb)


@pytest.fixture(scope="module")
def work() -> Any:
    return generate(120, NS)


@pytest.fixture(scope="module")
def state(kb: KnowledgeBase, work: Any) -> ClusterState:
    return ClusterState.from_objects(nodes(), work.services, [], runtimes(), kb=kb, synced=True)


def _apply_webhook(admitter: Admitter, pod: JSON, state: ClusterState) -> JSON:
    decision = admitter.decide("pod", orjson.dumps(creation_review(pod)), state)
    after = copy.deepcopy(pod)
    from cudasched.webhook.policy import table as table_module

    table_module._apply(after, orjson.loads(orjson.dumps(list(decision.patch))))
    return after


def _as_policy(pod: JSON, placement: Placement | None) -> JSON:
    """The pod as the policy leaves it, merged with the Python merge (the CEL merge is its
    twin, checked on the API server)."""
    out = copy.deepcopy(pod)
    if placement is None:
        return out
    if placement.requirement is not None:
        out["metadata"].setdefault("annotations", {})[L.ANN_REQUIREMENT] = placement.requirement
    if placement.terms is not None:
        out["spec"] = merge_required(out["spec"], list(placement.terms))
    return out


def test_the_key_pods_decision_is_the_pods_decision(
    admitter: Admitter, state: ClusterState, work: Any
) -> None:
    served = differ = 0
    for pod in work.pods:
        if not may_need_gpu(pod) or pod["metadata"].get("annotations", {}).get(L.ANN_SKIP):
            continue
        key = pod_key(pod, NS)
        assert key is not None
        placement = decide_all(admitter, {key: key_pod(pod, NS)}, state).get(key)
        webhook = _apply_webhook(admitter, pod, state)
        policy = _as_policy(pod, placement)
        served += placement is not None
        if (webhook["metadata"], webhook["spec"]) != (policy["metadata"], policy["spec"]):
            differ += 1
    assert differ == 0
    assert served > 60


def test_in_claim_mode_the_key_pods_decision_is_the_pods_decision(
    kb: KnowledgeBase, state: ClusterState, work: Any
) -> None:
    """``dra.mode: claim``: the placement decided on the key pod, applied as the policy applies
    it (the annotation, the merge, and the claim variables' operations in CEL), gives every
    pod the webhook's own answer; the only pods told apart are those the webhook keeps on node
    affinity because a container cannot be moved, which the policy leaves whole and
    unannotated (its documented choice), and the generated workload has none."""
    claim = Admitter.from_config(WebhookConfig.from_mapping({"dra": {"mode": "claim"}}), kb=kb)
    claimed = differ = left = 0
    for pod in work.pods:
        if not may_need_gpu(pod) or pod["metadata"].get("annotations", {}).get(L.ANN_SKIP):
            continue
        key = str(pod_key(pod, NS))
        placement = decide_all(claim, {key: key_pod(pod, NS)}, state).get(key)
        policy = pod
        if placement is not None:
            found = claim_cel(pod, placement.as_json())
            if found["claimLeft"]:
                left += 1  # left whole: the CEL test compares such pods with claim_rewrite
                continue
            policy = jsonpatch.apply_patch(_as_policy(pod, placement), found["claimOps"])
            claimed += bool(found["claimOps"])
        webhook = _apply_webhook(claim, pod, state)
        differ += (webhook["metadata"], webhook["spec"]) != (policy["metadata"], policy["spec"])
    assert differ == left == 0
    assert claimed > 30


def _ours(pod: JSON) -> list[str]:
    """cudasched's alternatives in a pod's required terms (what follows each marker)."""
    affinity = pod["spec"].get("affinity", {}).get("nodeAffinity", {}).get(REQUIRED_KEY, {})
    found = set()
    for term in affinity.get("nodeSelectorTerms", []):
        exprs = term.get("matchExpressions", [])
        marks = [i for i, e in enumerate(exprs) if e.get("key") == "cudasched.io/injected"]
        if marks:
            found.add(orjson.dumps(exprs[marks[0] + 1 :]).decode())
    return sorted(found)


def test_pods_of_one_key_get_one_placement(admitter: Admitter, state: ClusterState) -> None:
    work = generate(96, NS, seed=5)
    keys: dict[str, set[bytes]] = {}
    for pod in work.pods:
        key = pod_key(pod, NS)
        skipped = pod["metadata"].get("annotations", {}).get(L.ANN_SKIP)
        if key is None or skipped or not may_need_gpu(pod):
            continue  # the policy's matchConditions never send these
        webhook = _apply_webhook(admitter, pod, state)
        requirement = webhook["metadata"].get("annotations", {}).get(L.ANN_REQUIREMENT)
        keys.setdefault(key, set()).add(orjson.dumps([requirement, _ours(webhook)]))
    assert len(keys) < 60  # pods repeat keys: the check below compares something
    assert all(len(answers) == 1 for answers in keys.values())


def test_the_key_holds_what_admission_reads() -> None:
    pod = {
        "metadata": {"labels": {"app": "x"}, "annotations": {"note": "y"}},
        "spec": {
            "containers": [
                {"name": "c", "image": "i:1", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
            ]
        },
    }
    base = pod_key(pod, NS)
    changed = copy.deepcopy(pod)
    changed["metadata"]["labels"]["app"] = "z"  # a label admission never reads
    changed["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "4"
    assert pod_key(changed, NS) == base
    for edit in (
        lambda p: p["spec"]["containers"][0].update(image="i:2"),
        lambda p: p["metadata"]["annotations"].update({L.ANN_CUDA_VERSION: "12.4"}),
        lambda p: p["metadata"]["labels"].update({"component": "predictor"}),
        lambda p: p["spec"]["containers"][0].update(
            env=[{"name": "NVIDIA_REQUIRE_CUDA", "value": "cuda>=12"}]
        ),
        lambda p: p["spec"].update(serviceAccountName="other"),
    ):
        other = copy.deepcopy(pod)
        edit(other)
        assert pod_key(other, NS) != base
    assert pod_key(pod, "elsewhere") != base
    assert base is not None and base.startswith(KEY_VERSION + "|")


def test_separators_in_values_never_make_two_pods_one_key() -> None:
    def annotated(value: str, policy: str | None) -> JSON:
        annotations = {L.ANN_CUDA_VERSION: value}
        if policy is not None:
            annotations[L.ANN_POLICY] = policy
        return {"metadata": {"annotations": annotations}, "spec": {"containers": []}}

    one = pod_key(annotated("12.4|=strict", None), NS)
    two = pod_key(annotated("12.4", "strict"), NS)
    assert one != two
    empty, absent = pod_key(annotated("", None), NS), pod_key({"spec": {"containers": []}}, NS)
    assert empty != absent


def test_a_quantity_that_is_no_whole_number_is_never_served() -> None:
    pod = {
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1k"}}}]}
    }
    assert pod_key(pod, NS) is None


def test_placement_reads_the_probe_back(admitter: Admitter, state: ClusterState) -> None:
    annotated = key_pod(
        {
            "metadata": {"annotations": {L.ANN_CUDA_VERSION: "12.4"}},
            "spec": {
                "containers": [
                    {"name": "c", "image": "a:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                ]
            },
        },
        NS,
    )
    probe = probe_pod(annotated)
    decision = admitter.decide("pod", orjson.dumps(creation_review(probe)), state)
    placement = placement_of(decision, probe)
    assert placement is not None and placement.requirement is not None
    assert placement.terms
    assert all(t["matchExpressions"] for t in placement.terms)
    cpu = key_pod({"spec": {"containers": [{"name": "c", "image": "web:1"}]}}, NS)
    assert decide_all(admitter, {"k": cpu}, state) == {}


def test_a_dra_answer_is_read_back_as_the_class_and_kept_in_the_table(
    kb: KnowledgeBase, state: ClusterState
) -> None:
    dra = Admitter.from_config(
        WebhookConfig.from_mapping({"dra": {"mode": "extended-resource"}}), kb=kb
    )
    gpu = {"limits": {"nvidia.com/gpu": "1"}}
    pod = {"metadata": {"annotations": {L.ANN_CUDA_VERSION: "12.8"}}, "spec": {}}
    pod["spec"]["containers"] = [{"name": "c", "image": "a:1", "resources": gpu}]
    probe = probe_pod(key_pod(pod, NS))
    decision = dra.decide("pod", orjson.dumps(creation_review(probe)), state)
    placement = placement_of(decision, probe)
    assert placement is not None
    key = pod_key(pod, NS)
    assert key is not None
    held = held_placements(tables({key: placement}, KEY_VERSION), KEY_VERSION)
    assert placement == Placement(
        "cuda>=12.8 (annotation cudasched.io/cuda-version)", None, "gpu-cuda-12-8.cudasched.io"
    )
    assert held == {key: placement}
    assert Placement("r", None).as_json() == {"requirement": "r"}  # no class: ids unchanged


def test_a_claim_answer_is_read_back_as_the_claim_class_and_kept_in_the_table(
    kb: KnowledgeBase, state: ClusterState
) -> None:
    """``dra.mode: claim``: the webhook's answer on the probe adds a ``cudasched-gpu-*`` claim
    from the class's template; the placement keeps the class (not the count, which the policy
    reads from each pod) under its own field, and the tables give it back."""
    claim = Admitter.from_config(WebhookConfig.from_mapping({"dra": {"mode": "claim"}}), kb=kb)
    gpu = {"limits": {"nvidia.com/gpu": "4"}}
    pod: JSON = {"metadata": {"annotations": {L.ANN_CUDA_VERSION: "12.8"}}, "spec": {}}
    pod["spec"]["containers"] = [{"name": "c", "image": "a:1", "resources": gpu}]
    pod["spec"]["initContainers"] = [{"name": "i", "resources": gpu}]
    pod["spec"]["resourceClaims"] = [{"name": "cudasched-gpu-0", "resourceClaimName": "x"}]
    probe = probe_pod(key_pod(pod, NS))
    decision = claim.decide("pod", orjson.dumps(creation_review(probe)), state)
    placement = placement_of(decision, probe)
    expected = Placement(
        "cuda>=12.8 (annotation cudasched.io/cuda-version)",
        None,
        claim_class="gpu-cuda-12-8.cudasched.io",
    )
    assert placement == expected
    key = pod_key(pod, NS)
    assert key is not None
    assert held_placements(tables({key: placement}, KEY_VERSION), KEY_VERSION) == {key: expected}
    assert expected.as_json()["claimClass"] == expected.claim_class
    assert "claimClass" not in Placement("r", None, "c").as_json()  # ids of others unchanged


def test_tables_shard_within_their_bounds() -> None:
    terms = tuple({"matchExpressions": [{"key": f"k{i}", "operator": "Exists"}]} for i in range(40))
    entries = {
        f"{KEY_VERSION}|ns|key-{i:05d}|{'x' * 300}": Placement(
            f"cuda>=12.{i % 9}", terms[: 1 + i % 40]
        )
        for i in range(6000)
    }
    built = tables(entries, KEY_VERSION)
    assert len(built) > 1
    assert all(len(orjson.dumps(t)) <= MAX_TABLE_BYTES for t in built)
    held = {k for t in built for k in table_keys(t)}
    assert held == set(entries)
    names = {t["metadata"]["name"] for t in built}
    assert all(n.startswith(f"pods-{len(built)}-") for n in names)
    assert {t["metadata"]["namespace"] for t in built} == {"ns"}
    assert tables({}, KEY_VERSION) == []  # no keys, no table


def _entry(namespace: str, i: int) -> tuple[str, Placement]:
    return f"{KEY_VERSION}|{namespace}|key-{i:05d}|{'x' * 300}", Placement(f"cuda>=12.{i % 9}", ())


def test_each_namespace_has_tables_of_its_own_keys_sharded_there() -> None:
    """The policy reads only the tables of the pod's namespace: each key is written there, a
    namespace that outgrows one object is sharded on its own, the others stay one object."""
    entries = dict(_entry("big", i) for i in range(5000))
    entries.update(_entry("small", i) for i in range(3))
    built = tables(entries, KEY_VERSION)
    by_namespace: dict[str, list[JSON]] = {}
    for table in built:
        by_namespace.setdefault(table["metadata"]["namespace"], []).append(table)
    assert sorted(by_namespace) == ["big", "small"]
    assert len(by_namespace["big"]) > 1
    assert [t["metadata"]["name"] for t in by_namespace["small"]] == ["pods-1-0"]
    wrong = [
        (namespace, key)
        for namespace, objects in by_namespace.items()
        for table in objects
        for key in table_keys(table)
        if not key.startswith(f"{KEY_VERSION}|{namespace}|")
    ]
    assert wrong == []
    assert held_placements(built, KEY_VERSION) == entries  # the round trip


def test_a_key_in_another_namespaces_table_is_not_held() -> None:
    """A key read back from a table of another namespace than its own is one the policy
    never finds there: not held, so the controller does not inherit it from there."""
    key, placement = _entry("a", 1)
    (table,) = tables({key: placement}, KEY_VERSION)
    moved = {**table, "metadata": {**table["metadata"], "namespace": "b"}}
    assert held_placements([table], KEY_VERSION) == {key: placement}
    assert held_placements([moved], KEY_VERSION) == {}
    with pytest.raises(InputError):
        tables({"not-a-key": placement}, KEY_VERSION)


def test_sources_count_keys_per_object() -> None:
    index = SourceIndex()
    gpu = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "rs", "namespace": NS},
        "spec": {
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {
                    "containers": [
                        {
                            "name": "c",
                            "image": "vllm/vllm-openai:v0.9.0",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ]
                },
            }
        },
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": NS},
        "spec": gpu["spec"]["template"]["spec"],
    }
    stored_rs, stored_pod = SourceIndex.transform(gpu), SourceIndex.transform(pod)
    assert stored_rs["keys"].keys() == stored_pod["keys"].keys() == keys_of(pod).keys()
    index.on_listed(REPLICA_SET, {}, {(NS, "rs"): stored_rs})
    index.on_event(POD, None, stored_pod)
    assert len(index.pods) == 1
    index.on_event(REPLICA_SET, stored_rs, None)
    assert len(index.pods) == 1  # the pod still has it
    index.on_event(POD, stored_pod, None)
    assert index.pods == {}
    kept = index.current()  # kept a while after the last object went, then forgotten
    assert kept.keys() == stored_pod["keys"].keys()
    assert index.current(now=time.monotonic() + index.keep_seconds + 1) == {}
    assert not index.synced()


def test_the_tables_hold_the_class_bound_when_the_webhook_is_set_to(
    kb: KnowledgeBase, state: ClusterState, work: Any
) -> None:
    """``placement.boundCudaClass``: the policy's parameters are the webhook's decisions, so
    they carry the CUDA class bound exactly when the webhook's configuration asks for it."""
    bounded = Admitter.from_config(
        WebhookConfig.from_mapping({"placement": {"boundCudaClass": True}}), kb=kb
    )
    plain = Admitter.from_config(WebhookConfig(), kb=kb)
    pods = {}
    for pod in work.pods:
        key = pod_key(pod, NS) if may_need_gpu(pod) else None
        if key is not None:
            pods[key] = key_pod(pod, NS)

    def class_keyed(admitter: Admitter) -> int:
        placed = decide_all(admitter, pods, state).values()
        return sum(
            any(e.get("key") == L.CUDA_CODE for t in p.terms or () for e in t["matchExpressions"])
            for p in placed
        )

    assert class_keyed(bounded) > 30
    assert class_keyed(plain) == 0


@given(
    st.lists(
        st.text(st.characters(blacklist_characters="\n\t", blacklist_categories=["Cs"])),
        max_size=8,
        unique=True,
    )
)
def test_keys_round_trip_through_the_pods_text(tails: list[str]) -> None:
    """Whatever a key holds besides a newline or tab (separators of every kind, spaces,
    unicode) is read back as written, with its own placement, and no key is found inside
    another's line: the policy's ``split`` at ``\\n<key>\\t`` finds a key only where a line
    starts with it."""
    entries = {f"{KEY_VERSION}|ns|{tail}": Placement(f"r{i}", None) for i, tail in enumerate(tails)}
    built = tables(entries, KEY_VERSION)
    assert held_placements(built, KEY_VERSION) == entries
    for table in built:
        text = table["spec"]["pods"]
        for key, ident in table_keys(table).items():
            parts = text.split("\n" + key + "\t", 1)
            assert len(parts) == 2 and parts[1].split("\n", 1)[0] == ident


def test_a_key_a_table_cannot_hold_is_left_out() -> None:
    """A key with a newline or a tab (from an annotation value) would break the key lines: it
    is not stored (the policy leaves its pods unplaced and warns), the namespace's other keys
    are, and a table written before the keys were text holds none for the policy."""
    ok = f"{KEY_VERSION}|ns|k"
    placement = Placement("r", ())
    assert storable(ok) and not storable(ok + "\n") and not storable(ok + "\tx")
    entries = {ok: placement, ok + "\n": placement, ok + "\tx": placement}
    (table,) = tables(entries, KEY_VERSION)
    assert held_placements([table], KEY_VERSION) == {ok: placement}
    old = {**table, "spec": {**table["spec"], "pods": {ok: placement.ident()}}}
    assert held_placements([old], KEY_VERSION) == {}
