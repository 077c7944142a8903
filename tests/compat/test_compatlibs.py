"""An image's compat libraries on each node, per toolkit mode: native, through forward
compatibility, refused by the gate (legacy only) or failing with CUDA error 804/803, decided
once in the engine and compiled to the same nodes (issue 29 item 4)."""

from __future__ import annotations

from typing import Any

import pytest

from cudasched.compat.compatlibs import forward_compat_targets, loads_compat
from cudasched.compat.engine import check
from cudasched.compat.verdict import VerdictStatus
from cudasched.knowledge import KnowledgeBase
from cudasched.placement.compile import compile_requirement
from cudasched.vocab.labels import LabelScheme
from cudasched.vocab.nodeaffinity import Node, NodeSelector
from cudasched.vocab.requirecuda import gate_from_env
from cudasched.vocab.requirements import CompatLibrary, Policy, Requirement, ToolkitMode
from cudasched.vocab.versions import parse_cuda, parse_driver
from tests.support.builders import node_facts, node_labels

LEGACY, CDI = ToolkitMode.LEGACY, ToolkitMode.CDI

#: nvidia/cuda:12.9's compat library, with the note NVIDIA's toolkit tests carry for it
#: (testdata/compat/575.57.08 in NVIDIA/nvidia-container-toolkit).
CUDA_12_9 = CompatLibrary(
    parse_driver("575.57.08"), parse_cuda("12.9"), (535, 550, 560, 565, 570, 575)
)


def image(cuda: str, mode: ToolkitMode = LEGACY, **kw: Any) -> Requirement:
    return Requirement(
        cuda=parse_cuda(cuda), ships_cuda_compat=True, compat=CUDA_12_9, toolkit=mode, **kw
    )


@pytest.mark.parametrize(
    ("mode", "driver", "used"),
    [
        (LEGACY, "550.90.07", True),  # a newer major: libnvidia-container keeps it
        (LEGACY, "575.51.03", False),  # the same major: filtered out
        (CDI, "550.90.07", True),  # a branch the note lists, an older driver
        (CDI, "545.29.06", False),  # a branch the note does not list
        (CDI, "575.51.03", True),  # its own branch, an older driver of it
        (CDI, "575.57.08", False),  # not older
        (CDI, "580.65.06", False),
    ],
)
def test_when_the_toolkit_uses_the_compat_library(
    mode: ToolkitMode, driver: str, used: bool
) -> None:
    assert loads_compat(CUDA_12_9, mode, parse_driver(driver)) is used


def test_without_a_note_the_cdi_hook_compares_majors() -> None:
    bare = CompatLibrary(parse_driver("575.57.08"), parse_cuda("12.9"), None)
    assert loads_compat(bare, CDI, parse_driver("545.29.06"))
    assert not loads_compat(bare, CDI, parse_driver("575.51.03"))


def test_geforce_fails_with_804_where_minor_compat_alone_would_run(kb: KnowledgeBase) -> None:
    # The defect this fixes: minor-version compatibility accepted an RTX 4090 on R550 for a
    # CUDA 12.9 image, and the toolkit then loads the image's compat libcuda there.
    node = node_facts("RTX 4090", "550.90.07")
    before = check(node, Requirement(cuda=parse_cuda("12.9")), Policy.MINOR_COMPAT, kb)
    assert before.codes == ("minor-version-compat",)
    verdict = check(node, image("12.9"), Policy.MINOR_COMPAT, kb)
    assert verdict.status is VerdictStatus.INCOMPATIBLE
    assert verdict.codes[0] == "no-forward-compat-on-geforce"
    assert "error 804" in verdict.reasons[0].message
    assert "libnvidia-container (legacy mode)" in verdict.reasons[0].message


def test_a_data_center_gpu_runs_through_forward_compatibility(kb: KnowledgeBase) -> None:
    verdict = check(node_facts("A100", "550.90.07"), image("12.9"), Policy.MINOR_COMPAT, kb)
    assert verdict.status is VerdictStatus.COMPATIBLE_WITH_CAVEATS
    assert verdict.codes == ("forward-compat",)
    assert "libcuda.so.575.57.08 (CUDA 12.9; note: R535" in verdict.reasons[0].message


def test_a_branch_the_compat_driver_does_not_support_fails_with_803(kb: KnowledgeBase) -> None:
    # R545 is not in the note: libnvidia-container uses the library anyway (a newer major).
    verdict = check(node_facts("A100", "545.29.06"), image("12.9"), Policy.MINOR_COMPAT, kb)
    assert verdict.codes[0] == "compat-branch-unsupported"
    assert "error 803" in verdict.reasons[0].message
    # The CDI hook reads the note and leaves it unused: minor-version compatibility runs it.
    cdi = check(node_facts("A100", "545.29.06"), image("12.9", CDI), Policy.MINOR_COMPAT, kb)
    assert cdi.codes == ("minor-version-compat",)


def test_cdi_uses_it_on_its_own_branch_where_legacy_does_not(kb: KnowledgeBase) -> None:
    node = node_facts("RTX 4090", "575.51.03")
    assert check(node, image("12.9"), Policy.STRICT, kb).codes == ("native",)
    verdict = check(node, image("12.9", CDI), Policy.STRICT, kb)
    assert verdict.codes[0] == "no-forward-compat-on-geforce"


def test_the_gate_is_checked_in_legacy_mode_only(kb: KnowledgeBase) -> None:
    gate = gate_from_env({"NVIDIA_REQUIRE_CUDA": "cuda>=12.9"}, "image")
    node = node_facts("A100", "550.90.07")
    legacy = check(node, image("12.9", gate=gate), Policy.MINOR_COMPAT, kb)
    assert legacy.codes[0] == "require-cuda-unmet"
    cdi = check(node, image("12.9", CDI, gate=gate), Policy.MINOR_COMPAT, kb)
    assert cdi.codes == ("forward-compat",)


def test_the_note_widens_forward_compat_targets_only_where_it_is_used(kb: KnowledgeBase) -> None:
    cuda = parse_cuda("12.9")
    plain = Requirement(cuda=cuda, ships_cuda_compat=True)
    assert 560 not in forward_compat_targets(plain, cuda, kb)
    assert 560 in forward_compat_targets(image("12.9"), cuda, kb)
    # Never at or above the compat driver's branch, where the toolkit leaves it unused.
    assert 575 not in forward_compat_targets(image("12.9"), cuda, kb)


@pytest.mark.parametrize("mode", list(ToolkitMode))
@pytest.mark.parametrize("scheme", [LabelScheme.CUDASCHED, LabelScheme.GFD])
def test_compiled_placement_keeps_only_the_nodes_where_it_runs(
    kb: KnowledgeBase, mode: ToolkitMode, scheme: LabelScheme
) -> None:
    requirement = image("12.9", mode)
    terms = compile_requirement(requirement, Policy.MINOR_COMPAT, scheme, kb)
    selector = NodeSelector.from_terms(terms)
    # GFD says a GPU is a data-center one by its product name, as NVML spells it.
    a100, rtx = "NVIDIA-A100-SXM4-80GB", "NVIDIA-GeForce-RTX-4090"
    nodes = [
        (rtx, "550.90.07"),
        (a100, "550.90.07"),
        (a100, "545.29.06"),
        (rtx, "575.51.03"),
        (rtx, "580.65.06"),
    ]
    chosen = "gfd" if scheme is LabelScheme.GFD else "cudasched"
    matched = [
        selector.match(Node("n", node_labels(gpu=g, driver=d, scheme=chosen))) for g, d in nodes
    ]
    runs = [
        check(node_facts(g, d), requirement, Policy.MINOR_COMPAT, kb).compatible for g, d in nodes
    ]
    assert matched == runs
    assert runs[0] is False and runs[1] is True and runs[-1] is True
