"""The agent loop: probe, build labels, publish; repeat with jitter until SIGTERM.

Failure handling is the point of this module. A failed probe (no driver, library mismatch,
NVML error) must not erase what the scheduler knows: the last good labels stay, only
``probe.status=failed`` and ``probe.reason`` change, and a Warning Event is recorded on the
Node once per new failure. The next good probe restores ``ok`` and removes the reason by itself.

A node without an NVIDIA GPU (no driver library, no ``nvidia-smi``, no device) that never had
our labels is not a failure: the agent idles there, publishing nothing and logging it once, so
it can be scheduled on every node of a cluster without NFD or GPU Operator labels and start
labelling the moment a driver is installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from cudasched.agent.discovery import Source
from cudasched.agent.publish import EventSink, LabelPublisher
from cudasched.nodes.hostfacts import DiscoveryError, Reason
from cudasched.nodes.labelers import ArchCatalog, build_labels, failure_labels, owned_keys
from cudasched.vocab import labels as L

__all__ = ["Agent", "StepResult", "next_delay", "run_forever"]

log = logging.getLogger("cudasched.agent")

EVENT_FAILED = "CudaschedProbeFailed"
#: Probe failures that mean "no NVIDIA driver is installed here" (no NVML library, no
#: nvidia-smi), not "the GPU broke": a driver that is installed but not loaded (no-driver) or
#: sees no device (no-devices) is a GPU node's failure and is published as one.
NO_GPU_REASONS = frozenset({Reason.NVML_NOT_FOUND, Reason.NVIDIA_SMI_NOT_FOUND})
EVENT_RECOVERED = "CudaschedProbeRecovered"


@dataclass(frozen=True, slots=True)
class StepResult:
    ok: bool
    reason: str | None
    changed: bool
    labels: Mapping[str, str]


def next_delay(interval: float, jitter: float, rng: Callable[[], float] = random.random) -> float:
    """``interval`` plus up to ``jitter * interval`` seconds, so a fleet of agents restarted
    together does not hit the API server in lock-step."""
    if interval <= 0:
        raise ValueError(f"interval must be positive, got {interval}")
    if jitter < 0:
        raise ValueError(f"jitter must be >= 0, got {jitter}")
    return interval + rng() * jitter * interval


class Agent:
    """One node's agent: owns the last good labels and the last published status."""

    def __init__(
        self,
        source: Source,
        publisher: LabelPublisher,
        events: EventSink | None = None,
        *,
        gfd_compatible: bool = False,
        archs: ArchCatalog | None = None,
    ) -> None:
        self.source = source
        self.publisher = publisher
        self.events = events
        self.gfd_compatible = gfd_compatible
        self.archs = archs  # the knowledge base: GPU family words (None: `undefined`)
        self.owned = owned_keys(gfd_compatible)
        self.last_good: dict[str, str] | None = None
        self.last_failure: str | None = None  # reason of the failure currently published
        self.idle = False  # no NVIDIA GPU here and nothing of ours published

    async def step(self) -> StepResult:
        """One probe-and-publish round. Kubernetes API errors propagate to the caller."""
        try:
            facts = await asyncio.to_thread(self.source.probe)
        except DiscoveryError as exc:
            return await self._failed(exc)
        desired = build_labels(facts, archs=self.archs, gfd_compatible=self.gfd_compatible)
        changed = await self.publisher.apply(desired, self.owned)
        self.last_good = desired
        if self.last_failure is not None:
            self.last_failure = None
            await self._event("Normal", EVENT_RECOVERED, "GPU discovery succeeded again")
        return StepResult(True, None, changed, desired)

    async def _failed(self, exc: DiscoveryError) -> StepResult:
        if self.last_good is not None:
            base = dict(self.last_good)
        else:
            # First probe of this process failed: keep whatever an earlier run published.
            base = {k: v for k, v in (await self.publisher.labels()).items() if k in self.owned}
        if exc.reason in NO_GPU_REASONS and not base:
            if not self.idle:
                log.info("no NVIDIA GPU on this node (%s): idle, nothing to publish", exc.reason)
                self.idle = True
            return StepResult(False, exc.reason, False, {})
        self.idle = False
        log.warning("probe failed (%s): %s", exc.reason, exc)
        desired = {**base, **failure_labels(exc.reason)}
        changed = await self.publisher.apply(desired, self.owned)
        reason = desired[L.PROBE_REASON]
        if reason != self.last_failure:
            self.last_failure = reason
            await self._event("Warning", EVENT_FAILED, f"GPU discovery failed ({reason}): {exc}")
        return StepResult(False, reason, changed, desired)

    async def _event(self, type: str, reason: str, message: str) -> None:
        if self.events is None:
            return
        try:
            await self.events.event(type=type, reason=reason, message=message)
        except Exception as exc:  # an Event is best effort; never stop labelling for it
            log.warning("could not record event %s: %s", reason, exc)

    async def run(
        self,
        stop: asyncio.Event,
        *,
        interval: float = 60.0,
        jitter: float = 0.1,
        rng: Callable[[], float] = random.random,
    ) -> None:
        """Loop until ``stop`` is set. API errors are logged and retried next round."""
        while not stop.is_set():
            try:
                await self.step()
            except Exception as exc:
                log.error("publishing failed, retrying in the next round: %s", exc)
            delay = next_delay(interval, jitter, rng)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=delay)


async def run_forever(agent: Agent, *, interval: float, jitter: float) -> None:
    """Run ``agent`` until SIGTERM or SIGINT (the kubelet sends SIGTERM on pod deletion)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await agent.run(stop, interval=interval, jitter=jitter)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    log.info("stopped")
