"""Label builder: values, determinism on mixed nodes, GFD formats, label-value validity, and
GPU family words taken from the knowledge base's architecture rows."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.agent.nvidia_smi import parse_nvidia_smi
from cudasched.knowledge import KnowledgeBase
from cudasched.nodes.hostfacts import DriverFacts, GpuFacts
from cudasched.nodes.labelers import (
    AGENT_KEYS,
    GFD_KEYS,
    build_labels,
    enrich,
    failure_labels,
    owned_keys,
    sanitise_product,
)
from cudasched.vocab import labels as L
from cudasched.vocab.labelsyntax import label_value_ok
from cudasched.vocab.versions import ComputeCapability, CudaVersion, DriverVersion, parse_driver

DATA = Path(__file__).parents[1] / "data" / "nvidia-smi"
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


def test_codes_and_versions(kb: KnowledgeBase) -> None:
    labels = build_labels(facts(H100), archs=kb)
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


def test_mixed_node_takes_lowest_compute_and_sorted_products(kb: KnowledgeBase) -> None:
    labels = build_labels(facts(H100, T4, A100), archs=kb)
    assert labels[L.COMPUTE_CODE] == "75"
    assert labels[L.GPU_ARCH] == "turing"
    assert labels[L.GPU_PRODUCT] == "NVIDIA-A100-SXM4-80GB_NVIDIA-H100-80GB-HBM3_Tesla-T4"


@settings(max_examples=60)
@given(st.permutations([H100, A100, T4, RTX, H100]))
def test_mixed_node_labels_do_not_depend_on_gpu_order(
    kb: KnowledgeBase, gpus: list[GpuFacts]
) -> None:
    assert build_labels(facts(*gpus), archs=kb, gfd_compatible=True) == build_labels(
        facts(H100, H100, A100, T4, RTX), archs=kb, gfd_compatible=True
    )


def test_datacenter_only_when_every_gpu_is() -> None:
    assert build_labels(facts(H100, A100))[L.GPU_DATACENTER] == "true"
    assert build_labels(facts(H100, RTX))[L.GPU_DATACENTER] == "false"
    unknown = GpuFacts("NVIDIA Thing", ComputeCapability(9, 0))
    assert L.GPU_DATACENTER not in build_labels(facts(H100, unknown))
    assert build_labels(facts(unknown, RTX))[L.GPU_DATACENTER] == "false"


def test_unknown_compute_capability_omits_compute_labels(kb: KnowledgeBase) -> None:
    unknown = GpuFacts("NVIDIA Mystery")
    labels = build_labels(facts(H100, unknown), archs=kb, gfd_compatible=True)
    assert L.COMPUTE_CODE not in labels and L.GPU_ARCH not in labels
    assert L.GFD_COMPUTE_MAJOR not in labels and L.GFD_FAMILY not in labels
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


def test_gfd_compatible_formats(kb: KnowledgeBase) -> None:
    labels = build_labels(
        facts(H100, T4, driver="535.54.03", cuda="12.2"), archs=kb, gfd_compatible=True
    )
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


# (compute capability, cudasched.io/gpu.arch = the row's family, nvidia.com/gpu.family = GFD's
# word). 10.7 and 11.0 are where architectures.yaml and GFD disagree; 4.x and 13.x have no row.
FAMILIES = [
    ((3, 7), "kepler", "kepler"),
    ((5, 2), "maxwell", "maxwell"),
    ((6, 1), "pascal", "pascal"),
    ((7, 0), "volta", "volta"),
    ((7, 5), "turing", "turing"),
    ((8, 0), "ampere", "ampere"),
    ((8, 6), "ampere", "ampere"),
    ((8, 9), "ada-lovelace", "ada-lovelace"),
    ((9, 0), "hopper", "hopper"),
    ((10, 0), "blackwell", "blackwell"),
    ((10, 3), "blackwell", "blackwell"),
    ((10, 7), "rubin", "blackwell"),
    ((11, 0), "blackwell", "undefined"),
    ((12, 0), "blackwell", "blackwell"),
    ((4, 0), "undefined", "undefined"),
    ((13, 0), "undefined", "undefined"),
]


@pytest.mark.parametrize(("cc", "arch", "gfd_family"), FAMILIES)
def test_family_labels_come_from_the_architecture_rows(
    kb: KnowledgeBase, cc: tuple[int, int], arch: str, gfd_family: str
) -> None:
    gpu = GpuFacts("NVIDIA Some GPU", ComputeCapability(*cc), 1024)
    labels = build_labels(facts(gpu), archs=kb, gfd_compatible=True)
    assert labels[L.GPU_ARCH] == arch
    assert labels[L.GFD_FAMILY] == gfd_family
    row = kb.arch(ComputeCapability(*cc))
    assert arch == (row.family if row is not None else "undefined")


@dataclass
class FakeArch:
    family: str
    gfd_family: str


class FakeArchs:
    def arch(self, cc: ComputeCapability) -> FakeArch | None:
        return FakeArch("hopper-ish", "gfd-word") if cc == ComputeCapability(9, 0) else None


def test_family_words_are_the_arch_lookups_not_code() -> None:
    labels = build_labels(facts(H100), archs=FakeArchs(), gfd_compatible=True)  # type: ignore[arg-type]
    assert (labels[L.GPU_ARCH], labels[L.GFD_FAMILY]) == ("hopper-ish", "gfd-word")
    mixed = build_labels(facts(H100, T4), archs=FakeArchs(), gfd_compatible=True)  # type: ignore[arg-type]
    assert (mixed[L.GPU_ARCH], mixed[L.GFD_FAMILY]) == ("undefined", "undefined")


def test_without_a_knowledge_base_families_are_undefined() -> None:
    labels = build_labels(facts(H100), gfd_compatible=True)
    assert (labels[L.GPU_ARCH], labels[L.GFD_FAMILY]) == ("undefined", "undefined")
    assert labels[L.COMPUTE_CODE] == "90" and labels[L.GFD_COMPUTE_MAJOR] == "9"


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
def test_labels_of_every_recording_are_valid(kb: KnowledgeBase, name: str) -> None:
    recorded = parse_nvidia_smi((DATA / name).read_text())
    for probed in (recorded, enrich(recorded, kb)):
        labels = build_labels(probed, archs=kb, gfd_compatible=True)
        assert len(labels) >= 11  # at least the driver's labels (ours and GFD's) and the status
        assert all(VALUE_RE.match(v) and len(v) <= 63 for v in labels.values())


names = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=90
)


@settings(max_examples=120)
@given(st.lists(names, min_size=1, max_size=6), st.integers(0, 999), st.integers(0, 999))
def test_every_value_is_a_valid_label_value(
    kb: KnowledgeBase, gpu_names: list[str], minor: int, rev: int
) -> None:
    gpus = [GpuFacts(n, ComputeCapability(8, 6), 1024) for n in gpu_names]
    driver = DriverVersion(570, minor, rev)
    built = build_labels(
        DriverFacts(driver, CudaVersion(12, 8), tuple(gpus), "test"), archs=kb, gfd_compatible=True
    )
    # driver, CUDA, compute and status labels, ours and GFD's; the product only when publishable
    assert len(built) >= 25
    for key, value in built.items():
        assert label_value_ok(value), (key, value)
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


# --------------------------------------------------------------------------- issue 11 item 4


@pytest.mark.parametrize("name", ["NVIDIA GeForce", "NVIDIA RTX A200", "NVIDIA A100-SXM..."])
def test_truncated_names_are_never_published(kb: KnowledgeBase, name: str) -> None:
    """A name cut off by nvidia-smi's column is not a product: no product label, the rest of
    the node's facts are still published."""
    from cudasched.nodes.labelers import publishable_product
    from cudasched.vocab.versions import parse_cuda

    facts = DriverFacts(
        driver=parse_driver("550.90.07"),
        cuda=parse_cuda("12.4"),
        gpus=(GpuFacts(name=name, compute=ComputeCapability(8, 6)),),
        source="test",
    )
    labels = build_labels(facts, archs=kb, gfd_compatible=True)
    assert L.GPU_PRODUCT not in labels and L.GFD_PRODUCT not in labels
    assert labels[L.COMPUTE_CODE] == "86" and labels[L.DRIVER_CODE] == "550090007"
    assert publishable_product(name, kb) == ""
    # Without a knowledge base the obvious cases are still refused.
    if name != "NVIDIA RTX A200":
        assert publishable_product(name, None) == ""
    assert publishable_product("NVIDIA RTX A2000", kb) == "NVIDIA-RTX-A2000"


def test_jetson_driver_is_published_as_reported() -> None:
    """Issue 11 item 2: 540.4.0 stays 540.4.0; the integer code is the same either way."""
    orin = GpuFacts(name="Orin (nvgpu)", compute=ComputeCapability(8, 7))
    facts = DriverFacts(driver=parse_driver("540.4.0"), cuda=None, gpus=(orin,), source="test")
    labels = build_labels(facts, gfd_compatible=True)
    assert labels[L.DRIVER_VERSION] == "540.4.0" and labels[L.DRIVER_CODE] == "540004000"
    assert labels[L.GFD_DRIVER_FULL] == "540.4.0"
    assert (labels[L.GFD_DRIVER_MINOR], labels[L.GFD_DRIVER_REVISION]) == ("4", "0")
