"""The watch cache against a mock Kubernetes API server (kmock) over real HTTP.

Every test talks to the cache only through the Kubernetes API traffic kmock serves: objects are
created, patched and deleted with API calls, failures are scripted as API responses. Nothing in
the client is patched.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import kmock
import pytest

from cudasched.webhook.background.watchcache import ClusterCache
from cudasched.webhook.metrics import WebhookMetrics
from tests.harness.controlplane.processes import free_port
from tests.support import builders

NODES = "/api/v1/nodes"
ISVCS = "/apis/serving.kserve.io/v1beta1/namespaces/{ns}/inferenceservices"
RUNTIMES = "/apis/serving.kserve.io/v1alpha1/namespaces/{ns}/servingruntimes"
CLUSTER_RUNTIMES = "/apis/serving.kserve.io/v1alpha1/clusterservingruntimes"
LLMISVCS = "/apis/serving.kserve.io/v1alpha1/namespaces/{ns}/llminferenceservices"


@dataclass(frozen=True)
class Snapshot:
    """A stand-in for ClusterState: what the cache handed to the builder."""

    nodes: dict[str, dict[str, str]]
    isvcs: tuple[str, ...]
    runtimes: tuple[str, ...]
    cluster_runtimes: tuple[str, ...]
    raw_nodes: tuple[dict[str, Any], ...]
    llmisvcs: tuple[str, ...] = ()


def own_labels(obj: dict[str, Any]) -> dict[str, str]:
    """A node's labels less the kubelet's own (``kubernetes.io/``), which every built node
    carries: the tests compare the labels they set."""
    labels = obj["metadata"].get("labels") or {}
    return {k: v for k, v in labels.items() if not k.startswith("kubernetes.io/")}


def build(nodes, isvcs, runtimes, cluster_runtimes, llmisvcs) -> Snapshot:
    def names(objs):
        return tuple(
            sorted(
                f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}".lstrip("/")
                for o in objs
            )
        )

    return Snapshot(
        nodes={n["metadata"]["name"]: own_labels(n) for n in nodes},
        isvcs=names(isvcs),
        runtimes=names(runtimes),
        cluster_runtimes=names(cluster_runtimes),
        raw_nodes=tuple(nodes),
        llmisvcs=names(llmisvcs),
    )


def node(name: str, **labels: str) -> dict[str, Any]:
    """A Node as a LIST returns it (managed fields, annotations, images) with ``labels``."""
    return builders.node(name, gpu=None, driver=None, labels=labels, listed=True)


def named(name: str, namespace: str | None = None, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"metadata": meta, "spec": spec}


def make_cache(url: Any, **kwargs: Any) -> ClusterCache:
    options: dict[str, Any] = {
        "base_url": str(url).rstrip("/"),
        "build_state": build,
        "debounce_seconds": 0.01,
        "backoff_initial": 0.02,
        "backoff_max": 0.1,
        "missing_crd_retry_seconds": 0.1,
    }
    options.update(kwargs)
    return ClusterCache(**options)


def requests_to(server: kmock.RawHandler, method: str, path: str, *, watch: bool) -> int:
    count = 0
    for request in list(server):
        if request.method.value != method or request.url.path != path:
            continue
        if (request.url.query.get("watch") == "true") == watch:
            count += 1
    return count


async def test_initial_list_publishes_every_kind(kmock: kmock.KubernetesEmulator) -> None:
    listed = node("gpu-a", **{"nvidia.com/cuda.runtime.major": "12"})
    await kmock.post(NODES, json=listed)
    await kmock.post(NODES, json=node("cpu-b"))
    await kmock.post(ISVCS.format(ns="ml"), json=named("llm", "ml"))
    await kmock.post(RUNTIMES.format(ns="ml"), json=named("vllm", "ml"))
    await kmock.post(CLUSTER_RUNTIMES, json=named("triton"))
    metrics = WebhookMetrics()
    cache = make_cache(kmock.url, metrics=metrics)
    assert not cache.synced
    assert "waiting for the first list" in cache.not_ready_reason
    await cache.start()
    try:
        await eventually(cache, lambda c: c.synced, 10)
        state: Snapshot = cache.state
        assert state.nodes == {"gpu-a": {"nvidia.com/cuda.runtime.major": "12"}, "cpu-b": {}}
        assert state.isvcs == ("ml/llm",)
        assert state.runtimes == ("ml/vllm",)
        assert state.cluster_runtimes == ("triton",)
        assert cache.not_ready_reason == ""
        # Nodes are kept small: identity, labels and capacity only.
        stored = {n["metadata"]["name"]: n for n in state.raw_nodes}["gpu-a"]
        kept = ("capacity", "allocatable")
        assert stored["status"] == {k: listed["status"][k] for k in kept}
        assert set(stored["metadata"]) <= {"name", "uid", "resourceVersion", "labels"}
        assert [o["metadata"]["name"] for o in cache.objects("inferenceservices")] == ["llm"]
        assert "managedFields" not in cache.objects("inferenceservices")[0]["metadata"]
        text = metrics.render().decode()
        assert 'cudasched_cache_objects{kind="nodes"} 2.0' in text
        assert "cudasched_cache_synced 1.0" in text
    finally:
        await cache.stop()


async def test_watch_events_update_the_snapshot(kmock: kmock.KubernetesEmulator) -> None:
    kmock.resources["v1/nodes"] = {}
    for path in (ISVCS.format(ns="ml"), RUNTIMES.format(ns="ml"), CLUSTER_RUNTIMES):
        await kmock.post(path, json=named("seed", "ml" if "namespaces" in path else None))
    cache = make_cache(kmock.url)
    await cache.start()
    try:
        await eventually(cache, lambda c: c.synced, 10)
        assert cache.state.nodes == {}

        await kmock.post(NODES, json=node("n1", tier="a"))
        await eventually(cache, lambda c: c.state.nodes.get("n1") == {"tier": "a"})

        await kmock.patch(f"{NODES}/n1", json={"metadata": {"labels": {"tier": "b"}}})
        await eventually(cache, lambda c: c.state.nodes.get("n1") == {"tier": "b"})

        await kmock.post(ISVCS.format(ns="ml"), json=named("llm", "ml"))
        await eventually(cache, lambda c: "ml/llm" in c.state.isvcs)

        await kmock.delete(f"{NODES}/n1")
        await eventually(cache, lambda c: "n1" not in c.state.nodes)
        await kmock.delete(ISVCS.format(ns="ml") + "/llm")
        await eventually(cache, lambda c: c.state.isvcs == ("ml/seed",))
    finally:
        await cache.stop()


async def test_label_free_node_updates_do_not_rebuild(kmock: kmock.KubernetesEmulator) -> None:
    """Kubelet heartbeats modify Nodes all the time; only label changes matter to admission."""
    await kmock.post(NODES, json=node("n1", tier="a"))
    await kmock.post(NODES, json=node("n2", tier="a"))
    cache = make_cache(kmock.url)
    await cache.start()
    try:
        await eventually(cache, lambda c: c.synced and len(c.state.nodes) == 2, 10)
        # Let the watch's initial replay settle, then count publishes.
        await asyncio.sleep(0.2)
        before = cache.generation
        await kmock.patch(f"{NODES}/n1", json={"status": {"capacity": {"nvidia.com/gpu": "4"}}})
        # GFD's per-pass timestamp label changes on every node every minute.
        stamp = {"nvidia.com/gfd.timestamp": "1764480000"}
        await kmock.patch(f"{NODES}/n1", json={"metadata": {"labels": stamp}})
        await kmock.patch(f"{NODES}/n2", json={"metadata": {"labels": {"tier": "b"}}})
        await eventually(cache, lambda c: c.state.nodes["n2"] == {"tier": "b"})
        await asyncio.sleep(0.1)
        # The label change published; the capacity-only and timestamp-only changes were stored
        # without a rebuild.
        assert cache.generation == before + 1
        stored = {n["metadata"]["name"]: n for n in cache.objects("nodes")}
        assert stored["n1"]["status"]["capacity"]["nvidia.com/gpu"] == "4"
        assert stored["n1"]["metadata"]["labels"]["nvidia.com/gfd.timestamp"] == "1764480000"
    finally:
        await cache.stop()


async def test_isvc_status_churn_does_not_rebuild(kmock: kmock.KubernetesEmulator) -> None:
    """KServe rewrites an InferenceService's status on every reconcile; only the runtime it
    records there matters to admission, so only that change publishes a new snapshot."""
    kmock.resources["v1/nodes"] = {}
    path = ISVCS.format(ns="ml")
    await kmock.post(path, json=named("llm", "ml"))
    cache = make_cache(kmock.url)
    await cache.start()
    try:
        await eventually(cache, lambda c: c.synced and c.state.isvcs == ("ml/llm",), 10)
        await asyncio.sleep(0.2)
        before = cache.generation
        conditions = [{"type": "Ready", "status": "False", "lastTransitionTime": "t1"}]
        await kmock.patch(f"{path}/llm", json={"status": {"conditions": conditions}})
        await eventually(
            cache,
            lambda c: any(
                o.get("status", {}).get("conditions") == conditions
                for o in c.objects("inferenceservices")
            ),
        )
        await asyncio.sleep(0.1)
        assert cache.generation == before  # stored, not rebuilt
        await kmock.patch(f"{path}/llm", json={"status": {"servingRuntimeName": "vllm"}})
        await eventually(cache, lambda c: c.generation == before + 1)
    finally:
        await cache.stop()


async def test_stream_cut_mid_event_reconnects(kmock: kmock.KubernetesEmulator) -> None:
    await kmock.post(NODES, json=node("n1"))
    # The first nodes watch delivers one whole event, then half of the next, then ends.
    first_watch = kmock[kmock.action.WATCH, kmock.resource("v1/nodes")][:1]
    streamed = node("n-streamed", tier="x")
    streamed["metadata"]["resourceVersion"] = "42"
    first_watch << (
        {"type": "ADDED", "object": streamed},
        b'{"type": "MODIFIED", "object": {"apiVersion": "v1", "kind": "No',
    )
    metrics = WebhookMetrics()
    cache = make_cache(kmock.url, metrics=metrics)
    await cache.start()
    try:
        await eventually(cache, lambda c: c.synced, 10)
        await eventually(cache, lambda c: "n-streamed" in c.state.nodes)
        # After the broken stream the watch is re-established and delivers new events.
        await eventually(cache, lambda c: requests_to(kmock, "GET", NODES, watch=True) >= 2)
        # The watch resumes after the last event it applied, not from the list's version.
        watches = [
            r for r in list(kmock) if r.url.path == NODES and r.url.query.get("watch") == "true"
        ]
        assert watches[1].url.query.get("resourceVersion") == "42"
        await kmock.post(NODES, json=node("n2", tier="y"))
        await eventually(cache, lambda c: c.state.nodes.get("n2") == {"tier": "y"})
        text = metrics.render().decode()
        assert 'cudasched_cache_watch_restarts_total{kind="nodes",reason="watch_error"}' in text
        assert cache.synced
    finally:
        await cache.stop()


@pytest.mark.parametrize("as_http_status", [False, True], ids=["error-event", "http-410"])
async def test_gone_relists(kmock: kmock.KubernetesEmulator, as_http_status: bool) -> None:
    """The API server reports an expired resourceVersion as an ERROR event in the stream, or
    (before streaming starts) as an HTTP 410; either way the kind is listed again."""
    await kmock.post(NODES, json=node("n1"))
    expired = {
        "type": "ERROR",
        "object": {
            "apiVersion": "v1",
            "kind": "Status",
            "metadata": {},
            "status": "Failure",
            "message": "too old resource version: 5 (9)",
            "reason": "Expired",
            "code": 410,
        },
    }
    first_watch = kmock[kmock.action.WATCH, kmock.resource("v1/nodes")][:1]
    if as_http_status:
        first_watch << 410 << expired["object"]
    else:
        first_watch << (expired,)
    metrics = WebhookMetrics()
    cache = make_cache(kmock.url, metrics=metrics)
    await cache.start()
    try:
        await eventually(cache, lambda c: c.synced, 10)
        await eventually(cache, lambda c: requests_to(kmock, "GET", NODES, watch=False) >= 2)
        text = metrics.render().decode()
        assert 'cudasched_cache_watch_restarts_total{kind="nodes",reason="gone"} 1.0' in text
        # The re-list is followed by a working watch.
        await kmock.post(NODES, json=node("n2"))
        await eventually(cache, lambda c: set(c.state.nodes) == {"n1", "n2"})
    finally:
        await cache.stop()


async def eventually(cache: ClusterCache, predicate: Any, timeout: float = 5.0) -> None:
    """Poll ``predicate(cache)``: some conditions (request counts) change without a publish."""
    async with asyncio.timeout(timeout):
        while not predicate(cache):
            await asyncio.sleep(0.01)


async def test_unreachable_api_is_not_synced_until_it_appears() -> None:
    port = free_port()
    cache = make_cache(f"http://127.0.0.1:{port}")
    await cache.start()
    try:
        await asyncio.sleep(0.3)
        assert not cache.synced
        assert "waiting for the first list of nodes" in cache.not_ready_reason
        assert "last error" in cache.not_ready_reason
        async with kmock.KubernetesEmulator() as api, kmock.Server(api, port=port):
            await api.post(NODES, json=node("late"))
            await eventually(cache, lambda c: c.synced, 10)
            assert set(cache.state.nodes) == {"late"}
            # Close the watch streams before the mock server shuts down.
            await cache.stop()
    finally:
        await cache.stop()


async def test_missing_kserve_crds_count_as_empty(
    kmock: kmock.KubernetesEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="cudasched.webhook.background.watchcache")
    await kmock.post(NODES, json=node("n1"))
    cache = make_cache(kmock.url)
    await cache.start()
    try:
        await eventually(cache, lambda c: c.synced, 10)
        assert cache.state.isvcs == ()
        # Retried in the background (several times by now) but logged once per kind.
        await eventually(
            cache,
            lambda c: (
                requests_to(kmock, "GET", ISVCS.replace("/namespaces/{ns}", ""), watch=False) >= 3
            ),
        )
        missing = [r for r in caplog.records if r.message.startswith("inferenceservices are not")]
        assert len(missing) == 1
        # Installing KServe later needs no restart.
        await kmock.post(ISVCS.format(ns="ml"), json=named("llm", "ml"))
        await eventually(cache, lambda c: c.state.isvcs == ("ml/llm",))
    finally:
        await cache.stop()


async def test_default_builder_publishes_cluster_state(kmock: kmock.KubernetesEmulator) -> None:
    from cudasched.webhook.state.clusterstate import ClusterState

    gfd_node = builders.node("gpu-1", driver="550.90.07", scheme=builders.GFD, listed=True)
    await kmock.post(NODES, json=gfd_node)
    cache = make_cache(kmock.url, build_state=None)
    assert isinstance(cache.state, ClusterState) and not cache.state.synced
    await cache.start()
    try:
        await eventually(cache, lambda c: c.synced, 10)
        state = cache.state
        assert isinstance(state, ClusterState)
        assert state.synced
        assert [n.name for n in state.nodes] == ["gpu-1"]
    finally:
        await cache.stop()


async def test_periodic_resync_relists(kmock: kmock.KubernetesEmulator) -> None:
    await kmock.post(NODES, json=node("n1"))
    metrics = WebhookMetrics()
    cache = make_cache(kmock.url, metrics=metrics, resync_seconds=0.2)
    await cache.start()
    try:
        await eventually(cache, lambda c: requests_to(kmock, "GET", NODES, watch=False) >= 3)
        text = metrics.render().decode()
        assert 'cudasched_cache_watch_restarts_total{kind="nodes",reason="resync"}' in text
        assert set(cache.state.nodes) == {"n1"}
    finally:
        await cache.stop()


async def test_server_readiness_follows_the_cache(kmock: kmock.KubernetesEmulator) -> None:
    """Production wiring: the real HTTPS server with the cache as its state source, the cache
    running on the server's event loop and talking to the mock API server."""
    import ssl

    import httpx
    import orjson

    from cudasched.webhook.server.serving import serve_in_thread
    from tests.support.fakeadmission import FakeAdmission

    def review(uid: str) -> bytes:
        return orjson.dumps(builders.review(builders.pod(), uid=uid))

    kmock.resources["v1/nodes"] = {}
    # The nodes list is held back until released, so the server starts unsynced.
    gate = asyncio.Event()
    kmock[kmock.action.LIST, kmock.resource("v1/nodes")][:1] >> (lambda: gate.wait())
    cache = make_cache(kmock.url)
    admission = FakeAdmission()
    with serve_in_thread(cache, admission=admission) as srv:
        tls = ssl.create_default_context(cadata=srv.ca_pem.decode())

        def call(method: str, path: str, body: bytes = b"") -> httpx.Response:
            with httpx.Client(base_url=srv.url, verify=tls, timeout=10) as c:
                return c.request(method, path, content=body or None)

        ready = await asyncio.to_thread(call, "GET", "/readyz")
        assert ready.status_code == 503 and "nodes" in ready.text
        early = (await asyncio.to_thread(call, "POST", "/mutate/pods", review("e"))).json()
        assert early["response"]["allowed"] is True
        assert "not ready" in early["response"]["warnings"][0]

        await kmock.post(NODES, json=node("gpu-1"))
        gate.set()
        await eventually(cache, lambda c: c.synced, 10)
        assert (await asyncio.to_thread(call, "GET", "/readyz")).status_code == 200
        late = (await asyncio.to_thread(call, "POST", "/mutate/pods", review("l"))).json()
        assert late["response"] == {"uid": "l", "allowed": True}
        # Decided against the snapshot the cache published once synced.
        assert sorted(admission.last_state.nodes) == ["gpu-1"]
        metrics = (await asyncio.to_thread(call, "GET", "/metrics")).text
        assert "cudasched_cache_synced 1.0" in metrics
        await asyncio.to_thread(srv.request_stop)
    assert not cache.running  # the lifespan shutdown stopped the watches


def test_the_production_state_builder_uses_the_knowledge_base_it_is_given() -> None:
    """``cudasched webhook`` loads one knowledge base for admission and for every snapshot the
    cache builds (two copies would double its memory and could disagree)."""
    from cudasched.knowledge import KnowledgeBase
    from cudasched.settings.config import WebhookConfig
    from cudasched.webhook.background.watchcache import StateFromObjects
    from cudasched.webhook.metrics import WebhookMetrics
    from cudasched.webhook.server.assembly import build_admission

    kb = KnowledgeBase.load()
    build = StateFromObjects(kb)
    first = build([], [], [], [], [])
    second = build([], [], [], [], [])
    assert first.fleet.kb is kb and second.fleet.kb is kb and first.synced
    admission, _ = build_admission(WebhookConfig(), WebhookMetrics(), kb)
    assert admission.kb is kb


async def test_a_knowledge_swap_republishes_the_snapshot_with_it(
    kmock: kmock.KubernetesEmulator,
) -> None:
    """A bundle swapped in (from the follower's thread) rebuilds the snapshot from the objects
    the cache holds, with the new knowledge, at once: node facts read through the knowledge
    (a driver's CUDA, a GPU's architecture) must not wait for the next watch event."""
    from cudasched.knowledge.bundlecheck import Sourced, builtin_knowledge, knowledge_of
    from cudasched.webhook.background.watchcache import StateFromObjects
    from tests.support.bundles import planted

    old = builtin_knowledge().kb
    new = knowledge_of(Sourced(planted(["new-release"]), "test")).kb
    await kmock.post(NODES, json=builders.node("gpu-1", driver="615.20.01", listed=True))
    cache = make_cache(kmock.url, build_state=StateFromObjects(old))
    await cache.start()
    try:
        await eventually(cache, lambda c: c.synced, 10)
        before, generation = cache.state, cache.generation
        await asyncio.to_thread(cache.use_knowledge, new)  # the follower's thread
        await eventually(cache, lambda c: c.generation > generation)
        after = cache.state
    finally:
        await cache.stop()
    assert before.fleet.kb is old and after.fleet.kb is new
    assert [n.name for n in after.nodes] == ["gpu-1"]
