"""Requests the API server asks to send again (:mod:`cudasched.kube.retryafter`), through
httpx's own mock transport: a 429 is sent again after the ``Retry-After`` it names (one second
when none), a 5xx only when it names one, a write with the same body; the waits stop at the
tries and the budget, and what is handed on then is the server's last answer."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cudasched.kube.retryafter import RetryAfterTransport, retry_delay


def _answers(*answers: tuple[int, dict[str, str]]) -> tuple[httpx2.MockTransport, list[bytes]]:
    """A server that gives ``answers`` in turn (the last one again after that); the bodies of
    the requests it got."""
    queue: Iterator[tuple[int, dict[str, str]]] = iter(answers)
    got: list[bytes] = []
    last = answers[-1]

    def handler(request: httpx2.Request) -> httpx2.Response:
        got.append(request.read())
        status, headers = next(queue, last)
        return httpx2.Response(status, headers=headers, json={"kind": "Status"})

    return httpx2.MockTransport(handler), got


def _send(
    transport: httpx2.MockTransport, method: str = "GET", **kw: float
) -> tuple[int, list[float]]:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    async def run() -> int:
        retrying = RetryAfterTransport(transport, sleep=sleep, **kw)  # type: ignore[arg-type]
        async with httpx2.AsyncClient(transport=retrying, base_url="https://api") as client:
            body = {"json": {"kind": "PlacementTable"}} if method == "POST" else {}
            return (await client.request(method, "/apis/x", **body)).status_code

    return asyncio.run(run()), waits


def test_a_429_is_sent_again_after_the_wait_it_names() -> None:
    server, got = _answers((429, {"Retry-After": "2"}), (429, {}), (200, {}))
    status, waits = _send(server, "POST")
    assert status == 200 and waits == [2.0, 1.0]
    assert len(got) == 3 and len(set(got)) == 1 and got[0]  # the same body each time


@pytest.mark.parametrize(
    ("answer", "sent_again"),
    [
        ((503, {"Retry-After": "1"}), True),
        ((500, {"Retry-After": "1"}), True),
        ((503, {}), False),  # an outage that names no wait: the caller's own retries decide
        ((409, {"Retry-After": "1"}), False),
        ((404, {}), False),
    ],
)
def test_only_a_429_or_a_5xx_that_names_a_wait_is_sent_again(
    answer: tuple[int, dict[str, str]], sent_again: bool
) -> None:
    server, got = _answers(answer, (200, {}))
    status, _ = _send(server)
    assert (status == 200) is sent_again and len(got) == (2 if sent_again else 1)


def test_the_waits_stop_at_the_tries_and_the_budget() -> None:
    server, got = _answers((429, {"Retry-After": "1"}))
    status, waits = _send(server, tries=3)
    assert status == 429 and waits == [1.0, 1.0, 1.0] and len(got) == 4
    server, got = _answers((429, {"Retry-After": "7"}))
    status, waits = _send(server, budget=20.0)
    assert status == 429 and waits == [7.0, 7.0] and len(got) == 3
    server, got = _answers((429, {"Retry-After": "3600"}))
    status, waits = _send(server, longest=10.0, budget=25.0)
    assert waits == [10.0, 10.0]


@given(
    status=st.integers(100, 599),
    asked=st.one_of(
        st.none(),
        st.integers(-5, 10_000).map(str),
        st.sampled_from(["nan", "inf", "-inf", "1e999", "Wed, 21 Oct 2026 07:28:00 GMT"]),
        st.text(max_size=8),
    ),
)
def test_a_wait_is_never_negative_nor_past_the_longest(status: int, asked: str | None) -> None:
    headers = {"Retry-After": asked} if asked is not None and asked.isprintable() else {}
    try:
        response = httpx2.Response(status, headers=headers)
    except ValueError:  # a header value httpx refuses
        return
    delay = retry_delay(response, longest=10.0)
    retried = status == 429 or (500 <= status <= 599 and "retry-after" in response.headers)
    assert (delay is not None) is retried
    assert delay is None or 0.0 <= delay <= 10.0
