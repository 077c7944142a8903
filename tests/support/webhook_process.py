"""Test helper: the real ``cudasched webhook --cluster FILE`` server in its own process.

Attack and load tests measure what a deployment would see (memory of the process, latency over
real HTTPS), so they run the console command itself, not the server embedded in pytest's own
process. The server serves the bundled sample cluster unless a file is given.

Usage::

    with webhook_process(tmp_path, config={"decisionCacheBytes": 1048576}) as proc:
        httpx.post(proc.url + "/mutate/pods", content=body, verify=proc.ca_file)
        proc.rss_bytes()
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

__all__ = ["WebhookProcess", "free_port", "sample_cluster_file", "webhook_process"]

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def sample_cluster_file() -> Path:
    return REPO / "src" / "cudasched" / "data" / "sample-cluster.yaml"


@dataclass
class WebhookProcess:
    process: subprocess.Popen[bytes]
    port: int
    ca_file: Path
    log_file: Path

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def tls(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def rss_bytes(self) -> int:
        """The server's resident set size now (Linux /proc)."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")


def _command() -> list[str]:
    found = shutil.which("cudasched", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "cudasched.cli"]


@contextlib.contextmanager
def webhook_process(
    tmp: Path,
    *,
    config: dict[str, Any] | None = None,
    cluster: Path | None = None,
    startup_timeout: float = 60.0,
) -> Iterator[WebhookProcess]:
    """Start the server, wait until it answers ``/readyz``, stop it with SIGTERM at the end."""
    tls_dir = tmp / "tls"
    tls_dir.mkdir(exist_ok=True)
    config_file = tmp / "webhook.yaml"
    config_file.write_text(yaml.safe_dump(config or {}), encoding="utf-8")
    port = free_port()
    log_file = tmp / "webhook.log"
    args = [
        *_command(),
        "webhook",
        "--cluster",
        str(cluster or sample_cluster_file()),
        "--config",
        str(config_file),
        "--self-signed",
        "--tls-dir",
        str(tls_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    with log_file.open("wb") as log:
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    proc = WebhookProcess(process, port, tls_dir / "ca.crt", log_file)
    try:
        limit = time.monotonic() + startup_timeout
        while True:
            if process.poll() is not None:
                raise AssertionError(f"webhook exited {process.returncode}: {proc.log()}")
            if proc.ca_file.exists():
                try:
                    ready = httpx.get(proc.url + "/readyz", verify=proc.tls(), timeout=2)
                    if ready.status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
            if time.monotonic() > limit:
                raise AssertionError(f"webhook did not start: {proc.log()}")
            time.sleep(0.1)
        yield proc
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
