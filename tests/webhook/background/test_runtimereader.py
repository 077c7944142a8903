"""Runtimes the watch cache has not seen yet, read for a review: on the server's loop with the
cache's client, waited for at most the budget from the review thread, counted by result, and
never read without a loop, a client or a budget, or from the loop's own thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from cudasched.webhook.background.runtimereader import RuntimeReader
from cudasched.webhook.metrics import WebhookMetrics


class _Client:
    """Lists one ServingRuntime and no ClusterServingRuntime, after ``delay`` seconds; gets
    the pod ``llm`` (any other is gone)."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay

    async def get(self, resource: Any, name: str, *, namespace: str) -> Any:
        await asyncio.sleep(self.delay)
        if name != "llm":
            raise _Gone()
        return {"metadata": {"name": name, "namespace": namespace}}

    def list(self, resource: Any, *, namespace: str | None = None) -> AsyncIterator[Any]:
        plural = resource._api_info.plural

        async def items() -> AsyncIterator[Any]:
            await asyncio.sleep(self.delay)
            if plural == "servingruntimes":
                yield {"metadata": {"name": "triton", "namespace": namespace}}

        return items()


class _Gone(Exception):
    class status:  # noqa: N801 - the shape of lightkube's ApiError
        code = 404


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop running in a thread of its own, as the server's."""
    running = asyncio.new_event_loop()
    thread = threading.Thread(target=running.run_forever, daemon=True)
    thread.start()
    try:
        yield running
    finally:
        asyncio.run_coroutine_threadsafe(_settled(), running).result(5)
        running.call_soon_threadsafe(running.stop)
        thread.join(5)
        running.close()


async def _settled() -> None:
    """Let reads cancelled after their budget finish cancelling before the loop stops."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _started(reader: RuntimeReader, loop: asyncio.AbstractEventLoop) -> RuntimeReader:
    asyncio.run_coroutine_threadsafe(reader.start(), loop).result(5)
    return reader


def _count(metrics: WebhookMetrics, result: str) -> float:
    value = metrics.registry.get_sample_value(
        "cudasched_webhook_runtime_reads_total", {"result": result}
    )
    return value or 0.0


def test_a_review_thread_reads_the_runtimes_within_the_budget(
    loop: asyncio.AbstractEventLoop,
) -> None:
    metrics = WebhookMetrics()
    reader = _started(RuntimeReader(lambda: _Client(), 2.0, metrics), loop)
    found = reader.read("ml")
    assert found is not None
    serving, cluster = found
    assert [(o["kind"], o["metadata"]["name"]) for o in serving] == [("ServingRuntime", "triton")]
    assert cluster == []
    assert _count(metrics, "read") == 1


def test_a_slow_answer_is_not_waited_for(loop: asyncio.AbstractEventLoop) -> None:
    metrics = WebhookMetrics()
    reader = _started(RuntimeReader(lambda: _Client(delay=5.0), 0.1, metrics), loop)
    assert reader.read("ml") is None
    assert _count(metrics, "timeout") == 1


def test_nothing_is_read_without_a_loop_a_client_or_a_budget(
    loop: asyncio.AbstractEventLoop,
) -> None:
    assert RuntimeReader(lambda: _Client(), 1.0).read("ml") is None  # never started
    assert _started(RuntimeReader(lambda: None, 1.0), loop).read("ml") is None  # no client
    assert _started(RuntimeReader(lambda: _Client(), 0.0), loop).read("ml") is None  # off
    # On the loop's own thread it would wait on itself: it does not.
    reader = _started(RuntimeReader(lambda: _Client(), 1.0), loop)

    async def from_the_loop() -> Any:
        return reader.read("ml")

    assert asyncio.run_coroutine_threadsafe(from_the_loop(), loop).result(5) is None


def test_the_pod_a_claim_was_made_for_is_read_within_the_budget_and_not_counted(
    loop: asyncio.AbstractEventLoop,
) -> None:
    metrics = WebhookMetrics()
    reader = _started(RuntimeReader(lambda: _Client(), 2.0, metrics), loop)
    pod, why = reader.read_pod("ml", "llm")
    gone = reader.read_pod("ml", "other")
    slow = _started(RuntimeReader(lambda: _Client(delay=5.0), 0.1), loop).read_pod("ml", "llm")
    assert pod is not None and (pod["kind"], why) == ("Pod", "")
    assert gone == (None, "pod ml/other not found")
    assert slow == (None, "pod ml/llm not read within 0.1s")
    assert sum(_count(metrics, r) for r in ("read", "failed", "timeout")) == 0
