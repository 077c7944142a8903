"""Node facts from labels: the three label sources, GFD's value quirks, derivations."""

from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.knowledge import KnowledgeBase
from cudasched.nodes.facts import (
    SOURCE_CUDASCHED,
    SOURCE_GFD,
    SOURCE_GFD_DEPRECATED,
    SOURCE_MANUAL,
    SOURCE_NONE,
    facts_from_labels,
    facts_from_parts,
    has_gpu_labels,
)
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError, VersionError
from cudasched.vocab.versions import ComputeCapability, CudaVersion, DriverVersion


@functools.cache
def _kb() -> KnowledgeBase:
    """One knowledge base for property tests (loading it per example would dominate)."""
    return KnowledgeBase.load()


# What GFD v0.20 writes on an A100 node with driver 550.90.07 (reference/nvidia-labels.md §1.1).
GFD_A100 = {
    L.GFD_DRIVER_FULL: "550.90.07",
    L.GFD_DRIVER_MAJOR: "550",
    L.GFD_DRIVER_MINOR: "90",
    L.GFD_DRIVER_REVISION: "07",
    L.GFD_CUDA_FULL: "12.4",
    L.GFD_CUDA_MAJOR: "12",
    L.GFD_CUDA_MINOR: "4",
    L.GFD_OLD_DRIVER_MAJOR: "550",
    L.GFD_OLD_DRIVER_MINOR: "90",
    L.GFD_OLD_DRIVER_REV: "07",
    L.GFD_OLD_CUDA_MAJOR: "12",
    L.GFD_OLD_CUDA_MINOR: "4",
    L.GFD_PRODUCT: "NVIDIA-A100-SXM4-80GB",
    L.GFD_COMPUTE_MAJOR: "8",
    L.GFD_COMPUTE_MINOR: "0",
    L.GFD_FAMILY: "ampere",
    L.GFD_COUNT: "8",
    "kubernetes.io/hostname": "gpu-a100-1",
}

OURS_H100 = {
    L.CUDA_CODE: "12080",
    L.CUDA_VERSION: "12.8",
    L.DRIVER_CODE: "570124006",
    L.DRIVER_VERSION: "570.124.06",
    L.DRIVER_BRANCH: "570",
    L.COMPUTE_CODE: "90",
    L.GPU_ARCH: "hopper",
    L.GPU_PRODUCT: "NVIDIA-H100-80GB-HBM3",
    L.GPU_DATACENTER: "true",
}


def test_gfd_new_keys(kb: KnowledgeBase) -> None:
    f = facts_from_labels("a100", GFD_A100, kb)
    assert f.source == SOURCE_GFD
    assert f.driver == DriverVersion(550, 90, 7)
    assert str(f.driver) == "550.90.07"
    assert f.cuda == CudaVersion(12, 4)
    assert f.compute == ComputeCapability(8, 0)
    assert f.products == ("NVIDIA-A100-SXM4-80GB",)
    assert f.arch == "ampere"
    assert f.gpu_count == 8
    # GFD has no data-center label: it comes from the product.
    assert f.datacenter is True
    assert f.derived == {"datacenter"}
    assert f.problems == ()
    assert f.has_gpu


def test_gfd_deprecated_keys_only(kb: KnowledgeBase) -> None:
    old = {k: v for k, v in GFD_A100.items() if "-version" not in k}
    f = facts_from_labels("old", old, kb)
    assert f.source == SOURCE_GFD_DEPRECATED
    assert f.driver == DriverVersion(550, 90, 7)
    assert f.cuda == CudaVersion(12, 4)


def test_new_keys_win_over_deprecated(kb: KnowledgeBase) -> None:
    labels = {**GFD_A100, L.GFD_OLD_CUDA_MINOR: "2", L.GFD_OLD_DRIVER_MAJOR: "535"}
    f = facts_from_labels("n", labels, kb)
    assert f.cuda == CudaVersion(12, 4)
    assert f.driver is not None and f.driver.major == 550


def test_cudasched_labels_win_over_gfd(kb: KnowledgeBase) -> None:
    f = facts_from_labels("h100", {**GFD_A100, **OURS_H100}, kb)
    assert f.source == SOURCE_CUDASCHED
    assert f.driver == DriverVersion(570, 124, 6)
    assert f.cuda == CudaVersion(12, 8)
    assert f.compute == ComputeCapability(9, 0)
    assert f.products == ("NVIDIA-H100-80GB-HBM3",)
    assert f.arch == "hopper"
    assert f.datacenter is True
    assert "datacenter" not in f.derived


def test_facts_fall_back_per_fact(kb: KnowledgeBase) -> None:
    # Our agent's CUDA code, but the compute capability only from GFD.
    labels = {L.CUDA_CODE: "12040", L.DRIVER_CODE: "550090007", **_gfd_compute(8, 6)}
    f = facts_from_labels("n", labels, kb)
    assert f.source == SOURCE_CUDASCHED
    assert f.compute == ComputeCapability(8, 6)


def _gfd_compute(major: int, minor: int) -> dict[str, str]:
    return {L.GFD_COMPUTE_MAJOR: str(major), L.GFD_COMPUTE_MINOR: str(minor)}


def test_empty_revision_is_a_two_part_version(kb: KnowledgeBase) -> None:
    labels = {
        L.GFD_DRIVER_MAJOR: "570",
        L.GFD_DRIVER_MINOR: "26",
        L.GFD_DRIVER_REVISION: "",
        L.GFD_CUDA_MAJOR: "12",
        L.GFD_CUDA_MINOR: "8",
        **_gfd_compute(10, 0),
    }
    f = facts_from_labels("b200", labels, kb)
    assert f.driver == DriverVersion(570, 26, 0)
    assert f.driver is not None and not f.driver.has_revision
    assert str(f.driver) == "570.26"
    assert f.problems == ()


def test_leading_zeros_are_kept_numerically(kb: KnowledgeBase) -> None:
    labels = {
        L.GFD_OLD_DRIVER_MAJOR: "455",
        L.GFD_OLD_DRIVER_MINOR: "06",
        L.GFD_OLD_DRIVER_REV: "",
        **_gfd_compute(7, 5),
    }
    f = facts_from_labels("n", labels, kb)
    assert f.driver == DriverVersion(455, 6, 0)
    assert str(f.driver) == "455.06"


def test_tegra_unknown_driver(kb: KnowledgeBase) -> None:
    labels = {
        L.GFD_DRIVER_FULL: "unknown.unknown.unknown",
        L.GFD_DRIVER_MAJOR: "unknown",
        L.GFD_DRIVER_MINOR: "unknown",
        L.GFD_DRIVER_REVISION: "unknown",
        L.GFD_CUDA_MAJOR: "12",
        L.GFD_CUDA_MINOR: "6",
        **_gfd_compute(8, 7),
    }
    f = facts_from_labels("orin", labels, kb)
    assert f.driver is None
    assert f.cuda == CudaVersion(12, 6)
    assert f.compute == ComputeCapability(8, 7)
    assert any("unknown" in p for p in f.problems)
    assert f.source == SOURCE_GFD


def test_vfio_placeholders_are_unknown(kb: KnowledgeBase) -> None:
    labels = {
        L.GFD_CUDA_MAJOR: "0",
        L.GFD_CUDA_MINOR: "0",
        L.GFD_CUDA_FULL: "0.0",
        L.GFD_COMPUTE_MAJOR: "-1",
        L.GFD_COMPUTE_MINOR: "-1",
        L.GFD_FAMILY: "undefined",
        L.GFD_PRODUCT: "NVIDIA-A100-SXM4-80GB",
    }
    f = facts_from_labels("vfio", labels, kb)
    assert f.cuda is None
    assert f.driver is None
    assert f.arch == "ampere"  # from the product's compute capability, not "undefined"
    assert f.compute == ComputeCapability(8, 0)
    assert "compute" in f.derived
    assert f.problems


def test_cuda_derived_from_driver(kb: KnowledgeBase) -> None:
    labels = {L.DRIVER_CODE: "535104005", L.COMPUTE_CODE: "80"}
    f = facts_from_labels("n", labels, kb)
    assert f.cuda == CudaVersion(12, 2)
    assert "cuda" in f.derived


def test_compute_and_datacenter_from_product(kb: KnowledgeBase) -> None:
    f = facts_from_labels("n", {L.GFD_PRODUCT: "NVIDIA-GeForce-RTX-4090"}, kb)
    assert f.compute == ComputeCapability(8, 9)
    assert f.datacenter is False
    assert f.source == SOURCE_GFD
    assert {"compute", "datacenter"} <= f.derived


def test_datacenter_label_wins_over_product(kb: KnowledgeBase) -> None:
    labels = {L.GPU_PRODUCT: "NVIDIA-A100-SXM4-80GB", L.GPU_DATACENTER: "false"}
    assert facts_from_labels("n", labels, kb).datacenter is False


def test_mixed_node_takes_weakest_and_all_datacenter(kb: KnowledgeBase) -> None:
    labels = {L.GPU_PRODUCT: "NVIDIA-A100-SXM4-80GB_NVIDIA-GeForce-RTX-4090"}
    f = facts_from_labels("mixed", labels, kb)
    assert f.products == ("NVIDIA-A100-SXM4-80GB", "NVIDIA-GeForce-RTX-4090")
    assert f.compute == ComputeCapability(8, 0)
    assert f.datacenter is False


def test_no_gpu_facts(kb: KnowledgeBase) -> None:
    cpu = facts_from_labels("cpu", {"kubernetes.io/os": "linux"}, kb)
    assert cpu.source == SOURCE_NONE and not cpu.has_gpu
    assert cpu.describe() == "no GPU facts"
    present = facts_from_labels("p", {L.GFD_PRESENT: "true"}, kb)
    assert present.source == SOURCE_NONE
    assert has_gpu_labels({L.GFD_PRESENT: "true"})
    assert not has_gpu_labels({L.GFD_PRESENT: "false"})
    assert not has_gpu_labels({})


@pytest.mark.parametrize(
    ("major", "minor"),
    [
        (L.GFD_DRIVER_MAJOR, L.GFD_DRIVER_MINOR),
        (L.GFD_CUDA_MAJOR, L.GFD_CUDA_MINOR),
        (L.GFD_COMPUTE_MAJOR, L.GFD_COMPUTE_MINOR),
    ],
)
def test_a_split_label_without_its_minor_is_a_problem(
    kb: KnowledgeBase, major: str, minor: str
) -> None:
    f = facts_from_labels("n", {major: "8"}, kb)
    assert f.problems == (f"{major}='8' has no companion {minor}",)
    assert (f.driver, f.cuda, f.compute) == (None, None, None)


def test_bad_codes_are_problems_not_errors(kb: KnowledgeBase) -> None:
    labels = {L.CUDA_CODE: "12.4", L.DRIVER_CODE: "12", L.COMPUTE_CODE: "5"}
    f = facts_from_labels("n", labels, kb)
    assert f.cuda is None and f.driver is None and f.compute is None
    assert len(f.problems) == 3
    assert all(key in " ".join(f.problems) for key in (L.CUDA_CODE, L.DRIVER_CODE))


def test_labels_must_be_a_mapping(kb: KnowledgeBase) -> None:
    with pytest.raises(InputError, match="must be a mapping"):
        facts_from_labels("n", ["a=b"], kb)  # type: ignore[arg-type]


def test_to_dict_is_json_ready(kb: KnowledgeBase) -> None:
    d = facts_from_labels("a100", GFD_A100, kb).to_dict()
    assert d["driver"] == "550.90.07"
    assert d["cuda"] == "12.4"
    assert d["computeCapability"] == "8.0"
    assert d["source"] == "gfd"


def test_facts_from_parts(kb: KnowledgeBase) -> None:
    f = facts_from_parts("n", gpu="A100", driver="535.104.05", kb=kb)
    assert f.source == SOURCE_MANUAL
    assert f.cuda == CudaVersion(12, 2)
    assert f.compute == ComputeCapability(8, 0)
    assert f.datacenter is True
    g = facts_from_parts("n", gpu="sm_86", driver="550.54.14", kb=kb, cuda="12.4")
    assert g.compute == ComputeCapability(8, 6)
    assert g.datacenter is None
    assert g.cuda == CudaVersion(12, 4)
    with pytest.raises(InputError, match="unknown GPU 'Voodoo 5'"):
        facts_from_parts("n", gpu="Voodoo 5", driver="550.54.14", kb=kb)
    with pytest.raises(VersionError, match="driver version"):
        facts_from_parts("n", gpu="A100", driver="latest", kb=kb)


_KEYS = sorted(
    {
        L.CUDA_CODE,
        L.CUDA_VERSION,
        L.DRIVER_CODE,
        L.DRIVER_VERSION,
        L.COMPUTE_CODE,
        L.GPU_PRODUCT,
        L.GPU_DATACENTER,
        L.GPU_ARCH,
        *GFD_A100,
    }
)
_VALUES = st.one_of(
    st.sampled_from(["", "0", "07", "-1", "unknown", "12.4", "550.90.07", "true", "999999999999"]),
    st.text(max_size=12),
    st.integers(min_value=0, max_value=10**7).map(str),
)


@settings(max_examples=150)
@given(labels=st.dictionaries(st.sampled_from(_KEYS), _VALUES, max_size=10))
def test_never_raises_on_label_values(labels: dict[str, str]) -> None:
    kb = _kb()
    f = facts_from_labels("fuzz", labels, kb)
    assert f.source in {SOURCE_CUDASCHED, SOURCE_GFD, SOURCE_GFD_DEPRECATED, SOURCE_NONE}
    if f.source == SOURCE_NONE:
        assert f.driver is None and f.cuda is None and f.compute is None
    if f.driver is not None:
        assert f.driver.major > 0
    if f.compute is not None:
        assert f.compute.major >= 1 and 0 <= f.compute.minor <= 9


def test_two_part_driver_keeps_its_spelling(kb: KnowledgeBase) -> None:
    labels = {"cudasched.io/driver.code": "550120000", "cudasched.io/driver.version": "550.120"}
    assert str(facts_from_labels("n", labels, kb).driver) == "550.120"
    # The code wins when the readable label disagrees with it.
    labels["cudasched.io/driver.version"] = "550.90.07"
    assert str(facts_from_labels("n", labels, kb).driver) == "550.120.00"
