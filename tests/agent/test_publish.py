"""Publishing over HTTP against the kmock Kubernetes emulator, with the real lightkube client.

Covers: only-on-change (a second identical round sends no PATCH), stale owned keys removed
with ``null``, labels of others untouched, an Event on the Node on failure, and the
failure -> recovery sequence through :class:`Agent`.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kmock as kmock_lib
import pytest
from lightkube import AsyncClient, KubeConfig

from cudasched.agent.loop import Agent
from cudasched.agent.publish import NfdFilePublisher, NodeEvents, NodePublisher, label_patch
from cudasched.nodes.hostfacts import DiscoveryError, DriverFacts, GpuFacts, Reason
from cudasched.nodes.labelers import AGENT_KEYS, build_labels, owned_keys
from cudasched.vocab import labels as L
from cudasched.vocab.versions import ComputeCapability, CudaVersion, DriverVersion
from tests.support.discovery import Outcomes

NODE = "gpu-node-1"
FOREIGN = {
    "kubernetes.io/hostname": NODE,
    "nvidia.com/gpu.present": "true",
    "nvidia.com/cuda.driver-version.full": "535.104.05",
    "team": "inference",
}


def make_facts(driver: str = "550.90.07", cuda: tuple[int, int] = (12, 4)) -> DriverFacts:
    major, minor, rev = (int(x) for x in driver.split("."))
    return DriverFacts(
        driver=DriverVersion(major, minor, rev),
        cuda=CudaVersion(*cuda),
        gpus=(GpuFacts("NVIDIA H100 80GB HBM3", ComputeCapability(9, 0), 81559, "NVIDIA", True),),
        source="test",
    )


NODES = kmock_lib.resource("v1/nodes")
EVENTS = kmock_lib.resource("events.k8s.io/v1/events")


@pytest.fixture
async def client(kmock: Any) -> AsyncIterator[AsyncClient]:
    kmock.objects[NODES, None, NODE] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": NODE, "uid": "3f0c1c58-node-uid", "labels": dict(FOREIGN)},
    }
    config = KubeConfig.from_dict(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "mock", "cluster": {"server": str(kmock.url)}}],
            "users": [{"name": "agent", "user": {"token": "test-token"}}],
            "contexts": [{"name": "mock", "context": {"cluster": "mock", "user": "agent"}}],
            "current-context": "mock",
        }
    )
    c = AsyncClient(config=config)
    yield c
    await c.close()


def node_labels(kmock: Any) -> dict[str, str]:
    return dict(kmock.objects[NODES, None, NODE]["metadata"]["labels"])


def patches(kmock: Any) -> list[Any]:
    return [r for r in kmock if str(r.method).lower().endswith("patch")]


def events(kmock: Any) -> list[dict[str, Any]]:
    return [dict(obj.raw) for (res, _ns, _name), obj in kmock.objects.items() if res == EVENTS]


async def test_first_round_patches_our_keys_only(kmock: Any, client: AsyncClient) -> None:
    publisher = NodePublisher(client, NODE)
    desired = build_labels(make_facts())
    assert await publisher.apply(desired, AGENT_KEYS) is True
    labels = node_labels(kmock)
    assert {k: v for k, v in labels.items() if k in AGENT_KEYS} == desired
    assert {k: v for k, v in labels.items() if k not in AGENT_KEYS} == FOREIGN
    (patch,) = patches(kmock)
    assert set(patch.data["metadata"]["labels"]) == set(desired)  # nothing foreign in the patch
    assert "merge-patch+json" in patch.headers["Content-Type"]


async def test_second_identical_round_sends_no_patch(kmock: Any, client: AsyncClient) -> None:
    publisher = NodePublisher(client, NODE)
    desired = build_labels(make_facts())
    assert await publisher.apply(desired, AGENT_KEYS) is True
    assert await publisher.apply(desired, AGENT_KEYS) is False
    assert len(patches(kmock)) == 1


async def test_stale_owned_keys_are_removed_and_others_kept(
    kmock: Any, client: AsyncClient
) -> None:
    publisher = NodePublisher(client, NODE)
    await publisher.apply(build_labels(make_facts()), AGENT_KEYS)
    # The driver no longer reports a CUDA version: our CUDA labels must go, nothing else.
    no_cuda = DriverFacts(DriverVersion(550, 90, 7), None, make_facts().gpus, "test")
    assert await publisher.apply(build_labels(no_cuda), AGENT_KEYS) is True
    last = patches(kmock)[-1].data["metadata"]["labels"]
    assert last == {L.CUDA_CODE: None, L.CUDA_VERSION: None}
    labels = node_labels(kmock)
    assert L.CUDA_CODE not in labels and labels[L.DRIVER_CODE] == "550090007"
    assert {k: v for k, v in labels.items() if k not in AGENT_KEYS} == FOREIGN


async def test_gfd_keys_of_real_gfd_untouched_without_flag(kmock: Any, client: AsyncClient) -> None:
    agent = Agent(Outcomes(make_facts()), NodePublisher(client, NODE))
    await agent.step()
    assert node_labels(kmock)["nvidia.com/cuda.driver-version.full"] == "535.104.05"


async def test_gfd_compatible_takes_over_gfd_keys(kmock: Any, client: AsyncClient) -> None:
    agent = Agent(Outcomes(make_facts()), NodePublisher(client, NODE), gfd_compatible=True)
    await agent.step()
    labels = node_labels(kmock)
    assert labels["nvidia.com/cuda.driver-version.full"] == "550.90.07"
    assert labels["nvidia.com/cuda.runtime-version.full"] == "12.4"
    assert labels["nvidia.com/gpu.present"] == "true"  # the Operator's key is not ours
    assert labels["team"] == "inference"


async def test_failure_keeps_labels_sets_status_and_emits_event(
    kmock: Any, client: AsyncClient
) -> None:
    publisher = NodePublisher(client, NODE)
    mismatch = DiscoveryError(
        Reason.VERSION_MISMATCH, "Failed to initialize NVML: Driver/library version mismatch"
    )
    agent = Agent(
        Outcomes(make_facts(), mismatch, mismatch), publisher, NodeEvents(client, publisher)
    )
    ok = await agent.step()
    good = dict(ok.labels)

    failed = await agent.step()
    assert failed.ok is False and failed.reason == Reason.VERSION_MISMATCH
    labels = node_labels(kmock)
    assert labels[L.PROBE_STATUS] == "failed"
    assert labels[L.PROBE_REASON] == "driver-library-mismatch"
    kept = {k: v for k, v in good.items() if k != L.PROBE_STATUS}
    assert {k: labels[k] for k in kept} == kept  # last good facts survive
    (event,) = events(kmock)
    assert event["type"] == "Warning"
    assert event["reason"] == "CudaschedProbeFailed"
    assert "driver-library-mismatch" in event["note"]
    assert event["regarding"] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": NODE,
        "uid": "3f0c1c58-node-uid",
    }
    assert event["metadata"]["namespace"] == "default"
    assert event["reportingController"] == "cudasched-agent"
    assert event["deprecatedSource"]["host"] == NODE

    patch_count = len(patches(kmock))
    again = await agent.step()  # same failure again: no new patch, no new event
    assert again.changed is False
    assert len(patches(kmock)) == patch_count
    assert len(events(kmock)) == 1


async def test_failure_then_recovery(kmock: Any, client: AsyncClient) -> None:
    publisher = NodePublisher(client, NODE)
    no_driver = DiscoveryError(Reason.NO_DRIVER, "NVIDIA kernel driver not loaded")
    agent = Agent(
        Outcomes(make_facts("535.104.05", (12, 2)), no_driver, make_facts("550.90.07")),
        publisher,
        NodeEvents(client, publisher),
    )
    await agent.step()
    await agent.step()
    assert node_labels(kmock)[L.DRIVER_VERSION] == "535.104.05"
    assert node_labels(kmock)[L.PROBE_STATUS] == "failed"

    recovered = await agent.step()  # driver upgraded while we were failing
    assert recovered.ok
    labels = node_labels(kmock)
    assert labels[L.PROBE_STATUS] == "ok"
    assert L.PROBE_REASON not in labels
    assert labels[L.DRIVER_VERSION] == "550.90.07"
    assert labels[L.CUDA_CODE] == "12040"
    assert [e["reason"] for e in events(kmock)] == [
        "CudaschedProbeFailed",
        "CudaschedProbeRecovered",
    ]
    assert {k: v for k, v in labels.items() if k not in AGENT_KEYS} == FOREIGN


async def test_first_probe_failing_keeps_labels_of_an_earlier_run(
    kmock: Any, client: AsyncClient
) -> None:
    earlier = build_labels(make_facts())
    kmock.objects[NODES, None, NODE] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": NODE, "labels": {**FOREIGN, **earlier}},
    }
    publisher = NodePublisher(client, NODE)
    agent = Agent(
        Outcomes(DiscoveryError(Reason.NO_DRIVER, "x")), publisher, NodeEvents(client, publisher)
    )
    await agent.step()
    (patch,) = patches(kmock)
    assert patch.data["metadata"]["labels"] == {
        L.PROBE_STATUS: "failed",
        L.PROBE_REASON: "no-driver",
    }
    assert node_labels(kmock)[L.CUDA_CODE] == earlier[L.CUDA_CODE]


def test_label_patch_unit() -> None:
    owned = frozenset({"a/x", "a/y", "a/z"})
    current = {"a/x": "1", "a/y": "2", "other": "keep"}
    assert label_patch(current, {"a/x": "1", "a/z": "3"}, owned) == {"a/y": None, "a/z": "3"}
    assert label_patch(current, {"a/x": "1", "a/y": "2"}, owned) == {}
    with pytest.raises(ValueError, match="other"):
        label_patch(current, {"other": "x"}, owned)


# ------------------------------------------------------------------------- NFD file output


async def test_nfd_file_written_atomically_and_only_on_change(tmp_path: Path) -> None:
    path = tmp_path / "features.d" / "cudasched"
    publisher = NfdFilePublisher(path)
    desired = build_labels(make_facts())
    assert await publisher.apply(desired, AGENT_KEYS) is True
    text = path.read_text()
    assert text == "".join(f"{k}={v}\n" for k, v in sorted(desired.items()))
    assert await publisher.labels() == desired
    mtime = os.stat(path).st_mtime_ns
    assert await publisher.apply(desired, AGENT_KEYS) is False
    assert os.stat(path).st_mtime_ns == mtime
    assert [p.name for p in path.parent.iterdir()] == ["cudasched"]  # no temp files left


async def test_nfd_failure_keeps_file_labels_from_an_earlier_run(tmp_path: Path) -> None:
    path = tmp_path / "cudasched"
    earlier = build_labels(make_facts())
    path.write_text("".join(f"{k}={v}\n" for k, v in earlier.items()))
    publisher = NfdFilePublisher(path)
    agent = Agent(Outcomes(DiscoveryError(Reason.NO_DEVICES, "none")), publisher)
    await agent.step()
    now = await publisher.labels()
    assert now[L.PROBE_STATUS] == "failed" and now[L.PROBE_REASON] == "no-devices"
    assert now[L.CUDA_CODE] == earlier[L.CUDA_CODE]


async def test_nfd_write_failure_leaves_old_file(tmp_path: Path, monkeypatch: Any) -> None:
    path = tmp_path / "cudasched"
    path.write_text("cudasched.io/probe.status=ok\n")

    def boom(src: Any, dst: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        await NfdFilePublisher(path).apply(build_labels(make_facts()), owned_keys(False))
    assert path.read_text() == "cudasched.io/probe.status=ok\n"
    assert [p.name for p in tmp_path.iterdir()] == ["cudasched"]


@pytest.mark.parametrize("value", ["12.4\n", "a b", "-x", "x" * 64])
def test_nfd_file_refuses_a_value_that_is_not_a_label_value(value: str) -> None:
    """A value with a trailing newline once passed the check (``$`` matches before a final
    newline) and wrote a broken line into the features.d file."""
    with pytest.raises(ValueError, match="is not a valid label value"):
        NfdFilePublisher.render({"cudasched.io/cuda": value})
