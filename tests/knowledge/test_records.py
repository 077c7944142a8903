"""Record behaviour: support windows of an architecture, a toolkit's effective minimum driver."""

from __future__ import annotations

from cudasched.knowledge import (
    ArchInfo,
    FcCell,
    ForwardCompatPackage,
    KnowledgeBase,
    Status,
    ToolkitRelease,
)
from tests.support.versions import cc, cv, dv


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


def test_disputed_toolkit_row_is_judged_by_its_highest_alternative() -> None:
    disputed = ToolkitRelease(
        cuda=cv("13.4"),
        min_driver=None,
        status=Status.DISPUTED,
        source="test",
        alternatives=(dv("615.0"), dv("616.0")),
    )
    assert disputed.effective_min_driver == dv("616.0")
    unknown = ToolkitRelease(cv("13.5"), None, Status.UNKNOWN, "test")
    assert unknown.effective_min_driver is None
    update = ToolkitRelease(cv("12.4.1"), dv("550.54.15"), Status.KNOWN, "test")
    assert update.sort_key == (12, 4, 1) and update.effective_min_driver == dv("550.54.15")


def test_arch_support_window_of_a_hand_built_row() -> None:
    row = ArchInfo(
        name="Kepler",
        family="kepler",
        gfd_family="kepler",
        first_cuda=None,
        last_cuda=cv("11.8"),
        last_driver_branch=None,
        source="test",
        status=Status.UNKNOWN,
        unknown=("first_cuda", "last_driver_branch"),
    )
    assert row.toolkit_supports(cv("12.0")) is False
    assert row.toolkit_supports(cv("11.0")) is None
    assert row.driver_supports(dv("470.82.01")) is None  # unknown, not "still supported"
    ongoing = ArchInfo("Hopper", "hopper", "hopper", cv("11.8"), None, None, "test")
    assert ongoing.driver_supports(dv("610.43.02")) is True and not ongoing.jetson


def test_forward_compat_package_cells() -> None:
    cells = ((535, FcCell.COMPATIBLE), (570, FcCell.OWN_BRANCH), (580, FcCell.NO_PACKAGE))
    package = ForwardCompatPackage(cv("12.8"), 570, cells, "test")
    assert package.package == "cuda-compat-12-8"
    assert package.compatible_branches == frozenset({535})
    assert package.cell(570) is FcCell.OWN_BRANCH and package.cell(550) is None
