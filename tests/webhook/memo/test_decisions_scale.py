"""The decision memo at production size (issue 22): replicas are still answered from it.

The admission benchmark's workload, at its full size: 5,000 nodes, 200 runtimes, 1,000
predictor pods sent as 2,000 reviews (each pod twice, under two uids), cycled. Before the fix
the memo kept each key whole (a pod is ~4 KB) and each answer twice, so the 1,000 templates
took ~34 MB against a 16 MiB budget; evicting oldest-first, every entry was gone before its
next replica came, and the server decided (almost) every request again. Nothing is timed here:
the test counts what the application answered from the memo.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from cudasched.knowledge import KnowledgeBase
from cudasched.settings.config import WebhookConfig
from cudasched.webhook.server.app import POD_PATH, WebhookApp
from cudasched.webhook.server.assembly import build_app
from cudasched.webhook.state.clusterstate import ClusterState
from cudasched.webhook.state.source import StaticStateSource
from tests.support import synth


def _replay(app: WebhookApp, bodies: list[bytes]) -> list[bytes]:
    """Every body through the ASGI application in turn, on one event loop; the answers."""

    async def one(body: bytes) -> bytes:
        sent: list[dict[str, Any]] = []
        messages = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive() -> dict[str, Any]:
            return messages.pop(0) if messages else {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "method": "POST",
            "path": POD_PATH,
            "headers": [(b"content-length", str(len(body)).encode())],
        }
        await app(scope, receive, send)
        assert sent[0]["status"] == 200
        return b"".join(m.get("body", b"") for m in sent[1:])

    async def replay() -> list[bytes]:
        return [await one(body) for body in bodies]

    return asyncio.run(replay())


def _without_uid(answer: bytes) -> dict[str, Any]:
    response = dict(orjson.loads(answer)["response"])
    response.pop("uid")
    return response


def _remembered(app: WebhookApp) -> float:
    prefix = f'cudasched_webhook_remembered_answers_total{{endpoint="{POD_PATH}"}}'
    for line in app.metrics.render().decode().splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.parametrize(
    "settings",
    [{}, {"decisionCacheBytes": 2 * 1024 * 1024}],
    ids=["default-budget", "budget-below-the-working-set"],
)
def test_replicas_at_full_size_are_answered_from_the_memo(
    kb: KnowledgeBase, settings: dict[str, Any]
) -> None:
    """The benchmark's 2,000 reviews twice through the production application: with the
    default budget >= 99 % of the second pass comes from the memo; with a budget smaller than
    the working set, a part of it still does (first-in-first-out kept none), and every answer
    is the one the first pass gave."""
    cluster = synth.make_cluster(5000, 200, 1000)
    bodies = synth.review_bodies(cluster, 2000)
    state = ClusterState.from_objects(
        cluster.nodes,
        cluster.inference_services,
        cluster.serving_runtimes,
        cluster.cluster_serving_runtimes,
        kb=kb,
    )
    config = WebhookConfig.from_mapping(settings)
    app = build_app(config, StaticStateSource(state), kb=kb)
    try:
        first = _replay(app, bodies)
        before = _remembered(app)
        second = _replay(app, bodies)
        from_memo = _remembered(app) - before
    finally:
        app.close()
    # Review k and k + 1,000 are one pod under two uids; a first decision may carry a warning
    # given once per process, so the answers to compare are the ones after it was given.
    pods = len(cluster.pods)
    assert second[pods:] == first[pods:]
    assert [_without_uid(a) for a in second[:pods]] == [_without_uid(a) for a in first[pods:]]
    if not settings:
        assert from_memo >= 0.99 * len(bodies), from_memo
    else:
        assert from_memo >= 0.25 * len(bodies), from_memo
