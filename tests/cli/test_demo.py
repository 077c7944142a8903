"""``cudasched demo``: the real HTTPS webhook, end to end, on the bundled sample cluster."""

from __future__ import annotations

import threading

from typer.testing import CliRunner

from cudasched.cli import app
from cudasched.cli.demo import run_demo
from cudasched.cluster.snapshot import bundled_snapshot
from cudasched.webhook.admission.review import creation_review
from cudasched.workloads.kserve import is_predictor_pod


def test_demo_runs_end_to_end_and_leaves_nothing_running() -> None:
    before = {t.ident for t in threading.enumerate()}
    result = CliRunner().invoke(app, ["demo"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    # Every sample workload appears, with what the webhook decided for it.
    for workload in (
        "team-vision/resnet50",
        "team-vision/iris",
        "team-nlp/qwen2-7b",
        "team-nlp/gpt-oss-20b",
        "team-nlp/nemotron-nano-fp4",
        "ml-batch/cuda-smoke-test",
    ):
        assert workload in out, workload
    assert "cuda>=12.8" in out and "cuda>=13.0" in out
    assert "no node can run CUDA 13.2" in out
    assert "aml-vllm-cuda-12.8" in out
    assert "https://127.0.0.1:" in out
    assert "server stopped" in out
    # The server thread is gone once the command returns.
    leftover = [
        t for t in threading.enumerate() if t.ident not in before and t.name == "cudasched-webhook"
    ]
    assert leftover == []


def test_run_demo_rows_match_the_sample_cluster() -> None:
    snapshot = bundled_snapshot()
    rows, url, _elapsed = run_demo(snapshot)
    assert url.startswith("https://127.0.0.1:")
    by_workload = {row.workload: row for row in rows}
    assert len(rows) == len(snapshot.pods)
    # A CPU predictor is never constrained: every node remains eligible.
    iris = by_workload["team-vision/iris"]
    assert iris.requirement == "-" and len(iris.eligible) == len(snapshot.nodes)
    # Alauda runtimes: CUDA 12.8 fits only the R570 H100 inside the user's nodeSelector pool;
    # CUDA 13.0 fits only the B200 on R580.
    qwen = by_workload["team-nlp/qwen2-7b"]
    assert qwen.requirement == "cuda>=12.8" and "cpaas.io/cuda-version" in qwen.source
    assert [n.split(".")[0] for n in qwen.eligible] == ["ip-10-42-22-41"]
    gpt = by_workload["team-nlp/gpt-oss-20b"]
    assert [n.split(".")[0] for n in gpt.eligible] == ["ip-10-42-32-66"]
    # Nothing can run CUDA 13.2: admitted with a warning, no eligible node.
    nemotron = by_workload["team-nlp/nemotron-nano-fp4"]
    assert nemotron.allowed and nemotron.eligible == ()
    assert any("no node can run CUDA 13.2" in w for w in nemotron.warnings)
    for row in rows:
        assert all(len(w) <= 120 for w in row.warnings)


def test_creation_review_looks_like_the_api_server() -> None:
    pod = next(p for p in bundled_snapshot().pods if is_predictor_pod(p))
    review = creation_review(pod, uid="u-1")
    req = review["request"]
    assert review["apiVersion"] == "admission.k8s.io/v1" and req["uid"] == "u-1"
    assert req["operation"] == "CREATE" and req["kind"]["kind"] == "Pod"
    assert req["namespace"] == pod["metadata"]["namespace"]
    assert "status" not in req["object"] and "uid" not in req["object"]["metadata"]
    assert req["userInfo"]["username"].endswith(":replicaset-controller")


def test_demo_and_explain_count_the_same_eligible_nodes() -> None:
    """Issue 20 item 4: one count per thing. The demo's eligible nodes (the webhook's patch
    evaluated) are explain's for every pod, the CPU node counted by the same rule."""
    import json

    rows, _, _ = run_demo(bundled_snapshot())
    explained = json.loads(CliRunner().invoke(app, ["explain", "-o", "json"]).stdout)
    counts = [w["summary"]["eligible"] for w in explained["workloads"]]
    assert [len(row.eligible) for row in rows] == counts
    assert counts == [11, 9, 20, 21, 11, 1, 1, 0, 4]


def test_a_pod_whose_requirement_cannot_be_read_is_a_row_not_a_failure() -> None:
    """Admission leaves such a pod unconstrained with a warning; the demo showed nothing at all
    (its own reading of the pod raised). It is one row, saying why."""
    from cudasched.cluster.snapshot import ClusterSnapshot
    from tests.support.builders import pod

    bad = pod("bad-version", "ns1", annotations={"cudasched.io/cuda-version": "twelve"})
    snapshot = ClusterSnapshot.from_objects([*bundled_snapshot().objects(), bad])
    rows, _url, _elapsed = run_demo(snapshot)
    [row] = [r for r in rows if r.workload == "ns1/bad-version"]
    assert row.requirement == "unreadable" and "invalid CUDA version 'twelve'" in row.source
    assert row.allowed and any("pod not constrained" in w for w in row.warnings)
    assert len(rows) == len(snapshot.pods)
