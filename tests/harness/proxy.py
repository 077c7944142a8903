"""A recording TLS proxy in front of the real API server, with a hook before each request.

The tests put it between a cudasched command and kube-apiserver to see the requests the command
makes (pages, continue tokens) and to act at one exact moment, e.g. compact etcd right before a
continue request, so that the real API server answers ``410 Gone`` (see :func:`compact_etcd`).
Answers are the API server's own, passed through unchanged. It serves the API server's own
certificate (127.0.0.1 is among its names) and forwards as the admin.
"""

from __future__ import annotations

import base64
import contextlib
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import yaml

from tests.harness.controlplane.plane import ControlPlane
from tests.harness.kube import Api, Credentials

__all__ = ["Exchange", "Proxy", "compact_etcd", "proxy"]

_FORWARDED = ("accept", "content-type", "user-agent", "accept-encoding")


@dataclass
class Exchange:
    """One request the proxy forwarded and the API server's status."""

    method: str
    path: str
    query: dict[str, str]
    status: int


@dataclass
class Proxy:
    url: str
    kubeconfig: Path
    exchanges: list[Exchange] = field(default_factory=list)
    #: Called with (method, path, query) before forwarding; may block, and may return the
    #: answer itself (an earlier genuine answer of the API server, replayed).
    before: Callable[[str, str, dict[str, str]], httpx.Response | None] | None = None


@contextlib.contextmanager
def proxy(plane: ControlPlane, workdir: Path) -> Iterator[Proxy]:
    """Serve on a free loopback port until the block ends; ``kubeconfig`` points at it."""
    pki = plane.pki
    upstream = httpx.Client(base_url=plane.server, verify=plane.credentials().tls(), timeout=60)
    lock = threading.Lock()
    state: dict[str, Proxy] = {}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # quiet
            return

        def _forward(self) -> None:
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            current = state["proxy"]
            answer = None
            if current.before is not None:
                answer = current.before(self.command, parts.path, query)
            if answer is None:
                headers = {k: v for k, v in self.headers.items() if k.lower() in _FORWARDED}
                answer = upstream.request(
                    self.command,
                    parts.path,
                    params=parts.query or None,
                    content=body,
                    headers=headers,
                )
            with lock:
                current.exchanges.append(
                    Exchange(self.command, parts.path, query, answer.status_code)
                )
            payload = answer.content
            self.send_response(answer.status_code)
            for key in ("Content-Type", "Warning", "Audit-Id"):
                if key in answer.headers:
                    self.send_header(key, answer.headers[key])
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(pki.cert("apiserver")), str(pki.key("apiserver")))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    port = server.server_address[1]
    url = f"https://127.0.0.1:{port}"
    kubeconfig = workdir / "proxy.kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "proxy",
                        "cluster": {"server": url, "certificate-authority": str(pki.ca_cert)},
                    }
                ],
                "users": [
                    {
                        "name": "admin",
                        "user": {
                            "client-certificate": str(pki.cert("admin")),
                            "client-key": str(pki.key("admin")),
                        },
                    }
                ],
                "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "admin"}}],
                "current-context": "proxy",
            }
        )
    )
    state["proxy"] = Proxy(url, kubeconfig)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state["proxy"]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
        upstream.close()


def compact_etcd(plane: ControlPlane) -> int:
    """Compact etcd to its current revision the way another kube-apiserver of an HA control
    plane does: record the revision in ``compact_rev_key`` (which every API server watches, and
    which makes its watch cache drop older snapshots), then compact. Returns the revision."""
    pki = plane.pki
    tls = Credentials(
        "etcd", pki.ca_cert, pki.cert("apiserver-etcd-client"), pki.key("apiserver-etcd-client")
    ).tls()
    base = f"https://127.0.0.1:{plane.ports['etcd']}/v3"

    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    with httpx.Client(verify=tls, timeout=30) as etcd:
        key = b64("compact_rev_key")
        # a write first, so that the compaction revision is newer than anything served so far
        # (a compaction at revision R keeps R itself readable)
        bumped = etcd.post(f"{base}/kv/put", json={"key": key, "value": b64("0")})
        bumped.raise_for_status()
        head = int(bumped.json()["header"]["revision"])
        etcd.post(
            f"{base}/kv/compaction", json={"revision": head, "physical": True}
        ).raise_for_status()
        etcd.post(f"{base}/kv/put", json={"key": key, "value": b64(str(head))}).raise_for_status()
    return head


def wait_until_expired(api: Api, path: str, token: str, *, timeout: float = 60.0) -> None:
    """Block until the API server answers 410 to ``token`` (its watch cache has seen the
    compaction: within a second here, at most its 15 s poll)."""
    limit = time.monotonic() + timeout
    while api.send("GET", path, params={"limit": "1", "continue": token}).status_code != 410:
        if time.monotonic() > limit:
            raise TimeoutError(
                f"the API server still serves {path} continue tokens after compaction"
            )
        time.sleep(0.2)
