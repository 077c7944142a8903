"""Every ``--live`` command and the ``kubectl cudasched`` plugin against the real API server:
the same answers as from a snapshot file of the same objects, paging through more than one page
of pods, and a ``410 Gone`` in the middle of a list (provoked for real: etcd compacted between two
pages the way another API server's compactor does it, through a recording proxy).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import yaml

from tests.harness.controlplane.plane import ControlPlane
from tests.harness.fleet import cudasched_command
from tests.harness.kube import Api
from tests.harness.proxy import compact_etcd, proxy, wait_until_expired
from tests.harness.sample import Sample
from tests.harness.workloads import gpu_pod
from tests.support.outputs import without_source

PAGING_NS = "e2e-paging"
PAGING_PODS = 620  # more than cudasched's page of 500
FACTS_NS = "e2e-live-facts"
FACTS_DIGEST = "sha256:" + "5e" * 32
FACTS_PATH = "/apis/cudasched.io/v1alpha1/imagefacts"


def run(
    plane: ControlPlane, *args: str, kubeconfig: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = plane.env()
    env["KUBECONFIG"] = str(kubeconfig or plane.kubeconfig)
    return subprocess.run(
        [*cudasched_command(), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def paged(api: Api, sample: Sample) -> Iterator[int]:
    """Enough CPU pods for more than one page (the webhook never sees CPU pods)."""
    api.ensure_namespace(PAGING_NS)
    pods = [
        gpu_pod(f"page-{i:04d}", PAGING_NS, "registry.local/web:1", gpus=0)
        for i in range(PAGING_PODS)
    ]
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda p: api.create(p), pods))
    yield PAGING_PODS


@pytest.fixture(scope="module")
def stored_facts(
    plane: ControlPlane, api: Api, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The ImageFacts CRD, and a person's override in the object of a digest a pod of
    FACTS_NS runs (an in-house image no table knows): the cluster keeps what its image needs,
    so ``--live`` answers by it, and a snapshot must too. Bound at creation, so no scheduler
    moves it between the reads. The object goes afterwards; the CRD stays, as the ImageFacts
    tests leave it."""
    from cudasched.install.imagefacts import image_facts_crd
    from cudasched.knowledge.imagefacts import facts_name, facts_object

    crd = tmp_path_factory.mktemp("facts") / "crd.yaml"
    crd.write_text(yaml.safe_dump(image_facts_crd()))
    plane.kubectl("apply", "-f", str(crd))
    crd_path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/imagefacts.cudasched.io"
    api.wait_for(
        "the ImageFacts CRD to be established",
        lambda: any(
            c["type"] == "Established" and c["status"] == "True"
            for c in (api.get(crd_path).get("status") or {}).get("conditions") or []
        ),
    )
    facts = facts_object(FACTS_DIGEST)
    facts["spec"]["override"] = {"cuda": "12.1", "reason": "built on CUDA 12.1"}
    api.wait_for("ImageFacts to be served", lambda: api.exists(FACTS_PATH))
    api.call("POST", FACTS_PATH, body=facts)
    api.ensure_namespace(FACTS_NS)
    pod = gpu_pod("in-house", FACTS_NS, f"registry.local/acme/model@{FACTS_DIGEST}")
    pod["spec"]["nodeName"] = next(iter(api.list("/api/v1/nodes")))["metadata"]["name"]
    api.create(pod)
    try:
        yield facts_name(FACTS_DIGEST)
    finally:
        api.delete(f"{FACTS_PATH}/{facts_name(FACTS_DIGEST)}")
        plane.kubectl("delete", "pods", "--all", "-n", FACTS_NS, "--force", "--grace-period=0")


@pytest.fixture(scope="module")
def snapshot_file(
    plane: ControlPlane, paged: int, stored_facts: str, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    path = tmp_path_factory.mktemp("live") / "cluster.yaml"
    done = run(plane, "snapshot", "--live")
    path.write_text(ok(done))
    assert "does not serve" not in done.stderr, (
        done.stderr
    )  # every CRD cudasched reads is installed
    return path


def _items(text: str) -> list[dict[str, object]]:
    return list(yaml.safe_load(text)["items"])


def test_snapshot_reads_every_pod_through_pages(
    plane: ControlPlane, api: Api, snapshot_file: Path, tmp_path: Path
) -> None:
    expected = sum(1 for _ in api.list("/api/v1/pods", limit=0))
    with proxy(plane, tmp_path) as recording:
        done = run(plane, "snapshot", "--live", "-o", "json", kubeconfig=recording.kubeconfig)
    items = json.loads(ok(done))["items"]
    assert sum(1 for i in items if i["kind"] == "Pod") == expected > 500
    pod_pages = [e for e in recording.exchanges if e.path == "/api/v1/pods"]
    assert len(pod_pages) >= 2, pod_pages
    assert pod_pages[0].query.get("limit") == "500" and "continue" in pod_pages[1].query
    kinds = {i["kind"] for i in items}
    assert {"Node", "Pod", "InferenceService", "ServingRuntime", "ClusterServingRuntime"} <= kinds
    assert "Secret" not in kinds


def test_410_during_a_list_restarts_it(
    plane: ControlPlane, api: Api, paged: int, tmp_path: Path
) -> None:
    """The first page cudasched gets is a genuine page of the API server whose continue token
    has since expired: etcd was compacted after it was served (the way another API server's
    compactor does, see compact_etcd) and the API server answers 410 to that token. The proxy
    replays that page to cudasched (the API server's watch cache takes up to 15 s to notice a
    compaction, longer than cudasched waits for an answer), so cudasched's continue request meets
    the real 410."""
    expected = sum(1 for _ in api.list("/api/v1/pods", limit=0))
    first = api.send("GET", "/api/v1/pods", params={"limit": "500"})
    token = first.json()["metadata"]["continue"]
    compact_etcd(plane)
    wait_until_expired(api, "/api/v1/pods", token)
    replayed: list[str] = []

    with proxy(plane, tmp_path) as recording:

        def before(method: str, path: str, query: dict[str, str]) -> httpx.Response | None:
            if path == "/api/v1/pods" and "continue" not in query and not replayed:
                replayed.append(query.get("limit", ""))
                return first
            return None

        recording.before = before
        done = run(plane, "snapshot", "--live", "-o", "json", kubeconfig=recording.kubeconfig)
    items = json.loads(ok(done))["items"]
    pages = [
        (e.status, "continue" in e.query) for e in recording.exchanges if e.path == "/api/v1/pods"
    ]
    assert replayed == ["500"]
    assert pages[:2] == [(200, False), (410, True)], pages  # the real API server said Gone ...
    assert pages[-1] == (200, True) and [s for s, _ in pages].count(410) == 1, pages
    assert sum(1 for i in items if i["kind"] == "Pod") == expected  # ... and the list restarted


@pytest.mark.parametrize(
    "args",
    [
        ["explain", "isvc/llama3-8b", "-n", "team-nlp", "-o", "json"],
        ["explain", "-n", "team-vision", "-o", "json"],
        ["audit", "-o", "json"],
        ["audit", "-n", "team-nlp", "-l", "!aml.cpaas.io/runtime-type", "-o", "json"],
        ["plan-drivers", "-o", "yaml"],
        ["explain", "-n", FACTS_NS, "-o", "json"],
        ["audit", "-n", FACTS_NS, "-o", "json"],
    ],
    ids=[
        "explain-isvc",
        "explain-namespace",
        "audit",
        "audit-scoped",
        "plan-drivers",
        "explain-stored-facts",
        "audit-stored-facts",
    ],
)
def test_live_answers_equal_the_snapshot_answers(
    plane: ControlPlane, snapshot_file: Path, args: list[str]
) -> None:
    live = run(plane, *args, "--live")
    offline = run(plane, *args, "--cluster", str(snapshot_file))
    # audit exits 1 when it finds an error (the sample has one); both must agree on that too
    assert live.returncode == offline.returncode and live.returncode in (0, 1), live.stderr
    if args[0] == "plan-drivers":  # the first comment line names the source
        assert live.stdout.split("\n", 1)[0].startswith("# cudasched plan-drivers: live cluster")
        assert live.stdout.split("\n", 1)[1] == offline.stdout.split("\n", 1)[1]
    else:  # identical but for where the answer says the cluster came from
        assert without_source(live.stdout) == without_source(offline.stdout)


def test_the_snapshot_holds_the_image_facts_the_live_answers_use(
    plane: ControlPlane, snapshot_file: Path, stored_facts: str
) -> None:
    """Issue 29's ImageFacts are part of what a snapshot carries: the pod's requirement comes
    from the override kept in the cluster, live and from the file alike."""
    held = [i for i in _items(snapshot_file.read_text()) if i["kind"] == "ImageFacts"]
    assert [i["metadata"]["name"] for i in held] == [stored_facts]  # type: ignore[index]
    live = json.loads(
        ok(run(plane, "explain", "pod/in-house", "-n", FACTS_NS, "--live", "-o", "json"))
    )
    assert f"override in ImageFacts {stored_facts}" in live["summary"]["requirementSource"]


def test_explain_live_over_the_fleet(plane: ControlPlane, api: Api, snapshot_file: Path) -> None:
    report = json.loads(
        ok(run(plane, "explain", "isvc/llama3-8b", "-n", "team-nlp", "--live", "-o", "json"))
    )
    nodes = sum(1 for _ in api.list("/api/v1/nodes"))
    assert report["summary"]["total"] == nodes
    assert report["summary"]["requirement"] == "cuda>=12.4"
    # 11 of the sample's 21 label sets run it; the fleet holds each three times
    assert report["summary"]["eligible"] == 33


def test_report_and_demo_and_mutate_live(
    plane: ControlPlane, sample: Sample, tmp_path: Path
) -> None:
    html = tmp_path / "report.html"
    ok(run(plane, "report", "--live", "--output-file", str(html)))
    assert "<html" in html.read_text()[:2000].lower()
    demo = ok(run(plane, "demo", "--live"))
    assert "llama3-8b" in demo
    pod = next(
        o for o in sample.objects if o["kind"] == "Pod" and "llama3" in o["metadata"]["name"]
    )  # type: ignore[index,operator]
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump(pod))
    review = json.loads(ok(run(plane, "mutate", str(path), "--live")))
    assert review["response"]["allowed"] is True
    assert review["response"]["auditAnnotations"]["requirement"].startswith("cuda>=12.4")


def test_kubectl_plugin(plane: ControlPlane, sample: Sample) -> None:
    env = plane.env()
    env["PATH"] = os.pathsep.join([str(Path(cudasched_command()[0]).parent), env["PATH"]])
    listed = subprocess.run(
        [str(plane.binaries.kubectl), "plugin", "list"],
        capture_output=True,
        text=True,
        env=env,
        check=False,  # type: ignore[union-attr]
    )
    assert "kubectl-cudasched" in listed.stdout
    explained = subprocess.run(
        [
            str(plane.binaries.kubectl),
            "cudasched",
            "-n",
            "team-nlp",
            "explain",
            "isvc/llama3-8b",
            "-o",
            "json",
        ],  # type: ignore[union-attr]
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert explained.returncode == 0, explained.stderr
    summary = json.loads(explained.stdout)["summary"]
    assert summary["workload"] == "team-nlp/InferenceService/llama3-8b"
    assert summary["eligible"] == 33
    # Issue 20's done-when: kubectl cudasched audit -n X -l Y against the real API server.
    scoped = ["-n", "team-nlp", "-l", "!aml.cpaas.io/runtime-type", "-o", "json"]
    audited = subprocess.run(
        [str(plane.binaries.kubectl), "cudasched", "audit", *scoped],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert audited.returncode == 1, audited.stderr  # nemotron's no-compatible-node: an error
    doc = json.loads(audited.stdout)
    found = [(f["code"], f["object"]) for f in doc["findings"]]
    assert ("no-compatible-node", "InferenceService/team-nlp/nemotron-nano-fp4") in found
    assert [o for _, o in found if not o.startswith(("Node/", "InferenceService/team-nlp/"))] == []
    assert doc["cluster"]["scope"] == "namespace team-nlp, selector !aml.cpaas.io/runtime-type"
    snap = subprocess.run(
        [
            str(plane.binaries.kubectl),
            "cudasched",
            "snapshot",
            "-o",
            "json",
            "--kubeconfig",
            str(plane.kubeconfig),
        ],  # type: ignore[union-attr]
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert snap.returncode == 0, snap.stderr
    assert any(i["kind"] == "InferenceService" for i in json.loads(snap.stdout)["items"])
