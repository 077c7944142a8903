"""The agent loop: interval with jitter, stop event, SIGTERM; API errors must not kill it."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.agent.loop import Agent, next_delay, run_forever
from cudasched.nodes.hostfacts import DiscoveryError, DriverFacts, GpuFacts, Reason
from cudasched.vocab import labels as L
from cudasched.vocab.versions import ComputeCapability, CudaVersion, DriverVersion
from tests.support.discovery import Outcomes

FACTS = DriverFacts(
    DriverVersion(570, 124, 6),
    CudaVersion(12, 8),
    (GpuFacts("NVIDIA L4", ComputeCapability(8, 9), 23034, "NVIDIA", True),),
    "test",
)


class MemoryPublisher:
    """In-memory label store; optionally fails the first ``errors`` writes like a flaky API."""

    def __init__(self, errors: int = 0) -> None:
        self.store: dict[str, str] = {}
        self.writes = 0
        self.errors = errors
        self.on_apply: list[object] = []

    async def labels(self) -> dict[str, str]:
        return dict(self.store)

    async def apply(self, desired: Mapping[str, str], owned: frozenset[str]) -> bool:
        self.writes += 1
        for hook in self.on_apply:
            hook()  # type: ignore[operator]
        if self.errors:
            self.errors -= 1
            raise ConnectionError("API server unavailable")
        changed = dict(desired) != self.store
        self.store = dict(desired)
        return changed


@settings(max_examples=80)
@given(
    st.floats(min_value=0.001, max_value=3600),
    st.floats(min_value=0, max_value=1),
    st.floats(min_value=0, max_value=0.999999),
)
def test_next_delay_stays_within_interval_and_jitter(
    interval: float, jitter: float, r: float
) -> None:
    delay = next_delay(interval, jitter, lambda: r)
    assert interval <= delay <= interval * (1 + jitter) + 1e-9


def test_next_delay_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="interval"):
        next_delay(0, 0.1)
    with pytest.raises(ValueError, match="jitter"):
        next_delay(60, -1)


async def test_run_loops_until_stopped_and_survives_api_errors() -> None:
    source = Outcomes(FACTS)
    publisher = MemoryPublisher(errors=2)
    stop = asyncio.Event()
    publisher.on_apply.append(lambda: publisher.writes >= 4 and stop.set())
    agent = Agent(source, publisher)
    await asyncio.wait_for(agent.run(stop, interval=0.001, jitter=0.0), timeout=10)
    assert source.calls == 4
    assert publisher.store[L.PROBE_STATUS] == "ok"


async def test_failing_probe_in_the_loop_publishes_failed_status() -> None:
    source = Outcomes(DiscoveryError(Reason.NVML_ERROR, "GPU is lost"))
    publisher = MemoryPublisher()
    stop = asyncio.Event()
    publisher.on_apply.append(lambda: publisher.writes >= 2 and stop.set())
    await asyncio.wait_for(Agent(source, publisher).run(stop, interval=0.001), timeout=10)
    assert publisher.store == {L.PROBE_STATUS: "failed", L.PROBE_REASON: "nvml-error"}


async def test_sigterm_stops_the_agent_gracefully() -> None:
    publisher = MemoryPublisher()
    publisher.on_apply.append(lambda: os.kill(os.getpid(), signal.SIGTERM))
    agent = Agent(Outcomes(FACTS), publisher)
    await asyncio.wait_for(run_forever(agent, interval=3600, jitter=0), timeout=10)
    assert publisher.writes == 1
    # The handler is removed again: the default disposition is back.
    assert signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, signal.default_int_handler)


async def test_event_sink_errors_do_not_stop_labelling() -> None:
    class BrokenEvents:
        async def event(self, *, type: str, reason: str, message: str) -> None:
            raise RuntimeError("events API down")

    publisher = MemoryPublisher()
    agent = Agent(Outcomes(DiscoveryError(Reason.NO_DRIVER, "x")), publisher, BrokenEvents())
    result = await agent.step()
    assert result.ok is False
    assert publisher.store[L.PROBE_REASON] == "no-driver"


async def test_a_node_without_an_nvidia_driver_idles_quietly() -> None:
    """No NVML library and no nvidia-smi on a node that never had our labels: not a GPU node,
    nothing published, no Event; a GPU node whose driver stops talking is still a failure."""

    class Events:
        def __init__(self) -> None:
            self.sent: list[str] = []

        async def event(self, *, type: str, reason: str, message: str) -> None:
            self.sent.append(reason)

    publisher, events = MemoryPublisher(), Events()
    agent = Agent(
        Outcomes(DiscoveryError(Reason.NVML_NOT_FOUND, "no libnvidia-ml")), publisher, events
    )
    for _ in range(3):
        result = await agent.step()
        assert result.ok is False and result.reason == Reason.NVML_NOT_FOUND
    assert publisher.store == {} and events.sent == []
    # Once labelled, the same failure is published: the node had a GPU driver.
    labelled = MemoryPublisher()
    labelled.store = {L.PROBE_STATUS: "ok", L.DRIVER_VERSION: "550.90.07"}
    agent = Agent(Outcomes(DiscoveryError(Reason.NVML_NOT_FOUND, "gone")), labelled, events)
    await agent.step()
    assert labelled.store[L.PROBE_STATUS] == "failed"
