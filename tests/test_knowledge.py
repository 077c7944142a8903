"""Tests for the knowledge base: data-file hygiene, NVIDIA table invariants, lookups."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping
from importlib import resources
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.errors import InputError, KnowledgeError
from cudasched.knowledge import (
    DATA_FILES,
    FcCell,
    KnowledgeBase,
    ReleaseKind,
    Status,
    gfd_product_label,
)
from cudasched.versions import (
    ComputeCapability,
    CudaVersion,
    DriverVersion,
    parse_compute_capability,
    parse_cuda,
    parse_driver,
)

GFD_FAMILIES = {
    "tesla",
    "fermi",
    "kepler",
    "maxwell",
    "pascal",
    "volta",
    "turing",
    "ampere",
    "ada-lovelace",
    "hopper",
    "blackwell",
    "rubin",
}



def gfd_get_arch_family(value: ComputeCapability) -> str:
    """GFD v0.20's getArchFamily (internal/lm/resource.go; reference/nvidia-labels.md §1.3),
    transcribed here only to check architectures.yaml against it."""
    if value.major == 7:
        return "volta" if value.minor < 5 else "turing"
    if value.major == 8:
        return "ada-lovelace" if value.minor == 9 else "ampere"
    words = {1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 9: "hopper"}
    words |= {10: "blackwell", 12: "blackwell", 13: "rubin"}
    return words.get(value.major, "undefined")


# Lists of entries, per data file, that must each carry a source.
ENTRY_LISTS = {
    "toolkits.yaml": [("releases",)],
    "compat.yaml": [
        ("minor_version_compat",),
        ("forward_compat", "packages"),
        ("driver_branches",),
    ],
    "architectures.yaml": [("architectures",)],
    "gpus.yaml": [("gpus",)],
    "frameworks.yaml": [("pytorch",), ("tensorflow",), ("vllm",)],
    "containers.yaml": [("tritonserver",), ("pytorch",), ("tensorflow",)],
}


@pytest.fixture(scope="module")
def kb() -> KnowledgeBase:
    return KnowledgeBase.load()


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    root = resources.files("cudasched").joinpath("data")
    return {n: yaml.safe_load(root.joinpath(n).read_text("utf-8")) for n in DATA_FILES}


def cv(text: str) -> CudaVersion:
    return parse_cuda(text)


def dv(text: str) -> DriverVersion:
    return parse_driver(text)


def cc(text: str) -> ComputeCapability:
    return parse_compute_capability(text)


def _entries(doc: Mapping[str, Any], path: tuple[str, ...]) -> list[Mapping[str, Any]]:
    node: Any = doc
    for key in path:
        node = node[key]
    assert isinstance(node, list) and node, f"{path} must be a non-empty list"
    return node


def _is_valid_source(value: object, sources: Mapping[str, Any]) -> bool:
    if not isinstance(value, str) or not value.strip():
        return False
    if value in sources:
        return bool(str(sources[value]).strip())
    return value.startswith(("https://", "http://"))


# ---------------------------------------------------------------------------------------------
# Data-file hygiene
# ---------------------------------------------------------------------------------------------


def test_every_entry_in_every_data_file_has_a_source(raw: dict[str, Any]) -> None:
    assert set(ENTRY_LISTS) == set(DATA_FILES)
    checked = 0
    for name, paths in ENTRY_LISTS.items():
        doc = raw[name]
        sources = doc.get("sources", {})
        assert all(str(v).strip() for v in sources.values()), f"{name}: empty named source"
        for path in paths:
            for entry in _entries(doc, path):
                assert _is_valid_source(entry.get("source"), sources), (name, path, entry)
                checked += 1
    assert checked > 250


def test_pytorch_arch_lists_and_defaults_have_their_own_source(raw: dict[str, Any]) -> None:
    doc = raw["frameworks.yaml"]
    for release in doc["pytorch"]:
        if "pypi_default" in release:
            assert _is_valid_source(release.get("pypi_default_source"), doc["sources"])
        for tag, variant in release["variants"].items():
            if "arch_list" in variant:
                assert _is_valid_source(variant.get("arch_source"), doc["sources"]), tag


def test_loaded_facts_all_carry_a_source(kb: KnowledgeBase) -> None:
    facts: list[Any] = [
        *kb.toolkits(),
        *kb.architectures(),
        *kb.gpus(),
        *kb.minor_compat(),
        *kb.forward_compat_packages(),
        *kb.driver_branches(),
        *kb.ngc_releases(),
    ]
    assert facts
    for fact in facts:
        assert fact.source.strip(), fact


def test_unknown_and_disputed_are_explicit(kb: KnowledgeBase) -> None:
    for row in kb.toolkits():
        assert (row.min_driver is None) == (row.status in (Status.UNKNOWN, Status.DISPUTED))
        if row.status is Status.DISPUTED:
            assert len(row.alternatives) >= 2
    t134 = kb.toolkit(cv("13.4"))
    assert t134 is not None and t134.status is Status.DISPUTED
    assert {a.branch for a in t134.alternatives} == {615, 616}
    t135 = kb.toolkit(cv("13.5"))
    assert t135 is not None and t135.status is Status.UNKNOWN and t135.min_driver is None


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
    for row in kb.toolkits():
        if row.kind is ReleaseKind.GA and row.effective_min_driver is not None:
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
# Architectures and GPUs
# ---------------------------------------------------------------------------------------------


def test_architecture_rows_do_not_overlap(raw: dict[str, Any], kb: KnowledgeBase) -> None:
    seen: set[ComputeCapability] = set()
    for row in raw["architectures.yaml"]["architectures"]:
        ccs = {cc(c) for c in row["compute"]}
        assert not ccs & seen, row
        seen |= ccs
    assert {c for a in kb.architectures() for c in a.compute} == seen


def test_architecture_rows_are_well_formed(kb: KnowledgeBase) -> None:
    toolkits = {r.cuda for r in kb.toolkits()}
    for arch in kb.architectures():
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


def test_arch_support_windows(kb: KnowledgeBase) -> None:
    kepler = kb.arch(cc("3.7"))
    assert kepler is not None
    assert kepler.toolkit_supports(cv("12.0")) is False
    assert kepler.toolkit_supports(cv("11.8")) is None  # first CUDA for sm_37 unknown
    assert kepler.driver_supports(dv("535.104.05")) is False
    assert kepler.driver_supports(dv("470.256.02")) is True
    hopper = kb.arch(cc("9.0"))
    assert hopper is not None
    assert hopper.toolkit_supports(cv("11.7")) is False
    assert hopper.toolkit_supports(cv("13.2")) is True
    assert hopper.driver_supports(dv("610.43.02")) is True
    xavier = kb.arch(cc("7.2"))
    assert xavier is not None and xavier.driver_supports(dv("535.54.03")) is None


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


@pytest.mark.parametrize(
    ("name", "product", "compute", "datacenter"),
    [
        ("NVIDIA-A100-SXM4-80GB", "A100", "8.0", True),
        ("NVIDIA A100-SXM4-80GB", "A100", "8.0", True),
        ("nvidia a100-sxm4-80gb", "A100", "8.0", True),
        ("A100-SXM4-80GB", "A100", "8.0", True),
        ("A100-SXM4-40GB", "A100", "8.0", True),
        ("NVIDIA-A100-80GB-PCIe", "A100", "8.0", True),
        ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "A100", "8.0", True),
        ("NVIDIA-A100-SXM4-80GB-MIG-3g.40gb", "A100", "8.0", True),
        ("NVIDIA-A100-SXM4-80GB-SHARED", "A100", "8.0", True),
        ("Tesla T4", "T4", "7.5", True),
        ("Tesla-T4", "T4", "7.5", True),
        ("t4", "T4", "7.5", True),
        ("Tesla-V100-SXM2-16GB", "V100", "7.0", True),
        ("Tesla V100-PCIE-32GB", "V100", "7.0", True),
        ("Tesla-P100-SXM2-16GB", "P100", "6.0", True),
        ("NVIDIA-H100-80GB-HBM3", "H100", "9.0", True),
        ("NVIDIA H100 NVL", "H100", "9.0", True),
        ("H100 SXM5", "H100", "9.0", True),
        ("NVIDIA-H200", "H200", "9.0", True),
        ("NVIDIA-GH200-144G-HBM3e", "GH200", "9.0", True),
        ("NVIDIA-B200", "B200", "10.0", True),
        ("NVIDIA-B300-SXM6-AC", "B300", "10.3", True),
        ("NVIDIA-L40S", "L40S", "8.9", True),
        ("NVIDIA GeForce RTX 4090", "RTX 4090", "8.9", False),
        ("NVIDIA-GeForce-RTX-4090", "RTX 4090", "8.9", False),
        ("GeForce RTX 3090", "RTX 3090", "8.6", False),
        ("RTX 5090", "RTX 5090", "12.0", False),
        ("NVIDIA-RTX-6000-Ada-Generation", "RTX 6000 Ada", "8.9", False),
        (
            "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
            "RTX PRO 6000 Blackwell",
            "12.0",
            False,
        ),
        ("NVIDIA-RTX-A6000", "RTX A6000", "8.6", False),
    ],
)
def test_gpu_lookup_normalises_names(
    kb: KnowledgeBase, name: str, product: str, compute: str, datacenter: bool
) -> None:
    info = kb.gpu(name)
    assert info is not None, name
    assert (info.product, info.compute, info.datacenter) == (product, cc(compute), datacenter)


def test_gpu_spot_values_from_the_brief(kb: KnowledgeBase) -> None:
    a100 = kb.gpu("NVIDIA-A100-SXM4-80GB")
    assert a100 is not None
    assert a100.compute == cc("8.0") and a100.arch == "Ampere" and a100.datacenter
    assert a100.variant == "NVIDIA A100-SXM4-80GB"
    rtx = kb.gpu("NVIDIA GeForce RTX 4090")
    assert rtx is not None and not rtx.datacenter and rtx.family == "ada-lovelace"


def test_every_listed_name_and_its_gfd_label_resolve_to_the_board(kb: KnowledgeBase) -> None:
    for gpu in kb.gpus():
        for name in gpu.names:
            for spelling in (name, gfd_product_label(name), name.upper()):
                found = kb.gpu(spelling)
                assert found is not None and found.product == gpu.product, spelling
                # Names that differ only by the optional brand prefix are one board.
                assert found.variant in gpu.names, spelling
                assert found.variant.lower().endswith(name.lower()), spelling  # type: ignore[union-attr]


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_gpu_lookup_ignores_case_and_spacing(kb: KnowledgeBase, data: st.DataObject) -> None:
    gpu = data.draw(st.sampled_from(list(kb.gpus())))
    name = data.draw(st.sampled_from(gpu.names))
    flips = data.draw(st.lists(st.booleans(), min_size=len(name), max_size=len(name)))
    cased = "".join(c.upper() if f else c.lower() for c, f in zip(name, flips, strict=True))
    spaced = data.draw(st.sampled_from(["  ", "\t", " "])).join(cased.split(" "))
    found = kb.gpu(f" {spaced} ")
    assert found is not None and found.product == gpu.product


@settings(max_examples=150, deadline=None)
@given(major=st.integers(min_value=1, max_value=15), minor=st.integers(min_value=0, max_value=9))
def test_arch_lookup_stays_within_the_major(kb: KnowledgeBase, major: int, minor: int) -> None:
    value = ComputeCapability(major, minor)
    arch = kb.arch(value)
    if arch is not None:
        assert all(c.major == major for c in arch.compute)
        assert min(arch.compute) <= value


def test_gpu_unknown_and_ambiguous_names(kb: KnowledgeBase) -> None:
    for name in ("", "   ", "NVIDIA", "Quadro RTX 6000", "RTX 6000", "Radeon RX 7900", "A1000"):
        assert kb.gpu(name) is None, name
    short = kb.gpu("H100 SXM5")
    assert short is not None and short.variant is None  # the product, not the PCI-2339 board
    with pytest.raises(InputError):
        kb.gpu(None)  # type: ignore[arg-type]


def test_every_family_in_the_yaml_is_a_gfd_word(raw: dict[str, Any]) -> None:
    for row in raw["architectures.yaml"]["architectures"]:
        assert row["family"] in GFD_FAMILIES, row
        assert row.get("gfd_family", row["family"]) in GFD_FAMILIES | {"undefined"}, row


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


def test_gfd_product_label() -> None:
    assert gfd_product_label("NVIDIA A100 80GB PCIe") == "NVIDIA-A100-80GB-PCIe"
    assert gfd_product_label("Tesla T4") == "Tesla-T4"
    assert gfd_product_label("NVIDIA  H100 (SXM) 80GB+") == "NVIDIA-H100-SXM-80GB"


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
# Frameworks
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "name", "cuda"),
    [
        ("torch 2.5.1+cu124", "torch", "12.4"),
        ("torch==2.5.1+cu124", "torch", "12.4"),
        ("pytorch 2.5.1 cu124", "torch", "12.4"),
        ("PyTorch==2.5.1+cu118", "torch", "11.8"),
        ("torch 2.8.0", "torch", "12.8"),  # the PyPI default variant
        ("torch 2.11.0", "torch", "13.0"),
        ("torch 2.14.1", "torch", "13.2"),
        ("torch 2.12.0+cu132", "torch", "13.2"),
        ("tensorflow 2.15.0", "tensorflow", "12.2"),
        ("tensorflow==2.16.1", "tensorflow", "12.3"),
        ("tensorflow-gpu 2.11.0", "tensorflow", "11.2"),
        ("tensorflow 2.21.0", "tensorflow", "12.5"),
        ("vllm 0.9.0", "vllm", "12.8"),
        ("vllm==0.21.0", "vllm", "12.9"),
        ("vllm 0.7.2+cu118", "vllm", "11.8"),
        ("vllm 0.23.0", "vllm", "13.0"),
    ],
)
def test_framework_cuda(kb: KnowledgeBase, spec: str, name: str, cuda: str) -> None:
    build = kb.framework(spec)
    assert build is not None
    assert build.name == name and build.cuda == cv(cuda)
    assert build.source.strip()


def test_framework_spot_value_from_the_brief(kb: KnowledgeBase) -> None:
    build = kb.framework("torch 2.5.1+cu124")
    assert build is not None and build.cuda == cv("12.4") and build.version == "2.5.1+cu124"


def test_framework_arch_lists(kb: KnowledgeBase) -> None:
    cu126 = kb.framework("torch 2.9.0+cu126")
    assert cu126 is not None and cu126.arch_list is not None
    assert cc("5.0") in cu126.arch_list and not cu126.ptx
    cu128 = kb.framework("torch 2.11.0+cu128")
    assert cu128 is not None and cu128.arch_list is not None
    assert cc("7.0") not in cu128.arch_list and cc("7.5") in cu128.arch_list
    cu129 = kb.framework("torch 2.8.0+cu129")
    assert cu129 is not None and cu129.ptx and cu129.arch_list[-1] == cc("12.0")  # type: ignore[index]
    old = kb.framework("torch 2.5.1+cu124")
    assert old is not None and old.arch_list is None  # not known, which is not "all"
    vllm = kb.framework("vllm 0.23.0")
    assert vllm is not None and vllm.ptx and cc("8.9") in vllm.arch_list  # type: ignore[operator]


def test_framework_unknown_cuda_and_unknown_release(kb: KnowledgeBase) -> None:
    no_default = kb.framework("torch 2.5.1")
    assert no_default is not None and no_default.cuda is None
    assert "unknown" in no_default.source
    assert kb.framework("torch 3.7.0") is None
    assert kb.framework("vllm 0.9.1") is None
    assert kb.framework("tensorflow 1.15.0") is None
    tagged = kb.framework("torch 1.11.0+cu113")
    assert tagged is not None and tagged.cuda == cv("11.3")
    cpu = kb.framework("torch 2.5.1+cpu")
    assert cpu is not None and cpu.cuda is None


def test_framework_variant_the_release_never_shipped(kb: KnowledgeBase) -> None:
    with pytest.raises(InputError, match=r"cu118, cu121, cu124"):
        kb.framework("torch 2.5.1+cu130")
    with pytest.raises(InputError, match=r"cu118"):
        kb.framework("vllm 0.7.2+cu128")


@pytest.mark.parametrize(
    "spec",
    ["", "torch", "2.5.1", "jax 0.4.30", "torch 2.5.1+cu124 cu124", "tensorflow 2.15.0+cu122",
     "torch latest", "vllm 0.9.0+rocm"],
)  # fmt: skip
def test_framework_rejects_text_that_is_not_a_spec(kb: KnowledgeBase, spec: str) -> None:
    with pytest.raises(InputError, match="framework spec"):
        kb.framework(spec)


def test_every_published_torch_variant_resolves(raw: dict[str, Any], kb: KnowledgeBase) -> None:
    toolkits = {(r.cuda.major, r.cuda.minor) for r in kb.toolkits()}
    for release in raw["frameworks.yaml"]["pytorch"]:
        for tag in release["variants"]:
            build = kb.framework(f"torch {release['release']}.0+{tag}")
            assert build is not None and build.cuda == parse_cuda(tag)
            assert (build.cuda.major, build.cuda.minor) in toolkits


def test_framework_cudas_are_known_toolkits(raw: dict[str, Any], kb: KnowledgeBase) -> None:
    for key in ("tensorflow", "vllm"):
        for row in raw["frameworks.yaml"][key]:
            assert kb.toolkit(cv(row["cuda"])) is not None, row


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


# ---------------------------------------------------------------------------------------------
# Loader validation
# ---------------------------------------------------------------------------------------------


def _broken(
    raw: dict[str, Any], name: str, path: tuple[str, ...], index: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A deep copy of the data files and the entry to corrupt in it."""
    docs = copy.deepcopy(raw)
    return docs, _entries(docs[name], path)[index]


def test_loader_rejects_entries_without_a_source(raw: dict[str, Any]) -> None:
    docs, entry = _broken(raw, "gpus.yaml", ("gpus",), 0)
    del entry["source"]
    with pytest.raises(KnowledgeError, match="source"):
        KnowledgeBase.from_documents(docs)


def test_loader_rejects_unknown_named_sources(raw: dict[str, Any]) -> None:
    docs, entry = _broken(raw, "toolkits.yaml", ("releases",), 0)
    entry["source"] = "no_such_source"
    with pytest.raises(KnowledgeError, match="no_such_source"):
        KnowledgeBase.from_documents(docs)


def test_loader_rejects_overlapping_architectures(raw: dict[str, Any]) -> None:
    docs, entry = _broken(raw, "architectures.yaml", ("architectures",), 0)
    entry["compute"] = [*entry["compute"], "7.5"]
    with pytest.raises(KnowledgeError, match=r"7\.5"):
        KnowledgeBase.from_documents(docs)


def test_loader_rejects_a_gfd_family_that_repeats_family_or_has_no_source(
    raw: dict[str, Any],
) -> None:
    docs, entry = _broken(raw, "architectures.yaml", ("architectures",), 0)
    entry["gfd_family"] = entry["family"]
    entry["gfd_family_source"] = "gfd_resource_go"
    with pytest.raises(KnowledgeError, match="repeats family"):
        KnowledgeBase.from_documents(docs)
    docs, entry = _broken(raw, "architectures.yaml", ("architectures",), 0)
    entry["gfd_family"] = "undefined"
    with pytest.raises(KnowledgeError, match="gfd_family_source"):
        KnowledgeBase.from_documents(docs)


def test_loader_rejects_a_gpu_whose_arch_disagrees(raw: dict[str, Any]) -> None:
    docs, entry = _broken(raw, "gpus.yaml", ("gpus",), 0)
    entry["arch"] = "Hopper"
    with pytest.raises(KnowledgeError, match="Hopper"):
        KnowledgeBase.from_documents(docs)


def test_loader_rejects_a_second_ga_row(raw: dict[str, Any]) -> None:
    docs, entry = _broken(raw, "toolkits.yaml", ("releases",), 0)
    docs["toolkits.yaml"]["releases"].append({**entry, "version": "13.5.9"})
    with pytest.raises(KnowledgeError, match="GA"):
        KnowledgeBase.from_documents(docs)


def test_loader_rejects_a_missing_file(raw: dict[str, Any]) -> None:
    docs = {k: v for k, v in raw.items() if k != "gpus.yaml"}
    with pytest.raises(KnowledgeError, match=r"gpus\.yaml"):
        KnowledgeBase.from_documents(docs)


def test_load_reads_fresh_objects_each_time() -> None:
    first, second = KnowledgeBase.load(), KnowledgeBase.load()
    assert first is not second
    assert first.min_driver(cv("12.4")) == second.min_driver(cv("12.4"))
