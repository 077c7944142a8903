"""What would fix a blocking reason, and how explain shows it: blocking reasons with their
fix, the way a node runs the workload apart, the terminal's width (``COLUMNS`` when piped)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from cudasched.cli import app
from cudasched.compat.engine import Reason, check
from cudasched.compat.fixes import fix_for, with_fixes
from cudasched.knowledge import KnowledgeBase
from cudasched.nodes.facts import facts_from_parts
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.vocab.versions import ComputeCapability, parse_cuda


def _fixes(kb: KnowledgeBase, gpu: str, driver: str, req: Requirement, policy: str) -> dict:
    facts = facts_from_parts("n", gpu=gpu, driver=driver, kb=kb)
    verdict = check(facts, req, policy, kb)
    return {r.code: r.fix for r in with_fixes(verdict.reasons, facts, req, policy, kb)}


def test_a_driver_too_old_names_the_driver_and_branch(kb: KnowledgeBase) -> None:
    fixes = _fixes(kb, "T4", "535.104.05", Requirement(cuda=parse_cuda("12.4")), "strict")
    assert fixes == {"driver-too-old": "needs driver >= 550.54.14 (R550), or policy minor-compat"}
    # Below the minor-compat floor, the policy would not help: it is not offered.
    old = _fixes(kb, "T4", "470.256.02", Requirement(cuda=parse_cuda("12.4")), "strict")
    assert old == {"driver-too-old": "needs driver >= 550.54.14 (R550)"}


def test_minor_compat_is_offered_only_where_the_engine_would_then_admit(kb: KnowledgeBase) -> None:
    """An image whose NVIDIA_REQUIRE_CUDA refuses the driver is not rescued by the policy
    alone: the fix says what else it takes (the image's gate off), never the policy by itself."""
    from cudasched.vocab.requirecuda import gate_from_env

    gate = gate_from_env({"NVIDIA_REQUIRE_CUDA": "cuda>=12.8"}, "image vllm")
    gated = Requirement(cuda=parse_cuda("12.8"), gate=gate)
    fixes = _fixes(kb, "A100", "535.216.01", gated, "strict")
    assert fixes == {
        "driver-too-old": "needs driver >= 570.26 (R570), or policy minor-compat with "
        "NVIDIA_DISABLE_REQUIRE=true"
    }
    # The same CUDA without the gate: the policy alone does it, and the engine agrees.
    plain = Requirement(cuda=parse_cuda("12.8"))
    fixes = _fixes(kb, "A100", "535.216.01", plain, "strict")
    assert fixes == {"driver-too-old": "needs driver >= 570.26 (R570), or policy minor-compat"}
    facts = facts_from_parts("n", gpu="A100", driver="535.216.01", kb=kb)
    assert check(facts, plain, "minor-compat", kb).compatible
    assert not check(facts, gated, "minor-compat", kb).compatible


def test_architecture_and_gpu_fixes(kb: KnowledgeBase) -> None:
    fixes = _fixes(kb, "B200", "535.104.05", Requirement(cuda=parse_cuda("12.2")), "minor-compat")
    assert fixes["arch-too-new"] == "needs an image built with CUDA >= 12.8 (or with PTX)"
    assert fixes["driver-branch-unsupported-gpu"] == "needs driver >= 570.86.15 (R570)"
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
    result = CliRunner().invoke(app, ["explain", "pod/cuda-smoke-test", "-n", "ml-batch"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) > 120  # COLUMNS is followed when piped
    assert "runs as" in result.stdout and "why not, and the fix" in result.stdout
    t4 = next(line for line in lines if "dc1-t4-01" in line)
    assert "driver-too-old: needs driver >= 570.26 (R570)" in t4
    ok = next(line for line in lines if " yes " in line)
    assert "native" in ok
    wide = CliRunner().invoke(
        app, ["explain", "pod/cuda-smoke-test", "-n", "ml-batch", "-o", "wide"]
    )
    assert "details" in wide.stdout and "score" in wide.stdout
