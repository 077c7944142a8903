"""Requests the API server asks to send again later, sent again: the transport every client of
:func:`cudasched.kube.client.make_client` talks through.

The API server answers ``429 Too Many Requests`` with a ``Retry-After`` header when API Priority
and Fairness sheds load, and also when a resource's watch cache is not ready: after a restart,
and after a CustomResourceDefinition changes, every LIST of that resource is refused until
its cache is initialised again (KEP-4568, apiserver ``pkg/storage/cacher``:
``NewTooManyRequests(..., calculateRetryAfterForUnreadyCache(...))``). client-go waits and
retries such answers itself (``rest.Request``'s ``checkWait``: a 429, or a 5xx that carries
``Retry-After``; ten tries by default); lightkube hands them to the caller, so a ``--live``
command failed outright on a cluster that was only warming up (found on 1.37: a ``cudasched
explain`` right after ``kubectl apply`` of a CRD got ``HTTP 429`` for ImageFacts).

So: a 429, or a 5xx with ``Retry-After``, is sent again after the seconds the server asked
(one second when a 429 names none; at most ``longest`` each), up to ``tries`` times and at most
``budget`` seconds of waiting per request, then handed on as it is. The server did not act on
such a request, so sending a write again is safe; its body is held in memory (lightkube sends
JSON bytes).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable

import httpx2

__all__ = ["RetryAfterTransport", "retry_delay"]


def retry_delay(response: httpx2.Response, *, longest: float) -> float | None:
    """The seconds to wait before sending the request of ``response`` again, or ``None`` when
    it is not to be sent again (see the module docstring)."""
    code = response.status_code
    asked = response.headers.get("retry-after")
    if code != 429 and not (500 <= code <= 599 and asked is not None):
        return None
    try:
        seconds = float(asked) if asked is not None else 1.0
    except ValueError:  # an HTTP date: the API server never sends one
        seconds = 1.0
    if math.isnan(seconds):
        seconds = 1.0
    return min(max(seconds, 0.0), longest)


class RetryAfterTransport(httpx2.AsyncBaseTransport):
    """``inner``, with the requests the server asks to send again sent again (see the module
    docstring)."""

    def __init__(
        self,
        inner: httpx2.AsyncBaseTransport,
        *,
        tries: int = 10,
        longest: float = 10.0,
        budget: float = 30.0,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self.inner = inner
        self.tries = tries
        self.longest = longest
        self.budget = budget
        self._sleep = sleep

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        waited = 0.0
        for _ in range(self.tries):
            response = await self.inner.handle_async_request(request)
            delay = retry_delay(response, longest=self.longest)
            if delay is None or waited + delay > self.budget:
                return response
            await response.aclose()
            await self._sleep(delay)
            waited += delay
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()
