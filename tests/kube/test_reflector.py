"""The reflector against the kmock API server over real HTTP, for kinds the webhook cache does
not follow (Pods, NVIDIADrivers): list, watch, resume, re-list, absent CRDs, error accounting.

Failures are scripted as API responses; nothing in the client is patched. The listener only
records what it is told.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Callable
from typing import Any

import kmock as kmock_lib
import pytest

from cudasched.kube.client import make_client
from cudasched.kube.reflector import (
    ObjectKey,
    Reflector,
    ReflectorTiming,
    object_key,
    plain_object,
)
from cudasched.vocab.errors import InputError
from cudasched.vocab.kinds import NODE, NVIDIA_DRIVER, POD, Kind
from tests.harness.controlplane.processes import free_port

PODS = "/api/v1/namespaces/{ns}/pods"
NODES = "/api/v1/nodes"
DRIVERS = "/apis/nvidia.com/v1alpha1/nvidiadrivers"
FAST = ReflectorTiming(
    resync_seconds=300, backoff_initial=0.02, backoff_max=0.1, absent_retry_seconds=0.05
)


def _name(obj: dict[str, Any] | None) -> str | None:
    return None if obj is None else obj["metadata"]["name"]


class Recorded:
    """A listener that writes down every call."""

    def __init__(self) -> None:
        self.listed: list[tuple[list[ObjectKey], list[ObjectKey]]] = []
        self.events: list[tuple[str | None, str | None]] = []
        self.absent: list[list[ObjectKey]] = []
        self.restarts: list[str] = []

    def on_listed(self, kind: Kind, previous: Any, current: Any) -> None:
        self.listed.append((sorted(previous), sorted(current)))

    def on_event(self, kind: Kind, old: Any, new: Any) -> None:
        self.events.append((_name(old), _name(new)))

    def on_absent(self, kind: Kind, previous: Any) -> None:
        self.absent.append(sorted(previous))

    def on_restart(self, kind: Kind, reason: str) -> None:
        self.restarts.append(reason)


@contextlib.asynccontextmanager
async def running(
    url: Any, kind: Kind, *, timing: ReflectorTiming = FAST, **options: Any
) -> AsyncIterator[tuple[Reflector, Recorded]]:
    client = make_client(server=str(url).rstrip("/"), timeout=2.0)
    listener = Recorded()
    reflector = Reflector(client, kind, listener, timing=timing, rng=random.Random(7), **options)
    task = asyncio.create_task(reflector.run())
    try:
        yield reflector, listener
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await client.close()


async def eventually(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)


def pod(name: str, namespace: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "managedFields": [{"manager": "kubelet"}],
        },
        "spec": {"containers": [{"name": "main", "image": "vllm/vllm-openai:v0.9.0"}]},
    }


def watches(server: kmock_lib.RawHandler, path: str) -> list[Any]:
    return [r for r in list(server) if r.url.path == path and r.url.query.get("watch") == "true"]


def lists(server: kmock_lib.RawHandler, path: str) -> list[Any]:
    return [r for r in list(server) if r.url.path == path and r.url.query.get("watch") != "true"]


async def test_lists_and_watches_a_namespaced_kind(kmock: kmock_lib.KubernetesEmulator) -> None:
    await kmock.post(PODS.format(ns="ml"), json=pod("a", "ml", app="llm"))
    await kmock.post(PODS.format(ns="web"), json=pod("a", "web"))
    async with running(kmock.url, POD) as (reflector, listener):
        await eventually(lambda: reflector.listed)
        assert listener.listed == [([], [("ml", "a"), ("web", "a")])]
        stored = reflector.objects[("ml", "a")]
        assert type(stored) is dict and "managedFields" not in stored["metadata"]
        assert stored["metadata"]["labels"] == {"app": "llm"}

        await kmock.post(PODS.format(ns="ml"), json=pod("b", "ml"))
        await eventually(lambda: ("ml", "b") in reflector.objects)
        await kmock.patch(PODS.format(ns="ml") + "/a", json={"metadata": {"labels": {"v": "2"}}})
        await eventually(lambda: reflector.objects[("ml", "a")]["metadata"]["labels"].get("v"))
        await kmock.delete(PODS.format(ns="web") + "/a")
        await eventually(lambda: ("web", "a") not in reflector.objects)
        assert listener.events[-3:] == [(None, "b"), ("a", "a"), ("a", None)]
        assert reflector.last_error is None and listener.restarts == []
    # Every request spanned all namespaces.
    assert lists(kmock, "/api/v1/pods") and watches(kmock, "/api/v1/pods")


async def test_transform_applies_to_listed_and_watched_objects(
    kmock: kmock_lib.KubernetesEmulator,
) -> None:
    await kmock.post(PODS.format(ns="ml"), json=pod("a", "ml"))

    def names_only(obj: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": {k: obj["metadata"][k] for k in ("name", "namespace")}}

    async with running(kmock.url, POD, transform=names_only) as (reflector, _):
        await eventually(lambda: reflector.listed)
        await kmock.post(PODS.format(ns="ml"), json=pod("b", "ml"))
        await eventually(lambda: ("ml", "b") in reflector.objects)
        assert reflector.objects[("ml", "a")] == {"metadata": {"name": "a", "namespace": "ml"}}
        assert reflector.objects[("ml", "b")] == {"metadata": {"name": "b", "namespace": "ml"}}


async def test_absent_crd_is_an_empty_listed_kind_until_installed(
    kmock: kmock_lib.KubernetesEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cudasched.kube.reflector")
    async with running(kmock.url, NVIDIA_DRIVER) as (reflector, listener):
        await eventually(lambda: reflector.listed and reflector.absent)
        assert reflector.objects == {} and listener.absent[0] == []
        await eventually(lambda: len(lists(kmock, DRIVERS)) >= 3)  # retried in the background
        missing = [r.getMessage() for r in caplog.records if "are not served" in r.getMessage()]
        assert missing == [
            "nvidiadrivers are not served by the API server (GPU Operator CRD not installed?); "
            "treating them as none and retrying every 0.05s"
        ]
        await kmock.post(DRIVERS, json={"metadata": {"name": "default"}, "spec": {}})
        await eventually(lambda: ("", "default") in reflector.objects)
        assert not reflector.absent
        assert any("nvidiadrivers is available again" in r.getMessage() for r in caplog.records)
        assert reflector.last_error is None and listener.restarts == []


async def test_stream_cut_resumes_from_the_last_version(
    kmock: kmock_lib.KubernetesEmulator,
) -> None:
    kmock.resources["v1/nodes"] = {}
    streamed = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
    streamed["metadata"]["resourceVersion"] = "42"
    first_watch = kmock[kmock.action.WATCH, kmock.resource("v1/nodes")][:1]
    first_watch << (
        {"type": "ADDED", "object": streamed},
        b'{"type": "MODIFIED", "object": {"apiVersion": "v1", "kind": "No',
    )
    async with running(kmock.url, NODE) as (reflector, listener):
        await eventually(lambda: len(watches(kmock, NODES)) >= 2)
        assert watches(kmock, NODES)[1].url.query.get("resourceVersion") == "42"
        assert listener.restarts[0] == "watch_error"
        assert reflector.last_error is not None
        assert ("", "n1") in reflector.objects
        assert len(lists(kmock, NODES)) == 1  # resumed, not re-listed


async def test_bookmark_advances_the_version_only(kmock: kmock_lib.KubernetesEmulator) -> None:
    kmock.resources["v1/nodes"] = {}
    bookmark = {"apiVersion": "v1", "kind": "Node", "metadata": {"resourceVersion": "77"}}
    kmock[kmock.action.WATCH, kmock.resource("v1/nodes")][:1] << (
        {"type": "BOOKMARK", "object": bookmark},
    )
    async with running(kmock.url, NODE) as (reflector, listener):
        await eventually(lambda: len(watches(kmock, NODES)) >= 2)
        assert watches(kmock, NODES)[1].url.query.get("resourceVersion") == "77"
        assert reflector.objects == {} and listener.events == []


async def test_gone_relists(kmock: kmock_lib.KubernetesEmulator) -> None:
    await kmock.post(NODES, json={"metadata": {"name": "n1"}})
    gone = {"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": 410}
    kmock[kmock.action.WATCH, kmock.resource("v1/nodes")][:1] << (
        {"type": "ERROR", "object": gone},
    )
    async with running(kmock.url, NODE) as (_, listener):
        await eventually(lambda: len(lists(kmock, NODES)) >= 2)
        await eventually(lambda: len(listener.listed) >= 2)
        assert listener.restarts[0] == "gone"
        assert listener.listed[1] == ([("", "n1")], [("", "n1")])


async def test_periodic_resync_relists(kmock: kmock_lib.KubernetesEmulator) -> None:
    await kmock.post(NODES, json={"metadata": {"name": "n1"}})
    timing = ReflectorTiming(resync_seconds=0.1, backoff_initial=0.02, backoff_max=0.1)
    async with running(kmock.url, NODE, timing=timing) as (_, listener):
        await eventually(lambda: len(listener.listed) >= 3)
        assert set(listener.restarts) == {"resync"}


async def test_unreachable_api_counts_list_errors_and_logs_a_change_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="cudasched.kube.reflector")
    async with running(f"http://127.0.0.1:{free_port()}", POD) as (reflector, listener):
        await eventually(lambda: len(listener.restarts) >= 3)
        assert not reflector.listed
        assert set(listener.restarts) == {"list_error"}
        assert reflector.last_error is not None and "ConnectError" in reflector.last_error
    failures = [r for r in caplog.records if r.getMessage().startswith("list error of pods")]
    assert len(failures) == 1  # the same error again is not logged again


async def test_logs_through_the_owner_logger(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    owner = logging.getLogger("cudasched.test.owner")
    url = f"http://127.0.0.1:{free_port()}"
    async with running(url, POD, logger=owner) as (_, listener):
        await eventually(lambda: bool(listener.restarts))
    assert {r.name for r in caplog.records if "list error" in r.getMessage()} == {owner.name}


def test_timing_backoff_is_full_jitter_within_bounds() -> None:
    timing = ReflectorTiming(backoff_initial=0.5, backoff_max=30.0)
    rng = random.Random(1)
    for attempt in range(1, 40):
        delay = timing.backoff(attempt, rng)
        assert 0.25 <= delay <= min(30.0, 0.5 * 2**attempt)
    # A maximum below the initial delay is raised to it.
    assert ReflectorTiming(backoff_initial=2.0, backoff_max=1.0).backoff(5, rng) <= 2.0


@pytest.mark.parametrize(
    "options", [{"resync_seconds": 0}, {"backoff_initial": 0}, {"resync_seconds": -1}]
)
def test_timing_rejects_non_positive_values(options: dict[str, float]) -> None:
    with pytest.raises(InputError, match="invalid reflector timing"):
        ReflectorTiming(**options)


def test_keys_and_plain_objects() -> None:
    assert object_key({"metadata": {"name": "a", "namespace": "ml"}}) == ("ml", "a")
    assert object_key({"metadata": {"name": "n"}}) == ("", "n")
    assert object_key({"metadata": {"name": ""}}) is None
    assert object_key({}) is None
    raw = {"metadata": {"name": "a", "managedFields": [{}]}, "spec": {}}
    assert plain_object(raw) == {"metadata": {"name": "a"}, "spec": {}}
    assert raw["metadata"]["managedFields"] == [{}]  # the input is not changed
    assert plain_object({"kind": "X"}) == {"kind": "X", "metadata": {}}
