"""DRA output: every CEL selector compiles and runs in a CEL interpreter (cel-python, as for the
webhook's matchConditions), selects exactly the GPUs the engine accepts under strict and
minor-compat (and never one it rejects under forward-compat), and the ResourceClaimTemplate is
valid against the Kubernetes 1.34 schema, the first release with ``resource.k8s.io/v1``.

Kubernetes' semver CEL library is not part of cel-python: ``tests/support/dracel`` stands in for
it with semver.org's strict grammar, so a literal such as ``570.124.06`` or ``12.8`` fails here
too.
"""

from __future__ import annotations

import json
import re
from typing import Any

import kubernetes_validate
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cudasched.cli import app
from cudasched.compat.engine import check
from cudasched.knowledge import KnowledgeBase
from cudasched.nodes.autoscaling import template_labels
from cudasched.nodes.facts import facts_from_labels
from cudasched.placement.compile import compile_requirement
from cudasched.placement.dra import (
    MAX_EXPRESSION,
    claim_template,
    compiled_selectors,
    selectors,
    semver_parts,
)
from cudasched.vocab.errors import InputError
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.vocab.versions import (
    ComputeCapability,
    CudaVersion,
    parse_compute_capability,
    parse_cuda,
    parse_driver,
)
from tests.support.dracel import SEMVER, attributes, device, selects


def _expressions(claim: dict[str, Any]) -> list[str]:
    [request] = claim["spec"]["spec"]["devices"]["requests"]
    return [s["cel"]["expression"] for s in request["exactly"].get("selectors", [])]


def _selects(claim: dict[str, Any], dev: dict[str, Any]) -> bool:
    return selects(_expressions(claim), dev)


def _claim(kb: KnowledgeBase, cuda: str, policy: str = "strict", **kw: Any) -> dict[str, Any]:
    req = Requirement(cuda=parse_cuda(cuda), source="test", **kw)
    return claim_template(req, Policy(policy), kb).obj


# ------------------------------------------------------------------ the issue's expression


def test_strict_selects_on_the_drivers_cuda_version_as_the_issue_writes_it(
    kb: KnowledgeBase,
) -> None:
    claim = _claim(kb, "12.8")
    [request] = claim["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "gpu.nvidia.com"
    first = _expressions(claim)[0]
    assert first == (
        'has(device.attributes["gpu.nvidia.com"].cudaDriverVersion) && '
        'device.attributes["gpu.nvidia.com"].cudaDriverVersion.compareTo(semver("12.8.0")) >= 0'
    )
    h100_570 = device(**attributes("570.124.06", CudaVersion(12, 8), ComputeCapability(9, 0)))
    h100_550 = device(**attributes("550.90.07", CudaVersion(12, 4), ComputeCapability(9, 0)))
    assert _selects(claim, h100_570)
    assert not _selects(claim, h100_550)


def test_a_compute_capability_floor_is_a_bound_on_cuda_compute_capability(
    kb: KnowledgeBase,
) -> None:
    claim = _claim(kb, "12.4", min_compute=parse_compute_capability("8.0"))
    assert any(
        'cudaComputeCapability.compareTo(semver("8.0.0")) >= 0' in e for e in _expressions(claim)
    )
    t4 = device(**attributes("570.124.06", CudaVersion(12, 8), ComputeCapability(7, 5)))
    a100 = device(**attributes("570.124.06", CudaVersion(12, 8), ComputeCapability(8, 0)))
    assert not _selects(claim, t4)
    assert _selects(claim, a100)


def test_minor_compat_admits_an_older_driver_above_the_majors_floor(kb: KnowledgeBase) -> None:
    """The engine's minor-compat rule is a *driver* floor (12.x: 525.60.13), so the claim
    compares driverVersion with it: R550 (CUDA 12.4) runs a 12.8 build, 525.60.11 does not."""
    claim = _claim(kb, "12.8", "minor-compat")
    assert any(
        'driverVersion.compareTo(semver("525.60.13")) >= 0' in e for e in _expressions(claim)
    )
    r550 = device(**attributes("550.90.07", CudaVersion(12, 4), ComputeCapability(9, 0)))
    below = device(**attributes("525.60.11", CudaVersion(12, 0), ComputeCapability(9, 0)))
    assert _selects(claim, r550)
    assert not _selects(claim, below)
    assert not _selects(_claim(kb, "12.8"), r550)


def test_a_gpu_without_the_attributes_is_skipped_not_an_error(kb: KnowledgeBase) -> None:
    claim = _claim(kb, "12.8", "minor-compat")
    assert not _selects(claim, device())
    assert not _selects(claim, device(cudaDriverVersion="12.8.0"))


def test_every_literal_is_full_semver_and_every_has_reads_a_field(kb: KnowledgeBase) -> None:
    """cel-go's has() takes a field selection only (has(m["k"]) does not compile)."""
    seen = {"expressions": 0, "literals": 0, "fields": 0}
    for cuda in ("11.8", "12.0", "12.8", "13.0"):
        for policy in Policy:
            claim = _claim(kb, cuda, policy.value, ships_cuda_compat=True)
            for expression in _expressions(claim):
                for literal in re.findall(r'semver\("([^"]*)"\)', expression):
                    assert SEMVER.match(literal), literal
                    seen["literals"] += 1
                for arg in re.findall(r"has\(([^()]*)\)", expression):
                    assert re.fullmatch(r'device\.attributes\["gpu\.nvidia\.com"\]\.\w+', arg)
                    seen["fields"] += 1
                assert len(expression) <= MAX_EXPRESSION
                seen["expressions"] += 1
    # 4 CUDA versions x 3 policies, each claim with selectors that compare versions
    assert seen["expressions"] >= 12 and seen["literals"] >= 24 and seen["fields"] >= 12, seen


# ------------------------------------------------------------------ the engine's answer


def _boards_and_drivers(kb: KnowledgeBase) -> tuple[list[str], list[str]]:
    boards = sorted({info.names[0] for info in kb.gpus() if info.names})
    drivers = sorted(
        {str(r.effective_min_driver) for r in kb.toolkits() if r.effective_min_driver}
        | {"470.256.02", "535.104.05", "580.95.05", "590.44.01", "610.43.02"}
    )
    return boards, [d for d in drivers if kb.max_cuda_for_driver(parse_driver(d))]


def _cudas(kb: KnowledgeBase) -> list[str]:
    return sorted(
        {str(t.cuda.release) for t in kb.toolkits() if t.cuda.major >= 11},
        key=lambda v: tuple(map(int, v.split("."))),
    )


@settings(max_examples=150)
@given(data=st.data(), policy=st.sampled_from(list(Policy)), compat=st.booleans())
def test_the_claim_selects_exactly_the_gpus_the_engine_accepts(
    data: st.DataObject, policy: Policy, compat: bool
) -> None:
    kb = KnowledgeBase.load()
    boards, drivers = _boards_and_drivers(kb)
    board = data.draw(st.sampled_from(boards), label="gpu")
    driver = data.draw(st.sampled_from(drivers), label="driver")
    cuda = data.draw(st.sampled_from(_cudas(kb)), label="cuda")
    req = Requirement(cuda=parse_cuda(cuda), ships_cuda_compat=compat, source="test")
    try:
        claim = claim_template(req, policy, kb).obj
    except InputError:
        return  # no GPU can run it: affinity refuses it the same way
    info = kb.gpu(board)
    if info is not None and info.first_driver is not None:
        # A driver older than the first one that lists the GPU cannot drive it: such a GPU is
        # never published (by the DRA driver or by node labels), so no selector sees it.
        assume(parse_driver(driver) >= info.first_driver)
    node = facts_from_labels("n", template_labels(board, driver, kb), kb)
    engine = check(node, req, policy, kb)
    gpu = device(**attributes(driver, node.cuda, info.compute))
    selected = _selects(claim, gpu)
    if policy is Policy.FORWARD_COMPAT and compat:
        assert not selected or engine.compatible  # stricter: forward compat is left out
        if "forward-compat" not in engine.codes:
            assert selected == engine.compatible
    else:
        assert selected == engine.compatible, (board, driver, cuda, engine.codes)


@settings(max_examples=200)
@given(
    data=st.data(),
    policy=st.sampled_from(list(Policy)),
    dropped=st.sets(
        st.sampled_from(["driverVersion", "cudaDriverVersion", "cudaComputeCapability"])
    ),
)
def test_admits_says_what_the_selectors_say_of_every_device(
    data: st.DataObject, policy: Policy, dropped: set[str]
) -> None:
    """``explain`` judges devices with :meth:`CompiledSelectors.admits`, the selectors' tests as
    data: on any device, present attributes or not, it answers as the CEL does."""
    kb = KnowledgeBase.load()
    boards, drivers = _boards_and_drivers(kb)
    info = kb.gpu(data.draw(st.sampled_from(boards), label="gpu"))
    driver = data.draw(st.sampled_from(drivers), label="driver")
    cuda = data.draw(st.sampled_from(_cudas(kb)), label="cuda")
    req = Requirement(cuda=parse_cuda(cuda), source="test")
    try:
        compiled = compiled_selectors(req, policy, kb)
    except InputError:
        return
    assert info is not None
    published = attributes(driver, kb.max_cuda_for_driver(parse_driver(driver)), info.compute)
    kept = {k: v for k, v in published.items() if k not in dropped}
    versions = {k: semver_parts(v) for k, v in kept.items()}
    assert compiled.admits(versions) == selects(list(compiled.expressions), device(**kept))


def test_semver_parts_reads_three_numbers_and_refuses_the_rest() -> None:
    assert semver_parts("570.124.6") == (570, 124, 6)
    assert semver_parts("12.8.0-rc.1") == (12, 8, 0)
    with pytest.raises(ValueError, match="not a semantic version"):
        semver_parts("12.8")


# ------------------------------------------------------------------ the object


@pytest.mark.parametrize("policy", list(Policy))
def test_the_claim_template_is_valid_kubernetes_1_34(policy: Policy, kb: KnowledgeBase) -> None:
    claim = _claim(kb, "12.4", policy.value, min_compute=parse_compute_capability("8.0"))
    kubernetes_validate.validate(claim, "1.34", strict=True)


def test_schema_validation_can_fail(kb: KnowledgeBase) -> None:
    claim = json.loads(json.dumps(_claim(kb, "12.8")))
    claim["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selector"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(claim, "1.34", strict=True)


def test_selectors_refuse_an_expression_they_cannot_translate() -> None:
    with pytest.raises(ValueError, match="no DRA attribute"):
        selectors(
            [
                {
                    "matchExpressions": [
                        {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["1"]}
                    ]
                }
            ]
        )


def test_forward_compat_terms_are_left_out_and_reported(kb: KnowledgeBase) -> None:
    # 13.0's forward-compat branches (R535, R570) lie below the 13.x minor-compat floor, so
    # they are alternatives of their own (for 12.8 minor-compat already covers R535).
    req = Requirement(cuda=parse_cuda("13.0"), ships_cuda_compat=True)
    terms = compile_requirement(req, Policy.FORWARD_COMPAT, "cudasched", kb)
    assert any("gpu.datacenter" in json.dumps(t) for t in terms)
    _, dropped = selectors(terms)
    assert dropped
    assert not claim_template(req, Policy.STRICT, kb).dropped_forward_compat


# ------------------------------------------------------------------ the command


def test_cli_prints_the_claim_template(kb: KnowledgeBase) -> None:
    result = CliRunner().invoke(app, ["affinity", "--cuda", "12.8", "--dra", "-o", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == _claim(kb, "12.8") | {
        "metadata": {
            "name": "gpu-cuda-12-8",
            "annotations": {"cudasched.io/requirement": "cuda>=12.8 (command line)"},
        }
    }
    named = CliRunner().invoke(app, ["affinity", "--cuda", "12.8", "--dra", "--name", "llm"])
    assert named.exit_code == 0 and "name: llm\n" in named.stdout


def test_cli_warns_when_forward_compat_is_left_out() -> None:
    result = CliRunner().invoke(
        app,
        [
            "affinity",
            "--cuda",
            "13.0",
            "--dra",
            "--policy",
            "forward-compat",
            "--ships-cuda-compat",
        ],
    )
    assert result.exit_code == 0
    assert "forward-compat alternatives are not expressible" in result.stderr


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--cuda", "12.8", "--dra", "--scheme", "gfd"], "drop --scheme"),
        (["--cuda", "12.8", "--dra", "--mode", "preferred"], "drop --mode"),
        (["--cuda", "12.8", "--name", "x"], "needs --dra"),
        (["--cuda", "12.8", "--dra", "--name", "Not_A_Name"], "'Not_A_Name'"),
        (["--cuda", "99.1", "--dra"], "unknown CUDA toolkit 99.1"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(args: list[str], fragment: str) -> None:
    result = CliRunner().invoke(app, ["affinity", *args])
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("cudasched: error: ") and fragment in line


@pytest.mark.parametrize("name", ["gpu\n", "GPU", "-gpu", "a" * 254])
def test_a_claim_template_name_that_is_not_a_dns_subdomain_is_refused(
    kb: KnowledgeBase, name: str
) -> None:
    """``gpu\\n`` once passed (``re.match`` with ``$`` matches before a final newline) into
    the template's ``metadata.name``."""
    req = Requirement(cuda=parse_cuda("12.4"))
    with pytest.raises(InputError, match="invalid claim template name"):
        claim_template(req, Policy.STRICT, kb, name=name)
