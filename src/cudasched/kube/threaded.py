"""One Kubernetes client for callers that are threads: the image resolver's workers read pull
secrets and image facts, and lightkube's client is async. The client lives on an event loop of
its own thread (made at the first call), so neither the server's loop blocks the workers nor
they it; a call waits at most ``timeout_seconds``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

from cudasched.vocab.errors import InputError

__all__ = ["ThreadedClient"]

_T = TypeVar("_T")


class ThreadedClient:
    """``factory()``'s client on a loop thread named ``name`` (see the module's docstring)."""

    def __init__(
        self, factory: Callable[[], Any], *, timeout_seconds: float = 5.0, name: str = "kube"
    ) -> None:
        if timeout_seconds <= 0:
            raise InputError(f"invalid client timeout {timeout_seconds}: expected > 0 seconds")
        self._factory = factory
        self.timeout_seconds = timeout_seconds
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: Any = None

    def run(self, work: Callable[[Any], Coroutine[Any, Any, _T]]) -> _T:
        """``work(client)`` on the loop; an :class:`InputError` when it takes longer than
        ``timeout_seconds`` (the work is cancelled)."""
        future = asyncio.run_coroutine_threadsafe(self._with_client(work), self._started())
        try:
            return future.result(timeout=self.timeout_seconds)
        except FutureTimeout:
            future.cancel()
            raise InputError(
                f"no answer from the API server within {self.timeout_seconds:g}s"
            ) from None

    async def _with_client(self, work: Callable[[Any], Coroutine[Any, Any, _T]]) -> _T:
        if self._client is None:
            self._client = self._factory()
        return await work(self._client)

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name=f"cudasched-{self._name}", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def close(self) -> None:
        """Stop the loop and close the client."""
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None:
            return
        if self._client is not None:
            with contextlib.suppress(Exception):
                closing = asyncio.run_coroutine_threadsafe(self._client.close(), loop)
                closing.result(timeout=2)
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=2)
            if not thread.is_alive():
                loop.close()
