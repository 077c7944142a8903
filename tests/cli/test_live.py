"""Commands against a live cluster (``--live``, ``--kubeconfig``, ``--context``) give exactly the
answers the same objects give from a file; notes and errors are one line on stderr.

The cluster is ``kube_api.ClusterApi`` on kmock over real HTTP (paged, list items without
kinds); the commands run in a worker thread, as they would in their own process, while the
test's event loop serves the API.
"""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import kmock as kmock_lib
import pytest
import yaml
from typer.testing import CliRunner, Result

from cudasched.cli import app
from cudasched.cli.inputs import ClusterSource, cluster_source, load_cluster
from cudasched.cluster.snapshot import bundled_snapshot, load_snapshot
from cudasched.vocab.kinds import (
    CLUSTER_POLICY,
    CLUSTER_SERVING_RUNTIME,
    DEVICE_CLASS,
    INFERENCE_SERVICE,
    KARPENTER_NODE_POOL,
    LLM_INFERENCE_SERVICE,
    NAMESPACE,
    NODE_GROUP_KINDS,
    NVIDIA_DRIVER,
    POD,
    SERVING_RUNTIME,
)
from cudasched.webhook.admission.review import creation_review
from tests.support.gpu_operator import CRD_SPEC_PROPERTIES, cluster_policy, nvidiadriver_crd
from tests.support.kube_api import ClusterApi, forbidden, write_kubeconfig
from tests.support.outputs import without_source
from tests.support.rbac import granted

SAMPLE = bundled_snapshot()
SAMPLE_FILE = Path(__file__).parents[2] / "src" / "cudasched" / "data" / "sample-cluster.yaml"
runner = CliRunner()


def invoke(*args: str, stdin: str | None = None) -> Result:
    return runner.invoke(app, list(args), input=stdin)


async def invoke_async(*args: str, stdin: str | None = None) -> Result:
    return await asyncio.to_thread(invoke, *args, stdin=stdin)


@pytest.fixture
def kubeconfig(kmock: kmock_lib.KubernetesEmulator, tmp_path: Path) -> str:
    return str(write_kubeconfig(tmp_path, kmock.url, namespace="team-nlp"))


def one_line_error(result: Result) -> str:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("cudasched: error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0].removeprefix("cudasched: error: ")


# --------------------------------------------------------------------------- same answers


@pytest.mark.parametrize(
    "args",
    [
        ("explain", "-o", "json"),
        ("explain",),
        ("explain", "isvc/llama3-8b", "-n", "team-nlp", "-o", "json"),
        ("explain", "isvc/qwen2-7b", "-n", "team-nlp", "-o", "wide"),
        ("explain", "pod/resnet50-predictor-45920095b1-b027c", "-n", "team-vision", "-o", "yaml"),
        ("snapshot",),
        ("snapshot", "-o", "json"),
    ],
    ids=lambda a: " ".join(a),
)
async def test_live_and_file_give_identical_output(
    kmock: kmock_lib.KubernetesEmulator, kubeconfig: str, args: tuple[str, ...]
) -> None:
    ClusterApi.start(kmock, SAMPLE.objects())
    from_file = await invoke_async(*args, "--cluster", str(SAMPLE_FILE))
    live = await invoke_async(*args, "--kubeconfig", kubeconfig)
    assert from_file.exit_code == 0, from_file.output
    assert live.exit_code == 0, live.output
    assert without_source(live.stdout) == without_source(from_file.stdout)
    assert live.stderr == ""  # every kind served: no note; not a terminal: no progress


@pytest.mark.parametrize("output", ["json", "table"])
async def test_audit_of_the_live_cluster_is_the_audit_of_its_dump(
    kmock: kmock_lib.KubernetesEmulator, kubeconfig: str, output: str
) -> None:
    ClusterApi.start(kmock, SAMPLE.objects())
    from_file = await invoke_async("audit", "-o", output, "--cluster", str(SAMPLE_FILE))
    live = await invoke_async("audit", "-o", output, "--kubeconfig", kubeconfig)
    assert from_file.exit_code == live.exit_code == 1, live.output  # the sample has an error
    if output == "json":
        assert without_source(live.stdout) == without_source(from_file.stdout)
    else:  # the table names its source
        assert live.stdout.replace(kubeconfig, "X").count("no-compatible-node") == (
            from_file.stdout.count("no-compatible-node")
        )


async def test_mutate_answers_a_review_identically(
    kmock: kmock_lib.KubernetesEmulator, kubeconfig: str
) -> None:
    ClusterApi.start(kmock, SAMPLE.objects())
    pod = next(p for p in SAMPLE.pods if p["metadata"]["namespace"] == "team-nlp")
    review = json.dumps(creation_review(pod, uid="fixed-uid"))
    from_file = await invoke_async("mutate", "--cluster", str(SAMPLE_FILE), stdin=review)
    live = await invoke_async("mutate", "--kubeconfig", kubeconfig, stdin=review)
    assert from_file.exit_code == live.exit_code
    assert json.loads(from_file.stdout)["response"]["patch"]  # it did constrain the pod
    assert without_source(live.stdout) == without_source(from_file.stdout)


async def test_snapshot_of_a_live_cluster_reads_back_to_the_same_answers(
    kmock: kmock_lib.KubernetesEmulator, kubeconfig: str, tmp_path: Path
) -> None:
    ClusterApi.start(kmock, SAMPLE.objects())
    dump = await invoke_async("snapshot", "--kubeconfig", kubeconfig)
    path = tmp_path / "cluster.yaml"
    path.write_text(dump.stdout, encoding="utf-8")
    assert load_snapshot(path) == SAMPLE.shareable()
    from_dump = await invoke_async("explain", "-o", "json", "--cluster", str(path))
    from_sample = await invoke_async("explain", "-o", "json", "--cluster", str(SAMPLE_FILE))
    assert without_source(from_dump.stdout) == without_source(from_sample.stdout)


async def test_a_snapshot_keeps_the_image_facts_and_answers_as_the_live_cluster(
    kmock: kmock_lib.KubernetesEmulator, kubeconfig: str, tmp_path: Path
) -> None:
    """The ImageFacts a cluster keeps (issue 29) go into ``snapshot --live``, and the commands
    judge a dump by them as ``--live`` judges the cluster: the same answers. Here a person's
    override says which CUDA the sample's bert-legacy image needs, which nothing else tells."""
    from cudasched.knowledge.imagefacts import facts_object

    digest = "sha256:" + "ab" * 32
    facts = facts_object(digest)
    facts["spec"]["override"] = {"cuda": "12.1", "reason": "built on cuda 12.1"}
    facts["status"] = {
        "digest": digest,
        "image": "pytorch/torchserve-kfs:latest-gpu",
        "references": ["pytorch/torchserve-kfs:latest-gpu"],
        "observedTime": "2026-09-01T10:00:00Z",
    }
    ClusterApi.start(kmock, [*SAMPLE.objects(), facts])
    dump = await invoke_async("snapshot", "--kubeconfig", kubeconfig)
    path = tmp_path / "cluster.yaml"
    path.write_text(dump.stdout, encoding="utf-8")
    held = [o for o in load_snapshot(path).other if o.get("kind") == "ImageFacts"]
    assert held == [facts]
    asked = {"audit": ("audit", "-o", "json"), "explain": ("explain", "-A", "-o", "json")}
    live = {k: await invoke_async(*a, "--kubeconfig", kubeconfig) for k, a in asked.items()}
    dumped = {k: await invoke_async(*a, "--cluster", str(path)) for k, a in asked.items()}
    sample = await invoke_async("audit", "-o", "json", "--cluster", str(SAMPLE_FILE))
    assert {k: without_source(r.stdout) for k, r in live.items()} == {
        k: without_source(r.stdout) for k, r in dumped.items()
    }
    assert "override in ImageFacts sha256-abab" in live["explain"].stdout  # it answered
    # bert-legacy's CUDA is known through it: no requirement-unknown finding any more
    assert ("bert-legacy" in sample.stdout, "bert-legacy" in live["audit"].stdout) == (True, False)


async def test_the_context_namespace_is_the_default_namespace(
    kmock: kmock_lib.KubernetesEmulator, kubeconfig: str
) -> None:
    ClusterApi.start(kmock, SAMPLE.objects())
    live = await invoke_async("explain", "isvc/llama3-8b", "--kubeconfig", kubeconfig, "-o", "json")
    assert live.exit_code == 0, live.output
    assert json.loads(live.stdout)["summary"]["workload"] == "team-nlp/InferenceService/llama3-8b"
    # Without a live context the namespace is 'default', where the sample has no llama3-8b.
    from_file = await invoke_async("explain", "isvc/llama3-8b", "--cluster", str(SAMPLE_FILE))
    assert one_line_error(from_file) == (
        f"InferenceService default/llama3-8b not found in {SAMPLE_FILE} (another namespace? "
        "pass -n NAMESPACE)"
    )


async def test_a_deployment_is_fetched_by_name(
    kmock: kmock_lib.KubernetesEmulator, kubeconfig: str
) -> None:
    template = copy.deepcopy(next(p for p in SAMPLE.pods if "llama3" in p["metadata"]["name"]))
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "llama-direct", "namespace": "team-nlp"},
        "spec": {"template": {"metadata": template["metadata"], "spec": template["spec"]}},
    }
    api = ClusterApi.start(kmock, [*SAMPLE.objects(), deployment])
    live = await invoke_async(
        "explain", "deploy/llama-direct", "-n", "team-nlp", "--kubeconfig", kubeconfig, "-o", "json"
    )
    assert live.exit_code == 0, live.output
    doc = json.loads(live.stdout)
    assert doc["summary"]["workload"] == "team-nlp/Deployment/llama-direct"
    assert [r.name for r in api.requests if r.plural == "deployments"] == ["llama-direct"]
    missing = await invoke_async(
        "explain", "deployment/nope", "-n", "team-nlp", "--kubeconfig", kubeconfig
    )
    assert one_line_error(missing) == "Deployment team-nlp/nope not found in the live cluster"


async def test_an_llminferenceservice_is_explained_through_its_pods(
    kmock: kmock_lib.KubernetesEmulator, kubeconfig: str
) -> None:
    base = next(p for p in SAMPLE.pods if "llama3" in p["metadata"]["name"])
    llmisvc = {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "LLMInferenceService",
        "metadata": {"name": "chat", "namespace": "team-nlp"},
        "spec": {"model": {"uri": "hf://meta-llama/Llama-3.1-8B-Instruct"}},
    }

    def pod(name: str, component: str) -> dict[str, Any]:
        out = copy.deepcopy(base)
        out["metadata"] = {
            "name": name,
            "namespace": "team-nlp",
            "labels": {
                "app.kubernetes.io/part-of": "llminferenceservice",
                "app.kubernetes.io/name": "chat",
                "app.kubernetes.io/component": component,
            },
        }
        # KServe's model server is the container `main` (reference ops-facts.md section 2).
        out["spec"]["containers"][0].update(name="main", image="vllm/vllm-openai:v0.9.0")
        return out

    objects = [
        *SAMPLE.objects(),
        llmisvc,
        pod("chat-kserve-abc", "llminferenceservice-workload"),
        pod("chat-router-xyz", "llminferenceservice-router-scheduler"),
    ]
    api = ClusterApi.start(kmock, objects)
    live = await invoke_async(
        "explain", "llmisvc/chat", "-n", "team-nlp", "--kubeconfig", kubeconfig, "-o", "json"
    )
    assert live.exit_code == 0, live.output
    summary = json.loads(live.stdout)["summary"]  # one workload: the router pod is left out
    assert summary["workload"] == "team-nlp/Pod/chat-kserve-abc"
    assert summary["requirement"] and "vllm/vllm-openai:v0.9.0" in summary["requirementSource"]
    api.objects["pods"] = list(SAMPLE.pods)  # the service has no pods yet
    none_yet = await invoke_async(
        "explain", "llminferenceservice/chat", "-n", "team-nlp", "--kubeconfig", kubeconfig
    )
    # Issue 27 item 8: judged as the object itself, as admission and the audit judge it.
    assert none_yet.exit_code == 0, none_yet.output
    assert none_yet.stdout.startswith("team-nlp/LLMInferenceService/chat no CUDA requirement")
    assert "no model-server pod yet: judged by the service's own spec" in none_yet.stdout
    every = await invoke_async("explain", "--kubeconfig", kubeconfig, "-o", "json")
    listed = [w["workload"] for w in json.loads(every.stdout)["workloads"]]
    assert "team-nlp/LLMInferenceService/chat" in listed


async def test_explain_and_audit_judge_the_same_services_before_their_pods_exist(
    kmock: kmock_lib.KubernetesEmulator, kubeconfig: str
) -> None:
    """Issue 27 item 8: an LLMInferenceService whose pods KServe has not created is in
    explain -A's set, judged as audit judges it (here no node can run its CUDA 13.2)."""
    service = yaml.safe_load(
        (Path(__file__).parents[2] / "examples" / "qwen-llmisvc.yaml").read_text()
    )
    service["metadata"]["annotations"]["cudasched.io/cuda-version"] = "13.2"
    service["apiVersion"] = LLM_INFERENCE_SERVICE.api_version  # the version the mock serves
    ClusterApi.start(kmock, [*SAMPLE.objects(), service])
    explained = await invoke_async("explain", "-A", "--kubeconfig", kubeconfig, "-o", "json")
    audited = await invoke_async("audit", "-A", "--kubeconfig", kubeconfig, "-o", "json")
    assert explained.exit_code == 0, explained.output
    ref = "llm/LLMInferenceService/qwen2-7b-instruct-single"
    (item,) = [w for w in json.loads(explained.stdout)["workloads"] if w["workload"] == ref]
    assert item["summary"]["eligible"] == 0
    codes = {(f["code"], f["object"]) for f in json.loads(audited.stdout)["findings"]}
    assert ("no-compatible-node", "LLMInferenceService/llm/qwen2-7b-instruct-single") in codes


# --------------------------------------------------------------------------- the default cluster


async def test_the_configured_cluster_is_the_default_as_for_kubectl(
    kmock: kmock_lib.KubernetesEmulator, kubeconfig: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 27 item 5: with $KUBECONFIG naming a cluster, a command given no cluster reads it
    (not the bundled sample), exactly as with --kubeconfig."""
    api = ClusterApi.start(kmock, SAMPLE.objects())
    monkeypatch.setenv("KUBECONFIG", kubeconfig)
    default = await invoke_async("explain", "-o", "json")
    named = await invoke_async("explain", "-o", "json", "--kubeconfig", kubeconfig)
    assert default.exit_code == named.exit_code == 0, default.output
    assert default.stdout == named.stdout and default.stderr == ""
    assert json.loads(default.stdout)["cluster"]["sample"] is False
    assert json.loads(default.stdout)["cluster"]["source"].startswith("live cluster http")
    assert len(api.lists_of(POD)) == 2


async def test_home_kube_config_is_the_default_too(
    kmock: kmock_lib.KubernetesEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = ClusterApi.start(kmock, SAMPLE.objects())
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    write_kubeconfig(home / ".kube", kmock.url).rename(home / ".kube" / "config")
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.setenv("HOME", str(home))
    result = await invoke_async("audit", "-o", "json", "--as-of", "2026-12-01")
    assert result.exit_code == 1 and result.stderr == "", result.output  # the sample's error
    assert json.loads(result.stdout)["cluster"]["sample"] is False
    assert len(api.lists_of(POD)) == 1


async def test_sample_asked_for_reads_no_cluster_and_says_nothing(
    kmock: kmock_lib.KubernetesEmulator, kubeconfig: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = ClusterApi.start(kmock, SAMPLE.objects())
    monkeypatch.setenv("KUBECONFIG", kubeconfig)
    result = await invoke_async("audit", "--sample", "-o", "json", "--as-of", "2026-12-01")
    assert result.exit_code == 1 and result.stderr == "", result.output
    assert json.loads(result.stdout)["cluster"] == {
        "source": "bundled sample cluster",
        "sample": True,
    }
    assert api.lists_of(POD) == []


@pytest.mark.parametrize(
    ("args", "other"),
    [
        (["--live"], "--live"),
        (["--context", "mock"], "--kubeconfig/--context"),
        (["--cluster", "c.yaml"], "--cluster 'c.yaml'"),
    ],
)
def test_sample_and_another_cluster_are_refused(args: list[str], other: str) -> None:
    assert one_line_error(invoke("explain", "--sample", *args)) == (
        f"--sample and {other} name two clusters: give one"
    )


def test_files_alone_read_no_cluster_even_when_one_is_configured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """explain --workload --nodes-file judges the files: no cluster is read (here, one that no
    server answers for would fail), and nothing is said about a sample."""
    down = tmp_path / "down"
    down.mkdir()
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(down, "http://127.0.0.1:1")))
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": list(SAMPLE.nodes)})
    )
    workload = tmp_path / "pod.yaml"
    workload.write_text(yaml.safe_dump(SAMPLE.pods[0]))
    result = invoke("explain", "--workload", str(workload), "--nodes-file", str(nodes))
    assert result.exit_code == 0 and result.stderr == "", result.output


async def test_a_namespace_that_does_not_exist_is_said_so(
    kmock: kmock_lib.KubernetesEmulator, kubeconfig: str
) -> None:
    """Issue 27 item 9: -n nosuchns read as a clean namespace. The API server says whether it
    exists; an identity that may not get namespaces is told by the objects read instead."""
    api = ClusterApi.start(kmock, SAMPLE.objects())
    missing = await invoke_async("audit", "-n", "nosuchns", "--kubeconfig", kubeconfig)
    assert one_line_error(missing).startswith("namespace 'nosuchns' does not exist in live cluster")
    api.fail(NAMESPACE, 403, forbidden(NAMESPACE))
    allowed = await invoke_async("audit", "-n", "team-vision", "--kubeconfig", kubeconfig)
    assert allowed.exit_code == 0, allowed.output
    still = await invoke_async("explain", "-n", "nosuchns", "--kubeconfig", kubeconfig)
    assert one_line_error(still).endswith(": none of its objects is in it")


# --------------------------------------------------------------------------- notes and errors


@pytest.mark.parametrize("node_groups", ["served", "missing"])
async def test_missing_crds_get_one_note_each_on_stderr(
    kmock: kmock_lib.KubernetesEmulator, kubeconfig: str, node_groups: str
) -> None:
    kserve = (INFERENCE_SERVICE, SERVING_RUNTIME, CLUSTER_SERVING_RUNTIME, LLM_INFERENCE_SERVICE)
    # Karpenter and Cluster API are read only for hints: their absence is not worth a note.
    groups = NODE_GROUP_KINDS if node_groups == "missing" else ()
    ClusterApi.start(kmock, SAMPLE.objects(), missing=(*kserve, NVIDIA_DRIVER, *groups))
    result = await invoke_async("snapshot", "--kubeconfig", kubeconfig)
    assert result.exit_code == 0, result.output
    notes = result.stderr.splitlines()
    assert len(notes) == 2
    assert notes[0].startswith("cudasched: note: the cluster does not serve inferenceservices")
    assert notes[1].startswith("cudasched: note: the cluster does not serve nvidiadrivers")
    assert "KServe CRD not installed" in notes[0]
    dumped = load_snapshot(result.stdout.encode())
    assert dumped.nodes == SAMPLE.shareable().nodes and dumped.inference_services == ()


def _b200_r595_nodepool() -> dict:
    """A Karpenter NodePool that would add B200 nodes on R595 (``node-template``'s own output),
    with no node of it in the cluster: empty."""
    result = invoke(
        "node-template",
        "--gpu",
        "B200",
        "--driver",
        "595.45.04",
        "--provider",
        "karpenter",
        "--instance-type",
        "p6-b200.48xlarge",
        "-o",
        "json",
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["declarations"]["karpenter"]


async def test_the_audit_of_a_live_cluster_sees_its_karpenter_nodepools(
    kmock: kmock_lib.KubernetesEmulator, kubeconfig: str, tmp_path: Path
) -> None:
    """The empty-group hint works on the live cluster as on its dump: nemotron (CUDA 13.2) has
    no node, and an empty NodePool of B200s on R595 could run it."""
    pool = _b200_r595_nodepool()
    ClusterApi.start(kmock, [*SAMPLE.objects(), pool])
    live = await invoke_async("audit", "-o", "json", "--kubeconfig", kubeconfig)
    assert live.exit_code == 1 and live.stderr == "", live.output
    fixes = [
        f["fix"] for f in json.loads(live.stdout)["findings"] if f["code"] == "no-compatible-node"
    ]
    assert fixes and f"Karpenter NodePool {pool['metadata']['name']}" in fixes[0]
    dump = tmp_path / "cluster.yaml"
    dump.write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [*SAMPLE.objects(), pool]})
    )
    from_file = await invoke_async("audit", "-o", "json", "--cluster", str(dump))
    assert without_source(live.stdout) == without_source(from_file.stdout)
    # Without the pool, no such hint.
    bare = await invoke_async("audit", "-o", "json", "--cluster", str(SAMPLE_FILE))
    assert "Karpenter NodePool" not in bare.stdout


async def test_node_groups_the_identity_may_not_list_are_a_note_not_a_failure(
    kmock: kmock_lib.KubernetesEmulator, kubeconfig: str
) -> None:
    api = ClusterApi.start(kmock, [*SAMPLE.objects(), _b200_r595_nodepool()])
    api.fail(KARPENTER_NODE_POOL, 403, forbidden(KARPENTER_NODE_POOL, user="alice"))
    result = await invoke_async("audit", "-o", "json", "--kubeconfig", kubeconfig)
    assert result.exit_code == 1, result.output  # the sample's error finding, nothing worse
    assert result.stderr.splitlines() == [
        "cudasched: note: not allowed to list nodepools.karpenter.sh; autoscaler node groups "
        "read as none (grant list on them for the audit's scale-up hints)"
    ]
    assert "Karpenter NodePool" not in result.stdout
    # A required kind stays an error.
    api.fail(POD, 403, forbidden(POD, user="alice"))
    assert "grant list on pods" in one_line_error(
        await invoke_async("audit", "--kubeconfig", kubeconfig)
    )


async def test_a_missing_permission_is_one_line_exit_2(
    kmock: kmock_lib.KubernetesEmulator, kubeconfig: str
) -> None:
    api = ClusterApi.start(kmock, SAMPLE.objects())
    api.fail(POD, 403, forbidden(POD, user="alice"))
    result = await invoke_async("explain", "--kubeconfig", kubeconfig)
    assert one_line_error(result) == (
        "cannot list pods at the cluster scope: grant list on pods (denied to User 'alice')"
    )


async def test_every_missing_permission_is_named_at_once(
    kmock: kmock_lib.KubernetesEmulator, kubeconfig: str
) -> None:
    api = ClusterApi.start(kmock, SAMPLE.objects())
    for kind in (POD, INFERENCE_SERVICE, SERVING_RUNTIME):
        api.fail(kind, 403, forbidden(kind, user="alice"))
    result = await invoke_async("audit", "--kubeconfig", kubeconfig)
    names = "inferenceservices.serving.kserve.io, servingruntimes.serving.kserve.io, pods"
    listed = one_line_error(result)
    assert listed.startswith("cannot list ") and listed.endswith("(denied to User 'alice')")
    for name in names.split(", "):
        assert listed.count(name) == 2, listed  # what failed, and what to grant


async def test_unusable_configuration_is_one_line(tmp_path: Path) -> None:
    result = await invoke_async("explain", "--kubeconfig", str(tmp_path / "nope"))
    assert one_line_error(result) == (
        f"no usable Kubernetes configuration: kubeconfig file '{tmp_path / 'nope'}' does not exist"
    )


def test_live_uses_kubeconfig_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "from-env"))
    result = invoke("snapshot", "--live")
    assert one_line_error(result) == (
        f"no usable Kubernetes configuration: kubeconfig file '{tmp_path / 'from-env'}' "
        "(from $KUBECONFIG) does not exist"
    )


@pytest.mark.parametrize("live", [["--live"], ["--context", "x"], ["--kubeconfig", "k"]])
def test_a_file_and_the_live_cluster_are_exclusive(live: list[str]) -> None:
    result = invoke("explain", "--cluster", str(SAMPLE_FILE), *live)
    assert "name two clusters: give a file or the live cluster, not both" in one_line_error(result)


def test_a_namespace_alone_explains_its_workloads() -> None:
    result = invoke("explain", "-n", "team-nlp", "-o", "json")
    assert result.exit_code == 0, result.output
    names = [w["workload"] for w in json.loads(result.stdout)["workloads"]]
    assert names and all(n.startswith("team-nlp/") for n in names)
    everything = json.loads(invoke("explain", "-o", "json").stdout)["workloads"]
    assert len(names) == sum(w["workload"].startswith("team-nlp/") for w in everything)


def test_yaml_output_is_the_json_document() -> None:
    args = ("explain", "isvc/gpt-oss-20b", "-n", "team-nlp")
    as_yaml = invoke(*args, "-o", "yaml")
    as_json = invoke(*args, "-o", "json")
    assert as_yaml.exit_code == as_json.exit_code == 0
    assert "*id" not in as_yaml.stdout  # repeated selector terms are written out, not aliased
    assert yaml.safe_load(as_yaml.stdout) == json.loads(as_json.stdout)


def test_reference_errors() -> None:
    assert one_line_error(invoke("explain", "svc/x")).startswith(
        "invalid reference 'svc/x': expected TYPE/NAME with TYPE one of isvc, llmisvc, pod"
    )
    assert one_line_error(invoke("explain", "-n", "x", "--workload", str(SAMPLE_FILE))) == (
        "-n/--namespace and -l/--selector pick the cluster's workloads, not --workload's"
    )
    assert one_line_error(invoke("explain", "-n", "nowhere")) == (  # issue 27 item 9
        "namespace 'nowhere' does not exist in bundled sample cluster: none of its objects is in it"
    )
    both = invoke("explain", "pod/x", "--workload", str(SAMPLE_FILE))
    assert one_line_error(both) == "'pod/x' and --workload both name what to explain: give one"


# --------------------------------------------------------------------------- the option group


def test_load_cluster_keeps_taking_a_path_or_nothing() -> None:
    assert load_cluster(SAMPLE_FILE) == SAMPLE
    assert load_cluster(None) == SAMPLE
    assert load_cluster(ClusterSource()) == SAMPLE
    assert load_cluster(ClusterSource(cluster=SAMPLE_FILE)).source == str(SAMPLE_FILE)


def test_cluster_source_decorator_declares_the_options_once() -> None:
    import typer

    demo_app = typer.Typer()
    seen: list[ClusterSource] = []

    @demo_app.command()
    @cluster_source
    def show(name: str, source: ClusterSource = ClusterSource(), flag: bool = False) -> None:
        seen.append(source)

    result = runner.invoke(demo_app, ["n", "--context", "prod", "--kubeconfig", "k.yaml"])
    assert result.exit_code == 0, result.output
    assert seen == [ClusterSource(kubeconfig=Path("k.yaml"), context="prod")]
    assert seen[0].is_live
    help_text = runner.invoke(demo_app, ["--help"]).stdout
    for option in ("--cluster", "--live", "--sample", "--kubeconfig", "--context", "--flag"):
        assert option in help_text
    with pytest.raises(TypeError, match="needs a 'source' parameter"):
        cluster_source(lambda cluster: None)


def test_the_readme_clusterrole_grants_what_a_live_read_asks_for() -> None:
    from cudasched.kube.live import LIVE_KINDS
    from cudasched.vocab.kinds import CONTROLLERS

    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    block = readme.split("## Install", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    role = yaml.safe_load(block)
    assert role["kind"] == "ClusterRole"
    grants = granted(role)
    needed = {(k.group, k.plural, "list") for k in LIVE_KINDS}
    needed |= {(k.group, k.plural, "get") for k in CONTROLLERS}
    assert needed <= grants
    assert not any(r == "secrets" for _, r, _ in grants)


# --------------------------------------------------------------------------- GPU Operator release


async def test_plan_drivers_reads_the_gpu_operator_release_from_the_live_cluster(
    kmock: kmock_lib.KubernetesEmulator, kubeconfig: str, tmp_path: Path
) -> None:
    """The ClusterPolicy's Helm label says v25.10.1: the objects are written for 25.10 (no
    spec.default, no upgradePolicy), as from a dump holding the same objects; an explicit
    --gpu-operator-version wins."""
    operator = [cluster_policy("v25.10.1"), nvidiadriver_crd("v25.10.1")]
    ClusterApi.start(kmock, [*SAMPLE.objects(), *operator])
    live = await invoke_async("plan-drivers", "-o", "json", "--kubeconfig", kubeconfig)
    assert live.exit_code == 0 and live.stderr == "", live.output
    plan = json.loads(live.stdout)
    assert plan["gpuOperatorVersion"] == "25.10"
    [written] = [n for n in plan["notes"] if n.startswith("NVIDIADriver objects written for")]
    assert written.startswith(
        "NVIDIADriver objects written for GPU Operator 25.10 (read from the cluster's "
        "ClusterPolicy cluster-policy label app.kubernetes.io/version=v25.10.1)"
    )
    specs = [d["spec"] for d in plan["nvidiaDrivers"]]
    assert specs and not [s for s in specs if "default" in s or "upgradePolicy" in s]
    # `snapshot --live` keeps what the release read needs, so its dump plans the same.
    snap = await invoke_async("snapshot", "--kubeconfig", kubeconfig)
    assert snap.exit_code == 0, snap.output
    dump = tmp_path / "cluster.yaml"
    dump.write_text(snap.stdout)
    kept = [o for o in yaml.safe_load(snap.stdout)["items"] if o["kind"] in (
        "ClusterPolicy", "CustomResourceDefinition")]  # fmt: skip
    assert [o["kind"] for o in kept] == ["ClusterPolicy", "CustomResourceDefinition"]
    # The ClusterPolicy: name, labels, state and the driver settings (who installs drivers).
    assert kept[0]["spec"] == {"driver": {"enabled": True, "useNvidiaDriverCRD": True}}
    [version] = kept[1]["spec"]["versions"]
    assert set(version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]) == set(
        CRD_SPEC_PROPERTIES["v25.10.1"]
    )
    from_file = await invoke_async("plan-drivers", "-o", "json", "--cluster", str(dump))
    assert without_source(live.stdout) == without_source(from_file.stdout)
    explicit = await invoke_async(
        "plan-drivers", "-o", "json", "--kubeconfig", kubeconfig, "--gpu-operator-version", "26.7"
    )
    assert json.loads(explicit.stdout)["gpuOperatorVersion"] == "26.7"


async def test_plan_drivers_says_what_it_may_not_read_and_plans_for_the_newest(
    kmock: kmock_lib.KubernetesEmulator, kubeconfig: str
) -> None:
    api = ClusterApi.start(kmock, [*SAMPLE.objects(), cluster_policy("v25.10.1")])
    api.fail(CLUSTER_POLICY, 403, forbidden(CLUSTER_POLICY, user="alice"))
    live = await invoke_async("plan-drivers", "-o", "json", "--kubeconfig", kubeconfig)
    assert live.exit_code == 0, live.output
    assert live.stderr.splitlines() == [
        "cudasched: note: not allowed to list clusterpolicies.nvidia.com: the GPU Operator "
        "release is read from what remains"
    ]
    plan = json.loads(live.stdout)
    assert plan["gpuOperatorVersion"] == "26.7"
    assert any("the newest release cudasched knows" in n for n in plan["notes"])


def _dra_and_kueue_objects() -> list[dict[str, Any]]:
    """NVIDIA's class and a newer one that took ``nvidia.com/gpu`` from it, and a Kueue flavor
    that selects the sample's H100 nodes by product alone."""

    def device_class(name: str, created: str) -> dict[str, Any]:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {
                "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}],
                "extendedResourceName": "nvidia.com/gpu",
            },
        }

    flavor = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ResourceFlavor",
        "metadata": {"name": "h100"},
        "spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
    }
    return [
        device_class("gpu.nvidia.com", "2026-09-01T10:00:00Z"),
        device_class("team-a-gpu", "2026-11-20T08:00:00Z"),
        flavor,
    ]


async def test_the_audit_of_a_live_cluster_reads_its_dra_and_kueue_objects(
    kmock: kmock_lib.KubernetesEmulator, kubeconfig: str
) -> None:
    api = ClusterApi.start(kmock, [*SAMPLE.objects(), *_dra_and_kueue_objects()])
    live = await invoke_async("audit", "-o", "json", "--kubeconfig", kubeconfig)
    assert live.stderr == "", live.output
    found = {(f["code"], f["object"]) for f in json.loads(live.stdout)["findings"]}
    assert ("dra-extended-resource-shared", "DeviceClass/gpu.nvidia.com") in found
    assert ("kueue-flavor-without-cuda-key", "ResourceFlavor/h100") in found
    # An identity that may not list them reads none, with a note.
    api.fail(DEVICE_CLASS, 403, forbidden(DEVICE_CLASS, user="alice"))
    denied = await invoke_async("audit", "-o", "json", "--kubeconfig", kubeconfig)
    assert denied.stderr.splitlines() == [
        "cudasched: note: not allowed to list deviceclasses.resource.k8s.io; read as none "
        "(grant list on them for the audit's DRA and Kueue checks)"
    ]
    assert "dra-extended-resource-shared" not in denied.stdout
