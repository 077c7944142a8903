"""The webhook's HTTPS server: a small ASGI application served by uvicorn.

Why no web framework: the API server calls the webhook synchronously on every GPU pod
creation, so per-request overhead is latency every user pays. The application is one
dictionary lookup on ``scope["path"]``, orjson for the little JSON it writes itself, and the
admission decision from :class:`~cudasched.webhook.admission.Admitter`.

Failure behaviour (what the API server sees):

* malformed input is answered with HTTP 400 and a one-line reason (the API server then applies
  the webhook's ``failurePolicy``); oversized bodies get 413 before the rest is read;
* while the cluster cache has not completed its first list of every kind, admission requests
  are answered by the failure mode: allowed with a warning, or denied when ``failClosed``;
* a repeat of an object already decided under the current snapshot (another replica of the
  same template) is answered on the event loop from the reviewer's memo: parsing a body of at
  most 64 KiB, building its key and splicing the uid cost microseconds;
* every other review runs in a worker thread under a deadline (``requestTimeoutSeconds``, kept below
  the API server's ``timeoutSeconds``). If the decision is not ready in time the request is
  answered by the failure mode at once and the late result is discarded: a slow or stuck
  decision can never make the API server wait for its own timeout, and the event loop stays
  free to answer health checks and other requests meanwhile.

The cluster snapshot is read from a :class:`StateSource` (the watch cache in production, a
fixed snapshot in the demo and tests); request handling never calls the Kubernetes API.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import socket
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import orjson

from cudasched.errors import InputError
from cudasched.webhook.admission import MEMO_MAX_BODY_BYTES
from cudasched.webhook.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from cudasched.webhook.metrics import WebhookMetrics
from cudasched.webhook.tls import (
    ReloadingServerContext,
    generate_self_signed,
    load_server_context,
    write_self_signed,
)

if TYPE_CHECKING:
    import uvicorn

    from cudasched.webhook.config import WebhookConfig
    from cudasched.webhook.state import ClusterState

__all__ = [
    "ISVC_PATH",
    "POD_PATH",
    "Reviewer",
    "RunningServer",
    "SourceFactory",
    "StagedReviewer",
    "StateSource",
    "StaticStateSource",
    "WebhookApp",
    "build_app",
    "default_reviewer",
    "run_server",
    "serve_in_thread",
    "uvicorn_config",
]

log = logging.getLogger(__name__)

POD_PATH = "/mutate/pods"
ISVC_PATH = "/mutate/inferenceservices"
HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"
METRICS_PATH = "/metrics"

_API_VERSION = "admission.k8s.io/v1"
_REVIEW_KIND = "AdmissionReview"
_WARNING_LIMIT = 120  # Kubernetes asks for warnings of at most 120 characters
# Bodies up to this size are parsed on the event loop to look for a remembered answer (about
# 10 us per 4 KiB with orjson); larger ones are parsed in the review thread, under the deadline,
# and never remembered.
_INLINE_PARSE_BYTES = MEMO_MAX_BODY_BYTES

Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]


class Reviewer(Protocol):
    """What the server needs from admission (``Admitter`` satisfies it)."""

    def review(self, kind: str, body: bytes, state: ClusterState) -> bytes: ...


@runtime_checkable
class StagedReviewer(Protocol):
    """A reviewer that splits a review into cheap steps the event loop may run
    (``recall_body``: a remembered answer found without decoding; ``prepare``: decode and key;
    ``recall``: a remembered answer by the decoded request) and the decision itself
    (``answer``), which runs in a review thread under the deadline. Only the event loop calls
    the ``recall`` steps. ``Admitter`` is one; see its methods."""

    def recall_body(self, kind: Any, body: bytes, state: Any) -> tuple[bytes, str] | None: ...

    def prepare(self, kind: Any, body: bytes) -> Any: ...

    def recall(self, prepared: Any, state: Any) -> tuple[bytes, str] | None: ...

    def answer(self, prepared: Any, state: Any) -> tuple[bytes, str]: ...


@runtime_checkable
class StateSource(Protocol):
    """Where the current cluster snapshot comes from.

    ``state`` must be cheap (an attribute read): it is called once per request. ``start`` and
    ``stop`` run on the server's event loop at start-up and shutdown.
    """

    @property
    def state(self) -> ClusterState: ...

    @property
    def synced(self) -> bool: ...

    @property
    def not_ready_reason(self) -> str: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class StaticStateSource:
    """A fixed snapshot, always synced: the demo, e2e tests and offline use."""

    def __init__(self, state: ClusterState) -> None:
        self._state = state

    @property
    def state(self) -> ClusterState:
        return self._state

    @property
    def synced(self) -> bool:
        return True

    @property
    def not_ready_reason(self) -> str:
        return ""

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None


class _BadRequest(Exception):
    """A request the server refuses before admission (status + one-line message)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _clip(text: str) -> str:
    return text if len(text) <= _WARNING_LIMIT else text[: _WARNING_LIMIT - 1] + "…"


def _review_uid(body: bytes) -> str:
    """The uid of an AdmissionReview v1 request, for answers the server writes itself.

    Raises :class:`_BadRequest` (400) with the reason when the body is not one."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise _BadRequest(400, f"request body is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise _BadRequest(400, f"request body must be a JSON object, got {type(doc).__name__}")
    if doc.get("apiVersion") != _API_VERSION or doc.get("kind") != _REVIEW_KIND:
        raise _BadRequest(
            400,
            f"expected apiVersion {_API_VERSION!r} and kind {_REVIEW_KIND!r}, "
            f"got {doc.get('apiVersion')!r} and {doc.get('kind')!r}",
        )
    request = doc.get("request")
    uid = request.get("uid") if isinstance(request, dict) else None
    if not isinstance(uid, str) or not uid:
        raise _BadRequest(
            400, f"AdmissionReview request.uid must be a non-empty string, got {uid!r}"
        )
    return uid


def _fallback_review(uid: str, *, deny: bool, message: str, code: int) -> bytes:
    """An answer written by the failure mode: allowed with a warning, or denied."""
    text = _clip(message)
    response: dict[str, Any] = {"uid": uid, "allowed": not deny, "warnings": [text]}
    if deny:
        response["status"] = {
            "metadata": {},
            "status": "Failure",
            "reason": "InternalError" if code >= 500 else "BadRequest",
            "message": text,
            "code": code,
        }
    return orjson.dumps({"apiVersion": _API_VERSION, "kind": _REVIEW_KIND, "response": response})


def _outcome_of(answer: bytes) -> str:
    """Classify an AdmissionReview response for metrics without parsing it. orjson writes no
    whitespace and escapes quotes inside strings, so ``"allowed":false`` and ``"patch":``
    can only match the keys themselves, never text inside a warning or message."""
    if b'"allowed":false' in answer:
        return "denied"
    if b'"patch":' in answer:
        return "patched"
    return "unchanged"


class WebhookApp:
    """The ASGI application. One instance per server; nothing global.

    ``reviewer`` decides admission, ``source`` supplies the cluster snapshot, ``metrics`` holds
    this server's private Prometheus registry.
    """

    def __init__(
        self,
        reviewer: Reviewer,
        source: StateSource,
        *,
        max_body_bytes: int = 3_145_728,
        request_timeout: float = 2.5,
        fail_closed: bool = False,
        metrics: WebhookMetrics | None = None,
        review_threads: int = 4,
    ) -> None:
        if max_body_bytes < 1:
            raise InputError(f"invalid max_body_bytes {max_body_bytes!r}: expected >= 1")
        if not request_timeout > 0:
            raise InputError(f"invalid request_timeout {request_timeout!r}: expected > 0 seconds")
        self.reviewer = reviewer
        self.source = source
        self.max_body_bytes = max_body_bytes
        self.request_timeout = request_timeout
        self.fail_closed = fail_closed
        self.metrics = metrics if metrics is not None else WebhookMetrics()
        self._executor = ThreadPoolExecutor(
            max_workers=max(1, review_threads), thread_name_prefix="cudasched-review"
        )
        self._staged: StagedReviewer | None = (
            reviewer if isinstance(reviewer, StagedReviewer) else None
        )
        self._reviewer_decide: Callable[[str, bytes, Any], Any] | None = getattr(
            reviewer, "decide", None
        )
        self._admission: dict[str, str] = {POD_PATH: "pod", ISVC_PATH: "isvc"}
        self._plain: dict[str, Callable[[], tuple[int, bytes, bytes]]] = {
            HEALTH_PATH: self._healthz,
            READY_PATH: self._readyz,
            METRICS_PATH: self._metrics,
        }
        # Children of labelled metrics are looked up once, not per request.
        self._latency = {p: self.metrics.latency.labels(endpoint=p) for p in self._admission}
        self._counted: dict[tuple[str, str], Any] = {}
        self._remembered = {
            p: self.metrics.remembered_answers.labels(endpoint=p) for p in self._admission
        }

    # ------------------------------------------------------------------ ASGI entry point

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)
        else:  # websockets are never served
            raise RuntimeError(f"unsupported ASGI scope type {kind!r}")

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.source.start()
                except Exception as exc:
                    log.exception("start-up failed")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                try:
                    await self.source.stop()
                finally:
                    self._executor.shutdown(wait=False, cancel_futures=True)
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        path = scope["path"]
        method = scope["method"]
        kind = self._admission.get(path)
        if kind is not None:
            if method != "POST":
                await _respond(send, 405, b"method not allowed: use POST\n", allow=b"POST")
                return
            await self._admit(kind, path, scope, receive, send)
            return
        handler = self._plain.get(path)
        if handler is None:
            await _respond(send, 404, f"not found: {path!r}\n".encode())
            return
        if method not in ("GET", "HEAD"):
            await _respond(send, 405, b"method not allowed: use GET\n", allow=b"GET, HEAD")
            return
        status, body, content_type = handler()
        await _respond(send, status, body, content_type=content_type, head=method == "HEAD")

    # ------------------------------------------------------------------ plain endpoints

    def _healthz(self) -> tuple[int, bytes, bytes]:
        return 200, b"ok\n", b"text/plain; charset=utf-8"

    def _readyz(self) -> tuple[int, bytes, bytes]:
        if self.source.synced:
            return 200, b"ok\n", b"text/plain; charset=utf-8"
        reason = self.source.not_ready_reason or "cluster cache not synced"
        return 503, f"not ready: {reason}\n".encode(), b"text/plain; charset=utf-8"

    def _metrics(self) -> tuple[int, bytes, bytes]:
        return 200, self.metrics.render(), METRICS_CONTENT_TYPE.encode()

    # ------------------------------------------------------------------ admission

    async def _admit(
        self, kind: str, path: str, scope: dict[str, Any], receive: Receive, send: Send
    ) -> None:
        started = time.perf_counter()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.request_timeout
        outcome = "error"
        try:
            body = await self._read_body(scope, receive, deadline)
            answer, outcome = await self._decide(kind, path, body, deadline)
        except _BadRequest as exc:
            await _respond(
                send,
                exc.status,
                (exc.message.replace("\n", " ") + "\n").encode(),
                close=exc.status == 413,
            )
        else:
            await _respond(send, 200, answer, content_type=b"application/json")
        finally:
            counter = self._counted.get((path, outcome))
            if counter is None:
                counter = self.metrics.requests.labels(endpoint=path, outcome=outcome)
                self._counted[(path, outcome)] = counter
            counter.inc()
            self._latency[path].observe(time.perf_counter() - started)

    async def _read_body(self, scope: dict[str, Any], receive: Receive, deadline: float) -> bytes:
        limit = self.max_body_bytes
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    raise _BadRequest(400, "invalid Content-Length header") from None
                if declared > limit:
                    raise _BadRequest(
                        413, f"request body of {declared} bytes exceeds the limit of {limit} bytes"
                    )
                break
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout_at(deadline):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        raise _BadRequest(400, "client disconnected before sending the body")
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > limit:
                        raise _BadRequest(413, f"request body exceeds the limit of {limit} bytes")
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            # Without the body there is no uid to answer with; the API server applies its
            # failurePolicy to this error.
            raise _BadRequest(408, "request body not received within the time budget") from None
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def _decide(
        self, kind: str, path: str, body: bytes, deadline: float
    ) -> tuple[bytes, str]:
        """The answer and its outcome label; raises :class:`_BadRequest` for bad bodies."""
        source = self.source
        if not source.synced:
            reason = source.not_ready_reason or "cluster cache not synced"
            return self._fallback(
                body, path, "not_synced", f"cluster state not ready ({reason})", 503
            )
        state = source.state
        loop = asyncio.get_running_loop()
        staged = self._staged
        if staged is not None and len(body) <= _INLINE_PARSE_BYTES:
            # Repeats of a template are answered here without a thread hop; the rest goes to a
            # review thread with the request already parsed.
            try:
                found = staged.recall_body(kind, body, state)
                if found is not None:
                    self._remembered[path].inc()
                    return found
                prepared = staged.prepare(kind, body)
                found = staged.recall(prepared, state)
            except InputError as exc:  # BadReviewError: not an AdmissionReview v1
                raise _BadRequest(400, str(exc)) from None
            except Exception:
                log.exception("admission of %s failed", path)
                return self._fallback(body, path, "internal", "internal error", 500)
            if found is not None:
                self._remembered[path].inc()
                return found
            future = loop.run_in_executor(self._executor, staged.answer, prepared, state)
        else:
            future = loop.run_in_executor(self._executor, self._review, kind, body, state)
        try:
            async with asyncio.timeout_at(deadline):
                answer, outcome = await future
        except TimeoutError:
            log.warning(
                "admission of %s exceeded %.2fs; answered by the failure mode",
                path,
                self.request_timeout,
            )
            return self._fallback(
                body, path, "timeout", f"decision exceeded {self.request_timeout:g}s", 504
            )
        except InputError as exc:  # BadReviewError: not an AdmissionReview v1
            raise _BadRequest(400, str(exc)) from None
        except Exception:
            log.exception("admission of %s failed", path)
            return self._fallback(body, path, "internal", "internal error", 500)
        return answer, outcome

    def _review(self, kind: str, body: bytes, state: ClusterState) -> tuple[bytes, str]:
        """Runs in a review thread. Uses ``decide`` when the reviewer has it (the Admitter
        reports its own outcome), else classifies the serialised answer."""
        staged = self._staged
        if staged is not None:
            # No lookup here: only the event loop, which reads snapshots in the order the
            # source publishes them, moves the memo to a new snapshot (a review thread may hold
            # an older one). Bodies this large are not looked up on the loop either.
            return staged.answer(staged.prepare(kind, body), state)
        decide = self._reviewer_decide
        if decide is not None:
            decision = decide(kind, body, state)
            return decision.render(), str(decision.outcome)
        answer = self.reviewer.review(kind, body, state)
        return answer, _outcome_of(answer)

    def _fallback(
        self, body: bytes, path: str, reason: str, what: str, code: int
    ) -> tuple[bytes, str]:
        uid = _review_uid(body)
        self.metrics.fallbacks.labels(endpoint=path, reason=reason).inc()
        if self.fail_closed:
            message = f"cudasched: {what}; request denied (failClosed)"
        else:
            message = f"cudasched: {what}; admitted without CUDA placement"
        return _fallback_review(uid, deny=self.fail_closed, message=message, code=code), "error"

    def close(self) -> None:
        """Release the review threads (lifespan shutdown does this when served by uvicorn)."""
        self._executor.shutdown(wait=False, cancel_futures=True)


async def _respond(
    send: Send,
    status: int,
    body: bytes,
    *,
    content_type: bytes = b"text/plain; charset=utf-8",
    allow: bytes | None = None,
    close: bool = False,
    head: bool = False,
) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    if allow is not None:
        headers.append((b"allow", allow))
    if close:
        # The unread rest of the body must not be parsed as the next request.
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if head else body})


# ---------------------------------------------------------------------- assembly


def default_reviewer(config: WebhookConfig) -> Reviewer:
    """The production :class:`Admitter` for ``config`` with the bundled knowledge base and
    image table (``imageOverrides`` in front)."""
    from cudasched.images import ImageTable
    from cudasched.knowledge import KnowledgeBase
    from cudasched.webhook.admission import Admitter

    kb = KnowledgeBase.load()
    return Admitter(config, kb, ImageTable.from_config(config, kb=kb))


def build_app(
    config: WebhookConfig,
    source: StateSource,
    *,
    reviewer: Reviewer | None = None,
    metrics: WebhookMetrics | None = None,
) -> WebhookApp:
    """The application for ``config``: limits, time budget and failure mode from
    ``config.server`` / ``config.failClosed``; the Admitter unless ``reviewer`` is given."""
    return WebhookApp(
        reviewer if reviewer is not None else default_reviewer(config),
        source,
        max_body_bytes=config.server.max_body_bytes,
        request_timeout=config.server.request_timeout_seconds,
        fail_closed=config.fail_closed,
        metrics=metrics,
    )


def _best(kind: str) -> str:
    """uvicorn's fastest implementation that is installed (httptools / uvloop)."""
    if kind == "http":
        return "httptools" if importlib.util.find_spec("httptools") else "h11"
    return "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"


def uvicorn_config(
    app: WebhookApp,
    tls: ReloadingServerContext,
    *,
    host: str = "0.0.0.0",
    port: int = 8443,
    log_level: str = "info",
    graceful_seconds: float = 20.0,
) -> uvicorn.Config:
    """A uvicorn configuration serving ``app`` over HTTPS with the reloading TLS context.

    Logging is left to the caller (``log_config=None``) so embedding the server does not
    reconfigure the host program's loggers.
    """
    import uvicorn

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=_best("http"),
        loop=_best("loop"),
        ws="none",
        lifespan="on",
        ssl_context_factory=lambda _config, _default: tls.context,
        log_config=None,
        log_level=log_level,
        access_log=False,
        server_header=False,
        date_header=False,
        timeout_graceful_shutdown=graceful_seconds,
    )


@dataclass(frozen=True, slots=True)
class RunningServer:
    """A server started by :func:`serve_in_thread`: where it listens and whom to trust."""

    host: str
    port: int
    ca_pem: bytes
    ca_file: Path
    cert_file: Path
    key_file: Path
    app: WebhookApp
    tls: ReloadingServerContext
    server: uvicorn.Server

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"https://{host}:{self.port}"

    def request_stop(self) -> None:
        """Begin a graceful shutdown (what SIGTERM does): stop accepting, finish in-flight
        requests. Leaving the ``serve_in_thread`` block waits for it to complete."""
        self.server.should_exit = True


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise InputError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.set_inheritable(True)
    return sock


@contextlib.contextmanager
def serve_in_thread(
    state: ClusterState | StateSource,
    *,
    config: WebhookConfig | None = None,
    reviewer: Reviewer | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    cert_file: str | os.PathLike[str] | None = None,
    key_file: str | os.PathLike[str] | None = None,
    ca_pem: bytes | None = None,
    startup_timeout: float = 15.0,
) -> Iterator[RunningServer]:
    """Run the real HTTPS server in a background thread until the block exits.

    With no ``cert_file``/``key_file`` a fresh self-signed CA and certificate (valid for
    ``localhost`` and ``127.0.0.1``) are written to a temporary directory; the returned
    :class:`RunningServer` carries the CA PEM to verify against. ``port=0`` picks a free port.
    A :class:`ClusterState` is served as a fixed, synced snapshot (no Kubernetes needed).
    """
    import uvicorn

    from cudasched.webhook.config import WebhookConfig

    cfg = config if config is not None else WebhookConfig()
    source = state if isinstance(state, StateSource) else StaticStateSource(state)
    with tempfile.TemporaryDirectory(prefix="cudasched-tls-") as tmp:
        if cert_file is None or key_file is None:
            bundle = generate_self_signed(ip_addresses=("127.0.0.1", "::1"))
            cert_path, key_path, ca_path = write_self_signed(tmp, bundle)
            trust = bundle.ca_pem
        else:
            cert_path, key_path = Path(cert_file), Path(key_file)
            trust = ca_pem if ca_pem is not None else cert_path.read_bytes()
            ca_path = Path(tmp) / "ca.crt"
            ca_path.write_bytes(trust)
        tls = ReloadingServerContext(cert_path, key_path)
        shared = getattr(source, "metrics", None)  # a cache reports into the same registry
        metrics = shared if isinstance(shared, WebhookMetrics) else None
        app = build_app(cfg, source, reviewer=reviewer, metrics=metrics)
        sock = _bind(host, port)
        bound_port = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn_config(app, tls, host=host, port=bound_port))
        failure: list[BaseException] = []

        def run() -> None:
            try:
                with asyncio.Runner(loop_factory=server.config.get_loop_factory()) as runner:
                    runner.run(server.serve(sockets=[sock]))
            except BaseException as exc:  # SystemExit on start-up failure included
                failure.append(exc)

        thread = threading.Thread(target=run, name="cudasched-webhook", daemon=True)
        thread.start()
        limit = time.monotonic() + startup_timeout
        while not server.started:
            if not thread.is_alive() or time.monotonic() > limit:
                server.should_exit = True
                thread.join(5)
                sock.close()
                app.close()
                raise RuntimeError(f"webhook server did not start: {failure or 'timeout'}")
            time.sleep(0.01)
        try:
            yield RunningServer(
                host=host,
                port=bound_port,
                ca_pem=trust,
                ca_file=ca_path,
                cert_file=cert_path,
                key_file=key_path,
                app=app,
                tls=tls,
                server=server,
            )
        finally:
            server.should_exit = True
            thread.join(30)
            sock.close()


#: Builds the state source of one server process; it receives that process's metrics so the
#: cache reports into the same registry the ``/metrics`` endpoint renders.
SourceFactory = Callable[[WebhookMetrics], StateSource]


def run_server(
    config: WebhookConfig,
    source_factory: SourceFactory,
    *,
    reviewer: Reviewer | None = None,
    self_signed_dir: str | os.PathLike[str] | None = None,
    host: str | None = None,
    port: int | None = None,
) -> None:
    """Blocking entry point of ``cudasched webhook``.

    TLS comes from ``server.certFile``/``keyFile`` (followed across rotations) or, with
    ``server.selfSigned``, from a fresh self-signed pair written to ``self_signed_dir`` (a
    temporary directory when ``None``). With ``server.workers`` > 1 the listening socket is
    bound once and that many processes are forked to accept on it, each with its own cache,
    event loop and metrics; SIGTERM/SIGINT are forwarded to them and each drains gracefully.
    """
    host = host or config.server.host
    port = port or config.server.port
    workers = config.server.workers or 1
    with contextlib.ExitStack() as stack:
        cert, key = _server_tls_files(config, self_signed_dir, stack)
        if workers == 1:
            _serve_process(config, source_factory, reviewer, cert, key, host, port, None)
            return
        sock = _bind(host, port)
        _prefork(
            workers,
            sock,
            lambda: _serve_process(config, source_factory, reviewer, cert, key, host, port, [sock]),
        )


def _prefork(workers: int, sock: socket.socket, serve_child: Callable[[], None]) -> None:
    """Fork ``workers`` processes running ``serve_child`` on the shared listening socket and
    wait for them, forwarding SIGTERM/SIGINT. Signal forwarding is installed before the first
    fork so a SIGTERM during start-up cannot orphan workers."""
    import signal

    children: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    status = 0
    try:
        for _ in range(workers):
            pid = os.fork()
            if pid == 0:  # pragma: no cover - runs in the child process
                code = 0
                try:
                    for sig in previous:
                        signal.signal(sig, signal.SIG_DFL)
                    serve_child()
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else 0
                except BaseException:
                    log.exception("webhook worker failed")
                    code = 1
                finally:
                    os._exit(code)
            children.append(pid)
        sock.close()
        for pid in children:
            _, raw = os.waitpid(pid, 0)
            code = os.waitstatus_to_exitcode(raw)
            status = status or (code if code > 0 else 0)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if status:
        raise SystemExit(status)


def _serve_process(
    config: WebhookConfig,
    source_factory: SourceFactory,
    reviewer: Reviewer | None,
    cert: Path,
    key: Path,
    host: str,
    port: int,
    sockets: list[socket.socket] | None,
) -> None:
    import signal

    import uvicorn

    # uvicorn drains on SIGTERM, then re-raises the signal with the previous handler in place;
    # this handler turns that into a clean exit status 0 (and a SIGTERM during start-up too).
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _exit_cleanly)
    metrics = WebhookMetrics()
    tls = ReloadingServerContext(cert, key)
    app = build_app(config, source_factory(metrics), reviewer=reviewer, metrics=metrics)
    server = uvicorn.Server(uvicorn_config(app, tls, host=host, port=port))
    server.run(sockets=sockets)
    if not server.started:
        raise SystemExit(1)


def _exit_cleanly(_signum: int, _frame: object) -> None:
    raise SystemExit(0)


def _server_tls_files(
    config: WebhookConfig,
    self_signed_dir: str | os.PathLike[str] | None,
    stack: contextlib.ExitStack,
) -> tuple[Path, Path]:
    srv = config.server
    if not srv.self_signed:
        if not (srv.cert_file and srv.key_file):
            raise InputError(
                "no TLS certificate: set server.certFile and server.keyFile, "
                "or server.selfSigned (--self-signed)"
            )
        # Fail now, with the file names, rather than at the first handshake.
        load_server_context(srv.cert_file, srv.key_file)
        return Path(srv.cert_file), Path(srv.key_file)
    directory = self_signed_dir
    if directory is None:
        directory = stack.enter_context(tempfile.TemporaryDirectory(prefix="cudasched-tls-"))
    bundle = generate_self_signed()
    cert, key, ca = write_self_signed(directory, bundle)
    log.warning("serving a self-signed certificate (development only); its CA is %s", ca)
    return cert, key
