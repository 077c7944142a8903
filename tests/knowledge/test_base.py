"""KnowledgeBase queries: NVIDIA table invariants and spot values for toolkits, compatibility,
architectures (family words), GPUs and NGC containers."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.knowledge import FcCell, KnowledgeBase, ReleaseKind, Status
from cudasched.knowledge.base import release_order
from cudasched.vocab.errors import InputError
from cudasched.vocab.versions import (
    ComputeCapability,
    CudaVersion,
    DriverVersion,
)
from tests.support.gfd_reference import GFD_FAMILIES, gfd_get_arch_family
from tests.support.versions import cc, cv, dv

# ---------------------------------------------------------------------------------------------
# Table 3
# ---------------------------------------------------------------------------------------------


def test_table3_covers_every_release_from_8_0(kb: KnowledgeBase) -> None:
    ga = {(r.cuda.major, r.cuda.minor) for r in kb.toolkits() if r.kind is ReleaseKind.GA}
    expected = {(8, 0), (9, 0), (9, 1), (9, 2), (10, 0), (10, 1), (10, 2)}
    expected |= {(11, m) for m in range(9)} | {(12, m) for m in (0, 1, 2, 3, 4, 5, 6, 8, 9)}
    expected |= {(13, m) for m in range(6)}
    assert ga == expected  # there is no CUDA 12.7
    assert kb.toolkit(cv("12.7")) is None
    assert kb.min_driver(cv("12.7")) is None


@pytest.mark.parametrize(
    ("cuda", "driver"),
    [
        ("12.4", "550.54.14"),
        ("12.8", "570.26"),
        ("11.8", "520.61.05"),
        ("13.0", "580.65.06"),
        ("13.1", "590.44.01"),
        ("13.3", "610.43.02"),
        ("12.2", "535.54.03"),
        ("11.0", "450.51.05"),  # the 11.0.2 GA row, not the 11.0.1 RC
        ("10.2", "440.33"),
        ("8.0", "367.48"),
        ("12.4.1", "550.54.14"),  # min_driver reads the GA row whatever the patch level
    ],
)
def test_min_driver_spot_values(kb: KnowledgeBase, cuda: str, driver: str) -> None:
    assert kb.min_driver(cv(cuda)) == dv(driver)


def test_update_rows_are_reachable(kb: KnowledgeBase) -> None:
    row = kb.toolkit_release(cv("12.4.1"))
    assert row is not None and row.kind is ReleaseKind.UPDATE
    assert row.min_driver == dv("550.54.15")
    assert kb.toolkit_release(cv("12.2.2")).min_driver == dv("535.104.05")  # type: ignore[union-attr]
    assert kb.toolkit_release(cv("12.4")) is kb.toolkit(cv("12.4"))


def test_disputed_13_4_uses_the_strictest_alternative(kb: KnowledgeBase) -> None:
    assert kb.min_driver(cv("13.4")) == DriverVersion(616, 0, 0)
    assert kb.max_cuda_for_driver(dv("615.31")) == cv("13.3")
    assert kb.max_cuda_for_driver(dv("620.10.01")) == cv("13.4")


def test_min_drivers_never_decrease(kb: KnowledgeBase) -> None:
    rows = [r for r in kb.toolkits() if r.effective_min_driver is not None]
    keys = [r.sort_key for r in rows]
    assert keys == sorted(keys)
    for earlier, later in itertools.pairwise(rows):
        assert earlier.effective_min_driver <= later.effective_min_driver, (earlier, later)  # type: ignore[operator]
    ga = [r for r in rows if r.kind is ReleaseKind.GA]
    for earlier, later in itertools.pairwise(ga):
        assert earlier.effective_min_driver <= later.effective_min_driver  # type: ignore[operator]


def test_max_cuda_for_driver_spot_values(kb: KnowledgeBase) -> None:
    assert kb.max_cuda_for_driver(dv("550.90.07")) == cv("12.4")
    assert kb.max_cuda_for_driver(dv("535.104.05")) == cv("12.2")
    assert kb.max_cuda_for_driver(dv("580.65.06")) == cv("13.0")
    assert kb.max_cuda_for_driver(dv("570.26")) == cv("12.8")
    assert kb.max_cuda_for_driver(dv("570.25.99")) == cv("12.6")
    assert kb.max_cuda_for_driver(dv("470.82.01")) == cv("11.4")
    assert kb.max_cuda_for_driver(dv("300.01")) is None
    assert kb.max_cuda_for_driver(dv("550.90.07")).patch is None  # type: ignore[union-attr]


drivers = st.builds(
    DriverVersion,
    st.integers(min_value=300, max_value=700),
    st.integers(min_value=0, max_value=200),
    st.integers(min_value=0, max_value=99),
)


@settings(max_examples=300, deadline=None)
@given(driver=drivers)
def test_max_cuda_for_driver_inverts_min_driver(kb: KnowledgeBase, driver: DriverVersion) -> None:
    found = kb.max_cuda_for_driver(driver)
    ga = [r for r in kb.toolkits() if r.kind is ReleaseKind.GA and r.effective_min_driver]
    if found is None:
        assert all(r.effective_min_driver > driver for r in ga)  # type: ignore[operator]
        return
    need = kb.min_driver(found)
    assert need is not None and need <= driver
    for row in ga:
        if row.cuda > found:
            assert row.effective_min_driver > driver  # type: ignore[operator]


def test_every_ga_minimum_maps_back_to_its_release(kb: KnowledgeBase) -> None:
    ga = [
        row
        for row in kb.toolkits()
        if row.kind is ReleaseKind.GA and row.effective_min_driver is not None
    ]
    assert len(ga) >= 30  # CUDA 8.0 to 13.x
    for row in ga:
        assert kb.max_cuda_for_driver(row.effective_min_driver) == row.cuda


# ---------------------------------------------------------------------------------------------
# Minor-version and forward compatibility
# ---------------------------------------------------------------------------------------------


def test_minor_compat_floors(kb: KnowledgeBase) -> None:
    assert kb.minor_compat_floor(11) == dv("450.80.02")
    assert kb.minor_compat_floor(12) == dv("525.60.13")
    assert kb.minor_compat_floor(13) == dv("580.65.06")
    for major in (8, 9, 10, 14):
        assert kb.minor_compat_floor(major) is None
    # The 12 and 13 floors are their series' GA minimum; 11's is above 11.0 GA (NVIDIA footnote).
    assert kb.minor_compat_floor(12) == kb.min_driver(cv("12.0"))
    assert kb.minor_compat_floor(13) == kb.min_driver(cv("13.0"))
    assert kb.minor_compat_floor(11) > kb.min_driver(cv("11.0"))  # type: ignore[operator]


def test_forward_compat_matrix_is_consistent(kb: KnowledgeBase) -> None:
    columns = kb.forward_compat_columns()
    assert columns == tuple(sorted(columns))
    packages = list(kb.forward_compat_packages())
    assert {f"{p.cuda}" for p in packages} == {
        "12.2",
        "12.3",
        "12.4",
        "12.5",
        "12.6",
        "12.8",
        "12.9",
        "13.0",
        "13.1",
        "13.2",
        "13.3",
        "13.4",
    }
    for package in packages:
        own = package.built_from_branch
        for branch, cell in package.cells:
            # N/A exactly on the package's own branch ...
            assert (cell is FcCell.OWN_BRANCH) == (branch == own), (package.package, branch)
            # ... and never compatible with a branch newer than its own.
            if branch > own:
                assert cell is FcCell.NO_PACKAGE, (package.package, branch)
            if cell is FcCell.COMPATIBLE:
                assert branch < own
        # The package is built from the branch of its toolkit's Table 3 minimum.
        toolkit = kb.toolkit(package.cuda)
        assert toolkit is not None
        branches = {d.branch for d in (toolkit.min_driver, *toolkit.alternatives) if d}
        assert own in branches, package.package


def test_forward_compat_branches(kb: KnowledgeBase) -> None:
    assert kb.forward_compat_branches(cv("12.9")) == frozenset({535, 570})
    assert kb.forward_compat_branches(cv("12.4")) == frozenset({535})
    assert kb.forward_compat_branches(cv("13.4")) == frozenset({535, 570, 580, 590, 595, 610})
    assert kb.forward_compat_branches(cv("12.2")) == frozenset()
    assert kb.forward_compat_branches(cv("11.8")) == frozenset()
    assert kb.forward_compat_branches(cv("12.9.1")) == frozenset({535, 570})


def test_driver_branches(kb: KnowledgeBase) -> None:
    r580 = kb.driver_branch(580)
    assert r580 is not None and r580.type == "LTSB" and r580.status is Status.DISPUTED
    assert set(r580.alternatives) == {"2028-06", "2028-08"}
    r470 = kb.driver_branch(470)
    assert r470 is not None and r470.status is Status.UNKNOWN and r470.eol is None
    assert kb.driver_branch(999) is None


# ---------------------------------------------------------------------------------------------
# Architectures and their family words
# ---------------------------------------------------------------------------------------------


def test_architecture_rows_are_well_formed(kb: KnowledgeBase) -> None:
    toolkits = {r.cuda for r in kb.toolkits()}
    architectures = list(kb.architectures())
    assert len(architectures) >= 22  # Tesla to Blackwell, with their compute capabilities
    for arch in architectures:
        assert arch.family in GFD_FAMILIES, arch
        for c in arch.compute:
            expected = gfd_get_arch_family(c)
            assert arch.gfd_family == expected, (arch.name, c)
            if expected != "undefined" and arch.status is not Status.DISPUTED:
                assert arch.family == expected, (arch.name, c)
        if arch.gfd_family != arch.family:
            assert arch.gfd_family_source.strip(), arch  # a recorded difference cites GFD
        if arch.first_cuda is not None and arch.last_cuda is not None:
            assert arch.first_cuda <= arch.last_cuda
        if arch.last_cuda is not None:
            assert arch.last_cuda in toolkits, arch
        if arch.first_cuda is not None and arch.first_cuda >= cv("8.0"):
            assert arch.first_cuda in toolkits, arch
        if arch.first_cuda is None:
            assert arch.status is Status.UNKNOWN and "first_cuda" in arch.unknown


@pytest.mark.parametrize(
    ("value", "name", "last_cuda", "last_branch"),
    [
        ("3.5", "Kepler", "11.8", 470),
        ("3.7", "Kepler", "11.8", 470),
        ("3.0", "Kepler", "10.2", 470),
        ("5.2", "Maxwell", "12.9", 580),
        ("6.1", "Pascal", "12.9", 580),
        ("7.0", "Volta", "12.9", 580),
        ("7.5", "Turing", None, None),
        ("9.0", "Hopper", None, None),
        ("12.0", "Blackwell", None, None),
    ],
)
def test_architecture_spot_values(
    kb: KnowledgeBase, value: str, name: str, last_cuda: str | None, last_branch: int | None
) -> None:
    arch = kb.arch(cc(value))
    assert arch is not None and arch.name == name
    assert arch.last_cuda == (cv(last_cuda) if last_cuda else None)
    assert arch.last_driver_branch == last_branch


def test_arch_falls_back_to_the_family_row(kb: KnowledgeBase) -> None:
    orin = kb.arch(cc("8.7"))
    assert orin is not None and orin.jetson and orin.first_cuda == cv("11.4")
    assert kb.arch(cc("12.5")) is kb.arch(cc("12.1"))
    assert kb.arch(cc("5.9")) is kb.arch(cc("5.3"))
    assert kb.arch(cc("4.0")) is None
    assert kb.arch(cc("1.3")) is None
    assert kb.arch(cc("2.0")).family == "fermi"  # type: ignore[union-attr]


@settings(max_examples=150, deadline=None)
@given(major=st.integers(min_value=1, max_value=15), minor=st.integers(min_value=0, max_value=9))
def test_arch_lookup_stays_within_the_major(kb: KnowledgeBase, major: int, minor: int) -> None:
    value = ComputeCapability(major, minor)
    arch = kb.arch(value)
    if arch is not None:
        assert all(c.major == major for c in arch.compute)
        assert min(arch.compute) <= value


def test_gfd_words_agree_with_gfd_wherever_a_row_exists(kb: KnowledgeBase) -> None:
    without_a_row: set[int] = set()
    for major, minor in itertools.product(range(1, 16), range(10)):
        value = ComputeCapability(major, minor)
        row = kb.arch(value)
        if row is not None:
            assert row.gfd_family == gfd_get_arch_family(value), value
        elif gfd_get_arch_family(value) != "undefined":
            without_a_row.add(major)
    # GFD names these majors, architectures.yaml has no row for them (the agent says undefined).
    assert without_a_row == {1, 13}


@pytest.mark.parametrize(
    ("value", "family", "gfd_family"),
    [("3.7", "kepler", "kepler"), ("7.0", "volta", "volta"), ("7.5", "turing", "turing"),
     ("8.6", "ampere", "ampere"), ("8.9", "ada-lovelace", "ada-lovelace"),
     ("9.0", "hopper", "hopper"), ("10.0", "blackwell", "blackwell"),
     ("12.0", "blackwell", "blackwell"), ("10.7", "rubin", "blackwell"),
     ("10.9", "rubin", "blackwell"), ("11.0", "blackwell", "undefined")],
)  # fmt: skip
def test_family_words(kb: KnowledgeBase, value: str, family: str, gfd_family: str) -> None:
    arch = kb.arch(cc(value))
    assert arch is not None and (arch.family, arch.gfd_family) == (family, gfd_family)


@pytest.mark.parametrize("value", ["4.0", "13.0", "1.3"])
def test_no_family_without_an_architecture_row(kb: KnowledgeBase, value: str) -> None:
    assert kb.arch(cc(value)) is None


# ---------------------------------------------------------------------------------------------
# GPUs
# ---------------------------------------------------------------------------------------------


def test_every_gpu_maps_to_its_architecture_row(kb: KnowledgeBase) -> None:
    gpus = list(kb.gpus())
    assert len(gpus) >= 35
    by_cc = {c: a for a in kb.architectures() for c in a.compute}
    for gpu in gpus:
        arch = by_cc.get(gpu.compute)  # an exact row, not the fallback
        assert arch is not None, gpu.product
        assert gpu.arch == arch.name and gpu.family == arch.family
        if gpu.status is not Status.KNOWN:
            assert gpu.note, gpu.product


REQUIRED_PRODUCTS = [
    "K80",
    "M60",
    "P4",
    "P40",
    "P100",
    "V100",
    "T4",
    "A2",
    "A10",
    "A10G",
    "A16",
    "A30",
    "A40",
    "A100",
    "L4",
    "L40",
    "L40S",
    "H100",
    "H200",
    "H20",
    "GH200",
    "B200",
    "GB200",
    "B300",
    "RTX 3090",
    "RTX 4090",
    "RTX 5090",
    "RTX A6000",
    "RTX 6000 Ada",
    "RTX PRO 6000 Blackwell",
]


@pytest.mark.parametrize("product", REQUIRED_PRODUCTS)
def test_required_products_are_known(kb: KnowledgeBase, product: str) -> None:
    info = kb.gpu(product)
    assert info is not None and info.product == product


def test_gpu_spot_values_from_the_brief(kb: KnowledgeBase) -> None:
    a100 = kb.gpu("NVIDIA-A100-SXM4-80GB")
    assert a100 is not None
    assert a100.compute == cc("8.0") and a100.arch == "Ampere" and a100.datacenter
    assert a100.variant == "NVIDIA A100-SXM4-80GB"
    rtx = kb.gpu("NVIDIA GeForce RTX 4090")
    assert rtx is not None and not rtx.datacenter and rtx.family == "ada-lovelace"


# ---------------------------------------------------------------------------------------------
# NGC containers
# ---------------------------------------------------------------------------------------------


def test_ngc_release_lookup(kb: KnowledgeBase) -> None:
    triton = kb.ngc_release("tritonserver", "24.05")
    assert triton is not None and triton.cuda == cv("12.4")
    assert triton.source.startswith("https://docs.nvidia.com/")
    assert kb.ngc_release("nvcr.io/nvidia/tritonserver", "24.05-py3") == triton
    assert kb.ngc_release("triton", "24.05") == triton
    assert kb.ngc_release("tritonserver", "24.05-trtllm-python-py3") is None
    assert kb.ngc_release("tritonserver", "19.01") is None
    pytorch = kb.ngc_release("pytorch", "25.12")
    assert pytorch is not None and pytorch.cuda == cv("13.1") and pytorch.framework
    t2506 = kb.ngc_release("tritonserver", "25.06")
    assert t2506 is not None and t2506.cuda == CudaVersion(12, 9, 1)
    assert t2506.cuda_text == "12.9.1.010" and t2506.min_compute == cc("7.5")


@pytest.mark.parametrize(
    ("product", "release"), [("jax", "24.05"), ("pytorch", "may"), ("pytorch", "2024.05")]
)
def test_ngc_release_rejects_bad_input(kb: KnowledgeBase, product: str, release: str) -> None:
    with pytest.raises(InputError):
        kb.ngc_release(product, release)


def test_every_ngc_release_is_on_a_known_toolkit(kb: KnowledgeBase) -> None:
    rows = list(kb.ngc_releases())
    assert len(rows) >= 40
    for row in rows:
        assert kb.toolkit(row.cuda) is not None, row
    triton = [r.release for r in kb.ngc_releases("tritonserver")]
    assert triton == sorted(triton, key=lambda r: tuple(int(p) for p in r.split(".")))


def test_release_order_compares_numbers_and_puts_a_pre_release_first() -> None:
    # knowledge/base once defined its release key twice, and the strict second one (int() of
    # every part) replaced the documented lenient one: any non-numeric part raised ValueError.
    releases = ["2.10", "0.9.0", "2.9", "0.9.0rc1", "2.9.1"]
    assert sorted(releases, key=release_order) == ["0.9.0rc1", "0.9.0", "2.9", "2.9.1", "2.10"]


@settings(max_examples=300)
@given(st.text())
def test_release_order_never_raises(release: str) -> None:
    key = release_order(release)
    assert len(key) == release.count(".") + 1
    assert all(isinstance(part, int) and part >= -1 for part in key)
