"""``operations.drivers.runbook``: the rollout script of a plan works with the GPU Operator's
controllers: per wave cordon, drain GPU pods through the Eviction API, label, create or touch the
object, wait for owner, driver pod, driver version, GPUs and the object's ready state, uncordon;
valid bash."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from cudasched.cluster.fleet import Fleet
from cudasched.cluster.snapshot import ClusterSnapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.images import ImageTable
from cudasched.operations.drivers.plan import DriverPlan
from cudasched.operations.drivers.planning import plan_drivers
from cudasched.operations.drivers.runbook import GPU_PODS_JQ, render_script
from tests.support.planning_cluster import OPERATOR_DRIVER, cluster, gpu_node, runtime

TODAY = date(2026, 12, 1)


def _cluster(extra: tuple[dict[str, Any], ...] = ()) -> ClusterSnapshot:
    """Three T4 nodes on R550 and one A100 on R535, all the operator's, for CUDA 13.0."""
    return cluster(
        *(gpu_node(f"t4-{i}", "Tesla-T4", "550.90.07", extra=OPERATOR_DRIVER) for i in range(3)),
        gpu_node("a100-0", "NVIDIA-A100-SXM4-80GB", "535.216.01", extra=OPERATOR_DRIVER),
        runtime("vllm-13", "13.0"),
        *extra,
    )


def _plan(kb: KnowledgeBase, release: str = "26.7", **options: Any) -> DriverPlan:
    snapshot = options.pop("snapshot", None) or _cluster()
    return plan_drivers(
        snapshot,
        Fleet.from_snapshot(snapshot, kb),
        ImageTable.builtin(kb),
        today=TODAY,
        operator=kb.operator.version(release),
        **options,
    )


def _waves(script: str) -> list[list[str]]:
    """The script's lines, wave by wave (the preamble dropped)."""
    out: list[list[str]] = []
    for line in script.splitlines():
        if line.startswith("# ---- wave ") or line.startswith("# ----"):
            out.append([])
        elif out:
            out[-1].append(line)
    return out


def _first(lines: list[str], needle: str) -> int:
    return next(i for i, line in enumerate(lines) if needle in line)


def test_each_wave_works_with_the_operators_controllers(kb: KnowledgeBase) -> None:
    plan = _plan(kb, max_unavailable=2)
    script = render_script(plan, "test cluster")
    waves = _waves(script)
    assert len(waves) == len(plan.waves) == 2
    for lines in waves:
        order = [
            _first(lines, "kubectl cordon"),
            _first(lines, "drain_gpu_pods"),
            _first(lines, "kubectl label node"),
            _first(lines, "wait_for 'owner of"),
            _first(lines, "wait_for 'driver pod on"),
            _first(lines, "wait_for 'driver on"),
            _first(lines, "wait_for 'GPUs on"),
            _first(lines, "kubectl wait nvidiadriver/"),
            _first(lines, "kubectl uncordon"),
        ]
        assert order == sorted(order), lines
    # The T4 object is created in its first wave and touched (a new generation) in the next,
    # with maxParallelUpgrades counting its nodes labelled so far.
    t4 = "t4-ubuntu22.04-r580"
    assert sum("kubectl apply -f - <<'EOF'" in line for w in waves for line in w) == 2
    [touch] = [line for w in waves for line in w if f"kubectl patch nvidiadriver {t4}" in line]
    assert json.loads(touch.split(" -p ")[1].split("   #")[0].strip("'")) == {
        "spec": {"upgradePolicy": {"maxParallelUpgrades": 3}}
    }
    # The manifest applied is the plan's object (and names the pool label it selects).
    assert '"cudasched.io/driver-pool": "t4-ubuntu22.04-r580"' in script
    assert "cudasched.io/driver-pool=t4-ubuntu22.04-r580" in script


def test_before_26_7_the_label_is_the_trigger_and_there_is_no_owner_label(
    kb: KnowledgeBase,
) -> None:
    script = render_script(_plan(kb, "26.3", max_unavailable=2), "test cluster")
    assert "kubectl patch nvidiadriver" not in script
    assert "wait_for 'owner of" not in script
    assert "upgradePolicy" not in script.split("say()")[1]


def test_replaced_objects_are_deleted_after_the_last_wave(kb: KnowledgeBase) -> None:
    old = {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "NVIDIADriver",
        "metadata": {"name": "t4-ubuntu22.04-r580", "labels": {}},
        "spec": {"driverType": "gpu", "image": "driver", "usePrecompiled": True},
    }
    plan = _plan(kb, snapshot=_cluster((old,)))
    script = render_script(plan, "test cluster")
    last_wave = script.rindex("# ---- wave ")
    delete = script.index("kubectl delete nvidiadriver t4-ubuntu22.04-r580")
    assert delete > last_wave
    assert "t4-ubuntu22.04-r580-2" in script


def test_a_plan_without_operator_pools_rolls_out_nothing(kb: KnowledgeBase) -> None:
    host = cluster(
        gpu_node("t4", "Tesla-T4", "550.90.07", extra={"nvidia.com/gpu.deploy.driver": "false"}),
        runtime("vllm-13", "13.0"),
    )
    script = render_script(_plan(kb, snapshot=host), "test cluster")
    assert "nothing to roll out" in script and "kubectl cordon" not in script


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
@pytest.mark.parametrize("release", ["26.7", "25.10"])
def test_the_script_is_valid_bash(kb: KnowledgeBase, tmp_path: Path, release: str) -> None:
    path = tmp_path / "rollout.sh"
    path.write_text(render_script(_plan(kb, release, max_unavailable=1), "test cluster"))
    result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


# --------------------------------------------------------------------------- which pods drain


def _helpers(script: str) -> str:
    """The script's shell functions (after ``set -euo pipefail``, before the preflight)."""
    return script[script.index("set -euo pipefail") : script.index("# Preflight")]


def _bash(path: Path, files: Path) -> subprocess.CompletedProcess[str]:
    """``bash path`` with only the system PATH, ``$DIR`` naming the stand-in API's files."""
    return subprocess.run(
        ["bash", str(path)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "DIR": str(files)},
        check=False,
    )


def _pod(name: str, ns: str = "team-nlp", **spec: Any) -> dict[str, Any]:
    status = spec.pop("status", {"phase": "Running"})
    containers = spec.pop("containers", [{"name": "main", "image": "vllm/vllm-openai:v0.11.0"}])
    return {
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}"},
        "spec": {"nodeName": "gpu-a", "containers": containers, **spec},
        "status": status,
    }


def _claim(
    name: str, ns: str = "team-nlp", *, driver: str | None, request: dict[str, Any]
) -> dict[str, Any]:
    """A ``resource.k8s.io/v1`` ResourceClaim as the API server returns it: allocated by
    ``driver`` (None: not allocated yet)."""
    claim: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"devices": {"requests": [{"name": "gpu", **request}]}},
        "status": {},
    }
    if driver is not None:
        claim["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": driver, "pool": "gpu-a", "device": "gpu-0"}
                    ]
                }
            }
        }
    return claim


_GPU_CLASS = {"exactly": {"deviceClassName": "gpu.nvidia.com", "count": 1}}
_NIC_CLASS = {"exactly": {"deviceClassName": "rdma.example.com", "count": 1}}


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq is not installed")
def test_gpu_pods_include_those_with_gpus_only_from_dra_claims() -> None:
    """The runbook's jq program, run by jq on a node's PodList and the cluster's
    ResourceClaims shaped as the API server returns them: pods with a limit under nvidia.com/
    (containers or init containers) and pods whose claim NVIDIA's DRA driver was allocated, or
    that asks for its device class, are drained; a claim of another driver, or of the same name
    in another namespace, is not NVIDIA's; a pod that ended holds no GPU."""
    claims = [
        _claim("llm-0-gpu-x7k2p", driver="gpu.nvidia.com", request=_GPU_CLASS),
        _claim("shared-gpu", driver="gpu.nvidia.com",
               request={"firstAvailable": [{"name": "h100", "deviceClassName": "gpu.nvidia.com"}]}),
        _claim("pending-gpu", driver=None, request=_GPU_CLASS),
        _claim("nic-0", driver="rdma.example.com", request=_NIC_CLASS),
        _claim("mig-slice", driver="gpu.nvidia.com",
               request={"exactly": {"deviceClassName": "mig.nvidia.com", "count": 1}}),
    ]  # fmt: skip
    limits = {"limits": {"nvidia.com/gpu": "1"}}
    pods = [
        _pod("plugin-gpu", containers=[{"name": "m", "image": "x", "resources": limits}]),
        _pod("init-gpu", initContainers=[{"name": "i", "image": "x", "resources": limits}]),
        _pod("dra-template", resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "t"}],
             status={"resourceClaimStatuses": [{"name": "gpu",
                                                "resourceClaimName": "llm-0-gpu-x7k2p"}]}),
        _pod("dra-shared", resourceClaims=[{"name": "gpu", "resourceClaimName": "shared-gpu"}]),
        _pod("dra-class-only",
             resourceClaims=[{"name": "gpu", "resourceClaimName": "pending-gpu"}]),
        _pod("dra-mig", resourceClaims=[{"name": "g", "resourceClaimName": "mig-slice"}]),
        _pod("dra-nic", resourceClaims=[{"name": "nic", "resourceClaimName": "nic-0"}]),
        _pod("other-ns", ns="team-vision",
             resourceClaims=[{"name": "gpu", "resourceClaimName": "shared-gpu"}]),
        _pod("job-done", containers=[{"name": "m", "image": "x", "resources": limits}],
             status={"phase": "Succeeded"}),
        _pod("cpu-only", containers=[{"name": "m", "image": "x",
                                      "resources": {"limits": {"cpu": "2"}}}]),
    ]  # fmt: skip

    def drained(claim_list: list[dict[str, Any]]) -> list[str]:
        done = subprocess.run(
            ["jq", "-r", "--argjson", "claims", json.dumps({"items": claim_list}),
             "--arg", "driver", "gpu.nvidia.com", "--arg", "class", "gpu.nvidia.com",
             GPU_PODS_JQ],
            input=json.dumps({"apiVersion": "v1", "kind": "PodList", "items": pods}),
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert drained(claims) == [
        "team-nlp/plugin-gpu",
        "team-nlp/init-gpu",
        "team-nlp/dra-template",
        "team-nlp/dra-shared",
        "team-nlp/dra-class-only",
        "team-nlp/dra-mig",
    ]
    # A cluster without DRA (no ResourceClaims served): the device-plugin pods still drain.
    assert drained([]) == ["team-nlp/plugin-gpu", "team-nlp/init-gpu"]


def test_the_script_drains_with_the_jq_program_and_checks_for_jq(kb: KnowledgeBase) -> None:
    script = render_script(_plan(kb), "test cluster")
    assert f"GPU_PODS_JQ={shlex.quote(GPU_PODS_JQ)}" in script
    assert "--arg driver gpu.nvidia.com --arg class gpu.nvidia.com" in script
    assert "command -v jq" in script.split("# ---- wave 1")[0]
    assert 'left=$(gpu_pods "${node}")' in script


@pytest.mark.skipif(
    shutil.which("jq") is None or shutil.which("bash") is None, reason="needs bash and jq"
)
def test_gpu_pods_works_with_more_claims_than_one_argument_holds(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    """The script's own ``gpu_pods`` under ``set -euo pipefail``, with ``kubectl`` answering
    from files as the API server would: a cluster's ResourceClaims easily pass the 128 KiB
    Linux allows one command-line argument (MAX_ARG_STRLEN), so they must not be handed to jq
    as one, or the drain stops the script with "Argument list too long"."""
    claims = [
        _claim(f"llm-{i}-gpu-{i:05d}", driver="gpu.nvidia.com", request=_GPU_CLASS)
        for i in range(600)
    ]
    pods = [
        _pod("dra-template", resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "t"}],
             status={"resourceClaimStatuses": [{"name": "gpu",
                                                "resourceClaimName": "llm-599-gpu-00599"}]}),
        _pod("cpu-only"),
    ]  # fmt: skip
    claims_json = json.dumps({"apiVersion": "v1", "kind": "List", "items": claims}, indent=4)
    assert len(claims_json) > 128 * 1024
    (tmp_path / "claims.json").write_text(claims_json)
    (tmp_path / "pods.json").write_text(json.dumps({"kind": "PodList", "items": pods}))
    script = render_script(_plan(kb), "test cluster")
    helpers = _helpers(script)
    api = (
        "kubectl() {  # the API server's answers, from files\n"
        '  case "$2" in resourceclaims*) cat "$DIR/claims.json" ;; pods) cat "$DIR/pods.json" ;;'
        " *) return 1 ;; esac\n}\n"
    )
    path = tmp_path / "gpu_pods.sh"
    path.write_text(f"{helpers}\n{api}\ngpu_pods gpu-a\n")
    done = _bash(path, tmp_path)
    assert (done.returncode, done.stdout.split(), done.stderr) == (
        0,
        ["team-nlp/dra-template"],
        "",
    )


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_odd_node_names_stay_words_of_the_script(kb: KnowledgeBase, tmp_path: Path) -> None:
    """A snapshot file can name a node anything: a quote, a command substitution or a line
    break in the name must reach kubectl and the waits as that one word, in code and in the
    script's comments (the plan's notes name nodes), and never run. The script runs in bash
    with kubectl, the drain and the waits standing in as functions that record what they get."""
    odd = "t4-0'$(touch pwned)'\ntouch pwned2"
    snapshot = cluster(
        gpu_node(odd, "Tesla-T4", "550.90.07", extra=OPERATOR_DRIVER), runtime("vllm-13", "13.0")
    )
    script = render_script(_plan(kb, snapshot=snapshot), "test cluster")
    stand_ins = (
        'kubectl() { case "$*" in *useNvidiaDriverCRD*) echo true ;; *upgradePolicy*) echo object'
        ' ;; "label node "*) printf "%s\\0" "$3" >> labelled ;; esac; }\n'
        "drain_gpu_pods() { :; }\n"
        'wait_for() { printf "%s\\0" "$1" >> waits; }\n'
    )
    path = tmp_path / "rollout.sh"
    path.write_text(script.replace("# Preflight", stand_ins + "# Preflight", 1))
    done = subprocess.run(
        ["bash", str(path)], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["labelled", "rollout.sh", "waits"]
    assert (tmp_path / "labelled").read_text().split("\0")[:-1] == [odd]
    assert (tmp_path / "waits").read_text().split("\0")[:-1] == [
        f"owner of {odd}",
        f"driver pod on {odd}",
        f"driver on {odd}",
        f"GPUs on {odd}",
    ]


_PLUGIN_POD = _pod(
    "plugin-gpu",
    containers=[{"name": "m", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
)


@pytest.mark.skipif(
    shutil.which("jq") is None or shutil.which("bash") is None, reason="needs bash and jq"
)
@pytest.mark.parametrize(
    ("claims", "served", "expected"),
    [
        # No DRA API on the cluster: kubectl knows no such resource; no claims is right.
        (
            "echo 'error: the server doesn'\\''t have a resource type \"resourceclaims\"' >&2;"
            " return 1",
            "return 0",
            (0, ["team-nlp/plugin-gpu"], ""),
        ),
        # DRA is served but our user may not list claims: DRA pods would stay, so stop.
        (
            "echo 'Error from server (Forbidden): resourceclaims.resource.k8s.io is forbidden'"
            " >&2; return 1",
            "echo resourceclaims.resource.k8s.io; echo resourceslices.resource.k8s.io",
            (1, [], "cannot list ResourceClaims"),
        ),
        # The list failed and so did discovery (the API server is down): not "no DRA" either.
        (
            "echo 'Unable to connect to the server' >&2; return 1",
            "echo 'Unable to connect to the server' >&2; return 1",
            (1, [], "cannot list ResourceClaims"),
        ),
    ],
    ids=["not-served", "forbidden", "unreachable"],
)
def test_gpu_pods_stops_when_claims_cannot_be_listed(
    kb: KnowledgeBase, tmp_path: Path, claims: str, served: str, expected: tuple[Any, ...]
) -> None:
    """``gpu_pods`` (the script's own, under ``set -euo pipefail``, with ``kubectl`` standing
    in as a function): a ResourceClaim list that fails must not read as "no claims" unless the
    cluster does not serve the resource at all. Otherwise the pods that get GPUs through DRA
    are not drained, the driver cannot unload and the wave's waits time out much later; the
    script stops at once saying why, and evicts nothing."""
    (tmp_path / "pods.json").write_text(json.dumps({"kind": "PodList", "items": [_PLUGIN_POD]}))
    script = render_script(_plan(kb), "test cluster")
    helpers = _helpers(script)
    api = (
        "kubectl() {  # the API server's answers\n"
        '  case "$1 $2" in\n'
        f"    'get resourceclaims'*) {claims} ;;\n"
        f"    'api-resources '*) {served} ;;\n"
        '    "get pods") cat "$DIR/pods.json" ;;\n'
        '    "create --raw") echo "$3" >> "$DIR/evicted" ;;\n'
        "    *) return 1 ;;\n"
        "  esac\n}\n"
    )
    path = tmp_path / "gpu_pods.sh"
    path.write_text(f"{helpers}\n{api}\ngpu_pods gpu-a\n")
    done = _bash(path, tmp_path)
    rc, pods, said = expected
    assert (min(done.returncode, 1), done.stdout.split()) == (rc, pods), done.stderr
    assert said in done.stderr
    # The drain stops too, before any eviction.
    path.write_text(f"{helpers}\n{api}\nTIMEOUT=0\ndrain_gpu_pods gpu-a\n")
    drained = _bash(path, tmp_path)
    evicted = (tmp_path / "evicted").read_text().split() if (tmp_path / "evicted").exists() else []
    assert (min(drained.returncode, 1), evicted) == (
        (1, []) if rc else (1, ["/api/v1/namespaces/team-nlp/pods/plugin-gpu/eviction"])
    ), drained.stderr


def _slices(node: str, *versions: str) -> dict[str, Any]:
    """A ``resource.k8s.io/v1`` ResourceSliceList as NVIDIA's DRA kubelet plugin publishes it
    for ``node``: one device per version, ``driverVersion`` as the plugin writes it (semver,
    leading zeros dropped), plus another driver's slice on the same node."""
    gpus = [
        {
            "name": f"gpu-{i}",
            "attributes": {"type": {"string": "gpu"}, "driverVersion": {"version": v}},
        }
        for i, v in enumerate(versions)
    ]
    return {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{node}-gpu.nvidia.com-x"},
                "spec": {"driver": "gpu.nvidia.com", "nodeName": node, "devices": gpus,
                         "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}},
            },
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{node}-rdma"},
                "spec": {"driver": "rdma.example.com", "nodeName": node,
                         "devices": [{"name": "nic-0", "attributes": {
                             "driverVersion": {"version": "580.178.4"}}}],
                         "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}},
            },
        ],
    }  # fmt: skip


@pytest.mark.skipif(
    shutil.which("jq") is None or shutil.which("bash") is None, reason="needs bash and jq"
)
@pytest.mark.parametrize(
    ("allocatable", "before", "after", "offered"),
    [
        # GPUs only through DRA: nothing allocatable ever; the plugin's slice shows the driver.
        ("", ["570.124.6"], ["580.178.4", "580.178.4"], "yes"),
        ("", ["570.124.6"], ["570.124.6"], "no"),  # the old driver's slice still
        ("", ["570.124.6"], ["580.178.4", "570.124.6"], "no"),  # one GPU not yet
        ("", ["570.124.6"], [], "no"),  # the slice is gone while the plugin restarts
        # The device plugin: allocatable before the wave, so allocatable again is the sign.
        ("8", ["570.124.6"], ["580.178.4"], "yes"),
        ("0", [], [], "no"),
    ],
)
def test_the_wait_for_gpus_follows_how_the_node_offered_them(
    kb: KnowledgeBase,
    tmp_path: Path,
    allocatable: str,
    before: list[str],
    after: list[str],
    offered: str,
) -> None:
    """A node whose GPUs reach pods only through NVIDIA's DRA driver never has
    ``nvidia.com/gpu`` allocatable: waiting for it would time out every wave. The script
    records before the wave how each node offers GPUs (allocatable ``nvidia.com/gpu``, else a
    ``gpu.nvidia.com`` ResourceSlice for the node) and waits for that: allocatable again, or
    the node's slices publishing the planned driver on every device. The script's own
    functions and its wave-1 lines run in bash, ``kubectl`` answering from files."""
    script = render_script(_plan(kb), "test cluster")
    helpers = _helpers(script)
    wave = script[script.index("# ---- wave 1") : script.index("# ---- wave 2")].splitlines()
    [record] = [line for line in wave if "record_gpu_source" in line]
    [wait] = [line for line in wave if line.startswith("wait_for 'GPUs on a100-0'")]
    alloc = tmp_path / "allocatable"
    slices = tmp_path / "slices.json"
    api = (
        "kubectl() {  # the API server's answers, from files\n"
        '  case "$1 $2" in "get node") cat "$DIR/allocatable" ;;'
        ' "get resourceslices.resource.k8s.io") cat "$DIR/slices.json" ;; *) return 1 ;; esac\n}\n'
    )
    alloc.write_text(allocatable)
    slices.write_text(json.dumps(_slices("a100-0", *before)))
    path = tmp_path / "wave.sh"
    path.write_text(
        f"{helpers}\n{api}\nTIMEOUT=0\n{record}\n"
        f'cp "$DIR/after.json" "$DIR/slices.json"\n'
        f"{wait} && echo yes || echo no\n"
    )
    (tmp_path / "after.json").write_text(json.dumps(_slices("a100-0", *after)))
    done = _bash(path, tmp_path)
    assert (done.returncode, done.stdout.split()) == (0, [offered]), done.stderr
