"""The policy controller's own HTTP endpoint: metrics, liveness and readiness, on plain HTTP
(``cudasched policy-controller --http-port``; it carries no secret and serves no request of the
API server's).

* ``/metrics``: the controller's families (below) beside what its watch cache and knowledge
  follower count (the webhook's families, on the same private registry).
* ``/readyz``: 200 once the watch cache and every source kind are listed (a replica that
  could lead would write a whole view), else 503; both say why, with the knowledge in use and
  its last check (as the webhook's ``/readyz`` does).
* ``/healthz``: 200 while the rounds go on; 503 when one has run longer than ``stuck_seconds``
  (a call that hangs past every timeout), so the kubelet restarts a replica that would
  otherwise hold the lease and never write. Rounds that fail (the API server refuses) are no
  reason to restart: they are counted and logged, and a restart would not mend them.

The families are :class:`~cudasched.webhook.metrics.ControllerMetrics`; the server is
:func:`~cudasched.webhook.server.serving.plain_server`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from cudasched.webhook.metrics import CONTENT_TYPE

if TYPE_CHECKING:
    from cudasched.webhook.metrics import WebhookMetrics
    from cudasched.webhook.policy.controller import PolicyController

__all__ = ["health_app"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def _lines(ok: bool, lines: list[str]) -> tuple[int, bytes]:
    return (200 if ok else 503), ("\n".join(lines) + "\n").encode()


def health_app(
    controller: PolicyController,
    metrics: WebhookMetrics,
    *,
    stuck_seconds: float = 300.0,
    clock: Callable[[], float] = time.monotonic,
) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """The ASGI application of the three endpoints for ``controller`` (see the module
    docstring); ``metrics`` is what ``/metrics`` renders."""

    def readyz() -> tuple[int, bytes]:
        synced = controller.cache.synced and controller.sources.synced()
        lines = ["ready: caches listed" if synced else "not ready: caches not listed yet"]
        lines.append("leader" if controller.lease.held() else "standby")
        if controller.knowledge is not None:
            lines += controller.knowledge.detail()
        return _lines(synced, lines)

    def healthz() -> tuple[int, bytes]:
        began = controller.round_started
        running = clock() - began if began is not None else 0.0
        if running > stuck_seconds:
            return _lines(False, [f"a round has run for {running:.0f}s"])
        return _lines(True, ["ok"])

    routes: dict[str, Callable[[], tuple[int, bytes]]] = {
        "/readyz": readyz,
        "/healthz": healthz,
        "/metrics": lambda: (200, metrics.render()),
    }

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # served with lifespan off: nothing to start or stop
            return
        route = routes.get(scope.get("path", "")) if scope.get("method") == "GET" else None
        status, body = route() if route is not None else (404, b"not found\n")
        kind = CONTENT_TYPE if scope.get("path") == "/metrics" and route else "text/plain"
        headers = [(b"content-type", kind.encode()), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app
