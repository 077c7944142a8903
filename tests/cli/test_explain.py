"""``cudasched explain``: exit codes, JSON contract, table output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from cudasched.cli import app
from cudasched.cluster.snapshot import bundled_snapshot
from cudasched.workloads.pods import workloads_of

DATA = Path(__file__).parents[1] / "data"
runner = CliRunner()

NODE_KEYS = {"node", "eligible", "score", "reasons", "facts", "verdict"}
SUMMARY_KEYS = {
    "workload",
    "eligible",
    "total",
    "requirement",
    "requirementSource",
    "policy",
    "scheme",
    "gfdKeys",
    "requirementTerms",
    "requirementError",
    "skipped",
    "scoreError",
    "runtime",
    "requirementStatus",
    "unknown",
    "warnings",
    "noPods",
}


def run(*args: str) -> Any:
    return runner.invoke(app, ["explain", *args])


def run_json(*args: str) -> dict[str, Any]:
    result = run(*args, "-o", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


#: What a pod's summary adds: where it is (issue 27 item 7) and whose it is (item 9).
POD_KEYS = {"nodeName", "phase", "owner"}


def check_shape(doc: dict[str, Any]) -> None:
    assert set(doc) >= {"nodes", "summary"}
    pod = "/Pod/" in doc["summary"]["workload"]
    assert set(doc["summary"]) == SUMMARY_KEYS | (POD_KEYS if pod else set())
    for node in doc["nodes"]:
        assert set(node) == NODE_KEYS
        assert isinstance(node["eligible"], bool)
        assert node["score"] == "error" or isinstance(node["score"], int)
        for reason in node["reasons"]:
            assert {"code", "message"} <= set(reason) <= {"code", "message", "fix"}
    assert doc["summary"]["eligible"] == sum(n["eligible"] for n in doc["nodes"])
    # Where a workload's CUDA is unknown, nodes it may land on are "unknown", never "yes".
    status = doc["summary"]["requirementStatus"]
    may = "unknown" if status == "unknown" else "yes"
    assert [n["verdict"] for n in doc["nodes"]] == [
        may if n["eligible"] else "no" for n in doc["nodes"]
    ]
    assert (status == "unknown") == (doc["summary"]["unknown"] is not None)
    assert len(doc["summary"]["warnings"]) == (2 if status == "unknown" else 0)
    assert doc["summary"]["total"] == len(doc["nodes"])


def eligible(doc: dict[str, Any]) -> set[str]:
    return {n["node"] for n in doc["nodes"] if n["eligible"]}


def test_default_explains_every_workload_of_the_bundled_cluster() -> None:
    doc = run_json()
    assert set(doc) == {"workloads", "cluster", "cudaschedVersion"}
    assert doc["cluster"] == {"source": "bundled sample cluster", "sample": True}
    snapshot = bundled_snapshot()
    assert len(doc["workloads"]) == len(workloads_of(snapshot)) == 9
    by_isvc: dict[str, dict[str, Any]] = {}
    for item in doc["workloads"]:
        check_shape(item)
        assert item["workload"] == item["summary"]["workload"]
        assert len(item["nodes"]) == 21
        name = item["workload"].split("/")[2]
        by_isvc[name.split("-predictor-")[0]] = item
    # The chain the demo shows: runtime -> CUDA -> nodes.
    # Triton 24.05 is built with CUDA 12.4 (the image table may add a compute floor).
    assert by_isvc["resnet50"]["summary"]["requirement"].startswith("cuda>=12.4")
    assert by_isvc["resnet50"]["summary"]["runtime"] == "ClusterServingRuntime kserve-tritonserver"
    assert by_isvc["iris"]["summary"]["requirement"] is None
    assert by_isvc["iris"]["summary"]["requirementStatus"] == "none"
    assert by_isvc["iris"]["summary"]["eligible"] == 21
    statuses = {name: item["summary"]["requirementStatus"] for name, item in by_isvc.items()}
    assert [name for name, status in statuses.items() if status == "unknown"] == ["bert-legacy"]
    mnist = by_isvc["bert-legacy"]["summary"]
    assert mnist["unknown"]["reason"] == "tag_not_recorded"
    assert mnist["warnings"][1] == (
        "cudasched: to constrain it, label ClusterServingRuntime kserve-torchserve with "
        "cudasched.io/cuda-version"
    )
    qwen = by_isvc["qwen2-7b"]
    assert qwen["summary"]["requirement"].startswith("cuda>=12.8")
    assert eligible(qwen) == {"ip-10-42-22-41.us-west-2.compute.internal"}
    assert eligible(by_isvc["gpt-oss-20b"]) == {"ip-10-42-32-66.us-west-2.compute.internal"}
    assert by_isvc["nemotron-nano-fp4"]["summary"]["eligible"] == 0
    assert by_isvc["llama3-8b"]["summary"]["runtime"] == "ServingRuntime vllm-custom"
    smoke = by_isvc["cuda-smoke-test"]
    assert smoke["summary"]["requirementSource"] == "annotation cudasched.io/cuda-version"
    assert smoke["summary"]["eligible"] == 4


def test_one_workload_with_nodes_file() -> None:
    doc = run_json(
        "--workload",
        str(DATA / "deployment-vllm.yaml"),
        "--nodes-file",
        str(DATA / "nodes-gfd-old.yaml"),
    )
    check_shape(doc)
    assert doc["summary"]["workload"] == "serving/Deployment/vllm-llama"
    assert doc["summary"]["runtime"] is None
    assert [n["node"] for n in doc["nodes"]] == ["gpu-t4-07", "gpu-a100-02"]
    assert eligible(doc) == set()
    a100 = doc["nodes"][1]
    codes = [r["code"] for r in a100["reasons"]]
    assert codes == ["driver-too-old", "affinity-mismatch"]


def test_workload_against_cluster_file_and_policy(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.json"
    snapshot = bundled_snapshot()
    cluster.write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": list(snapshot.nodes)})
    )
    job = str(DATA / "job-cuda-compat.json")
    doc = run_json("--workload", job, "--cluster", str(cluster), "--scheme", "cudasched")
    assert doc["summary"]["policy"] == "minor-compat"  # the job's own annotation wins
    assert doc["summary"]["scheme"] == "cudasched"
    assert doc["summary"]["gfdKeys"] is None
    # Minor-version compatibility admits the R535 (CUDA 12.2) pools for a 12.4 build.
    assert {"dc1-a100-01", "dc1-v100-01"} <= eligible(doc)
    assert "ip-10-42-13-64.us-west-2.compute.internal" not in eligible(doc)  # no cudasched labels
    cron = run_json("--workload", str(DATA / "cronjob-gpu.yaml"), "--cluster", str(cluster))
    assert eligible(cron) == {"ip-10-42-32-66.us-west-2.compute.internal"}


def test_several_workloads_in_one_file(tmp_path: Path) -> None:
    path = tmp_path / "two.yaml"
    deploy = yaml.safe_load((DATA / "deployment-vllm.yaml").read_text())
    cron = yaml.safe_load((DATA / "cronjob-gpu.yaml").read_text())
    path.write_text(yaml.safe_dump(deploy) + "---\n" + yaml.safe_dump(cron))
    doc = run_json("--workload", str(path))
    assert [w["workload"] for w in doc["workloads"]] == [
        "serving/Deployment/vllm-llama",
        "ml-batch/CronJob/weekly-reindex",
    ]


def test_table_output_fits_100_columns() -> None:
    result = run("--workload", str(DATA / "deployment-vllm.yaml"))
    assert result.exit_code == 0, result.output
    out = result.stdout
    lines = out.splitlines()
    assert lines[0].startswith("serving/Deployment/vllm-llama needs cuda>=12.8, cc>=8.0")
    assert "13 GPU pools: 4 pools (4 nodes) can run it" in out  # summary first
    assert "h200-r570-amzn2023" in out  # pools by plan-drivers' names
    assert max(len(line) for line in lines) <= 100


def _words(text: str) -> set[str]:
    return set(text.split())


@pytest.mark.parametrize("columns", [80, 200])
def test_no_code_or_name_is_ever_cut(columns: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """At any width, every reason code and node name appears whole, and no line is longer
    than the width unless one word is (a word is never broken)."""
    monkeypatch.setenv("COLUMNS", str(columns))
    doc = run_json("isvc/llama3-8b", "-n", "team-nlp")
    for args in ([], ["--nodes"]):
        result = run("isvc/llama3-8b", "-n", "team-nlp", *args)
        assert result.exit_code == 0
        words = _words(result.stdout.replace(",", " ").replace(":", " ").replace("(", " "))
        codes = {r["code"] for n in doc["nodes"] for r in n["reasons"]}
        assert len(codes) >= 5
        assert codes <= words, codes - words
        names = {n["node"].split(".")[0] for n in doc["nodes"]}
        if args:
            assert len(names) == 21 and names <= words, names - words
        for line in result.stdout.splitlines():
            assert len(line) <= columns or " " not in line.strip(), line


def test_by_pool_summary_first_and_counts_agree() -> None:
    doc = run_json("isvc/llama3-8b", "-n", "team-nlp")
    out = run("isvc/llama3-8b", "-n", "team-nlp").stdout
    second = out.splitlines()[2] if out.splitlines()[1].startswith("  ") else out.splitlines()[1]
    assert second.startswith("21 nodes in 13 GPU pools: ")
    eligible = doc["summary"]["eligible"]
    assert f"({eligible} nodes) can run it" in out
    assert out.index("cannot run it") < out.index("can run it\n")
    failing = run("isvc/llama3-8b", "-n", "team-nlp", "--only-failing").stdout
    assert "can run it\n" not in failing and "cannot run it" in failing
    per_node = run("isvc/llama3-8b", "-n", "team-nlp", "--nodes").stdout
    assert per_node.count("\n  dc1-") + per_node.count("\n  ip-") + per_node.count("\n  ws-") == 21


def test_table_for_the_whole_sample() -> None:
    result = run()
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    # the summary first; bert-legacy's CUDA is unknown: schedulable, not known to run anywhere
    assert lines[0] == "9 workloads: 7 can run on some node, 1 on none, 1 of unknown CUDA"
    assert result.stdout.count("/Pod/") == 9
    assert "nemotron-nano-fp4-predictor-b17093d8bd-6f518: cuda>=13.2; 0/21 nodes" in (
        " ".join(result.stdout.split())
    )
    assert len(lines) < 40
    assert max(len(line) for line in lines) <= 100


def test_the_overview_says_what_each_workload_needs_as_its_own_answer_does() -> None:
    """A requirement that is unknown is not "no requirement": the one-line-per-workload view
    words it as the workload's own answer does."""
    out = " ".join(run().stdout.split())
    assert "bert-legacy-predictor-daca355946-5a3bd: CUDA unknown, not constrained; 20/21" in out
    assert "iris-predictor-13bfdec2c2-bac13: no CUDA requirement; 21/21" in out
    single = " ".join(run("isvc/bert-legacy", "-n", "team-vision").stdout.split())
    assert "needs CUDA unknown, not constrained" in single


def test_selector_and_namespace_choose_the_workloads() -> None:
    everything = run_json()["workloads"]
    nlp = run_json("-n", "team-nlp")["workloads"]
    assert len(nlp) == 4 and all(w["workload"].startswith("team-nlp/") for w in nlp)
    assert len(everything) == 9
    chosen = run_json("-l", "app.kubernetes.io/name=cuda-smoke-test")
    assert [w["workload"] for w in chosen["workloads"]] == ["ml-batch/Pod/cuda-smoke-test"]
    assert chosen["cluster"]["scope"] == "selector app.kubernetes.io/name=cuda-smoke-test"
    none = run("-l", "nothing=here")
    assert none.exit_code == 2 and "in scope (selector nothing=here)" in none.stderr
    also_all = run_json("-A")["workloads"]
    assert [w["workload"] for w in also_all] == [w["workload"] for w in everything]


def test_wide_tables_for_the_whole_sample() -> None:
    result = run("-o", "wide")
    assert result.exit_code == 0, result.output
    assert result.stdout.count("eligible;") == 8
    assert result.stdout.count("schedulable, none known to run it;") == 1
    assert "no CUDA requirement (not constrained)" in result.stdout
    # The CPU predictor has none; the GPU one of unknown CUDA is said to be unknown, with
    # admission's own warnings.
    assert "CUDA unknown, not constrained (tag's CUDA not recorded" in result.stdout
    assert "Warning: cudasched: not constrained, CUDA unknown:" in result.stdout
    assert "Warning: cudasched: to constrain it, label ClusterServingRuntime" in result.stdout
    overview = result.stdout[result.stdout.rindex("summary") :]
    assert "aml-vllm-cuda-12.8" in overview and "0/21" in overview


def test_an_unknown_requirement_is_said_in_the_grouped_view() -> None:
    out = " ".join(
        run("pod/bert-legacy-predictor-daca355946-5a3bd", "-n", "team-vision").stdout.split()
    )
    assert "CUDA unknown, not constrained (tag's CUDA not recorded" in out
    assert "none known to run it" in out and "can run it" not in out
    assert "Warning: cudasched: to constrain it, label ClusterServingRuntime" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workload", "/nonexistent/w.yaml"], "/nonexistent/w.yaml: no such file"),
        (["--policy", "lenient"], "invalid policy 'lenient'"),
        (["--nodes-file", "/nonexistent/n.yaml"], "/nonexistent/n.yaml: no such file"),
        (["-n", "team-nlp", "-A"], "give one"),
        (["isvc/x", "-A"], "do not go together"),
        (["-l", "app in (a"], "unbalanced parentheses"),
        (["-n", "Team_NLP"], "is not a namespace name"),
        (["--cluster", str(DATA / "deployment-vllm.yaml")], "no Node objects"),
    ],
)
def test_bad_input_exits_2_with_one_line(args: list[str], message: str) -> None:
    result = run(*args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("cudasched: error: ")
    assert message in lines[0]
    assert result.stdout == ""


def test_bad_workload_files_exit_2(tmp_path: Path) -> None:
    config_map = tmp_path / "cm.yaml"
    config_map.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n")
    result = run("--workload", str(config_map))
    assert result.exit_code == 2
    assert "no Pod, workload" in result.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations:\n"
        "    cudasched.io/cuda-version: twelve\nspec:\n  containers: []\n"
    )
    result = run("--workload", str(bad))
    assert result.exit_code == 2
    assert "invalid CUDA version 'twelve'" in result.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: [\n")
    result = run("--workload", str(broken), "-o", "json")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"cudasched: error: {broken}: invalid YAML at line")


def test_scheme_choice_is_validated() -> None:
    result = run("--scheme", "nfd")
    assert result.exit_code == 2


def test_inference_services_explained_like_their_predictor_pods(tmp_path: Path) -> None:
    snapshot = bundled_snapshot()
    path = tmp_path / "isvcs.yaml"
    path.write_text("---\n".join(yaml.safe_dump(i) for i in snapshot.inference_services))
    services = run_json("--workload", str(path))["workloads"]
    pods = {w["workload"]: w for w in run_json()["workloads"]}
    assert len(services) == len(snapshot.inference_services)
    for item in services:
        check_shape(item)
        namespace, kind, name = item["workload"].split("/")
        assert kind == "InferenceService"
        pod = next(w for k, w in pods.items() if k.startswith(f"{namespace}/Pod/{name}-predictor-"))
        assert eligible(item) == eligible(pod), name
        assert item["summary"]["requirement"] == pod["summary"]["requirement"], name
        assert item["summary"]["runtime"] == pod["summary"]["runtime"], name
        assert [n["score"] for n in item["nodes"]] == [n["score"] for n in pod["nodes"]], name


def test_inference_service_without_pod_is_explained_in_cluster_mode(tmp_path: Path) -> None:
    snapshot = bundled_snapshot()
    kept = [p for p in snapshot.pods if "qwen2-7b" not in p["metadata"]["name"]]
    items = [*snapshot.nodes, *snapshot.inference_services, *snapshot.cluster_serving_runtimes]
    items += [*snapshot.serving_runtimes, *kept]
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    doc = run_json("--cluster", str(cluster))
    names = [w["workload"] for w in doc["workloads"]]
    assert names[-1] == "team-nlp/InferenceService/qwen2-7b"
    assert sum(1 for n in names if "/InferenceService/" in n) == 1
    assert eligible(doc["workloads"][-1]) == {"ip-10-42-22-41.us-west-2.compute.internal"}


@pytest.mark.parametrize(
    "printed", ["team-nlp/InferenceService/llama3-8b", "InferenceService/team-nlp/llama3-8b"]
)
def test_a_workload_as_explain_or_audit_prints_it_is_explained_when_pasted_back(
    printed: str,
) -> None:
    """The overview names workloads NAMESPACE/Kind/NAME and audit Kind/NAMESPACE/NAME: either,
    copied into ``explain``, explains that workload; a -n that says otherwise is refused."""
    assert run_json(printed)["summary"]["workload"] == "team-nlp/InferenceService/llama3-8b"
    assert run_json(printed, "-n", "team-nlp")["summary"]["eligible"] == 11
    other = run(printed, "-n", "team-vision")
    assert (other.exit_code, other.stdout) == (2, "")
    assert other.stderr == (
        f"cudasched: error: {printed!r} names the namespace 'team-nlp' but -n/--namespace says "
        "'team-vision'\n"
    )
    assert run("team-nlp/Service/llama3-8b").exit_code == 2


def test_a_pod_is_explained_from_where_it_is() -> None:
    """Issue 27 item 7: explain pod/X says first the node it is bound to, its pool and whether
    that node can run it, or that it is pending; -o json gives nodeName and phase."""
    bound = str(DATA / "audit" / "bound.yaml")
    text = run("pod/vllm-0", "-n", "llm", "--cluster", bound)
    assert text.exit_code == 0, text.output
    assert text.stdout.splitlines()[0].startswith(
        "bound to gpu-h100-1 (h100-80gb-hbm3-r550-amazon-linux-2023.6.20241121, Running): it "
        "cannot run it"
    )
    doc = run_json("pod/vllm-0", "-n", "llm", "--cluster", bound)
    assert (doc["summary"]["nodeName"], doc["summary"]["phase"]) == ("gpu-h100-1", "Running")
    pending = run("pod/cuda-smoke-test", "-n", "ml-batch", "--sample")
    assert pending.stdout.splitlines()[0] == "Pending: not bound to a node"
    service = run_json("isvc/llama3-8b", "-n", "team-nlp", "--sample")
    assert "nodeName" not in service["summary"]  # a service is on no node: its pods are


def _deployment_cluster(tmp_path: Path) -> str:
    """bound.yaml plus a Deployment's four replicas: two on a node that cannot run them, one
    where it can run, one pending (named as the Deployment controller names them)."""
    import copy

    doc = yaml.safe_load((DATA / "audit" / "bound.yaml").read_text())
    replica = next(o for o in doc["items"] if o["metadata"]["name"] == "vllm-next-0")
    for name, node in (("a", "gpu-h100-1"), ("b", "gpu-h100-1"), ("c", "gpu-h100-2"), ("d", None)):
        pod = copy.deepcopy(replica)
        pod["metadata"] = {
            "name": f"chat-5d8f7c9b6d-{name}",
            "namespace": "llm",
            "labels": {"app": "chat", "pod-template-hash": "5d8f7c9b6d"},
            "annotations": {"cudasched.io/cuda-version": "12.8"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "chat-5d8f7c9b6d",
                    "controller": True,
                    "uid": "u",
                }
            ],
        }
        pod["spec"]["nodeName"] = node
        pod["status"] = {"phase": "Running" if node else "Pending"}
        if node is None:
            del pod["spec"]["nodeName"]
        doc["items"].append(pod)
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_explain_all_tells_a_controllers_pods_as_one_workload(tmp_path: Path) -> None:
    """Issue 27 item 9: explain -A listed each replica; a Deployment's pods are one line about
    the Deployment, with how many sit where they cannot run and the command that moves them,
    and -o json names each pod's owner."""
    cluster = _deployment_cluster(tmp_path)
    text = run("-A", "--cluster", cluster)
    assert text.exit_code == 0, text.output
    lines = " ".join(text.stdout.split())
    assert "chat-5d8f7c9b6d" not in lines
    assert (
        "llm/Deployment/chat (4 pods): cuda>=12.8; 1/2 nodes, 1/2 pools; driver-too-old; 2 of 4 "
        "pods on nodes that cannot run them (kubectl rollout restart deployment/chat -n llm); 1 "
        "pending" in lines
    )
    assert text.stdout.startswith("6 workloads: ")
    owners = {
        w["workload"]: w["summary"]["owner"]
        for w in run_json("-A", "--cluster", cluster)["workloads"]
    }
    assert owners["llm/Pod/chat-5d8f7c9b6d-d"] == "llm/Deployment/chat"
    assert owners["llm/Pod/vllm-next-0"] is None


@pytest.mark.parametrize("output", ["table", "json", "wide"])
def test_only_failing_keeps_only_failing_workloads_in_every_output(
    tmp_path: Path, output: str
) -> None:
    """Issue 27 item 9: --only-failing filtered the text overview only (and kept a workload
    whenever some node could not run it, which on any real cluster is every one). Of several
    workloads it keeps those no node can run and those with pods where they cannot run."""
    cluster = _deployment_cluster(tmp_path)
    result = run("-A", "--cluster", cluster, "--only-failing", "-o", output)
    assert result.exit_code == 0, result.output
    kept = {"vllm-0", "vllm-next-0", "vllm-gated-0", "Deployment/chat"}
    dropped = {"vllm-relaxed-0", "triton-0"}
    if output == "json":
        names = {w["workload"] for w in json.loads(result.stdout)["workloads"]}
        assert names == {
            "llm/Pod/vllm-0",
            "llm/Pod/vllm-next-0",
            "llm/Pod/vllm-gated-0",
            "llm/Pod/chat-5d8f7c9b6d-a",
            "llm/Pod/chat-5d8f7c9b6d-b",
        }
    else:
        shown = {k for k in kept | dropped if k in result.stdout}
        assert shown == (kept if output == "table" else kept - {"Deployment/chat"})


def test_the_toolkit_mode_decides_whether_the_gate_refuses(tmp_path: Path) -> None:
    # An image whose NVIDIA_REQUIRE_CUDA asks for 12.8: the legacy toolkit refuses the R535
    # nodes that minor-version compatibility would run it on; in CDI mode nothing checks it.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gated", "namespace": "default"},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.corp/ml/server:1",
                    "env": [{"name": "NVIDIA_REQUIRE_CUDA", "value": "cuda>=12.8"}],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ]
        },
    }
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump(pod))
    args = ("--workload", str(path), "--policy", "minor-compat", "--scheme", "cudasched")
    legacy = run_json(*args)
    cdi = run_json(*args, "--toolkit-mode", "cdi")
    assert eligible(legacy) < eligible(cdi)
    gated = {n["node"] for n in legacy["nodes"] if n["reasons"][0]["code"] == "require-cuda-unmet"}
    assert eligible(cdi) - eligible(legacy) <= gated
    # A dump with the GPU Operator's ClusterPolicy (v26.7: CDI by default) says the same.
    cluster = tmp_path / "cluster.yaml"
    policy = {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {
            "name": "cluster-policy",
            "labels": {"app.kubernetes.io/version": "v26.7.0"},
        },
        "spec": {},
    }
    items = [*bundled_snapshot().nodes, policy]
    cluster.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    result = run(*args, "--cluster", str(cluster), "-o", "json")
    assert result.exit_code == 0, result.output
    assert eligible(json.loads(result.stdout)) == eligible(cdi)
    assert "container toolkit mode cdi: ClusterPolicy cluster-policy" in result.stderr


def _sample_with_an_unreadable_pod(tmp_path: Path) -> Path:
    """The bundled sample plus one GPU pod whose cudasched.io/cuda-version cannot be read."""
    from tests.support.builders import pod

    bad = pod("bad-version", "ns1", annotations={"cudasched.io/cuda-version": "twelve"})
    path = tmp_path / "cluster.yaml"
    objects = [*bundled_snapshot().objects(), bad]
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}))
    return path


def test_a_workload_whose_requirement_cannot_be_read_is_left_out_and_named(
    tmp_path: Path,
) -> None:
    """One pod with an invalid cudasched.io value (admitted unconstrained with a warning) made
    every explain of the cluster fail; it is left out, named on stderr and in the JSON, and
    the rest is explained. Asked for by name, it is still bad input."""
    cluster = str(_sample_with_an_unreadable_pod(tmp_path))
    result = run("--cluster", cluster, "-o", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    [left] = doc["cluster"]["leftOut"]
    assert left["workload"] == "ns1/Pod/bad-version"
    assert left["error"].startswith("invalid cudasched.io/cuda-version on pod bad-version")
    assert len(doc["workloads"]) == len(workloads_of(bundled_snapshot()))
    assert "ns1/Pod/bad-version left out: invalid" in result.stderr
    named = run("--cluster", cluster, "pod/bad-version", "-n", "ns1")
    assert named.exit_code == 2 and "invalid CUDA version 'twelve'" in named.stderr
