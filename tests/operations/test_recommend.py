"""``operations.recommend``: the branch for one GPU, with known answers from NVIDIA's tables."""

from __future__ import annotations

import copy
from datetime import date
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.compat.branches import parse_os_tag, release_for, running
from cudasched.compat.engine import check
from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.drivers import parse_kernel
from cudasched.nodes.facts import facts_from_parts
from cudasched.operations.drivers.recommend import Recommendation, recommend
from cudasched.vocab.errors import InputError
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.vocab.versions import parse_cuda, parse_driver
from tests.support.versions import cudas

TODAY = date(2026, 12, 1)


def ask(kb: KnowledgeBase, gpu: str, cuda: str, **options: Any) -> Recommendation:
    """``recommend`` for one CUDA version, judged on ``TODAY`` unless ``today`` is given."""
    return recommend(kb, gpu, cudas(cuda), **{"today": TODAY, **options})


def by_operator(kb: KnowledgeBase, os: str = "ubuntu22.04") -> dict[str, Any]:
    """The options of a driver the newest GPU Operator installs from its containers for ``os``."""
    return {"os": parse_os_tag(os), "operator": kb.operator.newest}


def test_kepler_and_cuda_12_has_no_branch_and_says_why(kb: KnowledgeBase) -> None:
    answer = ask(kb, "K80", "12.0")
    assert not answer.found
    doc = answer.to_dict()
    assert doc["branch"] is None and doc["version"] is None
    assert "no driver branch drives K80 and runs CUDA 12.0" in doc["reasons"][0]
    # The reason names both facts: Kepler stops at R470, and CUDA 12.0 dropped Kepler.
    by_branch = {r["branch"]: r["why"] for r in doc["rejected"]}
    assert "end at R470" in by_branch["580"]
    assert "no longer supports Kepler" in by_branch["470"]


def test_kepler_with_cuda_11_stays_on_r470_with_an_unknown_lifecycle(kb: KnowledgeBase) -> None:
    doc = ask(kb, "Tesla K80", "11.4").to_dict()
    assert (doc["branch"], doc["version"], doc["kernelModuleType"]) == (
        "470",
        "470.256.02",
        "proprietary",
    )
    assert doc["cuda"] == "11.4" and doc["lifecycle"] is None and doc["eol"] is None
    assert any("lifecycle is not in the knowledge base" in w for w in doc["warnings"])


def test_volta_is_capped_at_r580_on_proprietary_modules(kb: KnowledgeBase) -> None:
    doc = ask(kb, "V100", "12.4").to_dict()
    assert (doc["branch"], doc["kernelModuleType"], doc["lifecycle"]) == (
        "580",
        "proprietary",
        "LTSB",
    )
    assert doc["cuda"] == "12.9"  # CUDA 13 dropped Volta: its native ceiling on R580
    assert {r["branch"] for r in doc["rejected"]} == {"620", "610", "595"}
    assert "Volta GPUs end at R580" in doc["reasons"]


def test_volta_cannot_run_cuda_13_on_any_branch(kb: KnowledgeBase) -> None:
    answer = ask(kb, "V100", "13.0")
    assert not answer.found
    assert "no longer supports Volta" in {r.branch: r.why for r in answer.rejected}[580]


def test_blackwell_is_open_modules_only(kb: KnowledgeBase) -> None:
    doc = ask(kb, "B200", "12.8").to_dict()
    assert doc["kernelModuleType"] == "open"
    assert any("open modules only" in r for r in doc["reasons"])
    # R620 is a long-term branch without a release anyone can install: never the answer.
    assert (doc["branch"], doc["version"], doc["lifecycle"]) == ("580", "580.178.04", "LTSB")
    assert doc["released"] == "2026-08-03"
    assert {r["branch"]: r["why"] for r in doc["rejected"]}["620"] == "no R620 release is known"


@pytest.mark.parametrize("gpu", ["H100", "L4", "T4", "A100"])
def test_every_answer_is_an_installable_release(kb: KnowledgeBase, gpu: str) -> None:
    """The README's own example (A100, CUDA 12.8) and its siblings: a branch, its newest
    release and that release's date, never "no release known"."""
    answer = ask(kb, gpu, "12.8", **by_operator(kb))
    assert (answer.branch, str(answer.version)) == (580, "580.178.04")
    assert answer.released == date(2026, 8, 3)
    assert answer.image == "nvcr.io/nvidia/driver:580.178.04-ubuntu22.04"


@pytest.mark.parametrize(
    ("os", "release", "image"),
    [
        ("rhel9.4", "26.7", "nvcr.io/nvidia/driver:580.178.04-rhel9"),
        ("rhel9.4", "26.3", "nvcr.io/nvidia/driver:580.178.04-rhel9.4"),
        ("rhel8.10", "25.10", "nvcr.io/nvidia/driver:580.178.04-rhel8.10"),
        ("rhel9.2", "26.3", None),  # NVIDIA stopped pushing rhel9.2 tags before R580
    ],
)
def test_rhel_answers_name_the_tag_the_operator_release_pulls(
    kb: KnowledgeBase, os: str, release: str, image: str | None
) -> None:
    answer = recommend(kb, "A100", cudas("12.8"), today=TODAY, os=parse_os_tag(os),
                       operator=kb.operator.version(release))  # fmt: skip
    assert answer.image == image
    if image is None:
        assert not answer.found
        assert answer.reasons[0].endswith("with a GPU Operator driver container for rhel9.2")


def test_releases_are_judged_on_the_date(kb: KnowledgeBase) -> None:
    """--as-of respects release dates, not only ends of life: on 2025-06-01 R580 did not
    exist yet and R570's newest release was 570.148.08."""
    answer = ask(kb, "H100", "12.8", today=date(2025, 6, 1))
    assert (answer.branch, str(answer.version), answer.released) == (
        570,
        "570.148.08",
        date(2025, 5, 27),
    )
    assert "was out yet on 2025-06-01" in {r.branch: r.why for r in answer.rejected}[580]


@pytest.mark.parametrize(
    ("os", "fragment"),
    [
        ("amzn2023", "never published driver containers for amzn2023"),
        ("ubuntu20.04", "stopped building ubuntu20.04 driver containers"),
    ],
)
def test_a_known_os_without_driver_containers_says_so(
    kb: KnowledgeBase, os: str, fragment: str
) -> None:
    answer = ask(kb, "A100", "12.4", **by_operator(kb, os))
    assert not answer.found
    assert any(fragment in r.why for r in answer.rejected)
    assert any("--installer host" in r for r in answer.reasons)
    # The same question for a host-installed driver (a node image): an answer.
    host = ask(kb, "A100", "12.4", os=parse_os_tag(os))
    assert host.found and host.installer == "host" and host.image is None


def test_the_current_driver_is_kept_when_it_satisfies_everything(kb: KnowledgeBase) -> None:
    keep = ask(kb, "H100", "12.4", current=parse_driver("580.65.06"))
    assert keep.keep and str(keep.version) == "580.65.06"
    move = ask(kb, "H100", "13.2", current=parse_driver("580.65.06"))
    assert not move.keep and move.branch == 595


def test_json_contract_keys(kb: KnowledgeBase) -> None:
    doc = ask(kb, "A100", "12.4").to_dict()
    for key in (
        "branch",
        "version",
        "kernelModuleType",
        "usePrecompiled",
        "cuda",
        "lifecycle",
        "eol",
        "reasons",
        "warnings",
        "rejected",
    ):
        assert key in doc
    assert isinstance(doc["usePrecompiled"], bool)


def test_end_of_life_branches_are_refused_on_the_date(kb: KnowledgeBase) -> None:
    # A kernel older than 4.15 keeps an A100 below R555: R535 (LTSB until June 2026) is left.
    old = parse_kernel("4.4.0-210-generic")
    before = ask(kb, "A100", "12.2", today=date(2026, 5, 1), kernel=old)
    # The newest R535 release out on that day (535.309.01 came on 2026-05-11).
    assert (before.branch, str(before.version)) == (535, "535.288.01")
    after = ask(kb, "A100", "12.2", kernel=old)
    assert not after.found
    assert {r.branch: r.why for r in after.rejected}[535] == "end of life (2026-06)"


def test_kernel_below_the_minimum_refuses_every_new_branch(kb: KnowledgeBase) -> None:
    answer = ask(kb, "A100", "12.8", kernel=parse_kernel("4.4.0-210-generic"))
    assert not answer.found
    rejected = {r.branch: r.why for r in answer.rejected}
    assert "older than 4.15" in rejected[580] and "older than 4.15" in rejected[595]
    assert rejected[620] == "no R620 release is known"


def test_kernel_breakage_is_a_warning_with_its_source(kb: KnowledgeBase) -> None:
    doc = ask(kb, "K80", "11.4", kernel=parse_kernel("6.19.2-1-generic")).to_dict()
    assert doc["branch"] == "470"
    assert any(
        "470.256.02" in w and "nvidia-graphics-drivers-470/pull/27" in w for w in doc["warnings"]
    )
    assert any("meets the minimum" in r for r in doc["reasons"])


def test_precompiled_only_where_it_exists(kb: KnowledgeBase) -> None:
    lts = parse_kernel("5.15.0-113-generic")
    precompiled = {**by_operator(kb), "precompiled": True}
    ubuntu = ask(kb, "V100", "12.4", kernel=lts, **precompiled).to_dict()
    assert ubuntu["usePrecompiled"] is True
    assert any("driver:580-5.15.0-113-generic-ubuntu22.04" in r for r in ubuntu["reasons"])
    old_kernel = ask(kb, "V100", "12.4", kernel=parse_kernel("6.5.0-45-generic"), **precompiled)
    assert old_kernel.use_precompiled is False
    assert any("not of an LTS kernel series" in w for w in old_kernel.to_dict()["warnings"])
    unknown_kernel = ask(kb, "V100", "12.4", **precompiled)
    assert unknown_kernel.use_precompiled is False
    # Precompiled containers are the GPU Operator's: never for a host install.
    host = ask(kb, "V100", "12.4", precompiled=True)
    assert host.use_precompiled is False
    # Without --precompiled it is never used.
    plain = ask(kb, "V100", "12.4", kernel=lts, **by_operator(kb))
    assert plain.use_precompiled is False


def test_policy_decides_what_counts(kb: KnowledgeBase) -> None:
    # CUDA 13.4 needs R615 or newer natively, and no such release is known: no answer ...
    assert not ask(kb, "A100", "13.4").found
    # ... but with forward compatibility (cuda-compat in the image) R580 runs it.
    forward = ask(kb, "A100", "13.4", policy=Policy.FORWARD_COMPAT)
    assert forward.branch == 580
    # CUDA 13.5 has no known minimum driver: no branch runs it natively ...
    assert not ask(kb, "A100", "13.5").found
    # ... but minor-version compatibility runs any 13.x on R580 and newer, with a caveat.
    minor = ask(kb, "A100", "13.5", policy=Policy.MINOR_COMPAT)
    assert minor.found
    assert any("minor-version compatibility" in w for w in minor.warnings)


def test_unknown_gpu_is_bad_input(kb: KnowledgeBase) -> None:
    with pytest.raises(InputError, match="unknown GPU 'Voodoo 2'"):
        recommend(kb, "Voodoo 2", today=TODAY)


def _without_r620(raw_documents: dict[str, Any]) -> KnowledgeBase:
    docs = copy.deepcopy(raw_documents)
    docs["compat.yaml"]["driver_branches"] = [
        b for b in docs["compat.yaml"]["driver_branches"] if b["branch"] != 620
    ]
    docs["drivers.yaml"]["latest_releases"] = [
        r for r in docs["drivers.yaml"]["latest_releases"] if r["branch"] != 620
    ]
    return KnowledgeBase.from_documents(docs)


def test_a_long_term_branch_is_preferred_over_newer_short_lived_ones_and_says_so(
    raw_documents: dict[str, Any],
) -> None:
    """On 2026-08-10: R610 (NFB) and R595 (PB) are newer than R580 (LTSB); the long-term
    branch wins, and the answer names the short-lived ones."""
    kb = _without_r620(raw_documents)
    answer = ask(kb, "H100", "12.8", today=date(2026, 8, 10))
    assert answer.branch == 580
    assert "long-term support branch" in answer.reasons[0]
    assert "R610 (NFB" in answer.reasons[0] and "R595 (PB" in answer.reasons[0]
    why = {r.branch: r.why for r in answer.rejected}
    assert "a long-term support branch is preferred" in why[595]
    # A CUDA only the newer branches run natively leaves the short-lived one as the answer.
    newer = ask(kb, "H100", "13.3", today=date(2026, 8, 10))
    assert newer.branch == 610


@settings(max_examples=40, deadline=None)
@given(
    gpu=st.sampled_from(["A100", "V100", "T4", "H100", "B200", "K80", "L4", "RTX 4090"]),
    cuda=st.sampled_from(["11.4", "11.8", "12.2", "12.4", "12.8", "13.0", "13.2"]),
    policy=st.sampled_from(list(Policy)),
)
def test_the_recommended_branch_runs_what_was_asked(
    kb: KnowledgeBase, gpu: str, cuda: str, policy: Policy
) -> None:
    """Whatever is recommended, the engine agrees its release runs the CUDA asked."""
    answer = ask(kb, gpu, cuda, policy=policy)
    if not answer.found:
        return
    assert answer.branch is not None
    release = answer.version
    assert release is not None and release.branch == answer.branch
    assert release_for(kb, answer.branch) is not None
    facts = running(facts_from_parts("n", gpu=gpu, driver=None, kb=kb), release, kb)
    req = Requirement(cuda=parse_cuda(cuda), ships_cuda_compat=policy is Policy.FORWARD_COMPAT)
    assert check(facts, req, policy, kb).compatible


def test_recommend_and_plan_agree_for_every_pool_of_the_sample(kb: KnowledgeBase) -> None:
    """Asked about one pool of the sample (its GPU, OS, kernel, current driver, who installs
    it, and the CUDA versions of the workloads the plan gives it), recommend-driver answers
    the branch and release plan-drivers chose."""
    from cudasched.cluster.fleet import Fleet
    from cudasched.cluster.snapshot import bundled_snapshot
    from cudasched.knowledge.images import ImageTable
    from cudasched.operations.drivers.planning import plan_drivers

    snapshot = bundled_snapshot()
    plan = plan_drivers(
        snapshot, Fleet.from_snapshot(snapshot, kb), ImageTable.builtin(kb), today=TODAY
    )
    compared = 0
    for d in plan.decisions:
        assert d.chosen is not None and d.pool.gpu is not None
        groups = [plan.demand.groups[g] for g in d.chosen.serves]
        assert all(g.policy is Policy.STRICT for g in groups)
        asked = sorted({g.requirement.cuda for g in groups if g.requirement.cuda is not None})
        answer = recommend(
            kb,
            d.pool.gpu,
            asked,
            today=TODAY,
            os=d.pool.os,
            kernel=d.pool.kernel,
            operator=kb.operator.newest if d.operator else None,
            current=d.pool.current,
        )
        assert (answer.branch, answer.version, answer.keep) == (
            d.chosen.branch,
            d.chosen.release,
            d.chosen.keep,
        ), d.pool.name
        compared += 1
    assert compared == len(plan.decisions) == 13


# ---- every cluster shape: architectures, RHCOS, the boards the operator lists ----------------


def test_an_arm64_only_gpu_gets_no_amd64_only_precompiled_image(kb: KnowledgeBase) -> None:
    """GB200 comes only in arm64 servers; NVIDIA builds Ubuntu 22.04 precompiled images for
    amd64 alone, so the answer is the conventional container (multi-arch)."""
    doc = ask(
        kb,
        "GB200",
        "12.8",
        precompiled=True,
        kernel=parse_kernel("5.15.0-124-generic"),
        **by_operator(kb),
    ).to_dict()
    assert (doc["arch"], doc["usePrecompiled"]) == ("arm64", False)
    assert doc["image"] == "nvcr.io/nvidia/driver:580.178.04-ubuntu22.04"
    assert any("built for amd64 only, not arm64" in w for w in doc["warnings"])
    on_noble = ask(
        kb,
        "GB200",
        "12.8",
        precompiled=True,
        kernel=parse_kernel("6.8.0-1028-nvidia"),
        **by_operator(kb, "ubuntu24.04"),
    ).to_dict()
    assert on_noble["usePrecompiled"] is True


def test_an_architecture_the_gpu_never_has_is_bad_input(kb: KnowledgeBase) -> None:
    with pytest.raises(InputError, match="GH200 comes only in arm64 servers"):
        ask(kb, "GH200", "12.8", arch="amd64")


def test_rhcos_nodes_get_the_rhcos_tag_nvidia_publishes(kb: KnowledgeBase) -> None:
    doc = ask(kb, "L40S", "12.8", **by_operator(kb, "rhcos4.18")).to_dict()
    assert doc["image"] == "nvcr.io/nvidia/driver:580.178.04-rhcos4.18"
    arm = ask(kb, "L40S", "12.8", arch="arm64", **by_operator(kb, "rhcos4.18")).to_dict()
    assert arm["branch"] is None  # NVIDIA's sources show no arm64 rhcos4.18 image


@pytest.mark.parametrize(
    ("gpu", "warned"),
    [("RTX A6000", False), ("Quadro RTX 8000", False), ("T4G", False), ("RTX 4090", True)],
)
def test_the_operators_board_list_decides_the_support_warning(
    kb: KnowledgeBase, gpu: str, warned: bool
) -> None:
    """The same list ``plan-drivers`` warns by: workstation boards on the platform page are
    supported, GeForce boards are not."""
    doc = ask(kb, gpu, "12.8", **by_operator(kb)).to_dict()
    said = any("is not a GPU the GPU Operator supports" in w for w in doc["warnings"])
    assert doc["branch"] == "580" and said is warned
