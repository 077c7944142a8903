"""The compatibility engine: each rule of the chain, each policy, each unknown fact."""

from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.compat.coverage import Coverage, framework_coverage, toolkit_coverage
from cudasched.compat.engine import check
from cudasched.compat.verdict import REASON_CODES, VerdictStatus
from cudasched.knowledge import KnowledgeBase
from cudasched.nodes.facts import facts_from_labels, facts_from_parts
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.vocab.requirements import FrameworkBuild, Policy, Requirement
from cudasched.vocab.versions import ComputeCapability, parse_cuda
from tests.support.builders import node_facts
from tests.support.versions import cc

COMPATIBLE = VerdictStatus.COMPATIBLE
CAVEATS = VerdictStatus.COMPATIBLE_WITH_CAVEATS
INCOMPATIBLE = VerdictStatus.INCOMPATIBLE


@functools.cache
def _kb() -> KnowledgeBase:
    """One knowledge base for property tests (loading it per example would dominate)."""
    return KnowledgeBase.load()


def req(cuda: str | None = None, **kw: object) -> Requirement:
    return Requirement(cuda=parse_cuda(cuda) if cuda else None, **kw)  # type: ignore[arg-type]


def test_native(kb: KnowledgeBase) -> None:
    v = check(node_facts("H100", "550.90.07"), req("12.4"), Policy.STRICT, kb)
    assert v.status is COMPATIBLE and v.compatible
    assert v.codes == ("native",)
    assert "550.90.07 supports CUDA 12.4" in v.reasons[0].message


def test_newer_major_driver_runs_older_toolkit(kb: KnowledgeBase) -> None:
    assert check(node_facts("A100", "580.65.06"), req("11.8"), "strict", kb).status is COMPATIBLE


def test_driver_too_old_names_the_numbers(kb: KnowledgeBase) -> None:
    v = check(node_facts("A100", "535.104.05"), req("12.4"), Policy.STRICT, kb)
    assert v.status is INCOMPATIBLE and not v.compatible
    assert v.codes == ("driver-too-old",)
    assert v.reasons[0].message == (
        "driver 535.104.05 supports CUDA 12.2; the workload needs CUDA 12.4 (driver >= 550.54.14)"
    )


def test_minor_version_compat(kb: KnowledgeBase) -> None:
    n = node_facts("A100", "535.104.05")
    v = check(n, req("12.8"), Policy.MINOR_COMPAT, kb)
    assert v.status is CAVEATS and v.compatible
    assert v.codes == ("minor-version-compat",)
    assert "525.60.13" in v.reasons[0].message and "PTX" in v.reasons[0].message
    # Below the 12.x floor there is no minor-version compatibility.
    old = check(node_facts("A100", "520.61.05"), req("12.0"), Policy.MINOR_COMPAT, kb)
    assert old.status is INCOMPATIBLE
    assert "525.60.13" in old.reasons[0].message


def test_minor_compat_does_not_cross_majors(kb: KnowledgeBase) -> None:
    # R575 is a 12.x driver; CUDA 13 needs the R580 floor.
    v = check(node_facts("H100", "575.57.08"), req("13.0"), Policy.MINOR_COMPAT, kb)
    assert v.status is INCOMPATIBLE and v.codes == ("driver-too-old",)
    assert "580.65.06" in v.reasons[0].message


def test_cuda_10_has_no_minor_compat(kb: KnowledgeBase) -> None:
    v = check(node_facts("T4", "418.39"), req("10.2"), Policy.MINOR_COMPAT, kb)
    assert v.status is INCOMPATIBLE
    assert "no minor-version compatibility" in v.reasons[0].message


def test_forward_compat_on_datacenter_gpu(kb: KnowledgeBase) -> None:
    n = node_facts("A100", "535.104.05")
    ok = check(n, req("13.0", ships_cuda_compat=True), Policy.FORWARD_COMPAT, kb)
    assert ok.status is CAVEATS and ok.codes == ("forward-compat",)
    assert "cuda-compat-13-0" in ok.reasons[0].message
    # The image must ship cuda-compat.
    no_pkg = check(n, req("13.0"), Policy.FORWARD_COMPAT, kb)
    assert no_pkg.status is INCOMPATIBLE and "cuda-compat" in no_pkg.reasons[0].message
    # Strict and minor-compat never use it.
    assert check(n, req("13.0", ships_cuda_compat=True), Policy.MINOR_COMPAT, kb).status is (
        INCOMPATIBLE
    )


def test_forward_compat_refused_on_geforce(kb: KnowledgeBase) -> None:
    n = node_facts("RTX 4090", "535.104.05")
    v = check(n, req("13.0", ships_cuda_compat=True), Policy.FORWARD_COMPAT, kb)
    assert v.status is INCOMPATIBLE
    assert "no-forward-compat-on-geforce" in v.codes
    # Said even when the branch is not a forward-compat target anyway.
    other = node_facts("RTX 4090", "550.90.07")
    w = check(other, req("13.0", ships_cuda_compat=True), Policy.FORWARD_COMPAT, kb)
    assert {"driver-too-old", "no-forward-compat-on-geforce"} <= set(w.codes)


def test_forward_compat_only_on_listed_branches(kb: KnowledgeBase) -> None:
    # R550 is end of life: not a forward-compat target in NVIDIA's current matrix.
    v = check(
        node_facts("H100", "550.90.07"), req("13.0", ships_cuda_compat=True), "forward-compat", kb
    )
    assert v.status is INCOMPATIBLE
    assert "listed only on R535, R570" in v.reasons[0].message


def test_requirement_policy_overrides_argument(kb: KnowledgeBase) -> None:
    n = node_facts("A100", "535.104.05")
    r = req("12.8", policy=Policy.MINOR_COMPAT)
    assert check(n, r, Policy.STRICT, kb).status is CAVEATS
    strict = req("12.8", policy=Policy.STRICT)
    assert check(n, strict, Policy.FORWARD_COMPAT, kb).status is INCOMPATIBLE


@pytest.mark.parametrize(
    ("gpu", "driver", "cuda", "code"),
    [
        ("V100", "580.65.06", "13.0", "arch-dropped"),  # CUDA 13 dropped Volta
        ("K80", "470.82.01", "12.0", "arch-dropped"),  # CUDA 12 dropped Kepler
        ("B200", "580.65.06", "11.8", "arch-too-new"),  # sm_100 first in 12.8
        ("RTX 5090", "570.124.06", "12.6", "arch-too-new"),
        ("K80", "535.104.05", "11.4", "driver-branch-unsupported-gpu"),  # Kepler ends at R470
        ("V100", "590.44.01", "12.4", "driver-branch-unsupported-gpu"),  # Volta ends at R580
    ],
)
def test_hardware_rules_apply_under_every_policy(
    kb: KnowledgeBase, gpu: str, driver: str, cuda: str, code: str
) -> None:
    verdicts = {
        policy: check(node_facts(gpu, driver), req(cuda, ships_cuda_compat=True), policy, kb)
        for policy in Policy
    }
    assert len(verdicts) == 3  # strict, minor-compat, forward-compat
    for policy, v in verdicts.items():
        assert v.status is INCOMPATIBLE, (policy, v)
        assert code in v.codes
        assert v.codes[0] == code  # blocking reasons come first


def test_arch_messages_name_the_versions(kb: KnowledgeBase) -> None:
    v = check(node_facts("V100", "580.65.06"), req("13.0"), Policy.STRICT, kb)
    assert "Volta" in v.reasons[0].message and "12.9" in v.reasons[0].message
    w = check(node_facts("B200", "580.65.06"), req("11.8"), Policy.STRICT, kb)
    assert "12.8" in w.reasons[0].message and "11.8" in w.reasons[0].message


def test_compute_capability_floor(kb: KnowledgeBase) -> None:
    r = req("12.4", min_compute=cc("8.0"))
    v = check(node_facts("T4", "550.90.07"), r, Policy.STRICT, kb)
    assert v.codes[0] == "compute-capability-too-low" and "7.5" in v.reasons[0].message
    assert check(node_facts("A100", "550.90.07"), r, Policy.STRICT, kb).status is COMPATIBLE


def test_compute_capability_only_requirement(kb: KnowledgeBase) -> None:
    r = req(min_compute=cc("8.0"))
    assert check(node_facts("A100", "450.80.02"), r, "strict", kb).codes == (
        "compute-capability-ok",
    )
    assert check(node_facts("T4", "550.90.07"), r, "strict", kb).status is INCOMPATIBLE


def _build(archs: str, *, ptx: bool, cuda: str = "12.8") -> FrameworkBuild:
    arch_list = tuple(cc(a) for a in archs.split())
    return FrameworkBuild("torch", "2.x", parse_cuda(cuda), arch_list=arch_list, ptx=ptx)


def test_framework_coverage() -> None:
    fw = _build("7.5 8.0 8.6 9.0 10.0 12.0", ptx=True)
    assert framework_coverage(fw, cc("8.0")) is Coverage.SASS
    assert framework_coverage(fw, cc("8.9")) is Coverage.SASS  # sm_86 cubin runs on 8.9
    assert framework_coverage(fw, cc("12.1")) is Coverage.SASS
    assert framework_coverage(fw, cc("13.0")) is Coverage.PTX
    assert framework_coverage(fw, cc("7.0")) is Coverage.NONE
    assert framework_coverage(_build("8.0 9.0", ptx=False), cc("10.0")) is Coverage.NONE
    assert framework_coverage(None, cc("7.0")) is Coverage.UNKNOWN


def test_framework_arch_list(kb: KnowledgeBase) -> None:
    fw = kb.framework("torch 2.11.0+cu130")
    assert fw is not None
    v = check(node_facts("V100", "580.65.06"), Requirement(framework=fw), "strict", kb)
    assert "framework-arch-unsupported" in v.codes
    ok = check(node_facts("H100", "580.65.06"), Requirement(framework=fw), "strict", kb)
    assert ok.status is COMPATIBLE  # the CUDA comes from the build (13.0)


def test_ptx_only_gpu_is_refused_under_minor_compat(kb: KnowledgeBase) -> None:
    # 8.0+PTX only: a Hopper GPU is reached by JIT, which minor-version compat forbids.
    fw = _build("8.0", ptx=True, cuda="12.8")
    n = node_facts("H100", "535.104.05")
    v = check(n, Requirement(framework=fw), Policy.MINOR_COMPAT, kb)
    assert v.status is INCOMPATIBLE and "framework-arch-unsupported" in v.codes
    # On a native driver PTX JIT is fine; so is forward compatibility.
    assert check(
        node_facts("H100", "570.124.06"), Requirement(framework=fw), "strict", kb
    ).compatible
    fc = Requirement(framework=fw, ships_cuda_compat=True)
    assert check(n, fc, Policy.FORWARD_COMPAT, kb).codes == ("forward-compat",)


def test_unknown_facts_never_pass(kb: KnowledgeBase) -> None:
    only_product = facts_from_labels("p", {L.GFD_PRODUCT: "NVIDIA-H100-80GB-HBM3"}, kb)
    v = check(only_product, req("12.4"), "minor-compat", kb)
    assert v.status is INCOMPATIBLE and "unknown-driver" in v.codes

    no_cc = facts_from_labels("d", {L.DRIVER_CODE: "550090007"}, kb)
    assert "unknown-compute-capability" in check(no_cc, req("12.4"), "strict", kb).codes

    odd = facts_from_labels("o", {L.CUDA_CODE: "12040", L.COMPUTE_CODE: "40"}, kb)
    assert "unknown-arch" in check(odd, req("12.4"), "strict", kb).codes

    v = check(node_facts("A100", "580.65.06"), req("12.7"), "strict", kb)
    assert v.status is INCOMPATIBLE and "unknown-toolkit" in v.codes

    fw = FrameworkBuild("torch", "9.9", None)
    assert (
        "unknown-toolkit"
        in check(node_facts("A100", "580.65.06"), Requirement(framework=fw), "strict", kb).codes
    )

    # Capped architecture (Volta <= R580) and no driver version: cannot confirm.
    volta = facts_from_labels("v", {L.CUDA_CODE: "12040", L.COMPUTE_CODE: "70"}, kb)
    assert "unknown-driver" in check(volta, req("12.4"), "strict", kb).codes

    # Forward compatibility with no word on the GPU class.
    anon = facts_from_labels("a", {L.DRIVER_CODE: "535104005", L.COMPUTE_CODE: "90"}, kb)
    fc = check(anon, req("13.0", ships_cuda_compat=True), "forward-compat", kb)
    assert fc.status is INCOMPATIBLE and "unknown-datacenter" in fc.codes


def test_no_gpu_facts_and_no_requirement(kb: KnowledgeBase) -> None:
    cpu = facts_from_labels("cpu", {}, kb)
    v = check(cpu, req("12.4"), "strict", kb)
    assert v.status is INCOMPATIBLE and v.codes == ("no-gpu-facts",)
    assert check(cpu, Requirement(), "strict", kb).codes == ("no-requirement",)


def test_bad_policy(kb: KnowledgeBase) -> None:
    with pytest.raises(InputError, match="invalid policy 'lenient'"):
        check(node_facts("A100", "550.90.07"), req("12.4"), "lenient", kb)


def test_to_dict(kb: KnowledgeBase) -> None:
    d = check(node_facts("A100", "535.104.05"), req("12.4"), "strict", kb).to_dict()
    assert d == {
        "verdict": "incompatible",
        "reasons": [{"code": "driver-too-old", "message": d["reasons"][0]["message"]}],  # type: ignore[index]
    }


# --------------------------------------------------------------------------- properties

_GPUS = ["K80", "P100", "V100", "T4", "A100", "A10", "RTX 4090", "L4", "H100", "B200", "RTX 5090"]
_DRIVERS = [
    "418.39",
    "450.80.02",
    "470.82.01",
    "520.61.05",
    "525.60.13",
    "535.104.05",
    "550.90.07",
    "570.26",
    "575.57.08",
    "580.65.06",
    "590.44.01",
    "610.43.02",
]
_CUDAS = ["10.2", "11.0", "11.4", "11.8", "12.0", "12.2", "12.4", "12.8", "12.9", "13.0", "13.2"]
_POSITIVE = {"native", "minor-version-compat", "forward-compat", "compute-capability-ok"}


@settings(max_examples=200)
@given(
    gpu=st.sampled_from(_GPUS),
    driver=st.sampled_from(_DRIVERS),
    cuda=st.sampled_from(_CUDAS),
    min_cc=st.sampled_from([None, "6.0", "7.5", "8.0", "9.0"]),
    ships=st.booleans(),
)
def test_policies_only_widen(
    gpu: str, driver: str, cuda: str, min_cc: str | None, ships: bool
) -> None:
    kb = _kb()
    n = node_facts(gpu, driver)
    r = req(cuda, min_compute=cc(min_cc) if min_cc else None, ships_cuda_compat=ships)
    verdicts = [
        check(n, r, p, kb) for p in (Policy.STRICT, Policy.MINOR_COMPAT, Policy.FORWARD_COMPAT)
    ]
    ok = [v.compatible for v in verdicts]
    assert ok == sorted(ok)  # strict <= minor-compat <= forward-compat
    for v in verdicts:
        assert v.reasons and all(r.code in REASON_CODES and r.message for r in v.reasons)
        if v.compatible:
            assert len(v.reasons) == 1 and v.reasons[0].code in _POSITIVE
            assert (v.status is COMPATIBLE) == (
                v.reasons[0].code in {"native", "compute-capability-ok"}
            )
        else:
            assert any(r.code not in _POSITIVE for r in v.reasons)
    # A strict pass is always native.
    if verdicts[0].compatible:
        assert verdicts[0].codes == ("native",)


# --------------------------------------------------------------------------- issue 12 items 1-5


@pytest.mark.parametrize(
    ("gpu", "driver", "workload"),
    [
        ("L4", "550.90.07", "11.6"),  # sm_86 cubin runs on 8.9
        ("A10G", "535.104.05", "11.0"),  # sm_80 cubin runs on 8.6
        ("L40S", "535.104.05", "torch 2.0.1+cu117"),
        ("B300", "580.82.07", "12.8"),  # sm_100 cubin runs on 10.3
        ("GB10", "590.48.01", "12.8"),  # sm_120 cubin runs on 12.1
        ("RTX 4090", "535.104.05", "11.6"),
    ],
)
def test_same_major_binary_compatibility(
    kb: KnowledgeBase, gpu: str, driver: str, workload: str
) -> None:
    """Issue 12 item 1: a cubin for X.y runs on X.z (z >= y), so a toolkit that predates a GPU
    of a known major still runs there, under every policy."""
    if workload.startswith("torch"):
        fw = kb.framework(workload)
        assert fw is not None
        r = Requirement(framework=fw)
    else:
        r = req(workload)
    for policy in Policy:
        v = check(node_facts(gpu, driver), r, policy, kb)
        assert v.status is COMPATIBLE and v.codes == ("native",), (policy, v)


@pytest.mark.parametrize(
    ("gpu", "driver", "cuda", "newest"),
    [
        ("H100", "550.90.07", "11.7", "8.x"),  # Hopper first targeted by 11.8
        ("B200", "570.124.06", "12.6", "9.x"),  # Blackwell first targeted by 12.8
        ("RTX 5090", "570.124.06", "11.8", "9.x"),
    ],
)
def test_a_newer_major_needs_ptx(
    kb: KnowledgeBase, gpu: str, driver: str, cuda: str, newest: str
) -> None:
    """Only a GPU whose major is newer than every target depends on PTX, which an image may
    not carry: refused unless a framework build says it ships PTX."""
    v = check(node_facts(gpu, driver), req(cuda), "strict", kb)
    assert v.codes[0] == "arch-too-new" and newest in v.reasons[0].message
    assert "PTX" in v.reasons[0].message
    cc_ = node_facts(gpu, driver).compute
    assert cc_ is not None
    low = ComputeCapability(8, 0)
    with_ptx = FrameworkBuild("torch", "x", parse_cuda(cuda), arch_list=(low,), ptx=True)
    assert check(node_facts(gpu, driver), Requirement(framework=with_ptx), "strict", kb).compatible
    no_ptx = FrameworkBuild("torch", "x", parse_cuda(cuda), arch_list=(low,), ptx=False)
    refused = check(node_facts(gpu, driver), Requirement(framework=no_ptx), "strict", kb)
    assert "framework-arch-unsupported" in refused.codes


def test_toolkit_coverage_matches_the_targets(kb: KnowledgeBase) -> None:
    assert toolkit_coverage(kb, cc("8.9"), parse_cuda("11.6")) is Coverage.SASS
    assert toolkit_coverage(kb, cc("9.0"), parse_cuda("11.7")) is Coverage.PTX
    assert toolkit_coverage(kb, cc("9.0"), parse_cuda("11.8")) is Coverage.SASS
    assert toolkit_coverage(kb, cc("10.3"), parse_cuda("12.8")) is Coverage.SASS
    assert toolkit_coverage(kb, cc("7.0"), parse_cuda("13.0")) is Coverage.NONE
    assert toolkit_coverage(kb, cc("11.0"), parse_cuda("12.8")) is Coverage.NONE


@pytest.mark.parametrize("driver", ["535.104.05", "550.90.07", "570.26"])
def test_a_driver_older_than_the_gpu_cannot_drive_it(kb: KnowledgeBase, driver: str) -> None:
    """Issue 12 item 2: B200 is first driven by 570.86.15; older drivers are refused under every
    policy, forward compatibility included (it replaces only the user-mode driver)."""
    r = req("12.2", ships_cuda_compat=True)
    for policy in Policy:
        v = check(node_facts("B200", driver), r, policy, kb)
        assert v.status is INCOMPATIBLE, (policy, v)
        assert "driver-branch-unsupported-gpu" in v.codes
        assert "570.86.15" in v.reasons[v.codes.index("driver-branch-unsupported-gpu")].message
    assert check(node_facts("B200", "570.86.15"), req("12.8"), "strict", kb).compatible


def test_first_driver_is_per_board(kb: KnowledgeBase) -> None:
    # H100 PCIe from 520.56.06, the NVL board only from 535.104.05.
    pcie = facts_from_labels(
        "p",
        {L.GFD_PRODUCT: "NVIDIA-H100-PCIe", L.DRIVER_CODE: "525085012", L.COMPUTE_CODE: "90"},
        kb,
    )
    nvl = facts_from_labels(
        "n",
        {L.GFD_PRODUCT: "NVIDIA-H100-NVL", L.DRIVER_CODE: "525085012", L.COMPUTE_CODE: "90"},
        kb,
    )
    assert check(pcie, req("12.0"), "strict", kb).compatible
    v = check(nvl, req("12.0"), "strict", kb)
    assert v.codes[0] == "driver-branch-unsupported-gpu" and "535.104.05" in v.reasons[0].message
    # Listing artefacts are not minima: T4 and the README's first table have no first driver.
    for product in ("T4", "A100", "A10G", "RTX 3090"):
        info = kb.gpu(product)
        assert info is not None and info.first_driver is None, product


def test_one_answer_whatever_the_input_form(kb: KnowledgeBase) -> None:
    """Issue 12 item 4: a node described by --gpu/--driver/--cuda and the same node given by
    labels get the same facts and the same verdict."""
    by_hand = facts_from_parts("n", gpu="H100", driver="615.31", cuda="13.4", kb=kb)
    labels = {
        L.GFD_PRODUCT: "NVIDIA-H100-80GB-HBM3",
        L.GFD_DRIVER_MAJOR: "615",
        L.GFD_DRIVER_MINOR: "31",
        L.GFD_DRIVER_REVISION: "",
        L.GFD_CUDA_MAJOR: "13",
        L.GFD_CUDA_MINOR: "4",
        L.GFD_COMPUTE_MAJOR: "9",
        L.GFD_COMPUTE_MINOR: "0",
    }
    by_labels = facts_from_labels("n", labels, kb)
    assert by_hand.cuda == by_labels.cuda == parse_cuda("13.3")  # 13.4's minimum is disputed
    assert by_hand.problems and by_labels.problems
    for cuda in ("13.3", "13.4"):
        for policy in Policy:
            a = check(by_hand, req(cuda), policy, kb)
            b = check(by_labels, req(cuda), policy, kb)
            assert a.status is b.status and a.codes == b.codes, (cuda, policy)


def test_a_label_claiming_more_than_the_driver_supports_is_not_trusted(kb: KnowledgeBase) -> None:
    labels = {
        L.GFD_DRIVER_MAJOR: "495",
        L.GFD_DRIVER_MINOR: "46",
        L.GFD_DRIVER_REVISION: "",
        L.GFD_CUDA_MAJOR: "11",
        L.GFD_CUDA_MINOR: "6",
        L.GFD_COMPUTE_MAJOR: "8",
        L.GFD_COMPUTE_MINOR: "0",
    }
    facts = facts_from_labels("n", labels, kb)
    assert facts.cuda == parse_cuda("11.5")
    assert any("510.39.01" in p and "11.6" in p for p in facts.problems)
    v = check(facts, req("11.6"), "strict", kb)
    assert v.codes == ("driver-too-old",)
    # The CUDA is the driver's: a label lower than the driver's tables is reported, not used.
    lower = facts_from_labels("m", {**labels, L.GFD_DRIVER_MAJOR: "550"}, kb)
    assert lower.cuda == kb.max_cuda_for_driver(lower.driver) and lower.problems


def test_unknown_minimum_is_never_guessed(kb: KnowledgeBase) -> None:
    """Issue 12 item 5: 13.5's minimum driver is unknown: unknown-toolkit, no invented
    numbers; minor-version compatibility (which needs only the 13.x floor) still applies."""
    v = check(node_facts("H100", "999.1"), req("13.5"), "strict", kb)
    assert v.status is INCOMPATIBLE and v.codes == ("unknown-toolkit",)
    assert "999.1" in v.reasons[0].message and "999.01" not in v.reasons[0].message
    ok = check(node_facts("H100", "580.65.06"), req("13.5"), "minor-compat", kb)
    assert ok.codes == ("minor-version-compat",)
    labelled = facts_from_labels(
        "l", {L.CUDA_CODE: "13050", L.COMPUTE_CODE: "90", L.DRIVER_VERSION: "540.4.0"}, kb
    )
    assert str(labelled.driver) == "540.4.0"
    assert "unknown-toolkit" in check(labelled, req("13.5"), "strict", kb).codes
