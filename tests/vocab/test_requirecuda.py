"""NVIDIA_REQUIRE_CUDA as the NVIDIA container toolkit evaluates it, and the engine applying it.

The values are the real ones of public images (``docker inspect`` of nvidia/cuda 12.8.1 and
13.0.2, whose ``NVIDIA_REQUIRE_CUDA`` lists twelve brands per driver branch; vLLM images are
built on them). The parsing rules mirror nvidia-container-toolkit
``internal/requirements/constraints`` (factory.go, binary.go, property.go).
"""

from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.compat.engine import check
from cudasched.knowledge import KnowledgeBase
from cudasched.vocab.errors import InputError
from cudasched.vocab.requirecuda import (
    ALL_BRANDS,
    DATACENTER_BRANDS,
    OTHER_BRANDS,
    brands_for,
    gate_from_env,
    parse_constraint,
)
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.vocab.versions import CudaVersion, parse_cuda, parse_driver
from tests.support.builders import node_facts

_IMAGE_BRANDS = [
    "unknown",
    "grid",
    "tesla",
    "nvidia",
    "quadro",
    "quadrortx",
    "nvidiartx",
    "vapps",
    "vpc",
    "vcs",
    "vws",
    "cloudgaming",
]


def image_value(cuda: str, branches: tuple[int, ...]) -> str:
    """An nvidia/cuda image's value: ``cuda>=X.Y`` then every brand per branch."""
    alts = [f"brand={b},driver>={n},driver<{n + 1}" for n in branches for b in _IMAGE_BRANDS]
    return " ".join([f"cuda>={cuda}", *alts])


CUDA_12_8_1 = image_value("12.8", (470, 535, 550, 560, 565))
CUDA_13_0_2 = image_value("13.0", (535, 550, 565, 570, 575))


@functools.cache
def _kb() -> KnowledgeBase:
    return KnowledgeBase.load()


def gate(value: str, **env: str):  # type: ignore[no-untyped-def]
    found = gate_from_env({"NVIDIA_REQUIRE_CUDA": value, **env}, "test")
    assert found is not None
    return found


def holds(g, cuda: str | None, driver: str | None, cc: int | None, brands=DATACENTER_BRANDS):  # type: ignore[no-untyped-def]
    return g.holds(
        parse_cuda(cuda) if cuda else None,
        parse_driver(driver).code if driver else None,
        cc,
        brands,
    )


# --------------------------------------------------------------------------- parsing


def test_the_real_image_values() -> None:
    g = gate(CUDA_13_0_2)
    assert g.cuda_floor() == CudaVersion(13, 0)
    assert g.branches(DATACENTER_BRANDS) == {535, 550, 565, 570, 575}
    # Neither GeForce nor TITAN is among the brands: no branch admits every other GPU.
    assert g.branches(OTHER_BRANDS) == frozenset()
    assert g.branches(ALL_BRANDS) == frozenset()
    assert gate(CUDA_12_8_1).branches(DATACENTER_BRANDS) == {470, 535, 550, 560, 565}


@pytest.mark.parametrize(
    ("value", "floor"),
    [
        ("cuda>=12.4", "12.4"),
        ("cuda>=12", "12.0"),
        ("cuda>=12.4.1", "12.5"),  # a host CUDA is X.Y.0: 12.4 < 12.4.1
        ("cuda>12.1", "12.2"),
        ("cuda=12.1", "12.1"),
        ("cuda>=12.4,driver>=550 cuda>=12.2", "12.2"),  # any alternative suffices
        ("cuda>=12.2,cuda>=12.6", "12.6"),  # every condition of one must hold
        ("cuda>=12.4,cuda<13.0", "12.4"),
    ],
)
def test_cuda_floor(value: str, floor: str) -> None:
    assert gate(value).cuda_floor() == parse_cuda(floor)


@pytest.mark.parametrize(
    "value",
    [
        "CUDA>=12.2",  # property names are case-sensitive: an unknown property is skipped
        "foo>=1",
        "",
        "   ",
    ],
)
def test_values_the_toolkit_skips(value: str) -> None:
    assert gate_from_env({"NVIDIA_REQUIRE_CUDA": value}, "t") is None


@pytest.mark.parametrize(
    "value",
    [
        "cuda>=abc",
        "cuda>=",
        "cuda==12.4",  # "=" is the operator, "=12.4" an invalid version
        "cuda>=12.04",  # semantic versions have no leading zeros
        "cuda~12.4",  # no operator at all
        "cuda>=12.x brand=tesla",
    ],
)
def test_values_the_toolkit_rejects(value: str) -> None:
    with pytest.raises(InputError, match="NVIDIA_REQUIRE_CUDA"):
        parse_constraint(value)


def test_disable_and_legacy_images() -> None:
    for truthy in ("1", "true", "True", "t", "TRUE"):
        assert (
            gate_from_env(
                {"NVIDIA_REQUIRE_CUDA": "cuda>=13.0", "NVIDIA_DISABLE_REQUIRE": truthy}, "t"
            )
            is None
        )
    # Anything else leaves the check on (Go's strconv.ParseBool).
    assert gate_from_env(
        {"NVIDIA_REQUIRE_CUDA": "cuda>=13.0", "NVIDIA_DISABLE_REQUIRE": "yes"}, "t"
    )
    legacy = gate_from_env({"CUDA_VERSION": "11.4.3"}, "t")
    assert legacy is not None and legacy.cuda_floor() == CudaVersion(11, 4)
    # Every NVIDIA_REQUIRE_* but JETPACK is ANDed.
    both = gate_from_env(
        {
            "NVIDIA_REQUIRE_CUDA": "cuda>=12.4",
            "NVIDIA_REQUIRE_ARCH": "arch>=8.0",
            "NVIDIA_REQUIRE_JETPACK": "l4t>=36",
        },
        "t",
    )
    assert both is not None and len(both.constraints) == 2
    assert holds(both, "12.4", "550.54.14", 75) is False
    assert holds(both, "12.4", "550.54.14", 80) is True


# --------------------------------------------------------------------------- evaluation


def test_strict_cuda_comparison_and_brand_alternatives() -> None:
    g = gate(CUDA_12_8_1)
    assert holds(g, "12.8", "570.124.06", 90) is True
    # R535 supports CUDA 12.2: refused, unless the GPU's brand is listed for R535.
    assert holds(g, "12.2", "535.104.05", 90, DATACENTER_BRANDS) is True
    assert holds(g, "12.2", "535.104.05", 89, frozenset({"geforce"})) is False
    assert holds(g, "12.2", "535.104.05", 89, OTHER_BRANDS) is False
    # R545 is not listed for any brand.
    assert holds(g, "12.3", "545.23.08", 90) is False
    # Unknown facts the gate reads: cannot be told.
    assert holds(g, None, "535.104.05", 90) is True  # the branch alternative alone holds
    assert holds(g, None, "545.23.08", 90) is None


def test_brands_by_gpu_class() -> None:
    assert brands_for(True) == DATACENTER_BRANDS
    assert brands_for(False) == OTHER_BRANDS
    assert brands_for(None) == ALL_BRANDS


_VALUES = st.sampled_from(
    [
        CUDA_12_8_1,
        CUDA_13_0_2,
        "cuda>=12.4",
        "cuda>12.4.1,arch>=8.0 brand=tesla,driver>=550",
        "cuda>=11.8 cuda!=12.0,driver<560",
        "arch>=7.5 arch=7.0",
        "brand!=geforce,cuda>=12.2",
    ]
)


def _reference(
    value: str, cuda: tuple[int, int], driver: tuple[int, int, int], cc: tuple[int, int], brand: str
) -> bool:
    """A direct reading of the toolkit's rules, independent of the interval arithmetic."""

    def compare(prop: str, op: str, text: str) -> bool:
        if prop == "brand":
            left, right = brand, text
        else:
            parts = [int(p) for p in text.split(".")] + [0, 0]
            right = tuple(parts[:3])  # type: ignore[assignment]
            left = {"cuda": (*cuda, 0), "driver": driver, "arch": (*cc, 0)}[prop]  # type: ignore[assignment]
        return {
            "=": left == right,
            "!=": left != right,
            "<": left < right,  # type: ignore[operator]
            "<=": left <= right,
            ">": left > right,
            ">=": left >= right,  # type: ignore[operator]
        }[op]

    for term in value.split(" "):
        ok = True
        for factor in term.split(","):
            for op in ("!=", "<=", ">=", "=", "<", ">"):
                i = factor.find(op)
                if i > 0 and factor[:i].isalpha():
                    ok = ok and compare(factor[:i], op, factor[i + len(op) :])
                    break
        if ok:
            return True
    return False


@settings(max_examples=300)
@given(
    value=_VALUES,
    cuda=st.tuples(st.integers(11, 13), st.integers(0, 9)),
    driver=st.tuples(
        st.sampled_from([470, 535, 545, 550, 559, 560, 565, 570, 575, 580]),
        st.integers(0, 150),
        st.integers(0, 20),
    ),
    cc=st.tuples(st.integers(6, 12), st.integers(0, 9)),
    brand=st.sampled_from(sorted(ALL_BRANDS)),
)
def test_evaluation_equals_the_toolkit_rules(
    value: str, cuda: tuple[int, int], driver: tuple[int, int, int], cc: tuple[int, int], brand: str
) -> None:
    g = gate(value)
    got = g.holds(
        CudaVersion(*cuda),
        driver[0] * 1_000_000 + driver[1] * 1000 + driver[2],
        cc[0] * 10 + cc[1],
        (brand,),
    )
    assert got is _reference(value, cuda, driver, cc, brand)


# --------------------------------------------------------------------------- the engine


def test_minor_compat_is_refused_at_container_start() -> None:
    """Issue 12 item 3: minor-version compatibility would run CUDA 12.8 on R545, but the
    toolkit compares ``cuda>=12.8`` strictly and no alternative names R545."""
    kb = _kb()
    r = Requirement(cuda=parse_cuda("12.8"), gate=gate(CUDA_12_8_1))
    v = check(node_facts("A100", "545.23.08"), r, Policy.MINOR_COMPAT, kb)
    assert v.codes[0] == "require-cuda-unmet"
    assert "NVIDIA_DISABLE_REQUIRE" in v.reasons[0].message
    assert "R470, R535, R550, R560, R565" in v.reasons[0].message
    # Without the gate (the pod disabled it) the same node is fine.
    assert check(
        node_facts("A100", "545.23.08"), Requirement(cuda=parse_cuda("12.8")), "minor-compat", kb
    ).compatible
    # A data-center GPU on a listed branch starts, under minor-version compatibility.
    ok = check(node_facts("A100", "535.104.05"), r, Policy.MINOR_COMPAT, kb)
    assert ok.codes == ("minor-version-compat",) and "R535" in ok.reasons[0].message
    # A GeForce card on the same branch does not.
    assert check(node_facts("RTX 4090", "535.104.05"), r, Policy.MINOR_COMPAT, kb).codes[0] == (
        "require-cuda-unmet"
    )


def test_image_alternatives_widen_forward_compatibility() -> None:
    """The brand/driver alternatives name the data-center branches the image's compat
    libraries are meant for: R550 is not in NVIDIA's current matrix for cuda-compat-13-0."""
    kb = _kb()
    r = Requirement(cuda=parse_cuda("13.0"), gate=gate(CUDA_13_0_2), ships_cuda_compat=True)
    v = check(node_facts("H100", "550.90.07"), r, Policy.FORWARD_COMPAT, kb)
    assert v.codes == ("forward-compat",) and "NVIDIA_REQUIRE_CUDA names it" in v.reasons[0].message
    # Without the gate only the matrix counts.
    plain = Requirement(cuda=parse_cuda("13.0"), ships_cuda_compat=True)
    assert not check(node_facts("H100", "550.90.07"), plain, Policy.FORWARD_COMPAT, kb).compatible
    # R560 is neither in the matrix nor in the image's list.
    assert not check(node_facts("H100", "560.35.03"), r, Policy.FORWARD_COMPAT, kb).compatible


def test_strict_policy_is_unchanged_by_a_matching_gate() -> None:
    kb = _kb()
    r = Requirement(cuda=parse_cuda("12.8"), gate=gate(CUDA_12_8_1))
    assert check(node_facts("H100", "570.124.06"), r, "strict", kb).codes == ("native",)
    assert check(node_facts("H100", "535.104.05"), r, "strict", kb).codes == ("driver-too-old",)
