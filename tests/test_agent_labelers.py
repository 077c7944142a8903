"""Label builder: values, determinism on mixed nodes, GFD formats, label-value validity."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched import labels as L
from cudasched.agent.facts import DriverFacts, GpuFacts
from cudasched.agent.labelers import (
    AGENT_KEYS,
    GFD_KEYS,
    build_labels,
    enrich,
    failure_labels,
    gfd_family,
    is_valid_label_value,
    owned_keys,
    sanitise_product,
)
from cudasched.agent.nvidia_smi import parse_nvidia_smi
from cudasched.versions import ComputeCapability, CudaVersion, DriverVersion, parse_driver

DATA = Path(__file__).parent / "data" / "nvidia-smi"
VALUE_RE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def facts(*gpus: GpuFacts, driver: str = "550.90.07", cuda: str | None = "12.4") -> DriverFacts:
    return DriverFacts(
        driver=parse_driver(driver),
        cuda=CudaVersion(*map(int, cuda.split("."))) if cuda else None,
        gpus=tuple(gpus),
        source="test",
    )


H100 = GpuFacts("NVIDIA H100 80GB HBM3", ComputeCapability(9, 0), 81559, "NVIDIA", True)
A100 = GpuFacts("NVIDIA A100-SXM4-80GB", ComputeCapability(8, 0), 81920, "NVIDIA", True)
T4 = GpuFacts("Tesla T4", ComputeCapability(7, 5), 15360, "Tesla", True)
RTX = GpuFacts("NVIDIA GeForce RTX 4090", ComputeCapability(8, 9), 24564, "GeForce", False)


def test_codes_and_versions() -> None:
    labels = build_labels(facts(H100))
    assert labels == {
        L.CUDA_CODE: "12040",
        L.CUDA_VERSION: "12.4",
        L.DRIVER_CODE: "550090007",
        L.DRIVER_VERSION: "550.90.07",
        L.DRIVER_BRANCH: "550",
        L.COMPUTE_CODE: "90",
        L.GPU_ARCH: "hopper",
        L.GPU_PRODUCT: "NVIDIA-H100-80GB-HBM3",
        L.GPU_DATACENTER: "true",
        L.PROBE_STATUS: "ok",
    }


def test_blackwell_compute_code_is_three_digits() -> None:
    b200 = GpuFacts("NVIDIA B200", ComputeCapability(10, 0), 183359, "NVIDIA", True)
    rtx50 = GpuFacts("NVIDIA GeForce RTX 5090", ComputeCapability(12, 0), 32607, "GeForce", False)
    assert build_labels(facts(b200))[L.COMPUTE_CODE] == "100"
    assert build_labels(facts(rtx50))[L.COMPUTE_CODE] == "120"


def test_mixed_node_takes_lowest_compute_and_sorted_products() -> None:
    labels = build_labels(facts(H100, T4, A100))
    assert labels[L.COMPUTE_CODE] == "75"
    assert labels[L.GPU_ARCH] == "turing"
    assert labels[L.GPU_PRODUCT] == "NVIDIA-A100-SXM4-80GB_NVIDIA-H100-80GB-HBM3_Tesla-T4"


@settings(max_examples=60)
@given(st.permutations([H100, A100, T4, RTX, H100]))
def test_mixed_node_labels_do_not_depend_on_gpu_order(gpus: list[GpuFacts]) -> None:
    assert build_labels(facts(*gpus), gfd_compatible=True) == build_labels(
        facts(H100, H100, A100, T4, RTX), gfd_compatible=True
    )


def test_datacenter_only_when_every_gpu_is() -> None:
    assert build_labels(facts(H100, A100))[L.GPU_DATACENTER] == "true"
    assert build_labels(facts(H100, RTX))[L.GPU_DATACENTER] == "false"
    unknown = GpuFacts("NVIDIA Thing", ComputeCapability(9, 0))
    assert L.GPU_DATACENTER not in build_labels(facts(H100, unknown))
    assert build_labels(facts(unknown, RTX))[L.GPU_DATACENTER] == "false"


def test_unknown_compute_capability_omits_compute_labels() -> None:
    unknown = GpuFacts("NVIDIA Mystery")
    labels = build_labels(facts(H100, unknown))
    assert L.COMPUTE_CODE not in labels and L.GPU_ARCH not in labels
    assert labels[L.GPU_PRODUCT] == "NVIDIA-H100-80GB-HBM3_NVIDIA-Mystery"


def test_unknown_cuda_omits_cuda_labels_but_keeps_driver() -> None:
    labels = build_labels(facts(H100, cuda=None))
    assert L.CUDA_CODE not in labels and L.CUDA_VERSION not in labels
    assert labels[L.DRIVER_CODE] == "550090007"


def test_two_part_driver_version() -> None:
    labels = build_labels(facts(H100, driver="550.135"), gfd_compatible=True)
    assert labels[L.DRIVER_CODE] == "550135000"
    assert labels[L.DRIVER_VERSION] == "550.135"
    assert labels[L.GFD_DRIVER_REVISION] == ""
    assert labels[L.GFD_OLD_DRIVER_REV] == ""


def test_gfd_compatible_formats() -> None:
    labels = build_labels(facts(H100, T4, driver="535.54.03", cuda="12.2"), gfd_compatible=True)
    gfd = {k: v for k, v in labels.items() if k.startswith("nvidia.com/")}
    assert gfd == {
        L.GFD_DRIVER_FULL: "535.54.03",
        L.GFD_DRIVER_MAJOR: "535",
        L.GFD_DRIVER_MINOR: "54",
        L.GFD_DRIVER_REVISION: "03",  # leading zero kept, as GFD
        L.GFD_OLD_DRIVER_MAJOR: "535",
        L.GFD_OLD_DRIVER_MINOR: "54",
        L.GFD_OLD_DRIVER_REV: "03",
        L.GFD_CUDA_FULL: "12.2",
        L.GFD_CUDA_MAJOR: "12",
        L.GFD_CUDA_MINOR: "2",
        L.GFD_OLD_CUDA_MAJOR: "12",
        L.GFD_OLD_CUDA_MINOR: "2",
        L.GFD_PRODUCT: "Tesla-T4",  # the lowest-compute model, not a random one
        L.GFD_COMPUTE_MAJOR: "7",
        L.GFD_COMPUTE_MINOR: "5",
        L.GFD_FAMILY: "turing",
        L.GFD_COUNT: "2",
        "nvidia.com/gpu.memory": "15360",
    }
    assert set(gfd) <= GFD_KEYS


def test_gfd_keys_only_with_flag() -> None:
    assert not any(k.startswith("nvidia.com/") for k in build_labels(facts(H100)))
    assert set(build_labels(facts(H100))) <= AGENT_KEYS
    assert owned_keys(False) == AGENT_KEYS
    assert owned_keys(True) == AGENT_KEYS | GFD_KEYS


@pytest.mark.parametrize(
    ("cc", "family"),
    [
        ((3, 7), "kepler"),
        ((5, 2), "maxwell"),
        ((6, 1), "pascal"),
        ((7, 0), "volta"),
        ((7, 5), "turing"),
        ((8, 0), "ampere"),
        ((8, 6), "ampere"),
        ((8, 9), "ada-lovelace"),
        ((9, 0), "hopper"),
        ((10, 0), "blackwell"),
        ((12, 0), "blackwell"),
        ((13, 0), "rubin"),
        ((11, 0), "undefined"),
    ],
)
def test_gfd_family(cc: tuple[int, int], family: str) -> None:
    assert gfd_family(ComputeCapability(*cc)) == family


@pytest.mark.parametrize(
    ("name", "sanitised"),
    [
        ("NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB"),
        ("Tesla T4", "Tesla-T4"),
        ("NVIDIA GeForce RTX 3080 Ti  Laptop GPU", "NVIDIA-GeForce-RTX-3080-Ti-Laptop-GPU"),
        ("NVIDIA RTX A6000 (Ada)", "NVIDIA-RTX-A6000-Ada"),
        ("NVIDIA A100-SXM...", "NVIDIA-A100-SXM"),
        ("...", ""),
    ],
)
def test_sanitise_product(name: str, sanitised: str) -> None:
    assert sanitise_product(name) == sanitised


def test_failure_labels() -> None:
    assert failure_labels("driver-library-mismatch") == {
        L.PROBE_STATUS: "failed",
        L.PROBE_REASON: "driver-library-mismatch",
    }
    assert failure_labels("???")[L.PROBE_REASON] == "unknown"


RECORDINGS = sorted(
    p.name
    for p in DATA.iterdir()
    if p.suffix in (".txt", ".xml") and not p.name.startswith("error")
)


@pytest.mark.parametrize("name", RECORDINGS)
def test_labels_of_every_recording_are_valid(name: str) -> None:
    labels = build_labels(parse_nvidia_smi((DATA / name).read_text()), gfd_compatible=True)
    assert all(VALUE_RE.match(v) and len(v) <= 63 for v in labels.values())


names = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=90
)


@settings(max_examples=120)
@given(st.lists(names, min_size=1, max_size=6), st.integers(0, 999), st.integers(0, 999))
def test_every_value_is_a_valid_label_value(gpu_names: list[str], minor: int, rev: int) -> None:
    gpus = [GpuFacts(n, ComputeCapability(8, 6), 1024) for n in gpu_names]
    driver = DriverVersion(570, minor, rev)
    built = build_labels(
        DriverFacts(driver, CudaVersion(12, 8), tuple(gpus), "test"), gfd_compatible=True
    )
    for key, value in built.items():
        assert is_valid_label_value(value), (key, value)
        assert VALUE_RE.match(value) and len(value) <= 63


@dataclass
class FakeInfo:
    compute: ComputeCapability
    datacenter: bool


class FakeKb:
    def __init__(self) -> None:
        self.asked: list[str] = []

    def gpu(self, name: str) -> FakeInfo | None:
        self.asked.append(name)
        return {"Tesla T4": FakeInfo(ComputeCapability(7, 5), True)}.get(name)


def test_enrich_fills_only_what_the_source_did_not_say() -> None:
    kb = FakeKb()
    plain = facts(GpuFacts("Tesla T4", memory_mib=15109), GpuFacts("NVIDIA Unknown"))
    out = enrich(plain, kb)
    assert out.gpus[0].compute == ComputeCapability(7, 5) and out.gpus[0].datacenter is True
    assert out.gpus[1].compute is None
    reported = facts(GpuFacts("Tesla T4", ComputeCapability(7, 0), datacenter=False))
    kept = enrich(reported, kb).gpus[0]
    assert (kept.compute, kept.datacenter) == (ComputeCapability(7, 0), False)
    assert enrich(plain, None) is plain
