"""Merging cudasched's terms into a pod's own node affinity.

The central promise, checked by a property test over random pods, fleets and requirements:
the merged pod can land exactly on the nodes the pod allowed before AND our terms allow (so
never on a node the user's own affinity refuses, whatever keys it uses), the merge is
idempotent, a new requirement replaces only our earlier injection, and the result is a pod the
API server accepts.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.placement.merge import (
    MARKER,
    MAX_MERGED_TERMS,
    PREFERRED_KEY,
    REQUIRED_KEY,
    AffinityMode,
    merge_preferred,
    merge_required,
    node_affinity,
)
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.vocab.nodeaffinity import Node, NodeSelector, PreferredTerms, RequiredNodeAffinity
from tests.support.builders import expr, term
from tests.support.k8s_schema import assert_valid_node_affinity, assert_valid_pod


def required_terms(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return spec["affinity"]["nodeAffinity"][REQUIRED_KEY]["nodeSelectorTerms"]


def with_required(spec: dict[str, Any], terms: list[Any]) -> dict[str, Any]:
    out = copy.deepcopy(spec)
    out.setdefault("affinity", {}).setdefault("nodeAffinity", {})[REQUIRED_KEY] = {
        "nodeSelectorTerms": terms
    }
    return out


CONTAINERS = [{"name": "main", "image": "nvcr.io/nvidia/tritonserver:24.05-py3"}]
BARE = {"containers": CONTAINERS}

# CUDA >= 12.4 in each scheme, as the placement compiler writes it.
OURS_CODE = [term(expr(L.CUDA_CODE, "Gt", "12039"))]
OURS_GFD = [
    term(expr(L.GFD_CUDA_MAJOR, "Gt", "12")),
    term(expr(L.GFD_CUDA_MAJOR, "In", "12"), expr(L.GFD_CUDA_MINOR, "Gt", "3")),
]

PREDICTOR_POD = """
apiVersion: v1
kind: Pod
metadata:
  name: yolo-detector-predictor-00001-deployment-7d9f8-x2k4q
  namespace: team-vision
  labels:
    component: predictor
    serving.kserve.io/inferenceservice: yolo-detector
spec:
  nodeSelector:
    nvidia.com/gpu.present: "true"
  tolerations:
  - key: nvidia.com/gpu
    operator: Exists
    effect: NoSchedule
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - key: nvidia.com/gpu.memory
            operator: Gt
            values: ["20000"]
        - matchExpressions:
          - key: node.kubernetes.io/instance-type
            operator: In
            values: ["p4d.24xlarge", "p5.48xlarge"]
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 50
        preference:
          matchExpressions:
          - key: nvidia.com/gpu.family
            operator: In
            values: ["hopper"]
    podAntiAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              serving.kserve.io/inferenceservice: yolo-detector
  containers:
  - name: kserve-container
    image: nvcr.io/nvidia/tritonserver:24.05-py3
    args: ["tritonserver", "--model-store=/mnt/models"]
    resources:
      limits:
        nvidia.com/gpu: "1"
"""

# The recipe many users copy: CUDA >= 12.0 over GFD keys, with the invalid operand "-1".
HAND_WRITTEN_POD = """
apiVersion: v1
kind: Pod
metadata:
  name: smoke
spec:
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - key: nvidia.com/cuda.runtime.major
            operator: Gt
            values: ["12"]
        - matchExpressions:
          - key: nvidia.com/cuda.runtime.major
            operator: In
            values: ["12"]
          - key: nvidia.com/cuda.runtime.minor
            operator: Gt
            values: ["-1"]
  containers:
  - name: main
    image: nvidia/cuda:12.4.1-base-ubuntu22.04
"""


def predictor() -> dict[str, Any]:
    return yaml.safe_load(PREDICTOR_POD)


def injected(*terms: dict[str, Any], user: tuple[dict[str, Any], ...] = ()) -> list[Any]:
    """Terms as the merge writes them: the user's expressions, our marker, ours."""
    return [term(*user, MARKER, *t["matchExpressions"]) for t in terms]


# --------------------------------------------------------------------------- merge_required


def test_pod_without_affinity_gets_our_terms() -> None:
    merged = merge_required(BARE, OURS_GFD)
    assert merged == BARE | {
        "affinity": {"nodeAffinity": {REQUIRED_KEY: {"nodeSelectorTerms": injected(*OURS_GFD)}}}
    }
    assert_valid_pod(merged)


def test_our_terms_are_anded_into_every_user_term() -> None:
    pod = predictor()
    merged = merge_required(pod["spec"], OURS_GFD)
    memory = expr("nvidia.com/gpu.memory", "Gt", "20000")
    instance = expr("node.kubernetes.io/instance-type", "In", "p4d.24xlarge", "p5.48xlarge")
    assert required_terms(merged) == [
        *injected(*OURS_GFD, user=(memory,)),
        *injected(*OURS_GFD, user=(instance,)),
    ]
    # Everything else is preserved exactly.
    for key in ("nodeSelector", "tolerations", "containers"):
        assert merged[key] == pod["spec"][key]
    assert merged["affinity"]["podAntiAffinity"] == pod["spec"]["affinity"]["podAntiAffinity"]
    preferred = merged["affinity"]["nodeAffinity"][PREFERRED_KEY]
    assert preferred == pod["spec"]["affinity"]["nodeAffinity"][PREFERRED_KEY]
    assert_valid_pod(pod | {"spec": merged})


def test_merged_pod_schedules_where_both_allow() -> None:
    spec = predictor()["spec"]
    merged = merge_required(spec, OURS_CODE)
    gpu = {"nvidia.com/gpu.present": "true"}
    cases = {
        Node("big-new", gpu | {"nvidia.com/gpu.memory": "81920", L.CUDA_CODE: "12080"}): True,
        Node("big-old", gpu | {"nvidia.com/gpu.memory": "81920", L.CUDA_CODE: "12020"}): False,
        Node("small-new", gpu | {"nvidia.com/gpu.memory": "16384", L.CUDA_CODE: "12080"}): False,
        Node(
            "p5", gpu | {"node.kubernetes.io/instance-type": "p5.48xlarge", L.CUDA_CODE: "12040"}
        ): True,
        Node("no-gpu-label", {"nvidia.com/gpu.memory": "81920", L.CUDA_CODE: "12080"}): False,
    }
    compiled = RequiredNodeAffinity.from_pod_spec(merged)
    for node, expected in cases.items():
        assert compiled.match(node) is expected, node.name


def test_input_is_never_mutated() -> None:
    spec = predictor()["spec"]
    before = copy.deepcopy(spec)
    ours = copy.deepcopy(OURS_GFD)
    merged = merge_required(spec, ours)
    merged2 = merge_preferred(spec, ours, 30)
    assert spec == before
    assert ours == OURS_GFD
    # ... and the output shares no mutable structure with the input.
    required_terms(merged)[0]["matchExpressions"].append(expr("x", "Exists"))
    merged2["affinity"]["nodeAffinity"][PREFERRED_KEY][-1]["preference"]["matchExpressions"].clear()
    merged["affinity"]["nodeAffinity"][PREFERRED_KEY].clear()
    assert spec == before
    assert ours == OURS_GFD


@pytest.mark.parametrize("ours", [OURS_CODE, OURS_GFD, []])
def test_idempotent_and_deterministic(ours: list[dict[str, Any]]) -> None:
    spec = predictor()["spec"]
    once = merge_required(spec, ours)
    assert merge_required(once, ours) == once
    assert merge_required(spec, ours) == once


def test_requirement_change_replaces_our_terms() -> None:
    spec = predictor()["spec"]
    old = merge_required(spec, OURS_GFD)
    new = merge_required(old, OURS_CODE)
    assert new == merge_required(spec, OURS_CODE)


def test_hand_written_owned_expressions_are_kept() -> None:
    """The user's expressions on keys cudasched compiles to are the user's: ANDed, not replaced
    (issue 12 item 6). Even an invalid one stays, for the API server to reject as it would
    without us."""
    pod = yaml.safe_load(HAND_WRITTEN_POD)
    merged = merge_required(pod["spec"], OURS_CODE)
    users = pod["spec"]["affinity"]["nodeAffinity"][REQUIRED_KEY]["nodeSelectorTerms"]
    assert required_terms(merged) == [
        *injected(*OURS_CODE, user=tuple(users[0]["matchExpressions"])),
        *injected(*OURS_CODE, user=tuple(users[1]["matchExpressions"])),
    ]
    assert merge_required(merged, []) == pod["spec"]


def test_users_own_cuda_constraint_survives() -> None:
    """Issue 12 item 6: a pod with its own ``nvidia.com/cuda.runtime.major In [12]`` is never
    admitted to a CUDA 13 driver because cudasched added CUDA >= 12.4."""
    mine = term(expr(L.GFD_OLD_CUDA_MAJOR, "In", "12"))
    spec = with_required(BARE, [mine])
    merged = merge_required(spec, OURS_CODE)
    compiled = RequiredNodeAffinity.from_pod_spec(merged)
    cuda13 = Node("new", {L.GFD_OLD_CUDA_MAJOR: "13", L.CUDA_CODE: "13000"})
    cuda12 = Node("ok", {L.GFD_OLD_CUDA_MAJOR: "12", L.CUDA_CODE: "12080"})
    assert not compiled.match(cuda13) and compiled.match(cuda12)
    # Preferred mode keeps the user's preferences on the same keys too.
    pref = {"weight": 9, "preference": mine}
    with_pref = BARE | {"affinity": {"nodeAffinity": {PREFERRED_KEY: [pref]}}}
    assert (
        merge_preferred(with_pref, OURS_CODE)["affinity"]["nodeAffinity"][PREFERRED_KEY][0] == pref
    )


def test_no_constraint_only_strips() -> None:
    # Nothing owned: the spec comes back unchanged.
    spec = predictor()["spec"]
    assert merge_required(spec, []) == spec
    assert merge_required(BARE, []) == BARE
    # Only our constraints: the required block goes, and the containers it leaves empty.
    assert merge_required(merge_required(BARE, OURS_CODE), []) == BARE
    # The user's, on whatever keys, stay.
    pod = yaml.safe_load(HAND_WRITTEN_POD)
    assert merge_required(pod["spec"], []) == pod["spec"]
    # Other parts of nodeAffinity stay.
    mixed = merge_required(spec, OURS_CODE)
    del mixed["affinity"]["nodeAffinity"][REQUIRED_KEY]
    stripped = merge_required(merge_required(mixed, OURS_CODE), [])
    assert stripped == mixed


def test_stripping_recovers_the_user_terms() -> None:
    spec = predictor()["spec"]
    assert merge_required(merge_required(spec, OURS_GFD), []) == spec


def test_term_emptied_by_stripping_is_dropped_user_empty_term_is_kept() -> None:
    user = term(expr("zone", "In", "a"))
    spec = with_required(BARE, [user, *injected(term(expr(L.CUDA_CODE, "Gt", "11000"))), {}])
    merged = merge_required(spec, OURS_CODE)
    # The term that was ours only is gone; the user's empty term still matches nothing and is
    # not crossed (crossing would make it match every node with CUDA >= 12.4).
    assert required_terms(merged) == [*injected(*OURS_CODE, user=(expr("zone", "In", "a"),)), {}]
    assert merge_required(merged, OURS_CODE) == merged
    node = Node("n", {"zone": "b", L.CUDA_CODE: "12080"})
    assert not RequiredNodeAffinity.from_pod_spec(merged).match(node)
    assert_valid_pod(merged)


def test_only_empty_user_terms_stay_unschedulable() -> None:
    spec = with_required(BARE, [{}])
    merged = merge_required(spec, OURS_CODE)
    assert required_terms(merged) == [{}]
    assert not RequiredNodeAffinity.from_pod_spec(merged).match(Node("n", {L.CUDA_CODE: "13000"}))


def test_duplicates_made_by_stripping_are_dropped() -> None:
    a = expr("zone", "In", "a")
    spec = with_required(
        BARE,
        [
            *injected(term(expr(L.CUDA_CODE, "Gt", "1")), user=(a,)),
            *injected(term(expr(L.COMPUTE_CODE, "Gt", "70")), user=(a,)),
            term(a),  # the user's own duplicate of the stripped form
        ],
    )
    assert required_terms(merge_required(spec, [])) == [term(a), term(a)]
    # Duplicates the user wrote are left alone.
    twice = with_required(BARE, [term(a), term(a)])
    assert merge_required(twice, []) == twice
    merged = merge_required(twice, OURS_CODE)
    assert required_terms(merged) == injected(*OURS_CODE, user=(a,))
    assert merge_required(merged, OURS_CODE) == merged


def test_match_fields_are_kept_in_every_product_term() -> None:
    fields = {"matchFields": [expr("metadata.name", "In", "gpu-7")]}
    spec = with_required(BARE, [fields])
    merged = merge_required(spec, OURS_GFD)
    assert required_terms(merged) == [fields | ours for ours in injected(*OURS_GFD)]
    assert merge_required(merged, []) == spec
    assert_valid_pod(merged)


def test_mixed_terms_keep_their_user_part() -> None:
    mine = (expr("zone", "In", "a"), expr(L.GFD_CUDA_MAJOR, "Gt", "11"))
    spec = with_required(BARE, [term(*mine)])
    merged = merge_required(spec, OURS_CODE)
    assert required_terms(merged) == injected(*OURS_CODE, user=mine)
    # Replacing our part later leaves the user's part as it was.
    assert merge_required(merged, OURS_GFD) == merge_required(spec, OURS_GFD)


def test_node_selector_is_untouched() -> None:
    spec = BARE | {"nodeSelector": {L.CUDA_CODE: "11000", "zone": "a"}}
    merged = merge_required(spec, OURS_CODE)
    assert merged["nodeSelector"] == spec["nodeSelector"]


def test_null_affinity_parts_are_filled_in() -> None:
    for spec in (BARE | {"affinity": None}, BARE | {"affinity": {"nodeAffinity": None}}):
        merged = merge_required(spec, OURS_CODE)
        assert required_terms(merged) == injected(*OURS_CODE)
        assert_valid_pod(merged)


def test_cross_product_limit() -> None:
    ours = [term(expr(L.CUDA_CODE, "Gt", str(12000 + i))) for i in range(4)]
    fits = with_required(
        BARE, [term(expr("zone", "In", f"z{i}")) for i in range(MAX_MERGED_TERMS // 4)]
    )
    assert len(required_terms(merge_required(fits, ours))) == MAX_MERGED_TERMS
    too_many = with_required(
        BARE, [term(expr("zone", "In", f"z{i}")) for i in range(MAX_MERGED_TERMS // 4 + 1)]
    )
    with pytest.raises(InputError, match="more than the limit"):
        merge_required(too_many, ours)
    # A pod that already has many terms is fine as long as the merge does not multiply them.
    many = with_required(BARE, [term(expr("zone", "In", f"z{i}")) for i in range(100)])
    assert len(required_terms(merge_required(many, OURS_CODE))) == 100


BAD_OUR_TERMS = [
    pytest.param("not a list", id="string"),
    pytest.param([{}], id="empty-term"),
    pytest.param([{"matchExpressions": []}], id="no-expressions"),
    pytest.param([term(expr("zone", "In", "a"))], id="key-not-owned"),
    pytest.param([term(expr(L.CUDA_CODE, "Gt", "-1"))], id="negative-operand"),
    pytest.param([term(expr(L.CUDA_CODE, "Gt", "12.4"))], id="non-integer-operand"),
    pytest.param([term(expr(L.CUDA_CODE, "Gt", "1", "2"))], id="two-operands"),
    pytest.param([term(expr(L.CUDA_CODE, "In"))], id="in-without-values"),
    pytest.param([term(expr(L.GPU_DATACENTER, "In", "not valid"))], id="bad-label-value"),
    pytest.param([term(expr(L.CUDA_CODE, "Equals", "1"))], id="bad-operator"),
    pytest.param(
        [term(expr(L.CUDA_CODE, "Gt", "1")) | {"matchFields": [expr("metadata.name", "In", "n")]}],
        id="match-fields",
    ),
    pytest.param([term(expr(L.CUDA_CODE, "Gt", "1")) | {"extra": 1}], id="unknown-field"),
    pytest.param(["term"], id="term-not-mapping"),
]


@pytest.mark.parametrize("ours", BAD_OUR_TERMS)
def test_invalid_our_terms_raise(ours: Any) -> None:
    with pytest.raises(InputError):
        merge_required(BARE, ours)
    with pytest.raises(InputError):
        merge_preferred(BARE, ours)


def test_invalid_our_terms_message_names_the_value() -> None:
    bad = [OURS_CODE[0], term(expr(L.CUDA_CODE, "Gt", "-1"))]
    with pytest.raises(InputError, match=r"terms\[1\]\.matchExpressions\[0\]\.values\[0\].*'-1'"):
        merge_required(BARE, bad)


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param("spec", id="not-a-mapping"),
        pytest.param(BARE | {"affinity": ["x"]}, id="affinity-list"),
        pytest.param(BARE | {"affinity": {"nodeAffinity": "x"}}, id="node-affinity-string"),
        pytest.param(with_required(BARE, []), id="zero-terms"),
        pytest.param(BARE | {"affinity": {"nodeAffinity": {REQUIRED_KEY: {}}}}, id="no-terms-key"),
        pytest.param(BARE | {"affinity": {"nodeAffinity": {REQUIRED_KEY: []}}}, id="required-list"),
        pytest.param(with_required(BARE, ["x"]), id="term-string"),
        pytest.param(with_required(BARE, [{"matchExpressions": "x"}]), id="expressions-string"),
        pytest.param(with_required(BARE, [{"matchExpressions": ["x"]}]), id="expression-string"),
    ],
)
def test_unusable_pod_spec_raises(spec: Any) -> None:
    with pytest.raises(InputError):
        merge_required(spec, OURS_CODE)


def test_user_parse_errors_are_preserved_not_fixed() -> None:
    # The API server accepts a non-integer Gt operand; the scheduler never matches that term.
    # ANDing keeps it never matching, which is exactly "the pod's constraint AND ours".
    bad = term(expr("nvidia.com/gpu.memory", "Gt", "20GB"))
    good = term(expr("zone", "In", "a"))
    merged = merge_required(with_required(BARE, [bad, good]), OURS_CODE)
    node = Node("n", {"zone": "a", "nvidia.com/gpu.memory": "81920", L.CUDA_CODE: "12080"})
    compiled = RequiredNodeAffinity.from_pod_spec(merged)
    assert compiled.match(node)
    assert len(compiled.errors) == 1


# --------------------------------------------------------------------------- merge_preferred


def preferred_of(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return spec["affinity"]["nodeAffinity"][PREFERRED_KEY]


def test_preferred_added_after_user_terms() -> None:
    spec = predictor()["spec"]
    merged = merge_preferred(spec, OURS_GFD, weight=30)
    user = spec["affinity"]["nodeAffinity"][PREFERRED_KEY]
    assert preferred_of(merged) == user + [
        {"weight": 30, "preference": t} for t in injected(*OURS_GFD)
    ]
    # The required terms are not touched by merge_preferred.
    assert required_terms(merged) == required_terms(spec)
    assert_valid_pod(merged)


def test_preferred_replaces_ours_keeps_mixed_and_user_terms() -> None:
    mixed = {"weight": 5, "preference": term(expr("zone", "In", "a"), expr(L.CUDA_CODE, "Gt", "1"))}
    by_name = {"weight": 7, "preference": {"matchFields": [expr("metadata.name", "In", "n")]}}
    users_own = {"weight": 3, "preference": term(expr(L.CUDA_CODE, "Gt", "12999"))}
    old_ours = {"weight": 100, "preference": injected(term(expr(L.CUDA_CODE, "Gt", "11000")))[0]}
    spec = BARE | {
        "affinity": {"nodeAffinity": {PREFERRED_KEY: [mixed, old_ours, users_own, by_name]}}
    }
    merged = merge_preferred(spec, OURS_CODE, weight=40)
    assert preferred_of(merged) == [
        mixed,
        users_own,
        by_name,
        {"weight": 40, "preference": injected(*OURS_CODE)[0]},
    ]
    assert merge_preferred(merged, OURS_CODE, weight=40) == merged
    assert merge_preferred(merged, OURS_CODE, weight=60) == merge_preferred(spec, OURS_CODE, 60)


def test_preferred_no_constraint_strips_and_cleans_up() -> None:
    spec = merge_preferred(BARE, OURS_GFD)
    assert merge_preferred(spec, []) == BARE
    untouched = BARE | {"affinity": {"nodeAffinity": {PREFERRED_KEY: []}}}
    assert merge_preferred(untouched, []) == untouched


@pytest.mark.parametrize("weight", [0, 101, -1, True, 1.5, "50"])
def test_preferred_weight_range(weight: Any) -> None:
    with pytest.raises(InputError, match="weight"):
        merge_preferred(BARE, OURS_CODE, weight)


@pytest.mark.parametrize("weight", [1, 100])
def test_preferred_weight_bounds_are_valid(weight: int) -> None:
    assert_valid_pod(merge_preferred(BARE, OURS_CODE, weight))


def test_preferred_score_adds_our_weight() -> None:
    spec = predictor()["spec"]
    merged = merge_preferred(spec, OURS_CODE, weight=25)
    hopper = {"nvidia.com/gpu.family": "hopper"}
    assert (
        PreferredTerms.from_pod_spec(merged).score(Node("a", hopper | {L.CUDA_CODE: "12080"})) == 75
    )
    assert (
        PreferredTerms.from_pod_spec(merged).score(Node("b", hopper | {L.CUDA_CODE: "12000"})) == 50
    )


# --------------------------------------------------------------------------- node_affinity


def test_node_affinity_required_and_preferred() -> None:
    required = node_affinity(OURS_GFD, "required")
    assert required == {REQUIRED_KEY: {"nodeSelectorTerms": OURS_GFD}}
    preferred = node_affinity(OURS_GFD, AffinityMode.PREFERRED, weight=10)
    assert preferred == {PREFERRED_KEY: [{"weight": 10, "preference": t} for t in OURS_GFD]}
    assert node_affinity([], "required") == {}
    assert node_affinity([], "preferred") == {}
    assert_valid_node_affinity(required)
    assert_valid_node_affinity(preferred)
    # Any valid label selector is allowed here, not only owned keys.
    assert node_affinity([term(expr("zone", "In", "a"))], " Required ")[REQUIRED_KEY]


@pytest.mark.parametrize("mode", ["both", "", None, 1])
def test_node_affinity_bad_mode(mode: Any) -> None:
    with pytest.raises(InputError, match="mode"):
        node_affinity(OURS_CODE, mode)


def test_node_affinity_bad_terms() -> None:
    with pytest.raises(InputError):
        node_affinity([term(expr("zone", "Gt", "x"))], "required")
    with pytest.raises(InputError):
        node_affinity([{}], "preferred")


def test_exists_values_are_canonical() -> None:
    ours = [{"matchExpressions": [{"key": L.GPU_DATACENTER, "operator": "Exists", "values": []}]}]
    merged = merge_required(BARE, ours)
    assert required_terms(merged) == injected(term(expr(L.GPU_DATACENTER, "Exists")))
    assert merge_required(merged, ours) == merged


# --------------------------------------------------------------------------- properties

USER_KEYS = ("zone", "pool", "mem")
USER_VALUES = ("a", "b", "")
INT_OPERANDS = ("0", "8", "16", "080")
NODE_NAMES = ("n0", "n1", "n2", "")
NODE_VALUES = ("a", "b", "", "8", "12", "0016", "x", "8.0")

OWNED_EXPRESSIONS = st.one_of(
    st.builds(
        lambda op, code: expr(L.CUDA_CODE, op, code),
        st.sampled_from(("Gt", "Lt")),
        st.sampled_from(("11079", "12039", "12079", "12999")),
    ),
    st.builds(lambda v: expr(L.COMPUTE_CODE, "Gt", v), st.sampled_from(("69", "79", "89"))),
    st.builds(lambda v: expr(L.GPU_DATACENTER, "In", v), st.sampled_from(("true", "false"))),
    st.builds(
        lambda op, vs: expr(L.GFD_CUDA_MAJOR, op, *vs),
        st.sampled_from(("In", "NotIn")),
        st.lists(st.sampled_from(("11", "12", "13")), min_size=1, max_size=2, unique=True),
    ),
    st.builds(lambda v: expr(L.GFD_CUDA_MINOR, "Gt", v), st.sampled_from(("0", "3", "7"))),
    st.builds(lambda v: expr(L.DRIVER_BRANCH, "NotIn", v), st.sampled_from(("470", "535"))),
    st.builds(
        lambda op: expr(L.GFD_OLD_CUDA_MAJOR, op), st.sampled_from(("Exists", "DoesNotExist"))
    ),
)
OUR_TERMS = st.lists(
    st.lists(OWNED_EXPRESSIONS, min_size=1, max_size=3).map(lambda es: term(*es)), max_size=4
)

USER_EXPRESSIONS = st.one_of(
    st.builds(
        lambda k, op, vs: expr(k, op, *vs),
        st.sampled_from(USER_KEYS),
        st.sampled_from(("In", "NotIn")),
        st.lists(st.sampled_from(USER_VALUES), min_size=1, max_size=2, unique=True),
    ),
    st.builds(
        lambda k, op: expr(k, op),
        st.sampled_from(USER_KEYS),
        st.sampled_from(("Exists", "DoesNotExist")),
    ),
    st.builds(
        lambda k, op, v: expr(k, op, v),
        st.sampled_from(USER_KEYS),
        st.sampled_from(("Gt", "Lt")),
        st.sampled_from(INT_OPERANDS),
    ),
)
USER_FIELDS = st.builds(
    lambda op, name: expr("metadata.name", op, name),
    st.sampled_from(("In", "NotIn")),
    st.sampled_from(NODE_NAMES[:3]),
)


def user_terms(with_owned: bool) -> st.SearchStrategy[list[dict[str, Any]]]:
    exprs = st.one_of(USER_EXPRESSIONS, OWNED_EXPRESSIONS) if with_owned else USER_EXPRESSIONS
    return st.lists(
        st.fixed_dictionaries(
            {},
            optional={
                "matchExpressions": st.lists(exprs, max_size=3),
                "matchFields": st.lists(USER_FIELDS, min_size=1, max_size=1),
            },
        ),
        min_size=1,
        max_size=4,
    )


def pod_specs(with_owned: bool) -> st.SearchStrategy[dict[str, Any]]:
    required = st.one_of(st.none(), user_terms(with_owned))
    preferred = st.lists(
        st.builds(
            lambda w, t: {"weight": w, "preference": t},
            st.integers(1, 100),
            st.lists(USER_EXPRESSIONS, min_size=1, max_size=2).map(lambda es: term(*es)),
        ),
        max_size=2,
    )
    node_selector = st.dictionaries(
        st.sampled_from(("zone", "pool")), st.sampled_from(USER_VALUES), max_size=1
    )

    def build(req: list[Any] | None, pref: list[Any], sel: dict[str, str]) -> dict[str, Any]:
        spec: dict[str, Any] = {"containers": CONTAINERS}
        if sel:
            spec["nodeSelector"] = sel
        node_aff: dict[str, Any] = {}
        if req is not None:
            node_aff[REQUIRED_KEY] = {"nodeSelectorTerms": req}
        if pref:
            node_aff[PREFERRED_KEY] = pref
        if node_aff:
            spec["affinity"] = {"nodeAffinity": node_aff}
        return spec

    return st.builds(build, required, preferred, node_selector)


OWNED_NODE_LABELS = {
    L.CUDA_CODE: ("11080", "12040", "12080", "13000", "x"),
    L.COMPUTE_CODE: ("70", "80", "90"),
    L.GPU_DATACENTER: ("true", "false"),
    L.GFD_CUDA_MAJOR: ("11", "12", "13"),
    L.GFD_CUDA_MINOR: ("0", "4", "8"),
    L.DRIVER_BRANCH: ("470", "535", "570"),
    L.GFD_OLD_CUDA_MAJOR: ("12",),
}


@st.composite
def nodes(draw: st.DrawFn) -> Node:
    labels: dict[str, str] = {}
    for key in draw(st.lists(st.sampled_from(USER_KEYS), unique=True)):
        labels[key] = draw(st.sampled_from(NODE_VALUES))
    for key in draw(st.lists(st.sampled_from(sorted(OWNED_NODE_LABELS)), unique=True)):
        labels[key] = draw(st.sampled_from(OWNED_NODE_LABELS[key]))
    return Node(draw(st.sampled_from(NODE_NAMES)), labels)


FLEETS = st.lists(nodes(), min_size=1, max_size=8)


def reference_strip(spec: dict[str, Any]) -> dict[str, Any]:
    """What "remove our injection" means, spelled out for the oracle: in each term drop our
    marker and what follows it, drop terms that held only that, drop the block if no term is
    left. A spec the user wrote has no marker and comes back as it is."""
    out = copy.deepcopy(spec)
    node_aff = (out.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_aff.get(REQUIRED_KEY)
    if required is None:
        return out
    kept = []
    for t in required["nodeSelectorTerms"]:
        exprs = t.get("matchExpressions") or []
        if MARKER not in exprs:
            kept.append(t)
            continue
        user = exprs[: exprs.index(MARKER)]
        rest = {k: v for k, v in t.items() if k != "matchExpressions"}
        if user:
            rest["matchExpressions"] = user
        if rest and rest not in kept:
            kept.append(rest)
    if kept:
        required["nodeSelectorTerms"] = kept
    else:
        del node_aff[REQUIRED_KEY]
    return out


def eligible(spec: dict[str, Any], fleet: list[Node]) -> list[bool]:
    compiled = RequiredNodeAffinity.from_pod_spec(spec)
    return [compiled.match(node) for node in fleet]


def allowed_by(ours: list[dict[str, Any]], fleet: list[Node]) -> list[bool]:
    if not ours:  # no terms means no constraint, not "no node"
        return [True] * len(fleet)
    compiled = NodeSelector.from_terms(ours)
    return [compiled.match(node) for node in fleet]


def check_merge(spec: dict[str, Any], ours: list[dict[str, Any]], fleet: list[Node]) -> None:
    merged = merge_required(spec, ours)
    users = eligible(reference_strip(spec), fleet)
    after = eligible(merged, fleet)
    assert after == [b and o for b, o in zip(users, allowed_by(ours, fleet), strict=True)]
    # Issue 12 item 6: never a node the user's own affinity refuses.
    assert all(u for u, a in zip(users, after, strict=True) if a)
    assert merge_required(merged, ours) == merged
    assert eligible(merge_required(merged, []), fleet) == users  # removing ours gives theirs
    assert merged.get("nodeSelector") == spec.get("nodeSelector")
    assert merged.get("affinity", {}).get("nodeAffinity", {}).get(PREFERRED_KEY) == (
        spec.get("affinity", {}).get("nodeAffinity", {}).get(PREFERRED_KEY)
    )
    assert_valid_pod(merged)


@settings(max_examples=120)
@given(spec=pod_specs(with_owned=False), ours=OUR_TERMS, fleet=FLEETS)
def test_merge_is_intersection_and_idempotent(
    spec: dict[str, Any], ours: list[dict[str, Any]], fleet: list[Node]
) -> None:
    assert reference_strip(spec) == spec  # the user wrote no marker
    check_merge(spec, ours, fleet)


@settings(max_examples=200)
@given(spec=pod_specs(with_owned=True), ours=OUR_TERMS, fleet=FLEETS)
def test_users_expressions_on_gfd_and_cudasched_keys_are_kept(
    spec: dict[str, Any], ours: list[dict[str, Any]], fleet: list[Node]
) -> None:
    """Random user affinities over GFD and cudasched keys: the eligible set after the merge is
    the user's eligible set AND ours, hence a subset of the user's."""
    assert reference_strip(spec) == spec
    check_merge(spec, ours, fleet)


@settings(max_examples=120)
@given(spec=pod_specs(with_owned=True), first=OUR_TERMS, second=OUR_TERMS, fleet=FLEETS)
def test_a_new_requirement_replaces_only_our_injection(
    spec: dict[str, Any],
    first: list[dict[str, Any]],
    second: list[dict[str, Any]],
    fleet: list[Node],
) -> None:
    once = merge_required(spec, first)
    again = merge_required(once, second)
    try:
        direct = merge_required(spec, second)
    except InputError:
        return  # over the term limit either way
    if second:
        assert again == direct
    else:  # an empty matchExpressions list the user wrote is not told apart from none
        assert eligible(again, fleet) == eligible(direct, fleet)
    check_merge(once, second, fleet)


@settings(max_examples=60)
@given(spec=pod_specs(with_owned=False), ours=OUR_TERMS, weight=st.integers(1, 100), fleet=FLEETS)
def test_merge_preferred_scores_and_is_idempotent(
    spec: dict[str, Any], ours: list[dict[str, Any]], weight: int, fleet: list[Node]
) -> None:
    merged = merge_preferred(spec, ours, weight)
    assert merge_preferred(merged, ours, weight) == merged
    assert eligible(merged, fleet) == eligible(spec, fleet)
    user = PreferredTerms.from_pod_spec(spec)
    after = PreferredTerms.from_pod_spec(merged)
    unique = [t for i, t in enumerate(ours) if t not in ours[:i]]
    for node in fleet:
        ours_score = sum(weight for t in unique if NodeSelector.from_terms([t]).match(node))
        assert after.score(node) == user.score(node) + ours_score
    assert_valid_pod(merged)


# --------------------------------------------------------------------------- the validator itself


@pytest.mark.parametrize(
    "node_aff",
    [
        pytest.param({REQUIRED_KEY: {"nodeSelectorTerms": []}}, id="no-terms"),
        pytest.param({REQUIRED_KEY: {}}, id="terms-missing"),
        pytest.param(node_affinity(OURS_CODE, "required") | {"extra": 1}, id="unknown-field"),
        pytest.param(
            with_required({}, [term(expr("a", "Gt", "-1"))])["affinity"]["nodeAffinity"],
            id="gt-negative",
        ),
        pytest.param(
            with_required({}, [term(expr("a", "Lt", "x"))])["affinity"]["nodeAffinity"],
            id="lt-word",
        ),
        pytest.param(
            with_required({}, [term(expr("a", "Gt", "1", "2"))])["affinity"]["nodeAffinity"],
            id="gt-two",
        ),
        pytest.param(
            with_required({}, [term(expr("a", "In"))])["affinity"]["nodeAffinity"], id="in-empty"
        ),
        pytest.param(
            with_required({}, [term(expr("a", "Exists", "x"))])["affinity"]["nodeAffinity"],
            id="exists-value",
        ),
        pytest.param(
            with_required({}, [term(expr("a b", "Exists"))])["affinity"]["nodeAffinity"],
            id="bad-key",
        ),
        pytest.param(
            with_required({}, [term(expr("a", "In", "x y"))])["affinity"]["nodeAffinity"],
            id="bad-value",
        ),
        pytest.param(
            with_required({}, [{"matchFields": [expr("metadata.uid", "In", "x")]}])["affinity"][
                "nodeAffinity"
            ],
            id="field-key",
        ),
        pytest.param({PREFERRED_KEY: [{"weight": 0, "preference": OURS_CODE[0]}]}, id="weight-0"),
        pytest.param(
            {PREFERRED_KEY: [{"weight": 101, "preference": OURS_CODE[0]}]}, id="weight-101"
        ),
        pytest.param(
            {PREFERRED_KEY: [{"weight": "5", "preference": OURS_CODE[0]}]}, id="weight-string"
        ),
    ],
)
def test_validator_rejects_what_the_api_server_rejects(node_aff: dict[str, Any]) -> None:
    with pytest.raises(AssertionError):
        assert_valid_node_affinity(node_aff)


def test_thousands_of_user_terms_cost_one_pass() -> None:
    """A legal pod with 2,000 required terms: stripping and crossing de-duplicate through a set
    (the result is the same as before: one alternative keeps the term count)."""
    user = [term(expr("topology.kubernetes.io/zone", "In", f"zone-{i}")) for i in range(2000)]
    spec = {"affinity": {"nodeAffinity": {REQUIRED_KEY: {"nodeSelectorTerms": user}}}}
    ours = [term(expr("cudasched.io/cuda.code", "Gt", "12039"))]
    merged = merge_required(spec, ours)
    terms = merged["affinity"]["nodeAffinity"][REQUIRED_KEY]["nodeSelectorTerms"]
    assert len(terms) == 2000
    assert all(t["matchExpressions"][-1]["key"] == "cudasched.io/cuda.code" for t in terms)
    assert merge_required(merged, ours) == merged
    with pytest.raises(InputError, match=f"more than the limit of {MAX_MERGED_TERMS}"):
        merge_required(spec, [*ours, term(expr("cudasched.io/cuda.code", "Gt", "13000"))])


def test_unhashable_expression_key_is_input_error_or_kept() -> None:
    bad = {"key": ["x"], "operator": "Exists"}
    spec = {"affinity": {"nodeAffinity": {REQUIRED_KEY: {"nodeSelectorTerms": [term(bad)]}}}}
    ours = [term(expr("cudasched.io/cuda.code", "Gt", "12039"))]
    merged = merge_required(spec, ours)
    (only,) = merged["affinity"]["nodeAffinity"][REQUIRED_KEY]["nodeSelectorTerms"]
    assert only["matchExpressions"][0] == bad
