"""``operations.recommend``: the branch for one GPU, with known answers from NVIDIA's tables."""

from __future__ import annotations

import copy
from datetime import date
from importlib import resources
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.compat.branches import parse_os_tag, release_for, running
from cudasched.compat.engine import check
from cudasched.knowledge import DATA_FILES, KnowledgeBase
from cudasched.knowledge.drivers import parse_kernel
from cudasched.nodes.facts import facts_from_parts
from cudasched.operations.drivers.recommend import recommend
from cudasched.vocab.errors import InputError
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.vocab.versions import CudaVersion, parse_cuda

TODAY = date(2026, 12, 1)


def cudas(*values: str) -> list[CudaVersion]:
    return [parse_cuda(v) for v in values]


def test_kepler_and_cuda_12_has_no_branch_and_says_why(kb: KnowledgeBase) -> None:
    answer = recommend(kb, "K80", cudas("12.0"), today=TODAY)
    assert not answer.found
    doc = answer.to_dict()
    assert doc["branch"] is None and doc["version"] is None
    assert "no driver branch drives K80 and runs CUDA 12.0" in doc["reasons"][0]
    # The reason names both facts: Kepler stops at R470, and CUDA 12.0 dropped Kepler.
    by_branch = {r["branch"]: r["why"] for r in doc["rejected"]}
    assert "end at R470" in by_branch["580"]
    assert "no longer supports Kepler" in by_branch["470"]


def test_kepler_with_cuda_11_stays_on_r470_with_an_unknown_lifecycle(kb: KnowledgeBase) -> None:
    doc = recommend(kb, "Tesla K80", cudas("11.4"), today=TODAY).to_dict()
    assert (doc["branch"], doc["version"], doc["kernelModuleType"]) == (
        "470",
        "470.256.02",
        "proprietary",
    )
    assert doc["cuda"] == "11.4" and doc["lifecycle"] is None and doc["eol"] is None
    assert any("lifecycle is not in the knowledge base" in w for w in doc["warnings"])


def test_volta_is_capped_at_r580_on_proprietary_modules(kb: KnowledgeBase) -> None:
    doc = recommend(kb, "V100", cudas("12.4"), today=TODAY).to_dict()
    assert (doc["branch"], doc["kernelModuleType"], doc["lifecycle"]) == (
        "580",
        "proprietary",
        "LTSB",
    )
    assert doc["cuda"] == "12.9"  # CUDA 13 dropped Volta: its native ceiling on R580
    assert {r["branch"] for r in doc["rejected"]} == {"620", "610", "595"}
    assert "Volta GPUs end at R580" in doc["reasons"]


def test_volta_cannot_run_cuda_13_on_any_branch(kb: KnowledgeBase) -> None:
    answer = recommend(kb, "V100", cudas("13.0"), today=TODAY)
    assert not answer.found
    assert "no longer supports Volta" in {r.branch: r.why for r in answer.rejected}[580]


def test_blackwell_is_open_modules_only(kb: KnowledgeBase) -> None:
    doc = recommend(kb, "B200", cudas("12.8"), today=TODAY).to_dict()
    assert doc["kernelModuleType"] == "open"
    assert any("open modules only" in r for r in doc["reasons"])
    # The newest supported branch, R620 (LTSB), whose release number no source gives.
    assert (doc["branch"], doc["version"], doc["lifecycle"]) == ("620", None, "LTSB")
    assert any("no release of R620" in w for w in doc["warnings"])


def test_json_contract_keys(kb: KnowledgeBase) -> None:
    doc = recommend(kb, "A100", cudas("12.4"), today=TODAY).to_dict()
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
    before = recommend(kb, "A100", cudas("12.2"), today=date(2026, 5, 1), kernel=old)
    assert (before.branch, str(before.version)) == (535, "535.183.06")
    after = recommend(kb, "A100", cudas("12.2"), today=TODAY, kernel=old)
    assert not after.found
    assert {r.branch: r.why for r in after.rejected}[535] == "end of life (2026-06)"


def test_kernel_below_the_minimum_refuses_every_new_branch(kb: KnowledgeBase) -> None:
    answer = recommend(
        kb, "A100", cudas("12.8"), today=TODAY, kernel=parse_kernel("4.4.0-210-generic")
    )
    assert not answer.found
    rejected = {r.branch: r.why for r in answer.rejected}
    assert "older than 4.15" in rejected[580] and "older than 4.15" in rejected[595]
    assert "older than 4.15" in rejected[620] and "620.00" not in rejected[620]


def test_kernel_breakage_is_a_warning_with_its_source(kb: KnowledgeBase) -> None:
    doc = recommend(
        kb, "K80", cudas("11.4"), today=TODAY, kernel=parse_kernel("6.19.2-1-generic")
    ).to_dict()
    assert doc["branch"] == "470"
    assert any(
        "470.256.02" in w and "nvidia-graphics-drivers-470/pull/27" in w for w in doc["warnings"]
    )
    assert any("meets the minimum" in r for r in doc["reasons"])


def test_precompiled_only_where_it_exists(kb: KnowledgeBase) -> None:
    ubuntu = recommend(
        kb,
        "V100",
        cudas("12.4"),
        today=TODAY,
        os=parse_os_tag("ubuntu22.04"),
        kernel=parse_kernel("5.15.0-113-generic"),
        precompiled=True,
    ).to_dict()
    assert ubuntu["usePrecompiled"] is True
    assert any("driver:580-5.15.0-113-generic-ubuntu22.04" in r for r in ubuntu["reasons"])
    amazon = recommend(
        kb,
        "V100",
        cudas("12.4"),
        today=TODAY,
        os=parse_os_tag("amzn2023"),
        kernel=parse_kernel("6.1.115-126.197.amzn2023.x86_64"),
        precompiled=True,
    ).to_dict()
    assert amazon["usePrecompiled"] is False
    assert any("usePrecompiled: false" in w and "not amzn2023" in w for w in amazon["warnings"])
    unknown_kernel = recommend(
        kb, "V100", cudas("12.4"), today=TODAY, os=parse_os_tag("ubuntu22.04"), precompiled=True
    )
    assert unknown_kernel.use_precompiled is False
    # Without --precompiled it is never used.
    plain = recommend(
        kb,
        "V100",
        cudas("12.4"),
        today=TODAY,
        os=parse_os_tag("ubuntu22.04"),
        kernel=parse_kernel("5.15.0-113-generic"),
    )
    assert plain.use_precompiled is False


def test_policy_decides_what_counts(kb: KnowledgeBase) -> None:
    # CUDA 13.4 on an A100: natively only R620; with forward compatibility R580 would do,
    # but the newest supported branch is still the answer (R620 runs it natively).
    strict = recommend(kb, "A100", cudas("13.4"), today=TODAY)
    assert strict.branch == 620
    # CUDA 13.5 has no known minimum driver: no branch runs it natively ...
    assert not recommend(kb, "A100", cudas("13.5"), today=TODAY).found
    # ... but minor-version compatibility runs any 13.x on R580 and newer, with a caveat.
    minor = recommend(kb, "A100", cudas("13.5"), today=TODAY, policy=Policy.MINOR_COMPAT)
    assert minor.found
    assert any("minor-version compatibility" in w for w in minor.warnings)


def test_unknown_gpu_is_bad_input(kb: KnowledgeBase) -> None:
    with pytest.raises(InputError, match="unknown GPU 'Voodoo 2'"):
        recommend(kb, "Voodoo 2", today=TODAY)


def _without_r620(kb_docs: dict[str, Any]) -> KnowledgeBase:
    docs = copy.deepcopy(kb_docs)
    docs["compat.yaml"]["driver_branches"] = [
        b for b in docs["compat.yaml"]["driver_branches"] if b["branch"] != 620
    ]
    docs["drivers.yaml"]["latest_releases"] = [
        r for r in docs["drivers.yaml"]["latest_releases"] if r["branch"] != 620
    ]
    return KnowledgeBase.from_documents(docs)


def test_a_long_term_branch_is_preferred_over_newer_short_lived_ones_and_says_so() -> None:
    """With R620 unknown, on 2026-05-01: R610 (NFB) and R595 (PB) are newer than R580 (LTSB);
    the long-term branch wins, and the answer names the short-lived ones."""
    root = resources.files("cudasched").joinpath("data")
    docs = {n: yaml.safe_load(root.joinpath(n).read_text("utf-8")) for n in DATA_FILES}
    kb = _without_r620(docs)
    answer = recommend(kb, "H100", cudas("12.8"), today=date(2026, 5, 1))
    assert answer.branch == 580
    assert "long-term support branch" in answer.reasons[0]
    assert "R610 (NFB" in answer.reasons[0] and "R595 (PB" in answer.reasons[0]
    why = {r.branch: r.why for r in answer.rejected}
    assert "a long-term support branch is preferred" in why[595]
    # A CUDA only the newer branches run natively leaves the short-lived one as the answer.
    newer = recommend(kb, "H100", cudas("13.2"), today=date(2026, 5, 1))
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
    answer = recommend(kb, gpu, cudas(cuda), today=TODAY, policy=policy)
    if not answer.found:
        return
    assert answer.branch is not None
    release = release_for(kb, answer.branch)
    if release is None:
        return  # judged by a stand-in; covered by the branch tests
    facts = running(facts_from_parts("n", gpu=gpu, driver=None, kb=kb), release, kb)
    req = Requirement(cuda=parse_cuda(cuda), ships_cuda_compat=policy is Policy.FORWARD_COMPAT)
    assert check(facts, req, policy, kb).compatible
