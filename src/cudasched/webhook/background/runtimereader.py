"""Serving runtimes read from the API server when the watch cache has not seen them yet.

``kubectl apply -f`` of a ServingRuntime and the InferenceService that uses it (how every
example and every GitOps tool applies them) creates the runtime a few milliseconds before the
service: the service's review arrives before the runtime's watch event reaches the cache, and
the service used to be admitted as if it used no runtime: no warning, no recorded requirement,
no Event. On such a miss admission asks :meth:`RuntimeReader.read` for the namespace's runtimes
(:mod:`cudasched.kube.runtimes`), from its review thread, and waits at most
``kube.runtimeReadSeconds``: the read runs on the server's event loop with the watch cache's
client, never blocking the loop, and an answer that comes later is dropped. Only
InferenceServices whose runtime the snapshot cannot find ever ask, so pods never pay for it.
Counted in ``cudasched_webhook_runtime_reads_total{result}``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cudasched.kube.runtimes import read_runtimes

if TYPE_CHECKING:
    from cudasched.webhook.metrics import WebhookMetrics

__all__ = ["RuntimeReader"]

log = logging.getLogger(__name__)


class RuntimeReader:
    """Reads a namespace's runtimes for admission (the ``RuntimeSource`` its rules ask).

    ``client_of`` returns the API client to read with (the watch cache's; ``None`` when the
    server serves a fixed snapshot, and then nothing is read); ``budget_seconds`` is the
    longest a review waits (0: never read)."""

    def __init__(
        self,
        client_of: Callable[[], Any],
        budget_seconds: float,
        metrics: WebhookMetrics | None = None,
    ) -> None:
        self._client_of = client_of
        self.budget_seconds = budget_seconds
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._results = (
            {r: metrics.runtime_reads.labels(result=r) for r in ("read", "failed", "timeout")}
            if metrics is not None
            else None
        )

    async def start(self) -> None:
        """Remember the server's event loop (its lifespan calls this)."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()

    def _count(self, result: str) -> None:
        if self._results is not None:
            self._results[result].inc()

    def read(
        self, namespace: str
    ) -> tuple[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]]] | None:
        """The ServingRuntimes of ``namespace`` and every ClusterServingRuntime as the API
        server has them now, or ``None`` when they could not be read within the budget (no
        loop or client, the loop's own thread, an error, too slow). Never raises."""
        loop, client = self._loop, self._client_of()
        if (
            self.budget_seconds <= 0
            or loop is None
            or client is None
            or loop.is_closed()
            or threading.get_ident() == self._loop_thread  # would wait on itself
        ):
            return None
        try:
            future = asyncio.run_coroutine_threadsafe(read_runtimes(client, namespace), loop)
        except RuntimeError:  # the loop is closing
            return None
        try:
            found = future.result(timeout=self.budget_seconds)
        except concurrent.futures.TimeoutError:
            future.cancel()
            self._count("timeout")
            log.info("runtimes of %s not read within %.2fs", namespace, self.budget_seconds)
            return None
        except Exception as exc:
            self._count("failed")
            log.warning("runtimes of %s not read: %s", namespace, exc)
            return None
        self._count("read")
        return found
