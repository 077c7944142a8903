"""The placement compiler: exact shapes, refusals, scheme choice, API validity, and the
contract's invariant (selector match == engine verdict != incompatible) over random nodes."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cudasched.compat.engine import check, effective_cuda, resolve_policy
from cudasched.knowledge import KnowledgeBase
from cudasched.nodes.facts import facts_from_labels
from cudasched.nodes.scheme import GfdKeys, choose_gfd_keys, choose_scheme
from cudasched.placement.compile import compile_requirement, forward_compat_compiled
from cudasched.placement.merge import (
    MAX_MERGED_TERMS,
    merge_preferred,
    merge_required,
    node_affinity,
)
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.vocab.labels import LabelScheme
from cudasched.vocab.labelsyntax import label_value_ok, parse_int64
from cudasched.vocab.nodeaffinity import Node, NodeSelector
from cudasched.vocab.requirecuda import Gate, gate_from_env
from cudasched.vocab.requirements import (
    CompatLibrary,
    FrameworkBuild,
    Policy,
    Requirement,
    ToolkitMode,
)
from cudasched.vocab.versions import ComputeCapability, CudaVersion, DriverVersion, parse_cuda
from tests.support import builders
from tests.support.builders import GFD_DEPRECATED, GFD_SCHEMES, expr
from tests.support.k8s_schema import assert_valid_node_affinity, assert_valid_pod


@functools.cache
def _kb() -> KnowledgeBase:
    """One knowledge base for the property tests (loading it per example would dominate)."""
    return KnowledgeBase.load()


def req(cuda: str | None = None, **kw: Any) -> Requirement:
    return Requirement(cuda=parse_cuda(cuda) if cuda else None, **kw)


def exprs_of(terms: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for t in terms for e in t["matchExpressions"]]


# --------------------------------------------------------------------------- exact shapes


def test_ours_is_one_gt_per_bound(kb: KnowledgeBase) -> None:
    """CUDA >= 12.4 is one Gt on the driver code: the node's CUDA is its driver's (Table 3)."""
    terms = compile_requirement(req("12.4"), Policy.STRICT, LabelScheme.CUDASCHED, kb)
    floor = kb.driver_floor(CudaVersion(12, 4))
    assert terms and floor is not None
    for term in terms:
        assert expr(L.DRIVER_CODE, "Gt", floor.code - 1) in term["matchExpressions"]
        assert all(e["key"] != L.CUDA_CODE for e in term["matchExpressions"])
    # Volta and older are capped at R580: that group carries the cap, newer ones do not.
    capped = [t for t in terms if expr(L.DRIVER_CODE, "Lt", 581000000) in t["matchExpressions"]]
    assert capped and len(capped) < len(terms)


def _gfd_node(driver: str, *, deprecated: bool = False) -> Node:
    """A GPU node as GFD labels it: an Ampere A100 and ``driver`` (both key generations, or
    with ``deprecated`` only the deprecated keys older GFD writes)."""
    scheme = GFD_DEPRECATED if deprecated else GFD_SCHEMES
    return Node.from_k8s(builders.node("n", driver=driver, scheme=scheme))


def test_gfd_x0_never_gt_minus_one(kb: KnowledgeBase) -> None:
    terms = compile_requirement(req("12.0"), "strict", "gfd", kb)
    assert all(v != "-1" for e in exprs_of(terms) for v in e.get("values", []))
    assert not [e for e in exprs_of(terms) if "runtime" in e["key"]]  # the driver decides
    selector = NodeSelector.from_terms(terms)
    assert selector.match(_gfd_node("525.60.13")) and not selector.match(_gfd_node("525.60.12"))


def test_gfd_allows_newer_majors(kb: KnowledgeBase) -> None:
    """The recipe most people copy never admits a newer CUDA major; the driver floor does."""
    selector = NodeSelector.from_terms(compile_requirement(req("12.4"), "strict", "gfd", kb))
    for driver, ok in [
        ("550.54.14", True),
        ("550.54.13", False),
        ("545.23.08", False),
        ("550.90.07", True),
        ("580.65.06", True),  # CUDA 13.0
        ("610.43.02", True),  # CUDA 13.3
    ]:
        assert selector.match(_gfd_node(driver)) is ok, driver


def test_gfd_deprecated_keys(kb: KnowledgeBase) -> None:
    terms = compile_requirement(req("12.4"), "strict", "gfd", kb, gfd_keys="deprecated")
    keys = {e["key"] for e in exprs_of(terms)}
    assert L.GFD_OLD_DRIVER_MAJOR in keys
    assert not keys & {L.GFD_CUDA_MAJOR, L.GFD_DRIVER_MAJOR, L.GFD_DRIVER_MINOR}
    selector = NodeSelector.from_terms(terms)
    assert selector.match(_gfd_node("550.54.14", deprecated=True))
    assert not selector.match(_gfd_node("535.104.05", deprecated=True))


def test_gfd_terms_are_split_by_driver_band_when_that_is_smaller(kb: KnowledgeBase) -> None:
    """CUDA 12.4 on cc >= 6.0 over GFD: Pascal and Volta end at R580, and one term per GPU
    group and step of the driver comparison made 12 terms (4 x 3). Split by driver band it is
    5: every GPU from the floor through R580, then the GPUs after Volta from R581, where the
    floor needs no term. kube-scheduler parses every term per pod and evaluates them on every
    node it filters (benchmarks/controlplane); the invariant tests hold both to one set."""
    wanted = req("12.4", min_compute=ComputeCapability(6, 0))
    terms = compile_requirement(wanted, "strict", "gfd", kb, gfd_keys="deprecated")
    assert (len(terms), len(exprs_of(terms))) == (5, 18)
    selector = NodeSelector.from_terms(terms)
    cases = [
        ("Tesla-P100-PCIE-16GB", "550.54.14", True),
        ("Tesla-P100-PCIE-16GB", "550.54.13", False),
        ("Tesla-P100-PCIE-16GB", "580.65.06", True),
        ("Tesla-P100-PCIE-16GB", "590.44.01", False),  # past Pascal's last branch
        ("Tesla-T4", "590.44.01", True),
        ("NVIDIA-H100-80GB-HBM3", "550.54.14", True),
        ("NVIDIA-H100-80GB-HBM3", "545.23.08", False),
    ]
    wrong = [
        (gpu, driver)
        for gpu, driver, ok in cases
        if selector.match(
            Node.from_k8s(builders.node("n", gpu=gpu, driver=driver, scheme=GFD_DEPRECATED))
        )
        is not ok
    ]
    assert wrong == []
    # over cudasched's codes the per-group form is as small already: it stays
    ours = compile_requirement(wanted, "strict", "cudasched", kb)
    capped = [t for t in ours if expr(L.DRIVER_CODE, "Lt", 581000000) in t["matchExpressions"]]
    assert len(ours) == 2 and len(capped) == 1


def test_architecture_window(kb: KnowledgeBase) -> None:
    # CUDA 13 needs cc >= 7.5; CUDA 11.8 cannot build for Blackwell (cc >= 10.0).
    sel13 = NodeSelector.from_terms(compile_requirement(req("13.0"), "strict", "cudasched", kb))
    sel118 = NodeSelector.from_terms(compile_requirement(req("11.8"), "strict", "cudasched", kb))
    for code, ok13, ok118 in [
        (70, False, True),
        (75, True, True),
        (90, True, True),
        (100, True, False),
    ]:
        labels = {L.CUDA_CODE: "13000", L.DRIVER_CODE: "580065006", L.COMPUTE_CODE: str(code)}
        node = Node("n", labels)
        assert sel13.match(node) is ok13, code
        assert sel118.match(node) is ok118, code


def test_min_compute_capability_only(kb: KnowledgeBase) -> None:
    r = req(min_compute=ComputeCapability(8, 6))
    assert compile_requirement(r, "strict", "cudasched", kb) == [
        {"matchExpressions": [expr(L.COMPUTE_CODE, "Gt", 85)]}
    ]
    assert compile_requirement(r, "strict", "gfd", kb) == [
        {"matchExpressions": [expr(L.GFD_COMPUTE_MAJOR, "Gt", 8)]},
        {
            "matchExpressions": [
                expr(L.GFD_COMPUTE_MAJOR, "In", 8),
                expr(L.GFD_COMPUTE_MINOR, "Gt", 5),
            ]
        },
    ]
    r9 = req(min_compute=ComputeCapability(9, 0))
    assert compile_requirement(r9, "strict", "gfd", kb) == [
        {"matchExpressions": [expr(L.GFD_COMPUTE_MAJOR, "Gt", 8)]}
    ]


def test_forward_compat_alternative(kb: KnowledgeBase) -> None:
    r = req("13.0", ships_cuda_compat=True)
    terms = compile_requirement(r, "forward-compat", "cudasched", kb)
    fc = [t for t in terms if expr(L.GPU_DATACENTER, "In", "true") in t["matchExpressions"]]
    assert fc
    assert all(expr(L.DRIVER_BRANCH, "In", 535, 570) in t["matchExpressions"] for t in fc)
    # Without cuda-compat in the image, or under another policy, there is no such alternative.
    assert compile_requirement(req("13.0"), "forward-compat", "cudasched", kb) == (
        compile_requirement(req("13.0"), "minor-compat", "cudasched", kb)
    )
    # Over GFD, forward compatibility is not expressible (no data-center label): documented.
    assert not forward_compat_compiled("gfd") and forward_compat_compiled("cudasched")
    assert compile_requirement(r, "forward-compat", "gfd", kb) == compile_requirement(
        r, "minor-compat", "gfd", kb
    )


def test_requirement_policy_overrides(kb: KnowledgeBase) -> None:
    r = req("12.4", policy=Policy.MINOR_COMPAT)
    assert compile_requirement(r, "strict", "cudasched", kb) == compile_requirement(
        req("12.4"), "minor-compat", "cudasched", kb
    )


def test_empty_requirement_needs_no_constraint(kb: KnowledgeBase) -> None:
    assert compile_requirement(Requirement(), "strict", "gfd", kb) == []


@pytest.mark.parametrize(
    ("requirement", "message"),
    [
        (req("12.7"), "unknown CUDA toolkit 12.7"),
        (req("14.0"), "unknown CUDA toolkit 14.0"),
        (req("11.8", min_compute=ComputeCapability(10, 0)), "no GPU can run cuda>=11.8, cc>=10.0"),
        (Requirement(framework=FrameworkBuild("torch", "9.9", None)), "torch 9.9 does not say"),
    ],
)
def test_unsatisfiable_requirements_raise(
    kb: KnowledgeBase, requirement: Requirement, message: str
) -> None:
    with pytest.raises(InputError, match=message):
        compile_requirement(requirement, "strict", "cudasched", kb)


def test_scheme_and_keys_are_checked(kb: KnowledgeBase) -> None:
    with pytest.raises(InputError, match="'auto' must be resolved"):
        compile_requirement(req("12.4"), "strict", "auto", kb)
    with pytest.raises(InputError, match="invalid label scheme 'nfd'"):
        compile_requirement(req("12.4"), "strict", "nfd", kb)
    with pytest.raises(InputError, match="invalid GFD key generation 'old'"):
        compile_requirement(req("12.4"), "strict", "gfd", kb, gfd_keys="old")
    with pytest.raises(InputError, match="invalid policy"):
        compile_requirement(req("12.4"), "loose", "gfd", kb)


def test_deterministic(kb: KnowledgeBase) -> None:
    r = req("12.8", ships_cuda_compat=True)
    a = compile_requirement(r, "forward-compat", "cudasched", kb)
    assert a == compile_requirement(r, "forward-compat", "cudasched", kb)


# --------------------------------------------------------------------------- scheme choice

OURS = {L.CUDA_CODE: "12040", L.DRIVER_CODE: "550090007", L.COMPUTE_CODE: "90"}
GFD_NEW = {
    L.GFD_CUDA_MAJOR: "12",
    L.GFD_CUDA_MINOR: "4",
    L.GFD_DRIVER_MAJOR: "550",
    L.GFD_OLD_CUDA_MAJOR: "12",
    L.GFD_OLD_CUDA_MINOR: "4",
    L.GFD_OLD_DRIVER_MAJOR: "550",
}
GFD_OLD = {L.GFD_OLD_CUDA_MAJOR: "12", L.GFD_OLD_CUDA_MINOR: "2", L.GFD_OLD_DRIVER_MAJOR: "535"}
CPU = {"kubernetes.io/os": "linux"}


def test_choose_scheme() -> None:
    nodes = [Node("a", {**OURS, **GFD_NEW}), Node("b", OURS), Node("cpu", CPU)]
    assert choose_scheme(nodes) is LabelScheme.CUDASCHED
    assert choose_scheme([*nodes, Node("c", GFD_NEW)]) is LabelScheme.GFD
    assert choose_scheme([Node("cpu", CPU)]) is LabelScheme.CUDASCHED
    assert choose_scheme([]) is LabelScheme.CUDASCHED
    # Kubernetes Node objects as the API returns them work too.
    k8s = {"kind": "Node", "metadata": {"name": "x", "labels": GFD_OLD}}
    assert choose_scheme([k8s]) is LabelScheme.GFD


def test_choose_gfd_keys() -> None:
    assert choose_gfd_keys([Node("a", GFD_NEW), Node("cpu", CPU)]) is GfdKeys.NEW
    assert choose_gfd_keys([Node("a", GFD_NEW), Node("b", GFD_OLD)]) is GfdKeys.DEPRECATED


# --------------------------------------------------------------------------- API validity


def _assert_well_formed(terms: list[dict[str, Any]]) -> None:
    assert terms, "never an empty term list"
    for term in terms:
        assert term["matchExpressions"]
        for e in term["matchExpressions"]:
            assert e["values"] and all(label_value_ok(v) for v in e["values"]), e
            if e["operator"] in ("Gt", "Lt"):
                assert len(e["values"]) == 1
                value = e["values"][0]
                assert value.isdigit() and parse_int64(value) is not None, e


GA = [t.cuda.release for t in _kb().toolkits() if t.kind == "ga"]


@pytest.mark.parametrize("cuda", [str(c) for c in GA])
def test_every_toolkit_compiles_to_well_formed_terms(kb: KnowledgeBase, cuda: str) -> None:
    r = req(cuda, ships_cuda_compat=True)
    try:
        compile_requirement(r, "strict", "cudasched", kb)
    except InputError:
        # Only toolkits no known GPU can run (ancient ones) may refuse, and under strict those
        # whose minimum driver NVIDIA's tables do not give (13.5: never judged natively).
        assert CudaVersion(10, 0) > parse_cuda(cuda) or kb.min_driver(parse_cuda(cuda)) is None
        if kb.min_driver(parse_cuda(cuda)) is not None:
            return
    for scheme in LabelScheme.CUDASCHED, LabelScheme.GFD:
        for policy in Policy:
            for keys in GfdKeys:
                try:
                    terms = compile_requirement(r, policy, scheme, kb, gfd_keys=keys)
                except InputError:
                    assert policy is Policy.STRICT and kb.min_driver(parse_cuda(cuda)) is None
                    continue
                _assert_well_formed(terms)
                assert len(terms) <= MAX_MERGED_TERMS
                assert not NodeSelector.from_terms(terms).errors
                # Merging strips owned keys before ANDing: every key we write must be owned.
                assert {e["key"] for e in exprs_of(terms)} <= L.OWNED_KEYS


@pytest.mark.parametrize(
    ("cuda", "policy", "scheme", "keys"),
    [
        ("12.0", "strict", "gfd", "new"),
        ("12.8", "minor-compat", "gfd", "deprecated"),
        ("13.0", "forward-compat", "cudasched", "new"),
        ("11.8", "minor-compat", "cudasched", "new"),
    ],
)
def test_affinity_passes_the_api_schema(
    kb: KnowledgeBase, cuda: str, policy: str, scheme: str, keys: str
) -> None:
    terms = compile_requirement(req(cuda, ships_cuda_compat=True), policy, scheme, kb, keys)
    for mode in ("required", "preferred"):
        assert_valid_node_affinity(node_affinity(terms, mode))


def test_merged_into_a_pod_is_valid(kb: KnowledgeBase) -> None:
    spec = {
        "containers": [{"name": "main", "image": "registry.example/vllm:1"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                expr("pool", "In", "gpu-a"),
                                expr("zone", "In", "1"),
                            ]
                        },
                        {"matchExpressions": [expr("pool", "In", "gpu-b")]},
                    ]
                }
            }
        },
    }
    merges = 0
    for policy in Policy:
        terms = compile_requirement(req("12.8", ships_cuda_compat=True), policy, "cudasched", kb)
        merged = merge_required(spec, terms)
        assert_valid_pod(merged)
        assert merge_required(merged, terms) == merged  # idempotent
        assert_valid_pod(merge_preferred(spec, terms))
        merges += 1
    for keys in GfdKeys:
        gfd = compile_requirement(req("13.2"), "minor-compat", "gfd", kb, gfd_keys=keys)
        merged = merge_required(spec, gfd)
        assert_valid_pod(merged)
        assert merge_required(merged, gfd) == merged
        merges += 1
    assert merges == 5  # three policies, two GFD key generations


@pytest.mark.parametrize("scheme", [LabelScheme.CUDASCHED, LabelScheme.GFD])
@pytest.mark.parametrize("cuda", ["11.4", "12.1", "12.8", "13.2"])
def test_minor_compat_floor_boundaries(kb: KnowledgeBase, scheme: LabelScheme, cuda: str) -> None:
    """Drivers exactly at, just below and just above the series floor, on a node whose own CUDA
    is too old for native support: only the selector's floor decides."""
    r = req(cuda)
    floor = kb.minor_compat_floor(r.cuda.major)  # type: ignore[union-attr]
    assert floor is not None
    selector = NodeSelector.from_terms(compile_requirement(r, "minor-compat", scheme, kb))
    below = [DriverVersion(floor.major, floor.minor, floor.revision - 1)]
    below += [
        DriverVersion(floor.major, floor.minor - 1, 99),
        DriverVersion(floor.major - 1, 99, 99),
    ]
    above = [floor, DriverVersion(floor.major, floor.minor, floor.revision + 1)]
    above += [DriverVersion(floor.major, floor.minor + 1, 0), DriverVersion(floor.major + 1, 0, 0)]
    old_cuda = CudaVersion(r.cuda.major, 0)  # type: ignore[union-attr]
    for driver, expected in [(d, False) for d in below] + [(d, True) for d in above]:
        if scheme is LabelScheme.CUDASCHED:
            labels = {
                L.CUDA_CODE: str(old_cuda.code),
                L.DRIVER_CODE: str(driver.code),
                L.COMPUTE_CODE: "80",
            }
        else:
            labels = {
                L.GFD_CUDA_MAJOR: str(old_cuda.major),
                L.GFD_CUDA_MINOR: str(old_cuda.minor),
                L.GFD_DRIVER_MAJOR: str(driver.major),
                L.GFD_DRIVER_MINOR: f"{driver.minor:02d}",
                L.GFD_DRIVER_REVISION: f"{driver.revision:02d}",
                L.GFD_COMPUTE_MAJOR: "8",
                L.GFD_COMPUTE_MINOR: "0",
            }
        verdict = check(facts_from_labels("n", labels, kb), r, "minor-compat", kb)
        assert verdict.compatible is expected, (driver, verdict)
        assert selector.match(Node("n", labels)) is expected, driver


@pytest.mark.parametrize("scheme", [LabelScheme.CUDASCHED, LabelScheme.GFD])
def test_ptx_only_gpus_get_no_minor_compat_alternative(
    kb: KnowledgeBase, scheme: LabelScheme
) -> None:
    """8.0 SASS + PTX: Hopper runs it only by JIT, which minor-version compat does not allow."""
    fw = FrameworkBuild(
        "torch", "x", CudaVersion(12, 8), arch_list=(ComputeCapability(8, 0),), ptx=True
    )
    r = Requirement(framework=fw)
    selector = NodeSelector.from_terms(compile_requirement(r, "minor-compat", scheme, kb))
    labelled = builders.OURS if scheme is LabelScheme.CUDASCHED else builders.GFD
    old, new = "535.104.05", "570.124.06"  # CUDA 12.2, 12.8
    cases = [
        ("NVIDIA-H100-80GB-HBM3", old, False),  # 9.0
        ("NVIDIA-H100-80GB-HBM3", new, True),
        ("NVIDIA-A100-SXM4-80GB", old, True),  # 8.0
        ("NVIDIA-A10", old, True),  # 8.6
    ]
    for gpu, driver, expected in cases:
        lab = builders.node_labels(gpu=gpu, driver=driver, scheme=labelled)
        verdict = check(facts_from_labels("n", lab, kb), r, "minor-compat", kb)
        assert verdict.compatible is expected, (gpu, driver, verdict)
        assert selector.match(Node("n", lab)) is expected, (gpu, driver)


# --------------------------------------------------------------------------- the invariant

_BRANCHES = [390, 418, 450, 470, 515, 520, 525, 535, 545, 550, 560, 570, 575, 580, 590, 595, 610]
_EDGE_DRIVERS = [
    DriverVersion(450, 80, 2),
    DriverVersion(450, 80, 1),
    DriverVersion(525, 60, 13),
    DriverVersion(525, 60, 12),
    DriverVersion(525, 59, 99),
    DriverVersion(525, 61, 0),
    DriverVersion(580, 65, 6),
    DriverVersion(580, 65, 5),
    DriverVersion(580, 64, 99),
    DriverVersion(580, 66, 0),
    DriverVersion(570, 26, 0, has_revision=False),
    DriverVersion(470, 82, 1),
    DriverVersion(471, 0, 0),
]
_CC_CODES = [21, 30, 35, 37, 40, 50, 52, 53, 60, 61, 62, 70, 71, 72, 73, 75, 80, 86, 87, 88]
_CC_CODES += [89, 90, 91, 100, 101, 102, 103, 107, 110, 115, 120, 121, 130]
_CUDAS = [CudaVersion(m, n) for m in (9, 10, 11, 12, 13, 14) for n in range(10)]
_PRODUCTS = [
    "NVIDIA-A100-SXM4-80GB",
    "Tesla-T4",
    "NVIDIA-GeForce-RTX-4090",
    "NVIDIA-H100-80GB-HBM3",
    "NVIDIA-B200",
]


def _products_driven_by(driver: DriverVersion | None) -> list[str]:
    """The sample products a node with ``driver`` can publish. A driver older than a product's
    first driver cannot drive that GPU, so no node ever reports the pair (NVML fails, GFD and
    our agent publish no GPU facts): such label sets are left out rather than the invariant
    weakened. The engine refuses the pair (``driver-branch-unsupported-gpu``); the compiler
    has no label to say it with, and needs none."""
    kb = _kb()
    out = []
    for name in _PRODUCTS:
        info = kb.gpu(name)
        first = info.first_driver if info is not None else None
        if driver is None or first is None or driver >= first:
            out.append(name)
    return out


def _driver_in(labels: dict[str, str]) -> DriverVersion | None:
    return facts_from_labels("n", labels, _kb()).driver


def _around(d: DriverVersion) -> list[DriverVersion]:
    """A driver and its nearest neighbours, where off-by-one errors in a selector show."""
    out = [d, DriverVersion(d.major, d.minor, d.revision + 1), DriverVersion(d.major, d.minor + 1)]
    if d.revision:
        out.append(DriverVersion(d.major, d.minor, d.revision - 1))
        out.append(DriverVersion(d.major, d.minor, 0, has_revision=False))
    if d.minor:
        out.append(DriverVersion(d.major, d.minor - 1, 99))
    out.append(DriverVersion(d.major + 1, 0, 0))
    out.append(DriverVersion(d.major - 1, 99, 99))
    return out


def _near_cudas(c: CudaVersion) -> list[CudaVersion]:
    out = [c, CudaVersion(c.major, min(c.minor + 1, 9)), CudaVersion(c.major + 1, 0)]
    out.append(CudaVersion(c.major, c.minor - 1) if c.minor else CudaVersion(c.major - 1, 9))
    return out


_random_drivers = st.builds(
    DriverVersion,
    st.sampled_from(_BRANCHES),
    st.integers(0, 150),
    st.integers(0, 20),
    st.booleans(),
).map(lambda d: d if d.has_revision else dataclasses.replace(d, revision=0))


@st.composite
def gpu_facts(
    draw: st.DrawFn, near: Requirement | None
) -> tuple[DriverVersion, CudaVersion, ComputeCapability]:
    """Driver, CUDA and compute capability, biased towards the requirement's boundaries."""
    kb = _kb()
    target = effective_cuda(near) if near is not None else None
    edge = list(_EDGE_DRIVERS)
    near_edge: list[DriverVersion] = []
    cudas = list(_CUDAS)
    codes = list(_CC_CODES)
    exact: list[DriverVersion] = []
    if target is not None:
        for d in (kb.min_driver(target), kb.minor_compat_floor(target.major)):
            if d is not None:
                exact.append(d)
                near_edge += _around(d)
        near_edge += [DriverVersion(b, 104, 5) for b in kb.forward_compat_branches(target)]
        cudas = _near_cudas(target) * 3 + cudas
    if near is not None and near.compat is not None:
        near_edge += _around(near.compat.driver)
        near_edge += [DriverVersion(b, 104, 5) for b in near.compat.branches or ()]
    if near is not None and near.min_compute is not None:
        codes += [near.min_compute.code - 1, near.min_compute.code, near.min_compute.code + 1]
    if near is not None and near.framework is not None:
        codes += [c.code + d for c in near.framework.arch_list or () for d in (0, 1)]
    choices = [st.sampled_from(edge), _random_drivers]
    choices += [st.sampled_from(near_edge)] if near_edge else []
    choices += [st.sampled_from(exact)] if exact else []
    driver = draw(st.one_of(*choices))
    native = kb.max_cuda_for_driver(driver)
    # Often what the driver really supports; often a label near the requirement.
    cuda = draw(st.sampled_from(cudas)) if native is None or draw(st.booleans()) else native
    code = draw(st.sampled_from(codes).filter(lambda c: c >= 10))
    return driver, cuda, ComputeCapability.from_code(code)


@st.composite
def cudasched_labels(draw: st.DrawFn, near: Requirement | None = None) -> dict[str, str]:
    driver, cuda, cc = draw(gpu_facts(near))
    return {
        L.CUDA_CODE: str(cuda.code),
        L.CUDA_VERSION: f"{cuda.major}.{cuda.minor}",
        L.DRIVER_CODE: str(driver.code),
        L.DRIVER_VERSION: str(driver),
        L.DRIVER_BRANCH: str(driver.major),
        L.COMPUTE_CODE: str(cc.code),
        L.GPU_DATACENTER: draw(st.sampled_from(["true", "false"])),
    }


@st.composite
def gfd_labels(
    draw: st.DrawFn,
    near: Requirement | None = None,
    generations: tuple[str, ...] = ("new", "deprecated"),
) -> dict[str, str]:
    driver, cuda, cc = draw(gpu_facts(near))
    minor = f"{driver.minor:02d}"
    rev = f"{driver.revision:02d}" if driver.has_revision else ""
    out = {L.GFD_COMPUTE_MAJOR: str(cc.major), L.GFD_COMPUTE_MINOR: str(cc.minor)}
    if "new" in generations:
        out |= {
            L.GFD_DRIVER_FULL: str(driver),
            L.GFD_DRIVER_MAJOR: str(driver.major),
            L.GFD_DRIVER_MINOR: minor,
            L.GFD_DRIVER_REVISION: rev,
            L.GFD_CUDA_FULL: f"{cuda.major}.{cuda.minor}",
            L.GFD_CUDA_MAJOR: str(cuda.major),
            L.GFD_CUDA_MINOR: str(cuda.minor),
        }
    if "deprecated" in generations:
        out |= {
            L.GFD_OLD_DRIVER_MAJOR: str(driver.major),
            L.GFD_OLD_DRIVER_MINOR: minor,
            L.GFD_OLD_DRIVER_REV: rev,
            L.GFD_OLD_CUDA_MAJOR: str(cuda.major),
            L.GFD_OLD_CUDA_MINOR: str(cuda.minor),
        }
    if draw(st.booleans()):
        out[L.GFD_PRODUCT] = draw(st.sampled_from(_products_driven_by(driver)))
    return out


ccs = st.sampled_from(_CC_CODES).map(ComputeCapability.from_code)


@st.composite
def requirements(draw: st.DrawFn) -> Requirement:
    cuda = draw(st.sampled_from([None, *GA]))
    min_cc = draw(st.one_of(st.none(), ccs.filter(lambda c: c.major >= 2)))
    framework = None
    if draw(st.integers(0, 3)) == 0:
        arch_list = draw(
            st.one_of(st.none(), st.lists(ccs, min_size=1, max_size=5, unique=True).map(tuple))
        )
        fw_cuda = draw(st.one_of(st.none(), st.sampled_from(GA)))
        framework = FrameworkBuild(
            "torch", "x", fw_cuda, arch_list=arch_list, ptx=draw(st.booleans())
        )
    compat = draw(st.one_of(st.none(), st.none(), compat_libraries(cuda)))
    return Requirement(
        cuda=cuda,
        min_compute=min_cc,
        policy=draw(st.one_of(st.none(), st.sampled_from(list(Policy)))),
        ships_cuda_compat=compat is not None or draw(st.booleans()),
        framework=framework,
        gate=draw(st.one_of(st.none(), st.none(), gates(cuda))),
        compat=compat,
        toolkit=draw(st.sampled_from(list(ToolkitMode))),
    )


@st.composite
def compat_libraries(draw: st.DrawFn, cuda: CudaVersion | None) -> CompatLibrary:
    """Compat ``libcuda.so`` libraries shaped like NVIDIA's: a driver of a listed branch, the
    CUDA near the requirement's (or none), a note listing some branches up to its own (or no
    note at all)."""
    major = draw(st.sampled_from(_BRANCHES))
    driver = DriverVersion(major, draw(st.integers(0, 150)), draw(st.integers(0, 20)))
    lib_cuda = draw(st.one_of(st.none(), st.sampled_from(_near_cudas(cuda or CudaVersion(12, 8)))))
    below = [b for b in _BRANCHES if b <= major]
    branches = draw(
        st.one_of(
            st.none(),
            st.lists(st.sampled_from(below), max_size=5, unique=True).map(
                lambda bs: tuple(sorted(bs))
            ),
        )
    )
    return CompatLibrary(driver, lib_cuda, branches)


_GATE_BRANDS = ["tesla", "nvidia", "geforce", "quadro", "unknown", "grid"]


@st.composite
def gates(draw: st.DrawFn, cuda: CudaVersion | None) -> Gate:
    """``NVIDIA_REQUIRE_CUDA`` values shaped like real images' (``cuda>=X`` then
    ``brand=B,driver>=N,driver<N+1`` alternatives), sometimes with an ``arch`` or a second
    ``NVIDIA_REQUIRE_*`` variable. Upper bounds on ``cuda`` are left out: the selector reads
    them from the CUDA label alone and is only sound, not exact, there (placement docs)."""
    floor = cuda or draw(st.sampled_from(GA))
    floor = draw(st.sampled_from([floor, *_near_cudas(floor)]))
    alternatives = [f"cuda>={floor.major}.{floor.minor}"]
    for branch in draw(st.lists(st.sampled_from(_BRANCHES), max_size=4, unique=True)):
        for brand in draw(st.lists(st.sampled_from(_GATE_BRANDS), min_size=1, max_size=3)):
            alternatives.append(f"brand={brand},driver>={branch},driver<{branch + 1}")
    env = {"NVIDIA_REQUIRE_CUDA": " ".join(alternatives)}
    if draw(st.integers(0, 4)) == 0:
        env["NVIDIA_REQUIRE_ARCH"] = draw(st.sampled_from(["arch>=7.5", "arch>=8.0 arch=7.0"]))
    gate = gate_from_env(env, "generated")
    assert gate is not None
    return gate


def _compile_or_none(
    r: Requirement, policy: Policy, scheme: LabelScheme, keys: GfdKeys
) -> list[dict[str, Any]] | None:
    try:
        return compile_requirement(r, policy, scheme, _kb(), gfd_keys=keys)
    except InputError:
        return None


def _assert_invariant(
    r: Requirement,
    policy: Policy,
    scheme: LabelScheme,
    keys: GfdKeys,
    nodes: list[dict[str, str]],
    *,
    exact: bool,
) -> None:
    kb = _kb()
    terms = _compile_or_none(r, policy, scheme, keys)
    facts = [facts_from_labels("n", lab, kb) for lab in nodes]
    verdicts = [check(f, r, policy, kb) for f in facts]
    if terms is None:  # the compiler refused: nothing may be able to run it
        # On partial labels a node that reports no driver is judged by its CUDA label alone,
        # which may claim a toolkit newer than the knowledge (a gate's ``cuda>=13.5``): the
        # compiler places only on what the knowledge confirms, so it may refuse there.
        judged = [v for f, v in zip(facts, verdicts, strict=True) if exact or f.driver]
        assert not any(v.compatible for v in judged)
        return
    if not terms:
        assert r.is_empty and all(v.compatible for v in verdicts)
        return
    _assert_well_formed(terms)
    selector = NodeSelector.from_terms(terms)
    assert not selector.errors
    # Over GFD, forward-compat is compiled as minor-compat (no data-center label): the selector
    # then equals the engine under minor-compat and is never wider than forward-compat.
    effective = resolve_policy(r, policy)
    judged = r
    if scheme is LabelScheme.GFD and effective is Policy.FORWARD_COMPAT:
        judged = dataclasses.replace(r, policy=Policy.MINOR_COMPAT)
    for labels, verdict in zip(nodes, verdicts, strict=True):
        matched = selector.match(Node("n", labels))
        if matched:
            assert verdict.compatible, (labels, terms, verdict)
        if exact:
            expected = check(facts_from_labels("n", labels, kb), judged, policy, kb).compatible
            assert matched == expected, (labels, r, policy, verdict)


_SETTINGS = settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
_NODES = {"min_size": 1, "max_size": 8}


@_SETTINGS
@given(r=requirements(), policy=st.sampled_from(list(Policy)), data=st.data())
def test_invariant_cudasched(r: Requirement, policy: Policy, data: st.DataObject) -> None:
    nodes = data.draw(st.lists(cudasched_labels(r), **_NODES))
    _assert_invariant(r, policy, LabelScheme.CUDASCHED, GfdKeys.NEW, nodes, exact=True)


@_SETTINGS
@given(
    r=requirements(),
    policy=st.sampled_from(list(Policy)),
    keys=st.sampled_from(list(GfdKeys)),
    data=st.data(),
)
def test_invariant_gfd(r: Requirement, policy: Policy, keys: GfdKeys, data: st.DataObject) -> None:
    nodes = data.draw(st.lists(gfd_labels(r), **_NODES))
    _assert_invariant(r, policy, LabelScheme.GFD, keys, nodes, exact=True)


@_SETTINGS
@given(r=requirements(), policy=st.sampled_from(list(Policy)), data=st.data())
def test_invariant_mixed_gfd_generations(
    r: Requirement, policy: Policy, data: st.DataObject
) -> None:
    generation = st.sampled_from([("deprecated",), ("new", "deprecated")])
    nodes = data.draw(st.lists(generation.flatmap(lambda g: gfd_labels(r, g)), **_NODES))
    keys = choose_gfd_keys(Node(str(i), lab) for i, lab in enumerate(nodes))
    assert choose_scheme(Node(str(i), lab) for i, lab in enumerate(nodes)) is LabelScheme.GFD
    _assert_invariant(r, policy, LabelScheme.GFD, keys, nodes, exact=True)


# Partial label sets that happen in real clusters: GFD started before the driver (no CUDA or
# driver labels), Tegra (`unknown` driver), vfio (CUDA 0.0, no compute labels), one label
# generation only, a key our agent could not fill. The selector must stay sound there: it may
# miss a node the engine could derive facts for, but never admit one the engine rejects.
_GFD_GROUPS = {
    "driver": [
        L.GFD_DRIVER_FULL,
        L.GFD_DRIVER_MAJOR,
        L.GFD_DRIVER_MINOR,
        L.GFD_DRIVER_REVISION,
        L.GFD_OLD_DRIVER_MAJOR,
        L.GFD_OLD_DRIVER_MINOR,
        L.GFD_OLD_DRIVER_REV,
    ],
    "cuda": [
        L.GFD_CUDA_FULL,
        L.GFD_CUDA_MAJOR,
        L.GFD_CUDA_MINOR,
        L.GFD_OLD_CUDA_MAJOR,
        L.GFD_OLD_CUDA_MINOR,
    ],
    "compute": [L.GFD_COMPUTE_MAJOR, L.GFD_COMPUTE_MINOR],
}


@st.composite
def partial_gfd_labels(draw: st.DrawFn, near: Requirement) -> dict[str, str]:
    labels = draw(gfd_labels(near))
    labels[L.GFD_PRODUCT] = draw(st.sampled_from(_products_driven_by(_driver_in(labels))))
    for group, keys in _GFD_GROUPS.items():
        action = draw(st.sampled_from(["keep", "keep", "drop", "junk"]))
        for key in keys:
            if action == "drop":
                labels.pop(key, None)
            elif action == "junk":
                labels[key] = {"driver": "unknown", "cuda": "0"}.get(group, "")
    return labels


@st.composite
def partial_cudasched_labels(draw: st.DrawFn, near: Requirement) -> dict[str, str]:
    labels = draw(cudasched_labels(near))
    for key in draw(st.lists(st.sampled_from(sorted(labels)), max_size=3)):
        labels.pop(key, None)
    if draw(st.booleans()):
        labels[L.GPU_PRODUCT] = draw(st.sampled_from(_products_driven_by(_driver_in(labels))))
    return labels


@_SETTINGS
@given(
    r=requirements(),
    policy=st.sampled_from(list(Policy)),
    keys=st.sampled_from(list(GfdKeys)),
    data=st.data(),
)
def test_selector_is_sound_on_partial_labels(
    r: Requirement, policy: Policy, keys: GfdKeys, data: st.DataObject
) -> None:
    gfd = data.draw(st.lists(partial_gfd_labels(r), **_NODES))
    ours = data.draw(st.lists(partial_cudasched_labels(r), **_NODES))
    _assert_invariant(r, policy, LabelScheme.GFD, keys, gfd, exact=False)
    _assert_invariant(r, policy, LabelScheme.CUDASCHED, keys, ours, exact=False)


# --------------------------------------------------------------------------- recorded cluster

_SCHEME_KEYS = {
    (LabelScheme.CUDASCHED, GfdKeys.NEW): (
        L.CUDA_CODE,
        L.DRIVER_CODE,
        L.DRIVER_BRANCH,
        L.COMPUTE_CODE,
        L.GPU_DATACENTER,
    ),
    (LabelScheme.GFD, GfdKeys.NEW): (
        L.GFD_CUDA_MAJOR,
        L.GFD_CUDA_MINOR,
        L.GFD_DRIVER_MAJOR,
        L.GFD_DRIVER_MINOR,
        L.GFD_DRIVER_REVISION,
        L.GFD_COMPUTE_MAJOR,
        L.GFD_COMPUTE_MINOR,
    ),
    (LabelScheme.GFD, GfdKeys.DEPRECATED): (
        L.GFD_OLD_CUDA_MAJOR,
        L.GFD_OLD_CUDA_MINOR,
        L.GFD_OLD_DRIVER_MAJOR,
        L.GFD_OLD_DRIVER_MINOR,
        L.GFD_OLD_DRIVER_REV,
        L.GFD_COMPUTE_MAJOR,
        L.GFD_COMPUTE_MINOR,
    ),
}


@pytest.mark.parametrize(("scheme", "keys"), list(_SCHEME_KEYS))
def test_invariant_on_the_bundled_sample_cluster(
    kb: KnowledgeBase, scheme: LabelScheme, keys: GfdKeys
) -> None:
    """The recorded sample cluster (21 real-shaped nodes): the selector agrees with the engine
    on every node that carries the scheme's labels and never admits a node the engine rejects."""
    from cudasched.cluster.snapshot import bundled_snapshot

    nodes = [Node.from_k8s(obj) for obj in bundled_snapshot().nodes]
    carrying = [n for n in nodes if all(k in n.labels for k in _SCHEME_KEYS[(scheme, keys)])]
    assert carrying, "the sample cluster should exercise every scheme"
    admitted = 0
    for cuda in ("11.4", "11.8", "12.2", "12.4", "12.8", "13.0", "13.2"):
        for policy in Policy:
            r = req(cuda, ships_cuda_compat=True)
            selector = NodeSelector.from_terms(compile_requirement(r, policy, scheme, kb, keys))
            judged = policy
            if scheme is LabelScheme.GFD and policy is Policy.FORWARD_COMPAT:
                judged = Policy.MINOR_COMPAT  # not expressible over GFD (see placement docs)
            for n in nodes:
                matched = selector.match(n)
                facts = facts_from_labels(n.name, n.labels, kb)
                if matched:
                    admitted += 1
                    assert check(facts, r, policy, kb).compatible, (n.name, cuda, policy)
                if n in carrying:
                    assert matched == check(facts, r, judged, kb).compatible, (n.name, cuda)
    assert admitted


# --------------------------------------------------------------------------- issue 12


@pytest.mark.parametrize("scheme", [LabelScheme.CUDASCHED, LabelScheme.GFD])
@pytest.mark.parametrize(
    ("cuda", "cc", "admitted"),
    [
        ("11.6", "8.9", True),  # L4: sm_86 code
        ("11.0", "8.6", True),  # A10G: sm_80 code
        ("11.7", "8.9", True),  # L40S for torch 2.0.1+cu117
        ("12.8", "10.3", True),  # B300: sm_100 code
        ("12.8", "12.1", True),  # GB10: sm_120 code
        ("11.7", "9.0", False),  # Hopper: PTX only
        ("12.6", "10.0", False),  # Blackwell: PTX only
        ("13.0", "7.0", False),  # Volta: dropped
    ],
)
def test_compiled_affinity_follows_binary_compatibility(
    kb: KnowledgeBase, scheme: LabelScheme, cuda: str, cc: str, admitted: bool
) -> None:
    """Issue 12 item 1, the selector side: the same GPUs the engine accepts."""
    major, minor = cc.split(".")
    driver = DriverVersion(590, 48, 1)
    if scheme is LabelScheme.CUDASCHED:
        labels = {
            L.CUDA_CODE: "13010",
            L.DRIVER_CODE: str(driver.code),
            L.COMPUTE_CODE: str(int(major) * 10 + int(minor)),
        }
    else:
        labels = {
            L.GFD_CUDA_MAJOR: "13",
            L.GFD_CUDA_MINOR: "1",
            L.GFD_DRIVER_MAJOR: "590",
            L.GFD_DRIVER_MINOR: "48",
            L.GFD_DRIVER_REVISION: "01",
            L.GFD_COMPUTE_MAJOR: major,
            L.GFD_COMPUTE_MINOR: minor,
        }
    selector = NodeSelector.from_terms(compile_requirement(req(cuda), "strict", scheme, kb))
    assert selector.match(Node("n", labels)) is admitted
    assert check(facts_from_labels("n", labels, kb), req(cuda), "strict", kb).compatible is admitted


def test_native_needs_the_driver_too(kb: KnowledgeBase) -> None:
    """Issue 12 item 4, the selector side: a CUDA label the driver cannot back is not enough."""
    selector = NodeSelector.from_terms(compile_requirement(req("11.6"), "strict", "cudasched", kb))
    liar = {L.CUDA_CODE: "11060", L.DRIVER_CODE: "495046000", L.COMPUTE_CODE: "80"}
    honest = {**liar, L.DRIVER_CODE: "510039001"}
    assert not selector.match(Node("liar", liar))
    assert not check(facts_from_labels("liar", liar, kb), req("11.6"), "strict", kb).compatible
    assert selector.match(Node("honest", honest))


def test_gate_over_our_labels(kb: KnowledgeBase) -> None:
    """Issue 12 item 3: under minor-compat a CUDA 12.8 image whose NVIDIA_REQUIRE_CUDA names
    R535 for data-center GPUs runs on an R535 A100, not on an R535 GeForce nor on R545."""
    gate = gate_from_env(
        {
            "NVIDIA_REQUIRE_CUDA": "cuda>=12.8 brand=tesla,driver>=535,driver<536 "
            "brand=nvidia,driver>=535,driver<536"
        },
        "image nvidia/cuda:12.8.1",
    )
    r = Requirement(cuda=parse_cuda("12.8"), gate=gate)
    selector = NodeSelector.from_terms(compile_requirement(r, "minor-compat", "cudasched", kb))
    base = {L.CUDA_CODE: "12020", L.DRIVER_CODE: "535104005", L.COMPUTE_CODE: "80"}
    for labels, ok in [
        ({**base, L.GPU_DATACENTER: "true"}, True),
        ({**base, L.GPU_DATACENTER: "false"}, False),
        (base, False),  # the class is not reported: cannot be confirmed
        ({**base, L.GPU_DATACENTER: "true", L.DRIVER_CODE: "545023008"}, False),
    ]:
        assert selector.match(Node("n", labels)) is ok, labels
        verdict = check(facts_from_labels("n", labels, kb), r, "minor-compat", kb)
        assert verdict.compatible is ok, (labels, verdict)
        if not ok:
            assert "require-cuda-unmet" in verdict.codes


# --------------------------------------------------------------------------- the class bound
# placement.boundCudaClass (placement/classbound): every term that bounds the driver also bounds
# the agent's CUDA class label by what that driver bound implies, so Kueue, which sees only the
# keys a flavor declares (cuda.code, never a driver version), sees the CUDA part too.


def test_class_bound_is_the_floor_each_alternative_implies(kb: KnowledgeBase) -> None:
    r = req("12.8")
    plain = compile_requirement(r, Policy.STRICT, LabelScheme.CUDASCHED, kb)
    strict = compile_requirement(r, Policy.STRICT, LabelScheme.CUDASCHED, kb, class_bound=True)
    minor = compile_requirement(r, Policy.MINOR_COMPAT, LabelScheme.CUDASCHED, kb, class_bound=True)
    floors = {
        e["values"][0]
        for e in exprs_of(strict)
        if e["key"] == L.CUDA_CODE and e["operator"] == "Gt"
    }
    minor_floors = {
        e["values"][0] for e in exprs_of(minor) if e["key"] == L.CUDA_CODE and e["operator"] == "Gt"
    }
    assert floors == {"12079"}  # natively: the class is 12.8 or newer
    assert minor_floors == {"11999"}  # minor-version compatible: any 12.x driver class
    assert not any(e["key"] == L.CUDA_CODE for e in exprs_of(plain))  # off: as before
    # the same terms, one class expression more per driver bound: nothing else moves
    stripped = [
        {"matchExpressions": [e for e in t["matchExpressions"] if e["key"] != L.CUDA_CODE]}
        for t in strict
    ]
    assert stripped == plain
    assert all(
        any(e["key"] == L.CUDA_CODE for e in t["matchExpressions"])
        for t in strict
        if any(e["key"] == L.DRIVER_CODE for e in t["matchExpressions"])
    )


def test_class_bound_caps_the_class_where_the_driver_is_capped(kb: KnowledgeBase) -> None:
    """Pascal and Volta end at R580: their term caps the driver, and so the class at the
    newest CUDA an R580 driver runs."""
    terms = compile_requirement(
        req("12.8"), Policy.STRICT, LabelScheme.CUDASCHED, kb, class_bound=True
    )
    capped = [
        t
        for t in terms
        if any(e["key"] == L.DRIVER_CODE and e["operator"] == "Lt" for e in t["matchExpressions"])
    ]
    top = kb.max_cuda_for_driver(DriverVersion(580, 999, 999))
    assert capped and top is not None
    assert all(
        {"key": L.CUDA_CODE, "operator": "Lt", "values": [str(top.code + 1)]}
        in t["matchExpressions"]
        for t in capped
    )


def test_class_bound_changes_nothing_over_gfd(kb: KnowledgeBase) -> None:
    r = req("12.4", policy=Policy.MINOR_COMPAT)
    assert compile_requirement(r, Policy.STRICT, LabelScheme.GFD, kb, class_bound=True) == (
        compile_requirement(r, Policy.STRICT, LabelScheme.GFD, kb)
    )


def _truthful(labels: dict[str, str]) -> dict[str, str]:
    """``labels`` with the class the agent writes for their driver (nvidia-smi's CUDA)."""
    native = _kb().max_cuda_for_driver(DriverVersion.from_code(int(labels[L.DRIVER_CODE])))
    out = {k: v for k, v in labels.items() if k not in (L.CUDA_CODE, L.CUDA_VERSION)}
    if native is not None:
        out |= {L.CUDA_CODE: str(native.code), L.CUDA_VERSION: f"{native.major}.{native.minor}"}
    return out


@_SETTINGS
@given(r=requirements(), policy=st.sampled_from(list(Policy)), data=st.data())
def test_class_bound_moves_no_verdict_on_truthful_labels(
    r: Requirement, policy: Policy, data: st.DataObject
) -> None:
    """With the setting on, a node the affinity admits is one the engine (``explain``) calls
    compatible and the other way round, wherever the class label is the driver's; where it is
    not, the bound only ever turns a node away."""
    kb = _kb()
    nodes = data.draw(st.lists(cudasched_labels(r), **_NODES))
    truthful = [_truthful(n) for n in nodes]
    try:
        plain = compile_requirement(r, policy, LabelScheme.CUDASCHED, kb)
        bounded = compile_requirement(r, policy, LabelScheme.CUDASCHED, kb, class_bound=True)
    except InputError:
        return  # the compiler refuses with or without the bound (same code path)
    with_bound = NodeSelector.from_terms(bounded) if bounded else None
    without = NodeSelector.from_terms(plain) if plain else None
    engine = [check(facts_from_labels("n", lab, kb), r, policy, kb).compatible for lab in truthful]
    on_truthful = [with_bound is None or with_bound.match(Node("n", lab)) for lab in truthful]
    assert on_truthful == engine
    widened = [
        lab
        for lab in nodes
        if with_bound is not None
        and with_bound.match(Node("n", lab))
        and not (without is None or without.match(Node("n", lab)))
    ]
    assert widened == []


def test_class_bound_keeps_a_term_that_already_admits_no_node(kb: KnowledgeBase) -> None:
    """A compat library whose note lists branches outside the driver range its term asks
    (found by the property above: R390 and R418 for a range within R391-R417) makes a term no
    node meets; the class bound keeps it as it is instead of failing on the empty class set."""
    compat = CompatLibrary(DriverVersion(450, 0, 0), parse_cuda("9.2"), branches=(390, 418))
    r = req("9.2", ships_cuda_compat=True, compat=compat, toolkit=ToolkitMode.CDI)
    plain = compile_requirement(r, Policy.FORWARD_COMPAT, LabelScheme.CUDASCHED, kb)
    bounded = compile_requirement(
        r, Policy.FORWARD_COMPAT, LabelScheme.CUDASCHED, kb, class_bound=True
    )
    node = builders.node_labels(gpu="Tesla-K80", driver="396.26")
    assert NodeSelector.from_terms(bounded).match(Node("n", node)) == (
        NodeSelector.from_terms(plain).match(Node("n", node))
    )


def test_class_bound_of_a_branch_list_is_its_branches_classes(kb: KnowledgeBase) -> None:
    """Forward compatibility lists driver branches, not a driver range: the class bound is the
    set of classes those branches' drivers have, so a branch between two listed ones (R550 for
    CUDA 13.0) stays out for Kueue too."""
    r = req("13.0", policy=Policy.FORWARD_COMPAT, ships_cuda_compat=True)
    terms = compile_requirement(r, Policy.STRICT, LabelScheme.CUDASCHED, kb, class_bound=True)
    fc = [
        t["matchExpressions"]
        for t in terms
        if any(e["key"] == L.DRIVER_BRANCH for e in t["matchExpressions"])
    ]
    assert fc
    branches = {int(v) for e in fc[0] if e["key"] == L.DRIVER_BRANCH for v in e["values"]}
    classes = {int(v) for e in fc[0] if e["key"] == L.CUDA_CODE for v in e["values"]}
    r550 = kb.max_cuda_for_driver(DriverVersion(550, 54, 14))
    assert r550 is not None and 550 not in branches
    assert r550.code not in classes
    assert all({e["key"] for e in t} >= {L.CUDA_CODE} for t in fc)
    for branch in branches:  # every listed branch's drivers keep their class
        native = kb.max_cuda_for_driver(DriverVersion(branch, 104, 5))
        assert native is not None and native.code in classes
