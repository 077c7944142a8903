"""``explain`` device by device on a DRA cluster: which GPUs of NVIDIA's ResourceSlices the
workload's CUDA-aware class admits (exactly what the class's CEL selects), and why each other
one is refused; the node explanation of a cluster without ResourceSlices is unchanged."""

from __future__ import annotations

import json
from typing import Any

from typer.testing import CliRunner

from cudasched.cli import app
from cudasched.explain.devices import explain_devices, nvidia_slices
from cudasched.knowledge import KnowledgeBase
from cudasched.placement.deviceclass import device_class
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.vocab.versions import parse_compute_capability, parse_cuda
from tests.support.dracel import device, selects

H100 = "NVIDIA H100 80GB HBM3"


def _gpu(name: str, driver: str, cuda: str, cc: str, product: str = H100) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {
            "type": {"string": "gpu"},
            "productName": {"string": product},
            "driverVersion": {"version": driver},
            "cudaDriverVersion": {"version": cuda},
            "cudaComputeCapability": {"version": cc},
        },
    }


def _typed(name: str, kind: str) -> dict[str, Any]:
    return {"name": name, "attributes": {"type": {"string": kind}}}


def _slice(node: str, devices: list[dict[str, Any]], driver: str = "gpu.nvidia.com") -> Any:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver}"},
        "spec": {"driver": driver, "nodeName": node, "pool": {"name": node}, "devices": devices},
    }


SLICES = [
    _slice(
        "h100-a",
        [
            _gpu("gpu-0", "570.124.6", "12.8.0", "9.0.0"),
            _typed("gpu-vfio-1", "vfio"),
            {"name": "gpu-2", "attributes": {"type": {"string": "gpu"}}},
        ],
    ),
    _slice("h100-b", [_gpu("gpu-0", "550.90.7", "12.4.0", "9.0.0")]),
    _slice(
        "a100-a",
        [
            _gpu("gpu-0", "570.124.6", "12.8.0", "8.0.0", "NVIDIA A100-SXM4-80GB"),
            _typed("mig-0", "mig"),
            _typed("odd-0", "nvlink"),
        ],
    ),
    _slice("nic-a", [_typed("eth-0", "gpu")], driver="net.example.com"),
]


def _req(cuda: str, cc: str | None = None, **kw: Any) -> Requirement:
    min_compute = parse_compute_capability(cc) if cc else None
    return Requirement(cuda=parse_cuda(cuda), min_compute=min_compute, source="test", **kw)


def _codes(exp: Any) -> dict[str, list[str]]:
    return {d.where: [r.code for r in d.reasons if r.blocking] for d in exp.devices}


def test_each_device_is_admitted_or_refused_with_its_reason(kb: KnowledgeBase) -> None:
    exp = explain_devices(_req("12.8", "9.0"), Policy.STRICT, kb, SLICES)
    assert exp.device_class == "gpu-cuda-12-8-cc-9-0.cudasched.io"
    assert [d.where for d in exp.devices if d.admitted] == ["h100-a/h100-a/gpu-0"]
    assert exp.admitted_count == 1 and len(exp.devices) == 7  # the NIC's driver is not judged
    assert _codes(exp) == {
        "h100-a/h100-a/gpu-0": [],
        "h100-a/h100-a/gpu-vfio-1": ["dra-device-vfio"],
        "h100-a/h100-a/gpu-2": ["dra-device-without-cuda-attributes"],
        "h100-b/h100-b/gpu-0": ["driver-too-old"],
        "a100-a/a100-a/gpu-0": ["compute-capability-too-low"],
        "a100-a/a100-a/mig-0": ["dra-device-mig"],
        "a100-a/a100-a/odd-0": ["dra-device-not-a-gpu"],
    }
    too_old = next(d for d in exp.devices if d.where == "h100-b/h100-b/gpu-0")
    assert too_old.facts.startswith("driver 550.90.07, CUDA 12.4, cc 9.0")
    assert "570.26" in too_old.reasons[0].fix  # the engine's fix, as for a node


def test_admitted_is_what_the_class_selectors_select(kb: KnowledgeBase) -> None:
    """The device view and the class the allocator evaluates agree, device by device."""
    answers: dict[str, bool] = {}
    chosen: dict[str, bool] = {}
    for req, policy in ((_req("12.8"), Policy.STRICT), (_req("12.8"), Policy.MINOR_COMPAT)):
        exp = explain_devices(req, policy, kb, SLICES)
        expressions = [
            s["cel"]["expression"] for s in device_class(req, policy, kb).obj["spec"]["selectors"]
        ]
        for spec in (s["spec"] for s in nvidia_slices(SLICES)):
            for dev in spec["devices"]:
                attrs = dev["attributes"]
                versions = {k: v["version"] for k, v in attrs.items() if "version" in v}
                cel = device(kind=attrs["type"]["string"], **versions)
                chosen[f"{policy}/{spec['nodeName']}/{dev['name']}"] = selects(expressions, cel)
        answers |= {f"{policy}/{d.node}/{d.device}": d.admitted for d in exp.devices}
    assert answers == chosen
    assert answers["minor-compat/h100-b/gpu-0"] and not answers["strict/h100-b/gpu-0"]


def test_forward_compat_the_class_cannot_say_is_named(kb: KnowledgeBase) -> None:
    """CUDA 13.0 on R535 runs on an L4 only by forward compatibility (a data-center part), which
    no DRA attribute says: the engine accepts the device, the class leaves it out."""
    l4 = _slice("l4-a", [_gpu("gpu-0", "535.230.2", "12.2.0", "8.9.0", "NVIDIA L4")])
    req = _req("13.0", ships_cuda_compat=True)
    exp = explain_devices(req, Policy.FORWARD_COMPAT, kb, [l4])
    [answer] = exp.devices
    assert exp.dropped_forward_compat and not answer.admitted
    assert [r.code for r in answer.reasons] == ["dra-class-stricter"]
    assert "forward-compat" in answer.reasons[0].message


def test_a_requirement_no_gpu_meets_has_no_class_and_refuses_every_device(
    kb: KnowledgeBase,
) -> None:
    exp = explain_devices(_req("12.8", "13.5"), Policy.STRICT, kb, SLICES)
    assert exp.device_class is None and exp.error and "no GPU can run" in exp.error
    assert exp.admitted_count == 0
    assert {code for codes in _codes(exp).values() for code in codes} == {"dra-no-class"}


# ------------------------------------------------------------------ the command

EXAMPLE = "examples/dra-cluster.yaml"


def _explain(*args: str) -> Any:
    result = CliRunner().invoke(app, ["explain", *args])
    assert result.exit_code == 0, result.output
    return result.stdout  # the notes (stderr) are not the answer


def test_explain_on_a_dra_cluster_adds_the_devices(kb: KnowledgeBase) -> None:
    text = _explain("--cluster", EXAMPLE, "pod/llm-cu128", "-n", "serving")
    assert "DRA devices: 2 of 6 admitted by class gpu-cuda-12-8-cc-9-0.cudasched.io" in text
    assert "h100-b/h100-b/gpu-0: driver 550.90.07" in text
    doc = json.loads(_explain("--cluster", EXAMPLE, "pod/llm-cu128", "-n", "serving", "-o", "json"))
    admitted = [f"{d['node']}/{d['device']}" for d in doc["devices"]["devices"] if d["admitted"]]
    assert admitted == ["h100-a/gpu-0", "h100-a/gpu-1"]
    assert [n["node"] for n in doc["nodes"] if n["eligible"]] == ["h100-a"]


def test_a_workload_file_is_judged_against_the_clusters_devices(tmp_path: Any) -> None:
    """``--workload`` joins the cluster's objects: its ResourceSlices stay."""
    pod = tmp_path / "pod.yaml"
    pod.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations:\n"
        "    cudasched.io/cuda-version: '12.4'\nspec:\n  containers:\n  - name: c\n"
        "    image: busybox\n"
    )
    doc = json.loads(_explain("--cluster", EXAMPLE, "--workload", str(pod), "-o", "json"))
    assert doc["devices"]["admitted"] == 4  # every full GPU with its versions runs CUDA 12.4


def test_a_cluster_without_resource_slices_gets_no_device_view() -> None:
    text = _explain("--cluster", "examples/clusters/eks.yaml")
    doc = json.loads(_explain("--cluster", "examples/clusters/eks.yaml", "-o", "json"))
    assert "DRA devices" not in text
    assert all("devices" not in w for w in doc["workloads"])
