"""CUDA-aware DeviceClasses: the guard comes first and lets no passthrough, MIG or foreign
device reach a version comparison, the rest are the claim template's selectors (the same
compiler as the node affinity), the object is valid Kubernetes 1.37 and its name is a valid
extended resource name part; ``cudasched device-classes`` prints them."""

from __future__ import annotations

import json
import re
from typing import Any

import kubernetes_validate
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cudasched.cli import app
from cudasched.knowledge import KnowledgeBase
from cudasched.placement.deviceclass import (
    GPU_SELECTOR,
    MAX_CLASS_NAME,
    class_name,
    device_class,
)
from cudasched.placement.dra import claim_template
from cudasched.vocab.errors import InputError
from cudasched.vocab.requirecuda import gate_from_env
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.vocab.versions import (
    ComputeCapability,
    CudaVersion,
    parse_compute_capability,
    parse_cuda,
)
from tests.support.dracel import attributes, device, selects

H100_570 = attributes("570.124.06", CudaVersion(12, 8), ComputeCapability(9, 0))
H100_550 = attributes("550.90.07", CudaVersion(12, 4), ComputeCapability(9, 0))


def _expressions(obj: dict[str, Any]) -> list[str]:
    return [s["cel"]["expression"] for s in obj["spec"]["selectors"]]


def _class(kb: KnowledgeBase, cuda: str, policy: Policy = Policy.STRICT, **kw: Any) -> Any:
    return device_class(Requirement(cuda=parse_cuda(cuda), source="test", **kw), policy, kb)


def test_the_first_selector_is_a_full_gpu_of_nvidias_driver(kb: KnowledgeBase) -> None:
    obj = _class(kb, "12.8").obj
    assert obj["apiVersion"] == "resource.k8s.io/v1" and obj["kind"] == "DeviceClass"
    assert _expressions(obj)[0] == GPU_SELECTOR
    assert GPU_SELECTOR.startswith('device.driver == "gpu.nvidia.com" && ')
    assert "extendedResourceName" not in obj["spec"]
    assert selects(_expressions(obj), device(**H100_570))
    assert not selects(_expressions(obj), device(**H100_550))


@pytest.mark.parametrize(
    "dev",
    [
        device(kind="vfio"),  # passthrough: no CUDA attributes (deviceinfo.go)
        device(kind="vfio", **H100_570),  # even if a driver published them one day
        device(kind="mig", **H100_570),  # MIG slices mirror the parent's versions
        device(kind=None, **H100_570),  # no type at all
        device(driver="gpu.example.com", **H100_570),  # another driver's device
    ],
    ids=["vfio", "vfio-with-versions", "mig", "no-type", "other-driver"],
)
def test_no_device_but_a_full_gpu_matches_and_none_is_an_error(
    kb: KnowledgeBase, dev: dict[str, Any]
) -> None:
    classes = [_class(kb, "12.4", policy).obj for policy in (Policy.STRICT, Policy.MINOR_COMPAT)]
    assert [selects(_expressions(obj), dev) for obj in classes] == [False, False]


@settings(max_examples=40, deadline=None)
@given(
    cuda=st.sampled_from(["11.8", "12.0", "12.4", "12.8", "13.0"]),
    policy=st.sampled_from(list(Policy)),
    cc=st.sampled_from([None, "7.5", "8.0", "9.0"]),
)
def test_the_class_is_the_guard_and_the_claims_selectors(
    cuda: str, policy: Policy, cc: str | None
) -> None:
    """The rules are the claim template's, which tests/placement/test_dra.py checks against
    the engine GPU by GPU: a class may not drift from them."""
    kb = KnowledgeBase.load()
    min_cc = parse_compute_capability(cc) if cc else None
    req = Requirement(cuda=parse_cuda(cuda), min_compute=min_cc, ships_cuda_compat=True)
    try:
        draft = device_class(req, policy, kb)
    except InputError:
        with pytest.raises(InputError):
            claim_template(req, policy, kb)
        return
    claim = claim_template(req, policy, kb)
    [request] = claim.obj["spec"]["spec"]["devices"]["requests"]
    claimed = [s["cel"]["expression"] for s in request["exactly"].get("selectors", [])]
    assert _expressions(draft.obj) == [GPU_SELECTOR, *claimed]
    assert draft.dropped_forward_compat == claim.dropped_forward_compat


@pytest.mark.parametrize("policy", list(Policy))
def test_the_class_is_valid_kubernetes_1_37(policy: Policy, kb: KnowledgeBase) -> None:
    req = Requirement(cuda=parse_cuda("12.4"), min_compute=parse_compute_capability("8.0"))
    draft = device_class(req, policy, kb, extended_resource_name="example.com/cuda-12-4")
    kubernetes_validate.validate(draft.obj, "1.37", strict=True)
    broken = json.loads(json.dumps(draft.obj))
    broken["spec"]["selector"] = broken["spec"].pop("selectors")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, "1.37", strict=True)


_QUALIFIED_NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def test_names_say_the_requirement_and_policy_and_fit_a_resource_name(
    kb: KnowledgeBase,
) -> None:
    torch = kb.framework("torch 2.5.1+cu124")
    cases = {
        class_name(Requirement(cuda=parse_cuda("12.8")), Policy.STRICT): (
            "gpu-cuda-12-8.cudasched.io"
        ),
        class_name(Requirement(cuda=parse_cuda("12.4")), Policy.MINOR_COMPAT): (
            "gpu-cuda-12-4-minor-compat.cudasched.io"
        ),
        class_name(
            Requirement(cuda=parse_cuda("13.0"), min_compute=parse_compute_capability("9.0")),
            Policy.STRICT,
        ): "gpu-cuda-13-0-cc-9-0.cudasched.io",
        class_name(Requirement(framework=torch), Policy.STRICT): (
            "gpu-cuda-12-4-torch-2-5-1-cu124.cudasched.io"
        ),
    }
    assert list(cases) == list(cases.values())
    long = class_name(
        Requirement(
            cuda=parse_cuda("12.4"),
            min_compute=parse_compute_capability("8.0"),
            framework=torch,
        ),
        Policy.FORWARD_COMPAT,
    )
    assert len(long) <= MAX_CLASS_NAME and long.endswith(".cudasched.io")
    assert _QUALIFIED_NAME_PART.match(long)


def test_a_gate_names_the_class_only_when_it_selects_other_devices(kb: KnowledgeBase) -> None:
    repeats = gate_from_env({"NVIDIA_REQUIRE_CUDA": "cuda>=12.8"}, "test")
    narrows = gate_from_env({"NVIDIA_REQUIRE_CUDA": "cuda>=12.4 driver>=575"}, "test")
    assert repeats is not None and narrows is not None
    assert _class(kb, "12.8", gate=repeats).name == "gpu-cuda-12-8.cudasched.io"
    plain = _class(kb, "12.4", Policy.MINOR_COMPAT)
    gated = _class(kb, "12.4", Policy.MINOR_COMPAT, gate=narrows)
    assert _expressions(gated.obj) != _expressions(plain.obj)
    assert gated.name.startswith("gpu-cuda-12-4-minor-compat-gate-")
    assert gated.name.endswith(".cudasched.io") and len(gated.name) <= MAX_CLASS_NAME


def test_a_bad_name_is_refused(kb: KnowledgeBase) -> None:
    req = Requirement(cuda=parse_cuda("12.8"))
    with pytest.raises(InputError, match="at most 63"):
        device_class(req, Policy.STRICT, kb, name="x" * 64)
    with pytest.raises(InputError, match="DNS subdomain"):
        device_class(req, Policy.STRICT, kb, name="Bad_Name")


# ------------------------------------------------------------------ the command


def test_cli_prints_one_class_per_requirement_of_the_sample() -> None:
    done = CliRunner().invoke(app, ["device-classes"])
    assert done.exit_code == 0, done.output
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    names = [d["metadata"]["name"] for d in docs]
    assert "gpu-cuda-12-8.cudasched.io" in names and len(names) == len(set(names))
    assert {d["kind"] for d in docs} == {"DeviceClass"}
    assert "# serves: InferenceService/team-nlp/qwen2-7b" in done.stdout
    assert "# requests: deviceclass.resource.kubernetes.io/gpu-cuda-12-8.cudasched.io" in (
        done.stdout
    )


def test_cli_json_lists_the_workloads_each_class_serves() -> None:
    done = CliRunner().invoke(app, ["device-classes", "-o", "json"])
    assert done.exit_code == 0, done.output
    doc = json.loads(done.stdout)
    by_name = {c["name"]: c for c in doc["deviceClasses"]}
    entry = by_name["gpu-cuda-12-8.cudasched.io"]
    assert "InferenceService/team-nlp/qwen2-7b" in entry["workloads"]
    assert entry["extendedResource"].startswith("deviceclass.resource.kubernetes.io/")
    assert entry["object"]["spec"]["selectors"][0]["cel"]["expression"] == GPU_SELECTOR


def test_cli_one_class_from_the_command_line() -> None:
    done = CliRunner().invoke(
        app,
        [
            "device-classes",
            "--cuda",
            "12.8",
            "--policy",
            "minor-compat",
            "--extended-resource-name",
            "example.com/gpu-cuda-12-8",
        ],
    )
    assert done.exit_code == 0, done.output
    [obj] = [d for d in yaml.safe_load_all(done.stdout) if d]
    assert obj["metadata"]["name"] == "gpu-cuda-12-8-minor-compat.cudasched.io"
    assert obj["spec"]["extendedResourceName"] == "example.com/gpu-cuda-12-8"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--name", "x.cudasched.io"], "give --cuda or --framework"),
        (["--cuda", "12.8", "--name", "Bad_Name"], "invalid device class name"),
        (["--cuda", "banana"], "banana"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(args: list[str], fragment: str) -> None:
    done = CliRunner().invoke(app, ["device-classes", *args])
    assert done.exit_code == 2
    assert fragment in done.stderr and len(done.stderr.strip().splitlines()) == 1
