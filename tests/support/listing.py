"""A client fake's ``list`` answer as lightkube's ``AsyncClient.list`` gives one: an async
iterator that yields the items, or raises ``found`` (an API refusal, a dropped connection) at
its first step, since the request is made only once the caller iterates."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any


def listed(found: Iterable[Any] | BaseException) -> AsyncIterator[Any]:
    """``found``'s items, or ``found`` raised when iteration starts."""

    async def items() -> AsyncIterator[Any]:
        if isinstance(found, BaseException):
            raise found
        for item in found:
            yield item

    return items()
