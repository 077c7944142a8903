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

The same reader, within the same budget, reads the pod a ResourceClaim was made for
(:meth:`RuntimeReader.read_pod`, :mod:`cudasched.kube.ownerpod`): only claims that
kube-controller-manager makes from a pod's template, and only with ``dra.mode`` on, ever ask.
Those reads are not counted in the runtimes' metric.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cudasched.kube.ownerpod import read_owner_pod
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
        found: tuple[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]]] | None
        found, _why = self._within(
            lambda client: read_runtimes(client, namespace), f"runtimes of {namespace}", True
        )
        return found

    def read_pod(self, namespace: str, name: str) -> tuple[Mapping[str, Any] | None, str]:
        """The Pod ``namespace/name`` as the API server has it now, or ``None`` and why not
        (gone, or not read within the budget). Never raises."""
        found, why = self._within(
            lambda client: read_owner_pod(client, namespace, name), f"pod {namespace}/{name}"
        )
        if found is None and not why:
            why = f"pod {namespace}/{name} not found"
        return found, why

    def _within(
        self, read: Callable[[Any], Coroutine[Any, Any, Any]], what: str, counted: bool = False
    ) -> tuple[Any, str]:
        """What ``read`` (given the client) returns, run on the server's loop and waited for
        at most the budget, or ``None`` and why not."""
        loop, client = self._loop, self._client_of()
        if (
            self.budget_seconds <= 0
            or loop is None
            or client is None
            or loop.is_closed()
            or threading.get_ident() == self._loop_thread  # would wait on itself
        ):
            return None, f"{what} not read: no API server to read from here"
        try:
            future = asyncio.run_coroutine_threadsafe(read(client), loop)
        except RuntimeError:  # the loop is closing
            return None, f"{what} not read: the server is stopping"
        try:
            found = future.result(timeout=self.budget_seconds)
        except concurrent.futures.TimeoutError:
            future.cancel()
            if counted:
                self._count("timeout")
            log.info("%s not read within %.2fs", what, self.budget_seconds)
            return None, f"{what} not read within {self.budget_seconds:g}s"
        except Exception as exc:
            if counted:
                self._count("failed")
            log.warning("%s not read: %s", what, exc)
            return None, f"{what} not read: {exc}"
        if counted:
            self._count("read")
        return found, ""
