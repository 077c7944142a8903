"""What would fix a blocking reason, and how explain shows it: blocking reasons with their
fix, the way a node runs the workload apart, the terminal's width (``COLUMNS`` when piped)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cudasched.cli import app
from cudasched.compat.engine import check
from cudasched.compat.fixes import fix_for, with_fixes
from cudasched.compat.verdict import Reason
from cudasched.knowledge import KnowledgeBase
from cudasched.nodes.facts import facts_from_parts
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.vocab.versions import ComputeCapability, parse_cuda


def _fixes(kb: KnowledgeBase, gpu: str, driver: str, req: Requirement, policy: str) -> dict:
    facts = facts_from_parts("n", gpu=gpu, driver=driver, kb=kb)
    verdict = check(facts, req, policy, kb)
    return {r.code: r.fix for r in with_fixes(verdict.reasons, facts, req, policy, kb)}


def test_a_driver_too_old_names_the_minimum_and_an_installable_branch(kb: KnowledgeBase) -> None:
    """The minimum is Table 3's; the branch to install is the one plan-drivers would take:
    R550 (CUDA 12.4's minimum) ended, so the fix names R580, the supported long-term branch,
    from its first release a container carries."""
    fixes = _fixes(kb, "T4", "535.104.05", Requirement(cuda=parse_cuda("12.4")), "strict")
    assert fixes == {
        "driver-too-old": "needs driver >= 550.54.14: install R580 >= 580.65.06 (LTSB), "
        "or policy minor-compat"
    }
    # Below the minor-compat floor, the policy would not help: it is not offered.
    old = _fixes(kb, "T4", "470.256.02", Requirement(cuda=parse_cuda("12.4")), "strict")
    assert old == {"driver-too-old": "needs driver >= 550.54.14: install R580 >= 580.65.06 (LTSB)"}


def test_minor_compat_is_offered_only_where_the_engine_would_then_admit(kb: KnowledgeBase) -> None:
    """An image whose NVIDIA_REQUIRE_CUDA refuses the driver is not rescued by the policy
    alone: the fix says what else it takes (the image's gate off), never the policy by itself."""
    from cudasched.vocab.requirecuda import gate_from_env

    gate = gate_from_env({"NVIDIA_REQUIRE_CUDA": "cuda>=12.8"}, "image vllm")
    gated = Requirement(cuda=parse_cuda("12.8"), gate=gate)
    fixes = _fixes(kb, "A100", "535.216.01", gated, "strict")
    assert fixes == {
        "driver-too-old": "needs driver >= 570.26: install R580 >= 580.65.06 (LTSB), or policy "
        "minor-compat with NVIDIA_DISABLE_REQUIRE=true"
    }
    # The same CUDA without the gate: the policy alone does it, and the engine agrees.
    plain = Requirement(cuda=parse_cuda("12.8"))
    fixes = _fixes(kb, "A100", "535.216.01", plain, "strict")
    assert fixes == {
        "driver-too-old": "needs driver >= 570.26: install R580 >= 580.65.06 (LTSB), "
        "or policy minor-compat"
    }
    facts = facts_from_parts("n", gpu="A100", driver="535.216.01", kb=kb)
    assert check(facts, plain, "minor-compat", kb).compatible
    assert not check(facts, gated, "minor-compat", kb).compatible


def test_architecture_and_gpu_fixes(kb: KnowledgeBase) -> None:
    fixes = _fixes(kb, "B200", "535.104.05", Requirement(cuda=parse_cuda("12.2")), "minor-compat")
    assert fixes["arch-too-new"] == "needs an image built with CUDA >= 12.8 (or with PTX)"
    assert fixes["driver-branch-unsupported-gpu"] == (
        "needs driver >= 570.86.15: install R580 >= 580.65.06 (LTSB)"
    )
    low = _fixes(kb, "T4", "580.65.06", Requirement(min_compute=ComputeCapability(8, 0)), "strict")
    assert low == {"compute-capability-too-low": "needs a GPU with compute capability >= 8.0"}


def test_informational_reasons_get_no_fix(kb: KnowledgeBase) -> None:
    facts = facts_from_parts("n", gpu="H100", driver="570.124.06", kb=kb)
    req = Requirement(cuda=parse_cuda("12.8"))
    [native] = check(facts, req, Policy.STRICT, kb).reasons
    assert not native.blocking and fix_for(native, facts, req, "strict", kb) == ""
    assert Reason("driver-too-old", "m").blocking


def test_explain_table_shows_the_fix_apart_from_the_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "220")
    result = CliRunner().invoke(
        app, ["explain", "pod/cuda-smoke-test", "-n", "ml-batch", "--nodes"]
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) > 100  # COLUMNS is followed when piped
    t4 = lines.index(next(line for line in lines if line.strip().startswith("dc1-t4-01 ")))
    # the fix on its own line under the node, apart from how a node runs it
    assert (
        lines[t4 + 1]
        .strip()
        .startswith("driver-too-old: needs driver >= 570.26: install R580 >= 580.65.06 (LTSB)")
    )
    can = lines[lines.index("can run it") + 1 :]
    assert can and all(line.endswith(": native") for line in can if line.startswith("  ip-"))
    wide = CliRunner().invoke(
        app, ["explain", "pod/cuda-smoke-test", "-n", "ml-batch", "-o", "wide"]
    )
    assert "details" in wide.stdout and "score" in wide.stdout


@pytest.mark.parametrize(
    ("gpu", "driver", "cuda", "cap", "image"),
    [
        ("K80", "470.256.02", "12.4", "Kepler GPUs end at R470", "CUDA 11.4 or older"),
        ("V100", "535.216.01", "13.2", "Volta GPUs end at R580", "CUDA 12.9 or older"),
        ("GTX 1080", "535.216.01", "13.2", "Pascal GPUs end at R580", "CUDA 12.9 or older"),
    ],
)
def test_a_driver_a_gpu_cannot_run_is_never_the_fix(
    kb: KnowledgeBase, gpu: str, driver: str, cuda: str, cap: str, image: str
) -> None:
    """Kepler ends at R470, Volta and Pascal at R580: the fix says no driver can, and names
    what can (an image built for a CUDA the last branch runs, or another GPU)."""
    fixes = _fixes(kb, gpu, driver, Requirement(cuda=parse_cuda(cuda)), "strict")
    text = fixes["driver-too-old"]
    assert text.startswith("no driver can: ") and cap in text and image in text
    assert "another GPU" in text


def test_the_remedy_raises_the_floor_to_the_gpus_first_driver(kb: KnowledgeBase) -> None:
    from cudasched.compat.fixes import driver_remedy
    from cudasched.vocab.versions import parse_driver

    b200 = facts_from_parts("n", gpu="B200", driver="550.127.05", kb=kb)
    remedy = driver_remedy(b200, parse_driver("550.54.14"), kb)
    assert str(remedy.driver) == "570.86.15"  # B200's first driver
    k80 = facts_from_parts("n", gpu="K80", driver="470.256.02", kb=kb)
    assert driver_remedy(k80, parse_driver("470.42.01"), kb).driver is not None
    assert driver_remedy(k80, parse_driver("525.60.13"), kb).driver is None


_GPUS = ["K80", "P100", "V100", "GTX 1080", "T4", "A100", "H100", "B200", "RTX 4090"]
_DRIVERS = ["390.157", "470.256.02", "535.216.01", "550.127.05", "570.133.20", "580.65.06"]


@settings(max_examples=80, deadline=None)
@given(
    gpu=st.sampled_from(_GPUS),
    driver=st.sampled_from(_DRIVERS),
    cuda=st.sampled_from(["11.4", "11.8", "12.2", "12.4", "12.8", "13.0", "13.2", "13.4"]),
    policy=st.sampled_from(["strict", "minor-compat", "forward-compat"]),
    gated=st.booleans(),
)
def test_no_fix_names_a_driver_the_gpu_cannot_run(
    kb: KnowledgeBase, gpu: str, driver: str, cuda: str, policy: str, gated: bool
) -> None:
    import re

    from cudasched.compat.branches import drive_problem, gpu_target
    from cudasched.vocab.requirecuda import gate_from_env
    from cudasched.vocab.versions import parse_driver

    gate = gate_from_env({"NVIDIA_REQUIRE_CUDA": f"cuda>={cuda}"}, "image") if gated else None
    req = Requirement(cuda=parse_cuda(cuda), gate=gate)
    facts = facts_from_parts("n", gpu=gpu, driver=driver, kb=kb)
    target = gpu_target(kb, facts)
    assert target is not None
    fixes = [
        r.fix for r in with_fixes(check(facts, req, policy, kb).reasons, facts, req, policy, kb)
    ]
    offered = [m for fix in fixes for m in re.findall(r"needs driver >= ([0-9.]+)", fix)]
    for text in offered:
        assert drive_problem(target, parse_driver(text)) is None, (gpu, text, fixes)
