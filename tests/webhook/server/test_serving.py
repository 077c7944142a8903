"""How the webhook is run: the server in a thread (graceful stop with a request in flight), the
uvicorn configuration, and the ``cudasched webhook`` command in a subprocess (one process, or
the prefork supervisor with two workers), stopped by SIGTERM.
"""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from cudasched.settings.config import WebhookConfig
from cudasched.webhook.server.assembly import build_app
from cudasched.webhook.server.serving import serve_in_thread, uvicorn_config
from cudasched.webhook.server.tls import (
    ReloadingServerContext,
    generate_self_signed,
    write_self_signed,
)
from cudasched.webhook.state.source import StaticStateSource
from tests.harness.controlplane.processes import free_port
from tests.support.admission import client, review
from tests.support.fakeadmission import FakeAdmission


def test_uvicorn_config_serves_the_app_over_the_reloading_context(tmp_path: Path) -> None:
    """HTTPS through the reloading context, lifespan on (the cache starts and stops with the
    server), no websockets, and the host program's logging left alone."""
    cert, key, _ca = write_self_signed(tmp_path, generate_self_signed())
    tls = ReloadingServerContext(cert, key)
    app = build_app(WebhookConfig(), StaticStateSource(object()), admission=FakeAdmission())  # type: ignore[arg-type]
    try:
        config = uvicorn_config(app, tls, host="127.0.0.1", port=9443, graceful_seconds=7.0)
        assert config.app is app
        assert (config.host, config.port) == ("127.0.0.1", 9443)
        assert config.ssl_context_factory is not None
        assert config.ssl_context_factory(config, None) is tls.context  # type: ignore[arg-type]
        assert config.lifespan == "on" and config.ws == "none"
        assert config.log_config is None and config.access_log is False
        assert config.server_header is False and config.date_header is False
        assert config.timeout_graceful_shutdown == 7.0
        assert config.http.__name__ in ("LimitedHttpToolsProtocol", "LimitedH11Protocol")
        assert config.loop in ("uvloop", "asyncio")
        assert config.timeout_keep_alive == 5
    finally:
        app.close()


def test_in_flight_request_finishes_on_graceful_stop() -> None:
    standin = FakeAdmission("block")
    result: dict[str, Any] = {}
    with serve_in_thread(object(), admission=standin) as srv:

        def send() -> None:
            with client(srv) as c:
                result["resp"] = c.post("/mutate/pods", content=review("inflight"))

        sender = threading.Thread(target=send)
        sender.start()
        assert standin.entered.wait(10)
        srv.request_stop()  # what SIGTERM does
        time.sleep(0.2)  # the server is draining, the request still in flight
        standin.release.set()
        sender.join(10)
    assert result["resp"].status_code == 200
    assert result["resp"].json()["response"]["uid"] == "inflight"


# ---------------------------------------------------------------------- the CLI command


@pytest.mark.parametrize("workers", [1, 2])
def test_cli_webhook_serves_and_stops_on_sigterm(tmp_path: Path, workers: int) -> None:
    """``cudasched webhook --self-signed`` against an API server that does not answer: it
    serves health, reports not-ready, admits by the failure mode, and exits 0 on SIGTERM
    (with ``server.workers: 2`` the supervisor forwards the signal to both workers)."""
    api_port, port = free_port(), free_port()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
        f"clusters: [{{name: t, cluster: {{server: 'http://127.0.0.1:{api_port}'}}}}]\n"
        "users: [{name: t, user: {}}]\n"
        "contexts: [{name: t, context: {cluster: t, user: t}}]\n"
    )
    tls_dir = tmp_path / "tls"
    config = tmp_path / "config.yaml"
    config.write_text(f"server:\n  workers: {workers}\n")
    cmd = [
        sys.executable,
        "-c",
        "from cudasched.cli import main; main()",
        "webhook",
        "--self-signed",
        "--tls-dir",
        str(tls_dir),
        "--config",
        str(config),
        "--kubeconfig",
        str(kubeconfig),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    lines: list[bytes] = []
    assert proc.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, b"")))
    reader.start()

    def started() -> int:
        return sum(b"Application startup complete" in line for line in list(lines))

    try:
        ca = tls_dir / "ca.crt"
        limit = time.monotonic() + 30
        health = None
        while time.monotonic() < limit and proc.poll() is None:
            # Every worker must be up before the signal, or it would (correctly) stop early.
            if ca.exists() and started() == workers:
                tls = ssl.create_default_context(cadata=ca.read_text())
                try:
                    with httpx.Client(verify=tls, timeout=2) as c:
                        health = c.get(f"https://127.0.0.1:{port}/healthz")
                        ready = c.get(f"https://127.0.0.1:{port}/readyz")
                        answer = c.post(
                            f"https://127.0.0.1:{port}/mutate/pods", content=review("cli-1")
                        ).json()["response"]
                    break
                except httpx.TransportError:
                    pass
            time.sleep(0.1)
        assert health is not None and health.status_code == 200, proc.poll()
        assert ready.status_code == 503
        assert answer["uid"] == "cli-1" and answer["allowed"] is True
        assert oct(ca.stat().st_mode & 0o777) == oct(0o600)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(10)
    out = b"".join(lines)
    assert proc.returncode == 0, out.decode()[-2000:]
    assert out.count(b"Started server process") == workers, out.decode()[-2000:]
    assert out.count(b"Finished server process") == workers, out.decode()[-2000:]
