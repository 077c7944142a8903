"""Shared test support."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import kmock

from cudasched.settings.config import WebhookConfig
from cudasched.webhook.background.watchcache import ClusterCache
from cudasched.webhook.server.serving import RunningServer, serve_in_thread


def trust(pem: bytes) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=pem.decode())


def make_cache(url: str) -> ClusterCache:
    """The production cache and state builder, with test-sized timings."""
    return ClusterCache(
        base_url=url.rstrip("/"),
        debounce_seconds=0.01,
        backoff_initial=0.02,
        backoff_max=0.1,
        missing_crd_retry_seconds=0.2,
        request_timeout=1.0,
    )


@contextlib.asynccontextmanager
async def serving(source: Any, settings: dict[str, Any]) -> AsyncIterator[RunningServer]:
    """:func:`serve_in_thread` entered and left off the event loop, so the mock API server
    (on this loop) keeps answering while the webhook starts and drains."""
    stack = contextlib.ExitStack()
    cfg = WebhookConfig.from_mapping(settings)
    srv = await asyncio.to_thread(stack.enter_context, serve_in_thread(source, config=cfg))
    try:
        yield srv
    finally:
        await asyncio.to_thread(stack.close)


def events(emulator: Any) -> list[dict[str, Any]]:
    return [dict(o.raw) for (res, _ns, _n), o in emulator.objects.items() if res == EVENTS]


async def eventually(predicate: Callable[[], Awaitable[bool] | bool], timeout: float = 20) -> None:
    async with asyncio.timeout(timeout):
        while True:
            result = predicate()
            if isinstance(result, Awaitable):
                result = await result
            if result:
                return
            await asyncio.sleep(0.05)


EVENTS = kmock.resource("events.k8s.io/v1/events")
