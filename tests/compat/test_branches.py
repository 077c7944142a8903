"""``cudasched.compat.branches`` and ``drivers.yaml``: which branches drive a GPU, the CUDA each
runs there (the engine's own verdicts), module flavours, lifecycles, kernel checks."""

from __future__ import annotations

import copy
from datetime import date
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.compat.branches import (
    LifecycleState,
    ModuleType,
    branch_cuda,
    candidate_branches,
    drive_problem,
    first_driver,
    gpu_target,
    kernel_breakages,
    kernel_problem,
    known_branches,
    lifecycle,
    module_type,
    parse_os_tag,
    release_for,
    running,
)
from cudasched.compat.engine import check
from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.drivers import parse_kernel
from cudasched.nodes.facts import facts_from_parts
from cudasched.vocab.errors import InputError, KnowledgeError
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.vocab.versions import CudaVersion, DriverVersion, parse_driver

TODAY = date(2026, 12, 1)


def target(kb: KnowledgeBase, gpu: str):  # noqa: ANN201 - test helper
    found = gpu_target(kb, facts_from_parts("n", gpu=gpu, driver=None, kb=kb))
    assert found is not None
    return found


# ------------------------------------------------------------------------- drivers.yaml


def test_driver_facts_load_with_their_sources(kb: KnowledgeBase) -> None:
    facts = kb.drivers
    assert facts.modules.open_first_branch == 515
    assert str(facts.modules.open_min_compute) == "7.5"
    assert facts.modules.open_default_branch == 560
    assert str(facts.latest_release(580)) == "580.178.04"
    assert facts.latest_release(620) is None  # listed, no release known
    assert facts.latest_release(999) is None
    # Releases are dated: on a day before a release only older ones exist.
    assert str(facts.latest_release(580, date(2026, 3, 1))) == "580.126.20"
    assert facts.latest_release(580, date(2025, 6, 1)) is None  # R580 began in August 2025
    assert str(facts.latest_release(535)) == "535.309.01"  # newer than the sample's 535.216.01
    rows = [*facts.minimum_kernels, *facts.breakages, *facts.latest.values()]
    rows += [r for releases in facts.releases.values() for r in releases]
    assert len(rows) > 40
    for row in rows:
        assert row.source.strip()


@pytest.mark.parametrize(
    ("driver", "kernel"),
    [
        ("470.256.02", "2.6.32"),
        ("510.39.01", "3.10"),
        ("510.39.00", "2.6.32"),
        ("550.100", "3.10"),
        ("555.42.02", "4.15"),
        ("595.45.04", "4.15"),
    ],
)
def test_minimum_kernel_per_release(kb: KnowledgeBase, driver: str, kernel: str) -> None:
    assert kb.drivers.minimum_kernel(parse_driver(driver)).kernel.text == kernel


@pytest.mark.parametrize(
    ("text", "version", "flavour"),
    [
        ("5.15.0-113-generic", (5, 15, 0), "generic"),
        ("5.15.0-1075-azure-fde", (5, 15, 0), "azure-fde"),
        ("6.8.0-1021-aws", (6, 8, 0), "aws"),
        ("6.1.115-126.197.amzn2023.x86_64", (6, 1, 115), ""),
        ("6.17.9-76061709-generic", (6, 17, 9), "generic"),
        ("4.15", (4, 15, 0), ""),
    ],
)
def test_kernel_releases_parse(text: str, version: tuple[int, int, int], flavour: str) -> None:
    kernel = parse_kernel(text)
    assert (kernel.version, kernel.flavour, str(kernel)) == (version, flavour, text)


@pytest.mark.parametrize("bad", ["", "five", "5", "generic-5.15", "5.x.1"])
def test_bad_kernel_releases_are_input_errors(bad: str) -> None:
    with pytest.raises(InputError, match="invalid kernel release"):
        parse_kernel(bad)


def test_breakages_touch_the_release_and_older_ones_on_the_kernel_and_newer(
    kb: KnowledgeBase,
) -> None:
    def hits(driver: str, kernel: str, flavour: str | None = None) -> list[str]:
        return [
            str(b.driver)
            for b in kb.drivers.breakages_for(parse_driver(driver), parse_kernel(kernel), flavour)
        ]

    assert hits("570.153", "6.15.2") == ["570.153"]
    assert hits("570.133.20", "6.16.0") == ["570.153"]  # older release of the branch
    assert hits("570.169", "6.15.2") == []  # the release the report says builds
    assert hits("570.153", "6.14.0") == []  # an older kernel
    assert hits("470.256.02", "6.19.1") == ["470.256.02"]
    assert hits("470.256.02", "6.12.0") == []  # 470.239.06's report is about an older release
    # Flavour-specific reports.
    assert hits("580.119.02", "6.17.9-76061709-generic", "open") == ["580.119.02"]
    assert hits("580.119.02", "6.17.9-76061709-generic", "proprietary") == []
    assert hits("580.119.02", "7.0.9", "proprietary") == ["580.119.02"]
    assert hits("580.119.02", "7.0.9") == ["580.119.02", "580.119.02"]  # flavour not known


def _broken(raw_documents: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    docs = copy.deepcopy(raw_documents)
    node = docs["drivers.yaml"]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return docs


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("latest_releases", 0, "version"), "535.1.1", "is not a release of R470"),
        (("latest_releases", 1, "source"), "nowhere", "neither a URL nor a key"),
        (("build_breakages", 0, "flavour"), "both", "flavour is open or proprietary"),
        (("minimum_kernel", 1, "kernel"), "three", "invalid kernel release"),
        (("minimum_kernel", 0, "from_driver"), "400.1.1", "one row without from_driver"),
        (("kernel_modules", "open_first_branch"), 515, "must be {value, source}"),
        (("latest_releases", 1, "released"), "May 2026", "is not YYYY-MM-DD"),
        (("earlier_releases", 0, "version"), "535.999.1", "not older than a latest release"),
    ],
)
def test_malformed_driver_facts_are_knowledge_errors(
    raw_documents: dict[str, Any], path: tuple[str, ...], value: Any, message: str
) -> None:
    with pytest.raises(KnowledgeError, match=message):
        KnowledgeBase.from_documents(_broken(raw_documents, path, value))


# ------------------------------------------------------------------------- which branches


@pytest.mark.parametrize(
    ("gpu", "first"),
    [
        ("B200", "570.86.15"),
        ("H100 PCIe", "520.56.06"),
        ("GB10", "590.48.01"),
        ("A100", None),
        ("T4", None),
        ("V100", None),
    ],
)
def test_first_driver_is_the_knowledge_bases_without_readme_artefacts(
    kb: KnowledgeBase, gpu: str, first: str | None
) -> None:
    info = kb.gpu(gpu)
    assert info is not None
    found = first_driver(info)
    assert (str(found) if found else None) == first


@pytest.mark.parametrize(
    ("gpu", "newest", "oldest"),
    [
        ("K80", 470, 390),  # Kepler ends at R470
        ("V100", 580, 390),  # Volta ends at R580
        ("B200", 620, 570),  # first driver 570.86.15; open modules only
        ("A100", 620, 450),  # Ampere's first toolkit (CUDA 11.0) needs R450
        ("H100", 620, 525),  # Hopper: CUDA 11.8 needs R520; no R520 row, R525 next
    ],
)
def test_candidate_branches_follow_first_driver_and_architecture_ceiling(
    kb: KnowledgeBase, gpu: str, newest: int, oldest: int
) -> None:
    branches = candidate_branches(kb, target(kb, gpu))
    assert (branches[0], branches[-1]) == (newest, oldest)


def test_volta_above_r580_and_kepler_above_r470_cannot_be_driven(kb: KnowledgeBase) -> None:
    volta, kepler = target(kb, "V100"), target(kb, "K80")
    assert drive_problem(volta, parse_driver("580.126.20")) is None
    assert "end at R580" in (drive_problem(volta, parse_driver("595.91.07")) or "")
    assert drive_problem(kepler, parse_driver("470.256.02")) is None
    assert "end at R470" in (drive_problem(kepler, parse_driver("535.183.06")) or "")
    b200 = target(kb, "B200")
    # A B200 on R535 (the example): the branch predates Blackwell altogether.
    assert "predates Blackwell" in (drive_problem(b200, parse_driver("535.183.06")) or "")
    # An R570 release older than the B200's first driver cannot drive it either.
    assert "570.86.15" in (drive_problem(b200, parse_driver("570.26")) or "")
    assert drive_problem(b200, parse_driver("570.172.08")) is None


@pytest.mark.parametrize(
    ("gpu", "branch", "expected"),
    [
        ("K80", 470, ModuleType.PROPRIETARY),
        ("V100", 580, ModuleType.PROPRIETARY),  # Volta: never open
        ("T4", 535, ModuleType.PROPRIETARY),  # Turing on a branch before the open default
        ("T4", 580, ModuleType.OPEN),
        ("A100", 510, ModuleType.PROPRIETARY),  # before the open modules existed
        ("B200", 570, ModuleType.OPEN),  # Blackwell: open only
        ("GH200", 550, ModuleType.OPEN),  # GH200: open only
        ("RTX 5090", 580, ModuleType.OPEN),
    ],
)
def test_module_flavour(kb: KnowledgeBase, gpu: str, branch: int, expected: ModuleType) -> None:
    assert module_type(kb, target(kb, gpu), branch) is expected


def test_open_only_gpu_before_the_open_modules_has_no_flavour(kb: KnowledgeBase) -> None:
    gh200 = target(kb, "GH200")
    assert "open kernel modules only" in str(module_type(kb, gh200, 510))


def test_lifecycle_on_a_date(kb: KnowledgeBase) -> None:
    assert lifecycle(kb, 580, TODAY).state is LifecycleState.SUPPORTED
    assert lifecycle(kb, 580, TODAY).long_term
    assert lifecycle(kb, 535, date(2026, 6, 30)).state is LifecycleState.SUPPORTED
    assert lifecycle(kb, 535, date(2026, 7, 1)).state is LifecycleState.END_OF_LIFE
    assert lifecycle(kb, 575, TODAY).state is LifecycleState.END_OF_LIFE  # listed as ended
    assert lifecycle(kb, 470, TODAY).state is LifecycleState.UNKNOWN
    assert lifecycle(kb, 590, TODAY).state is LifecycleState.UNKNOWN  # not in the lists
    assert lifecycle(kb, 580, TODAY).alternatives == ("2028-06", "2028-08")  # disputed


def test_known_branches_include_lifecycle_rows_releases_and_architecture_ceilings(
    kb: KnowledgeBase,
) -> None:
    branches = known_branches(kb)
    assert branches == tuple(sorted(branches, reverse=True))
    assert {620, 595, 580, 535, 470, 390} <= set(branches)
    assert release_for(kb, 595) == parse_driver("595.91.07")


# ------------------------------------------------------------------------- CUDA per branch


@pytest.mark.parametrize(
    ("gpu", "release", "native", "minor", "forward"),
    [
        ("A100", "535.183.06", "12.2", "12.9", "13.4"),  # cuda-compat-13-4 lists R535
        ("A100", "580.126.20", "13.0", "13.5", "13.5"),
        ("V100", "580.126.20", "12.9", "12.9", "12.9"),  # CUDA 13 dropped Volta
        ("K80", "470.256.02", "11.4", "11.8", "11.8"),
        ("RTX 4090", "535.183.06", "12.2", "12.9", "12.9"),  # GeForce: no forward compat
        ("T4", "535.183.06", "12.2", "12.9", "13.4"),
    ],
)
def test_branch_cuda_is_the_engines_ceiling(
    kb: KnowledgeBase, gpu: str, release: str, native: str, minor: str, forward: str
) -> None:
    facts = facts_from_parts("n", gpu=gpu, driver=None, kb=kb)
    cuda = branch_cuda(kb, facts, parse_driver(release))
    assert (str(cuda.native), str(cuda.minor_compat), str(cuda.forward_compat)) == (
        native,
        minor,
        forward,
    )


@settings(max_examples=60, deadline=None)
@given(
    gpu=st.sampled_from(["A100", "V100", "T4", "H100", "B200", "K80", "RTX 4090", "L4"]),
    branch=st.sampled_from([470, 535, 550, 570, 575, 580, 595, 610]),
    minor=st.integers(0, 9),
    major=st.sampled_from([11, 12, 13]),
    policy=st.sampled_from(list(Policy)),
)
def test_ceiling_agrees_with_every_engine_verdict(
    kb: KnowledgeBase, gpu: str, branch: int, minor: int, major: int, policy: Policy
) -> None:
    """A CUDA release at or under a branch's ceiling is one the engine accepts on that GPU and
    release, and the release right above it is not (the ceiling is the engine's answer)."""
    release = release_for(kb, branch)
    assert release is not None
    facts = facts_from_parts("n", gpu=gpu, driver=None, kb=kb)
    cuda = branch_cuda(kb, facts, release)
    ceiling = {
        Policy.STRICT: cuda.native,
        Policy.MINOR_COMPAT: cuda.minor_compat,
        Policy.FORWARD_COMPAT: cuda.forward_compat,
    }[policy]
    asked = CudaVersion(major, minor)
    if kb.toolkit(asked) is None:
        return
    on = running(facts, release, kb)
    req = Requirement(cuda=asked, ships_cuda_compat=policy is Policy.FORWARD_COMPAT)
    verdict = check(on, req, policy, kb)
    if ceiling is None or asked > ceiling:
        assert not verdict.compatible  # everything above the ceiling is refused
    elif asked == ceiling:
        assert verdict.compatible


def test_running_replaces_driver_and_cuda(kb: KnowledgeBase) -> None:
    facts = facts_from_parts("n", gpu="A100", driver="535.183.06", kb=kb)
    on = running(facts, DriverVersion(580, 126, 20), kb)
    assert (str(on.driver), str(on.cuda), on.products) == ("580.126.20", "13.0", facts.products)


# ------------------------------------------------------------------------- kernel and OS


def test_kernel_problem_names_the_minimum(kb: KnowledgeBase) -> None:
    old = parse_kernel("4.4.0-210-generic")
    assert "older than 4.15" in (kernel_problem(kb, parse_driver("580.126.20"), old) or "")
    assert kernel_problem(kb, parse_driver("535.183.06"), old) is None
    assert kernel_problem(kb, parse_driver("580.126.20"), parse_kernel("5.15.0-1-generic")) is None
    # A branch without a known release is named as the branch, never as "620.00".
    text = kernel_problem(kb, DriverVersion(620, 0, 0, has_revision=False), old) or ""
    assert "R620" in text and "620.00" not in text


def test_kernel_breakages_for_the_module_in_use(kb: KnowledgeBase) -> None:
    kernel = parse_kernel("7.0.9-arch1")
    found = kernel_breakages(kb, parse_driver("580.119.02"), kernel, ModuleType.PROPRIETARY)
    assert found and "nvidia-all/issues/379" in found[0].source
    assert not kernel_breakages(kb, parse_driver("580.126.20"), kernel, ModuleType.PROPRIETARY)


@pytest.mark.parametrize(
    ("text", "tag"),
    [
        ("ubuntu22.04", "ubuntu22.04"),
        ("rhel9.4", "rhel9"),
        ("rocky-9.3", "rocky9"),
        ("amzn2023", "amzn2023"),
        ("Ubuntu 24.04", "ubuntu24.04"),
    ],
)
def test_os_tags_as_the_gpu_operator_writes_them(text: str, tag: str) -> None:
    assert str(parse_os_tag(text)) == tag


@pytest.mark.parametrize("bad", ["", "ubuntu", "22.04", "windows-server"])
def test_bad_os_tags_are_input_errors(bad: str) -> None:
    with pytest.raises(InputError, match="invalid OS"):
        parse_os_tag(bad)


# --------------------------------------------------------------------------- a branch to name


def test_the_branch_a_fix_names_is_installable_and_ranked_as_the_planner_ranks(
    kb: KnowledgeBase,
) -> None:
    """Table 3's minimum of an ended branch (570.26 for CUDA 12.8) is never what a fix tells
    one to install: the supported long-term R580 is, from its first dated release."""
    from cudasched.compat.branches import branch_floor, installable_branch

    h100 = gpu_target(kb, facts_from_parts("n", gpu="H100", driver=None, kb=kb))
    assert h100 is not None
    choice = installable_branch(kb, h100, parse_driver("570.26"), date(2026, 12, 1))
    assert choice is not None and (choice.branch, str(choice.floor)) == (580, "580.65.06")
    assert choice.describe() == "install R580 >= 580.65.06 (LTSB)"
    # One minimum per branch: NVIDIA's own where it lies in the branch (Table 3's 595.45.04
    # for CUDA 13.2, not the oldest dated release 595.58.03), else the oldest version the
    # sources name at or above the need (R535 for 12.2 is 535.54.03, not dated 535.183.06).
    assert str(branch_floor(kb, 595, parse_driver("595.45.04"))) == "595.45.04"
    assert str(branch_floor(kb, 595, parse_driver("570.26"))) == "595.45.04"
    assert str(branch_floor(kb, 535, parse_driver("535.54.03"))) == "535.54.03"
    assert str(branch_floor(kb, 610, parse_driver("595.45.04"))) == "610.43.02"
    late = installable_branch(kb, h100, parse_driver("595.45.04"), date(2026, 12, 1))
    assert late is not None and (late.branch, str(late.floor)) == (595, "595.45.04")
    volta = gpu_target(kb, facts_from_parts("n", gpu="V100", driver=None, kb=kb))
    assert installable_branch(kb, volta, parse_driver("595.45.04"), date(2026, 12, 1)) is None
