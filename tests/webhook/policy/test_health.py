"""The policy controller's HTTP endpoint through its ASGI application (httpx's ASGI
transport): ``/readyz`` is 503 until the caches are listed and then says leader or standby,
``/healthz`` turns 503 only when a round runs past its limit, ``/metrics`` renders the
controller's families (rounds by outcome, writes, keys, tables, leader) in Prometheus' text
format, and anything else is 404. The e2e test on 1.37 reads the same from
``cudasched policy-controller --http-port``."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from cudasched.knowledge import KnowledgeBase
from cudasched.settings.config import WebhookConfig
from cudasched.webhook.admission.admitter import Admitter
from cudasched.webhook.metrics import (
    CONTENT_TYPE,
    ROUND_OUTCOMES,
    ControllerMetrics,
    WebhookMetrics,
)
from cudasched.webhook.policy.health import health_app
from tests.support.admission import nodes_state
from tests.support.policyfakes import FakeApi, FakeCache, controller_of, gpu_pod, listed


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _get(app: Any, *paths: str) -> list[httpx.Response]:
    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://c") as http:
            return [await http.get(p) for p in paths]

    return asyncio.run(run())


@pytest.fixture
def parts(kb: KnowledgeBase) -> tuple[Any, WebhookMetrics, FakeCache, _Clock]:
    metrics = WebhookMetrics()
    cache = FakeCache(nodes_state(kb))
    admitter = Admitter.from_config(WebhookConfig(), kb=kb)
    controller = controller_of(FakeApi(), admitter, cache, "a")
    controller.metrics = ControllerMetrics(metrics.registry)
    return controller, metrics, cache, _Clock()


def test_ready_once_listed_and_alive_until_a_round_hangs(parts: Any) -> None:
    controller, metrics, cache, clock = parts
    app = health_app(controller, metrics, stuck_seconds=300, clock=clock)
    cache.synced = False
    (unsynced,) = _get(app, "/readyz")
    cache.synced = True
    listed(controller.sources)
    ready, alive = _get(app, "/readyz", "/healthz")
    controller.round_started = clock.now - 299
    (slow,) = _get(app, "/healthz")
    controller.round_started = clock.now - 301
    (stuck,) = _get(app, "/healthz")
    (missing,) = _get(app, "/nothing")
    assert unsynced.status_code == 503 and "caches not listed" in unsynced.text
    assert ready.status_code == 200 and ready.text.splitlines() == [
        "ready: caches listed",
        "standby",
    ]
    assert alive.status_code == 200 and slow.status_code == 200
    assert stuck.status_code == 503 and "a round has run for 301s" in stuck.text
    assert missing.status_code == 404


def test_metrics_count_the_rounds_and_what_they_wrote(parts: Any) -> None:
    controller, metrics, _cache, _clock = parts
    listed(controller.sources, gpu_pod("p", "vllm/vllm-openai:v0.9.0"))

    async def rounds() -> None:
        await controller.step()  # leads, decides, writes one table
        await controller.step()  # nothing due

    asyncio.run(rounds())
    (got,) = _get(health_app(controller, metrics), "/metrics")
    lines = set(got.text.splitlines())
    assert got.headers["content-type"] == CONTENT_TYPE
    for outcome in ROUND_OUTCOMES:  # every outcome is a series from the start
        assert any(f'outcome="{outcome}"' in line for line in lines), outcome
    assert 'cudasched_policy_controller_rounds_total{outcome="written"} 1.0' in lines
    assert 'cudasched_policy_controller_rounds_total{outcome="idle"} 1.0' in lines
    assert "cudasched_policy_controller_leader 1.0" in lines
    assert "cudasched_policy_controller_keys 1.0" in lines
    assert "cudasched_policy_controller_tables 1.0" in lines
    assert "cudasched_policy_controller_table_writes_total 1.0" in lines


def test_a_port_in_use_is_one_clear_error(tmp_path: Any) -> None:
    """``--http-port`` taken by another process: the command says which port and why, and
    exits 2 before it starts watching anything."""
    import socket

    from typer.testing import CliRunner

    from cudasched.cli import app

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))  # noqa: S104 - where the command binds
        taken.listen(1)
        port = taken.getsockname()[1]
        result = CliRunner().invoke(
            app,
            ["policy-controller", "--kubeconfig", str(kubeconfig), "--http-port", str(port)],
        )
    assert result.exit_code == 2
    assert f"cannot listen on --http-port {port}: Address already in use" in result.output
