"""The node-affinity evaluator must agree with Kubernetes, quirks included.

Expected results come from the upstream Go code and tests (component-helpers ``nodeaffinity``,
apimachinery ``labels.Requirement`` and ``validation``), as summarised in
``shared/reference/kserve-k8s.md`` section 5.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.vocab.errors import InputError
from cudasched.vocab.labelsyntax import label_key_ok, label_value_ok, parse_int64
from cudasched.vocab.nodeaffinity import Node, NodeSelector, PreferredTerms, RequiredNodeAffinity
from cudasched.vocab.nodeterms import CompileCache, NodeSelectorError
from tests.support.builders import expr
from tests.support.builders import term as term_of


def selector(*terms: dict[str, Any]) -> NodeSelector:
    return NodeSelector.compile({"nodeSelectorTerms": list(terms)})


def one(*exprs: dict[str, Any]) -> NodeSelector:
    return selector({"matchExpressions": list(exprs)})


NODE = Node(
    "gpu-a100-1",
    {
        "zone": "a",
        "empty": "",
        "cuda": "12040",
        "padded": "08",
        "padded4": "0206",
        "float": "8.0",
        "word": "abc",
        "huge": "9223372036854775808",
        "neg": "-5",
        "plus": "+9",
    },
)


# --------------------------------------------------------------------------- operators

OPERATOR_CASES = [
    # In
    (expr("zone", "In", "a"), True),
    (expr("zone", "In", "b", "a"), True),
    (expr("zone", "In", "b"), False),
    (expr("missing", "In", "a"), False),
    (expr("empty", "In", ""), True),
    (expr("missing", "In", ""), False),
    # NotIn: an absent key matches
    (expr("zone", "NotIn", "a"), False),
    (expr("zone", "NotIn", "b"), True),
    (expr("missing", "NotIn", "a"), True),
    (expr("empty", "NotIn", ""), False),
    # Exists / DoesNotExist: an empty value is present
    (expr("zone", "Exists"), True),
    (expr("empty", "Exists"), True),
    (expr("missing", "Exists"), False),
    (expr("zone", "DoesNotExist"), False),
    (expr("empty", "DoesNotExist"), False),
    (expr("missing", "DoesNotExist"), True),
    # Gt: numeric, strict, base-10 on both sides
    (expr("cuda", "Gt", "12039"), True),
    (expr("cuda", "Gt", "12040"), False),
    (expr("cuda", "Gt", "12041"), False),
    (expr("cuda", "Gt", "9999"), True),  # numeric, not lexical
    (expr("padded", "Gt", "7"), True),  # "08" is 8
    (expr("padded", "Gt", "8"), False),
    (expr("padded4", "Gt", "0204"), True),  # upstream test: "0206" > "0204"
    (expr("cuda", "Gt", "012039"), True),  # leading zeros in the selector too
    (expr("float", "Gt", "1"), False),  # "8.0" is not an integer: no match, no error
    (expr("word", "Gt", "1"), False),
    (expr("empty", "Gt", "0"), False),
    (expr("huge", "Gt", "1"), False),  # int64 overflow on the node
    (expr("missing", "Gt", "0"), False),
    (expr("neg", "Gt", "0"), False),
    (expr("plus", "Gt", "8"), True),  # Go's ParseInt accepts a sign
    # Lt
    (expr("cuda", "Lt", "12041"), True),
    (expr("cuda", "Lt", "12040"), False),
    (expr("padded", "Lt", "9"), True),
    (expr("neg", "Lt", "0"), True),
    (expr("float", "Lt", "100"), False),
    (expr("missing", "Lt", "100"), False),
]


@pytest.mark.parametrize(("requirement", "expected"), OPERATOR_CASES)
def test_operator(requirement: dict[str, Any], expected: bool) -> None:
    compiled = one(requirement)
    assert compiled.errors == ()
    assert compiled.match(NODE) is expected


# --------------------------------------------------------------------------- parse errors

PARSE_ERROR_CASES = [
    (expr("cuda", "Gt", "abc"), "integer"),
    (expr("cuda", "Gt", "-1"), "label value"),  # an int, but not a valid label value
    (expr("cuda", "Gt", "+5"), "label value"),
    (expr("cuda", "Gt", "1", "2"), "exactly one"),
    (expr("cuda", "Gt"), "exactly one"),
    (expr("cuda", "Lt", "1_000"), "integer"),  # Python int() would accept it, Go does not
    (expr("cuda", "Lt", " 5"), "integer"),
    (expr("cuda", "Lt", "５"), "integer"),  # a full-width digit
    (expr("cuda", "Gt", "9223372036854775808"), "integer"),  # int64 overflow
    (expr("zone", "In"), "must not be empty"),
    (expr("zone", "NotIn"), "must not be empty"),
    (expr("zone", "Exists", "a"), "must be empty"),
    (expr("zone", "DoesNotExist", "a"), "must be empty"),
    (expr("zone", "Equals", "a"), "unsupported"),
    (expr("zone", "in", "a"), "unsupported"),  # operators are case-sensitive
    ({"key": "zone"}, "unsupported"),
    (expr("-zone", "In", "a"), "label key"),
    (expr("a/b/c", "In", "a"), "label key"),
    (expr("Example.com/zone", "In", "a"), "label key"),  # prefix must be lowercase
    (expr("/zone", "In", "a"), "label key"),
    (expr("example.com/", "In", "a"), "label key"),
    (expr("x" * 64, "In", "a"), "label key"),
    (expr("", "Exists"), "label key"),
    (expr("zone", "In", "has space"), "label value"),
    (expr("zone", "In", "a" * 64), "label value"),
    (expr("zone", "In", "a-"), "label value"),
]


@pytest.mark.parametrize(("requirement", "message"), PARSE_ERROR_CASES)
def test_parse_error_skips_the_term(requirement: dict[str, Any], message: str) -> None:
    bad = {"matchExpressions": [requirement]}
    compiled = selector(bad)
    assert compiled.term_count == 0
    assert any(message in error for error in compiled.errors), compiled.errors
    assert compiled.errors[0].startswith("nodeSelectorTerms[0].matchExpressions[0]")
    assert compiled.match(NODE) is False
    # A later good term still matches: errors are lazy, as in NewLazyErrorNodeSelector.
    good = {"matchExpressions": [expr("zone", "In", "a")]}
    assert selector(bad, good).match(NODE) is True
    assert selector(bad, good).errors == compiled.errors


def test_error_in_one_expression_poisons_the_whole_term() -> None:
    term = {"matchExpressions": [expr("zone", "In", "a"), expr("cuda", "Gt", "x")]}
    assert selector(term).match(NODE) is False


def test_all_errors_are_reported() -> None:
    compiled = selector(
        {"matchExpressions": [expr("Bad Key", "Gt", "x", "y")]},
        {"matchFields": [expr("metadata.name", "Exists")]},
    )
    assert len(compiled.errors) >= 4


@pytest.mark.parametrize(
    "bad",
    [
        {"nodeSelectorTerms": "not a list"},
        {"nodeSelectorTerms": ["not a mapping"]},
        {"nodeSelectorTerms": [{"matchExpressions": {"key": "a"}}]},
        {"nodeSelectorTerms": [{"matchExpressions": [{"key": 1, "operator": "Exists"}]}]},
        {"nodeSelectorTerms": [{"matchExpressions": [expr("a", "In", "b") | {"values": "b"}]}]},
        {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "a", "operator": "In", "values": [1]}]}
            ]
        },
    ],
)
def test_wrongly_typed_input_raises(bad: dict[str, Any]) -> None:
    with pytest.raises(NodeSelectorError):
        NodeSelector.compile(bad)


def test_none_selector_raises_input_error() -> None:
    with pytest.raises(InputError):
        NodeSelector.compile(None)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- term structure


@pytest.mark.parametrize(
    "node_selector",
    [
        {},
        {"nodeSelectorTerms": None},
        {"nodeSelectorTerms": []},
        {"nodeSelectorTerms": [{}]},
        {"nodeSelectorTerms": [None]},
        {"nodeSelectorTerms": [{"matchExpressions": [], "matchFields": []}]},
        {"nodeSelectorTerms": [{"matchExpressions": None}]},
    ],
)
def test_no_terms_or_empty_terms_match_nothing(node_selector: dict[str, Any]) -> None:
    compiled = NodeSelector.compile(node_selector)
    assert compiled.errors == ()
    assert compiled.match(NODE) is False
    assert compiled.match(Node("", {})) is False


def test_expressions_are_anded_terms_are_ored() -> None:
    a = expr("zone", "In", "a")
    b = expr("cuda", "Gt", "13000")
    assert one(a).match(NODE)
    assert not one(a, b).match(NODE)
    assert selector({"matchExpressions": [b]}, {"matchExpressions": [a]}).match(NODE)
    assert not selector({"matchExpressions": [b]}, {"matchExpressions": [a, b]}).match(NODE)


def test_from_terms_equals_compile() -> None:
    terms = [{"matchExpressions": [expr("zone", "In", "a")]}]
    assert NodeSelector.from_terms(terms).match(NODE)
    assert NodeSelector({"nodeSelectorTerms": terms}).match(NODE)


# --------------------------------------------------------------------------- matchFields


def name_is(op: str, *values: str) -> dict[str, Any]:
    return {"matchFields": [expr("metadata.name", op, *values)]}


@pytest.mark.parametrize(
    ("term", "node_name", "expected"),
    [
        (name_is("In", "gpu-1"), "gpu-1", True),
        (name_is("In", "gpu-1"), "gpu-2", False),
        (name_is("NotIn", "gpu-1"), "gpu-1", False),
        (name_is("NotIn", "gpu-1"), "gpu-2", True),
        # A node without a name has no fields: matchFields are ignored, as upstream.
        (name_is("In", "gpu-1"), "", True),
        (name_is("NotIn", "gpu-1"), "", True),
        # Labels and fields are ANDed.
        (name_is("In", "gpu-1") | {"matchExpressions": [expr("zone", "In", "a")]}, "gpu-1", True),
        (name_is("In", "gpu-1") | {"matchExpressions": [expr("zone", "In", "b")]}, "gpu-1", False),
        (name_is("In", "gpu-1") | {"matchExpressions": [expr("zone", "In", "b")]}, "", False),
        # Upstream looks any other field up in a set holding only metadata.name: it reads "".
        ({"matchFields": [expr("spec.unschedulable", "In", "x")]}, "gpu-1", False),
        ({"matchFields": [expr("spec.unschedulable", "NotIn", "x")]}, "gpu-1", True),
    ],
)
def test_match_fields(term: dict[str, Any], node_name: str, expected: bool) -> None:
    node = Node(node_name, {"zone": "a"})
    compiled = selector(term)
    assert compiled.errors == ()
    assert compiled.match(node) is expected


@pytest.mark.parametrize(
    "term",
    [
        name_is("In", "a", "b"),
        name_is("In"),
        name_is("NotIn", "a", "b"),
        name_is("Exists"),
        name_is("Gt", "1"),
    ],
)
def test_match_fields_parse_errors(term: dict[str, Any]) -> None:
    compiled = selector(term)
    assert compiled.errors
    assert compiled.match(Node("a", {})) is False
    assert compiled.match(Node("", {})) is False  # a parse error is never ignored


# --------------------------------------------------------------------------- syntax helpers


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("", True),
        ("a", True),
        ("12040", True),
        ("550.90.07", True),
        ("Tesla-T4", True),
        ("A100_SXM4", True),
        ("a" * 63, True),
        ("a" * 64, False),
        ("-1", False),
        ("+1", False),
        ("a-", False),
        (".a", False),
        ("has space", False),
        ("a/b", False),
        ("é", False),
        ("a\n", False),
    ],
)
def test_label_value_ok(value: str, ok: bool) -> None:
    assert label_value_ok(value) is ok


@pytest.mark.parametrize(
    ("key", "ok"),
    [
        ("zone", True),
        ("cudasched.io/cuda.code", True),
        ("nvidia.com/cuda.runtime-version.major", True),
        ("kubernetes.io/hostname", True),
        ("node-role.kubernetes.io/control-plane", True),
        ("UpperName", True),
        ("a" * 63, True),
        ("p/" + "a" * 63, True),
        (("a" * 63 + ".") * 3 + "a" * 61 + "/n", True),  # 253-character prefix
        (("a" * 63 + ".") * 3 + "a" * 62 + "/n", False),  # 254
        ("a" * 64, False),
        ("", False),
        ("/name", False),
        ("prefix/", False),
        ("a/b/c", False),
        ("Upper.io/name", False),
        ("-name", False),
        ("name-", False),
        ("pre_fix.io/name", False),
        ("bad..io/name", False),
        ("na me", False),
    ],
)
def test_label_key_ok(key: str, ok: bool) -> None:
    assert label_key_ok(key) is ok


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("08", 8),
        ("-5", -5),
        ("+7", 7),
        ("9223372036854775807", 2**63 - 1),
        ("-9223372036854775808", -(2**63)),
        ("9223372036854775808", None),
        ("-9223372036854775809", None),
        ("", None),
        ("+", None),
        ("-", None),
        ("1_0", None),
        (" 1", None),
        ("1 ", None),
        ("1\n", None),
        ("0x10", None),
        ("1e3", None),
        ("8.0", None),
        ("٣", None),
        ("²", None),
    ],
)
def test_parse_int64_follows_go(text: str, expected: int | None) -> None:
    assert parse_int64(text) == expected


# --------------------------------------------------------------------------- nodes


def test_node_copies_labels_and_preparses_integers() -> None:
    labels = {"cuda": "12040", "zone": "a", "pad": "007"}
    node = Node("n", labels)
    labels["zone"] = "changed"
    assert node.labels["zone"] == "a"
    assert dict(node.int_labels) == {"cuda": 12040, "pad": 7}
    with pytest.raises(TypeError):
        node.labels["zone"] = "x"  # type: ignore[index]


def test_nodes_compare_and_hash_by_name_and_labels() -> None:
    a = Node("n", {"x": "1", "y": "2"})
    b = Node("n", {"y": "2", "x": "1"})
    assert a == b and hash(a) == hash(b)
    assert len({a, b, Node("m", {"x": "1", "y": "2"}), Node("n", {"x": "1"})}) == 3


@pytest.mark.parametrize(
    ("name", "labels"),
    [(None, {}), ("n", None), ("n", {"a": 1}), ("n", {1: "a"})],
)
def test_node_rejects_bad_input(name: Any, labels: Any) -> None:
    with pytest.raises(InputError):
        Node(name, labels)


def test_node_from_k8s() -> None:
    obj = yaml.safe_load(
        """
        apiVersion: v1
        kind: Node
        metadata:
          name: gpu-h100-1
          labels:
            kubernetes.io/hostname: gpu-h100-1
            cudasched.io/cuda.code: "12080"
        status: {}
        """
    )
    node = Node.from_k8s(obj)
    assert node.name == "gpu-h100-1"
    assert node.int_labels["cudasched.io/cuda.code"] == 12080
    assert Node.from_k8s({"metadata": {}}) == Node("", {})
    with pytest.raises(InputError):
        Node.from_k8s("gpu-1")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- required affinity

PREDICTOR_POD = """
apiVersion: v1
kind: Pod
metadata:
  name: yolo-detector-predictor-00001-deployment-7d9f8
  namespace: team-vision
  labels:
    component: predictor
    serving.kserve.io/inferenceservice: yolo-detector
spec:
  nodeSelector:
    node.kubernetes.io/instance-type: p4d.24xlarge
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - key: nvidia.com/gpu.memory
            operator: Gt
            values: ["20000"]
          - key: nvidia.com/gpu.product
            operator: NotIn
            values: ["NVIDIA-A10G"]
        - matchFields:
          - key: metadata.name
            operator: In
            values: ["gpu-special"]
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 50
        preference:
          matchExpressions:
          - key: nvidia.com/gpu.family
            operator: In
            values: ["hopper", "ampere"]
      - weight: 20
        preference:
          matchExpressions:
          - key: nvidia.com/gpu.memory
            operator: Gt
            values: ["40000"]
      - weight: 0
        preference:
          matchExpressions:
          - key: nvidia.com/gpu.family
            operator: Gt
            values: ["not-an-int"]
  containers:
  - name: kserve-container
    image: nvcr.io/nvidia/tritonserver:24.05-py3
    resources:
      limits:
        nvidia.com/gpu: "1"
"""

P4D = {"node.kubernetes.io/instance-type": "p4d.24xlarge"}


@pytest.mark.parametrize(
    ("name", "labels", "expected"),
    [
        ("a100-1", P4D | {"nvidia.com/gpu.memory": "81920"}, True),
        ("a100-2", P4D | {"nvidia.com/gpu.memory": "16384"}, False),
        (
            "a100-3",
            P4D | {"nvidia.com/gpu.memory": "81920", "nvidia.com/gpu.product": "NVIDIA-A10G"},
            False,
        ),
        ("a100-4", {"nvidia.com/gpu.memory": "81920"}, False),  # nodeSelector key missing
        (
            "a100-5",
            {"node.kubernetes.io/instance-type": "g5.xlarge", "nvidia.com/gpu.memory": "81920"},
            False,
        ),
        ("gpu-special", P4D, True),  # second term: matchFields only
        ("gpu-special", {}, False),  # ... but nodeSelector still applies
    ],
)
def test_required_affinity_from_real_pod(name: str, labels: dict[str, str], expected: bool) -> None:
    pod = yaml.safe_load(PREDICTOR_POD)
    required = RequiredNodeAffinity.from_pod_spec(pod["spec"])
    assert required.errors == ()
    assert required.match(Node(name, labels)) is expected


def test_preferred_score_from_real_pod() -> None:
    pod = yaml.safe_load(PREDICTOR_POD)
    preferred = PreferredTerms.from_pod_spec(pod["spec"])
    assert len(preferred) == 2  # the weight-0 term is skipped before it is parsed
    both = Node("h100", {"nvidia.com/gpu.family": "hopper", "nvidia.com/gpu.memory": "81920"})
    assert preferred.score(both) == 70
    assert preferred.score(Node("a", {"nvidia.com/gpu.family": "ampere"})) == 50
    assert preferred.score(Node("t4", {"nvidia.com/gpu.family": "turing"})) == 0


@pytest.mark.parametrize(
    ("spec", "labels", "expected"),
    [
        ({}, {}, True),
        ({"nodeSelector": {}}, {}, True),
        ({"nodeSelector": None, "affinity": None}, {}, True),
        ({"nodeSelector": {"zone": "a"}}, {"zone": "a"}, True),
        ({"nodeSelector": {"zone": "a"}}, {"zone": "b"}, False),
        ({"nodeSelector": {"zone": "a"}}, {}, False),
        ({"nodeSelector": {"zone": ""}}, {"zone": ""}, True),
        ({"nodeSelector": {"zone": ""}}, {}, False),
        ({"affinity": {"podAffinity": {}}}, {}, True),
        ({"affinity": {"nodeAffinity": {}}}, {}, True),
        (
            {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}},
            {},
            True,
        ),
        # a required block with no terms matches nothing
        (
            {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}},
            {},
            False,
        ),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}
                    }
                }
            },
            {},
            False,
        ),
        (
            {
                "nodeSelector": {"zone": "a"},
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [expr("tier", "In", "gold")]}
                            ]
                        }
                    }
                },
            },
            {"zone": "a", "tier": "silver"},
            False,
        ),
    ],
)
def test_required_affinity_cases(
    spec: dict[str, Any], labels: dict[str, str], expected: bool
) -> None:
    assert RequiredNodeAffinity.from_pod_spec(spec).match(Node("n", labels)) is expected


def test_required_affinity_keeps_parse_errors() -> None:
    spec = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [expr("cuda", "Gt", "12.4")]}]
                }
            }
        }
    }
    required = RequiredNodeAffinity.from_pod_spec(spec)
    assert required.errors and "integer" in required.errors[0]
    assert required.errors[0].startswith("spec.affinity.nodeAffinity.")
    assert required.match(Node("n", {"cuda": "13000"})) is False


def test_required_affinity_rejects_bad_spec() -> None:
    with pytest.raises(InputError):
        RequiredNodeAffinity.from_pod_spec("spec")  # type: ignore[arg-type]
    with pytest.raises(InputError):
        RequiredNodeAffinity.from_pod_spec({"nodeSelector": {"zone": 1}})
    with pytest.raises(InputError):
        RequiredNodeAffinity.from_pod_spec({"affinity": ["x"]})


def test_filter_keeps_order() -> None:
    nodes = [Node(f"n{i}", {"i": str(i)}) for i in range(6)]
    spec = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [expr("i", "Gt", "2")]}]
                }
            }
        }
    }
    assert [n.name for n in RequiredNodeAffinity.from_pod_spec(spec).filter(nodes)] == [
        "n3",
        "n4",
        "n5",
    ]
    assert [n.name for n in one(expr("i", "Lt", "2")).filter(nodes)] == ["n0", "n1"]


# --------------------------------------------------------------------------- preferred


def test_preferred_weights_and_skips() -> None:
    terms = [
        {"weight": 10, "preference": {"matchExpressions": [expr("zone", "In", "a")]}},
        {"weight": 5, "preference": {"matchExpressions": [expr("cuda", "Gt", "12000")]}},
        {"weight": 7, "preference": {"matchExpressions": [expr("zone", "In", "b")]}},
        {"weight": 0, "preference": {"matchExpressions": [expr("zone", "In", "a")]}},
        {"weight": 9, "preference": {}},
        {"weight": 9},
        {"weight": 3, "preference": {"matchFields": [expr("metadata.name", "In", "gpu-a100-1")]}},
    ]
    compiled = PreferredTerms.compile(terms)
    assert len(compiled) == 4
    assert compiled.score(NODE) == 18
    assert compiled.score(Node("other", {})) == 0
    assert PreferredTerms.compile([]).score(NODE) == 0
    assert PreferredTerms.compile(None).score(NODE) == 0


def test_preferred_parse_error_raises() -> None:
    terms = [
        {"weight": 10, "preference": {"matchExpressions": [expr("zone", "In", "a")]}},
        {"weight": 5, "preference": {"matchExpressions": [expr("cuda", "Gt", "x")]}},
        {"weight": 5, "preference": {"matchFields": [expr("metadata.name", "In", "a", "b")]}},
    ]
    with pytest.raises(NodeSelectorError) as caught:
        PreferredTerms.compile(terms)
    assert len(caught.value.errors) == 2
    assert isinstance(caught.value, InputError)
    assert "[1].preference.matchExpressions[0]" in str(caught.value)


@pytest.mark.parametrize("weight", ["10", 1.5, True])
def test_preferred_weight_must_be_an_integer(weight: Any) -> None:
    with pytest.raises(NodeSelectorError):
        PreferredTerms.compile(
            [{"weight": weight, "preference": {"matchExpressions": [expr("a", "Exists")]}}]
        )


# --------------------------------------------------------------------------- bundled sample cluster


def test_sample_cluster_nodes_against_cudasched_labels() -> None:
    text = files("cudasched").joinpath("data/sample-cluster.yaml").read_text()
    items = yaml.safe_load(text)["items"]
    nodes = [Node.from_k8s(item) for item in items if item.get("kind") == "Node"]
    assert nodes
    at_least_124 = one(expr("cudasched.io/cuda.code", "Gt", "12039"))
    for node in nodes:
        code = node.labels.get("cudasched.io/cuda.code")
        expected = code is not None and int(code) >= 12040
        assert at_least_124.match(node) is expected, node.name


# ----------------------------------------------------------------- property: reference model

KEYS = ("zone", "num")
STR_VALUES = ("a", "b", "")
INT_VALUES = ("0", "5", "07", "12", "x", "-1")  # the last two fail to parse as operands
NODE_VALUES = ("a", "b", "", "0", "5", "07", "12", "x", "8.0", "-3")
NAMES = ("n1", "n2", "")


def _reference_expr_ok(e: dict[str, Any]) -> bool:
    """Does the expression parse? Written from the spec for the small universe above."""
    op, values = e["operator"], e.get("values", [])
    if op in ("In", "NotIn"):
        return bool(values) and all(v != "-1" for v in values)
    if op in ("Exists", "DoesNotExist"):
        return not values
    return len(values) == 1 and values[0] not in ("x", "-1")


def _reference_expr_matches(e: dict[str, Any], labels: dict[str, str]) -> bool:
    op, key, values = e["operator"], e["key"], e.get("values", [])
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if not present:
        return False
    try:
        node_value = int(labels[key])
    except ValueError:
        return False
    return node_value > int(values[0]) if op == "Gt" else node_value < int(values[0])


def _reference_match(terms: list[dict[str, Any]], name: str, labels: dict[str, str]) -> bool:
    for term in terms:
        exprs = term.get("matchExpressions", [])
        fields = term.get("matchFields", [])
        if not exprs and not fields:
            continue
        if not all(_reference_expr_ok(e) for e in exprs):
            continue
        if not all(len(f["values"]) == 1 for f in fields):
            continue
        if not all(_reference_expr_matches(e, labels) for e in exprs):
            continue
        if name and not all((name == f["values"][0]) == (f["operator"] == "In") for f in fields):
            continue
        return True
    return False


expressions = st.one_of(
    st.builds(
        expr,
        st.sampled_from(KEYS),
        st.sampled_from(("In", "NotIn")),
        st.sampled_from((*STR_VALUES, "-1")),
        st.sampled_from(STR_VALUES),
    ),
    st.builds(
        lambda k, op: expr(k, op),
        st.sampled_from(KEYS),
        st.sampled_from(("Exists", "DoesNotExist")),
    ),
    st.builds(
        expr, st.sampled_from(KEYS), st.sampled_from(("Gt", "Lt")), st.sampled_from(INT_VALUES)
    ),
    st.builds(lambda k: expr(k, "In"), st.sampled_from(KEYS)),  # no values: parse error
)
field_reqs = st.builds(
    lambda op, values: {"key": "metadata.name", "operator": op, "values": values},
    st.sampled_from(("In", "NotIn")),
    st.lists(st.sampled_from(("n1", "n2")), min_size=1, max_size=2),
)
terms_strategy = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "matchExpressions": st.lists(expressions, max_size=3),
            "matchFields": st.lists(field_reqs, max_size=1),
        },
    ),
    max_size=4,
)
nodes_strategy = st.builds(
    Node,
    st.sampled_from(NAMES),
    st.dictionaries(st.sampled_from(KEYS), st.sampled_from(NODE_VALUES), max_size=2),
)


@settings(max_examples=300)
@given(terms=terms_strategy, node=nodes_strategy)
def test_matches_a_plain_reading_of_the_spec(terms: list[dict[str, Any]], node: Node) -> None:
    expected = _reference_match(terms, node.name, dict(node.labels))
    assert NodeSelector.from_terms(terms).match(node) is expected


# --------------------------------------------------------------------------- compile cache


def _outcome(build: Any) -> tuple[str, Any]:
    """What a compilation gives: its errors (or the hard error) and how it matches every node
    of the reference set."""
    try:
        compiled = build()
    except NodeSelectorError as exc:
        return "raised", str(exc)
    nodes = [Node(name, labels) for name in NAMES for labels in CACHE_LABEL_SETS]
    return "ok", (compiled.errors, [compiled.match(n) for n in nodes])


CACHE_LABEL_SETS = [{}, {"zone": "a"}, {"zone": "b", "num": "5"}, {"num": "12"}]


@settings(max_examples=150)
@given(batch=st.lists(terms_strategy, min_size=1, max_size=4))
def test_compile_cache_changes_nothing(batch: list[list[dict[str, Any]]]) -> None:
    """Selectors compiled through one shared cache match and report exactly as alone."""
    cache = CompileCache()
    compared = 0
    for terms in batch:
        alone = _outcome(lambda t=terms: NodeSelector.from_terms(t))
        shared = _outcome(lambda t=terms: NodeSelector.from_terms(t, cache=cache))
        assert shared == alone
        compared += 1
    assert compared == len(batch) >= 1


def test_compile_cache_keeps_only_clean_expressions() -> None:
    cache = CompileCache()
    good = expr("zone", "In", "a", "b")
    bad = expr("zone", "Gt", "x")
    first = NodeSelector.from_terms([term_of(good), term_of(bad)], cache=cache)
    assert len(cache) == 1  # the erroneous expression is compiled again each time
    # Same content, another dict and another position: one entry, errors at their own path.
    second = NodeSelector.from_terms([term_of(bad), term_of(dict(good))], cache=cache)
    assert len(cache) == 1
    assert first.errors == (
        "nodeSelectorTerms[1].matchExpressions[0].values[0]: invalid value "
        "'x': operator Gt needs a base-10 64-bit integer",
    )
    assert second.errors == (first.errors[0].replace("Terms[1]", "Terms[0]"),)
    assert first.match(NODE) and second.match(NODE)
    # A missing values list compiles like an empty one; a tuple like a list.
    NodeSelector.from_terms([term_of(expr("zone", "Exists"))], cache=cache)
    NodeSelector.from_terms(
        [term_of({"key": "zone", "operator": "Exists", "values": []})], cache=cache
    )
    assert len(cache) == 2
    NodeSelector.from_terms(
        [term_of({"key": "zone", "operator": "In", "values": ("a", "b")})], cache=cache
    )
    assert len(cache) == 2


@pytest.mark.parametrize(
    "expression",
    [
        {"key": "zone", "operator": "In", "values": [["a"]]},  # unhashable value
        {"key": "zone", "operator": "In", "values": "a"},  # not a list
        {"key": 5, "operator": "In", "values": ["a"]},
        {"key": "zone", "operator": "In", "values": [5]},
    ],
)
def test_compile_cache_raises_like_plain_compilation(expression: dict[str, Any]) -> None:
    cache = CompileCache()
    with pytest.raises(NodeSelectorError) as plain:
        NodeSelector.from_terms([term_of(expression)])
    for _ in range(2):
        with pytest.raises(NodeSelectorError) as cached:
            NodeSelector.from_terms([term_of(expression)], cache=cache)
        assert str(cached.value) == str(plain.value)
    assert len(cache) == 0


def test_compile_cache_is_shared_by_required_and_preferred() -> None:
    cache = CompileCache()
    shared_expr = expr("zone", "In", "a")
    spec = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [term_of(shared_expr)]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 5, "preference": term_of(dict(shared_expr), expr("cuda", "Gt", "1"))}
                ],
            }
        }
    }
    assert RequiredNodeAffinity.from_pod_spec(spec, cache=cache).match(NODE)
    assert PreferredTerms.from_pod_spec(spec, cache=cache).score(NODE) == 5
    assert len(cache) == 2
