"""How the webhook's ASGI application is run: uvicorn over HTTPS, in a thread or as processes.

* :func:`uvicorn_config`: the uvicorn settings every server uses (fastest installed HTTP
  parser and event loop, the reloading TLS context, lifespan on, logging left to the caller);
* :func:`serve_in_thread`: the real server in a background thread of this process, on a
  fresh self-signed certificate unless files are given (tests, the demo, ``mutate --serve``);
* :func:`run_server`: the blocking entry point of ``cudasched webhook``: one process, or a
  prefork supervisor that binds the socket once, forks ``server.workers`` processes to accept
  on it and forwards SIGTERM/SIGINT so each drains gracefully.

The application itself is :mod:`cudasched.webhook.server.app`; TLS files and contexts are
:mod:`cudasched.webhook.server.tls`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib.util
import logging
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cudasched.settings.config import HttpParser
from cudasched.vocab.errors import InputError
from cudasched.webhook.metrics import REFUSAL_REASONS, WebhookMetrics
from cudasched.webhook.server.app import StagedAdmission, WebhookApp
from cudasched.webhook.server.assembly import build_app
from cudasched.webhook.server.protocol import (
    ConnectionLimits,
    available_parsers,
    h11_event_limit,
    protocol_class,
)
from cudasched.webhook.server.tls import (
    ReloadingServerContext,
    generate_self_signed,
    server_tls_files,
    write_self_signed,
)
from cudasched.webhook.state.source import StateSource, StaticStateSource

if TYPE_CHECKING:
    import uvicorn

    from cudasched.knowledge import KnowledgeBase
    from cudasched.knowledge.images import ImageTable
    from cudasched.settings.config import ServerConfig, WebhookConfig
    from cudasched.webhook.background.following import FollowedKnowledge
    from cudasched.webhook.state.clusterstate import ClusterState

__all__ = [
    "RunningServer",
    "SourceFactory",
    "bind_socket",
    "connection_limits",
    "freeze_heap",
    "http_parser",
    "make_server",
    "plain_server",
    "run_server",
    "serve_in_thread",
    "uvicorn_config",
]

log = logging.getLogger(__name__)


def _best_loop() -> str:
    """uvicorn's fastest event loop that is installed (uvloop, else asyncio)."""
    return "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"


def http_parser(wanted: HttpParser | str = HttpParser.AUTO) -> str:
    """The HTTP parser to serve with: ``auto`` is the fastest installed one; a parser that is
    asked for by name must be installed."""
    installed = available_parsers()
    choice = HttpParser(wanted)
    if choice is HttpParser.AUTO:
        if not installed:  # pragma: no cover - uvicorn itself needs h11
            raise InputError("no HTTP parser installed: expected httptools or h11")
        return installed[0]
    if choice.value not in installed:
        raise InputError(
            f"invalid server.httpParser {choice.value!r}: not installed (installed: "
            f"{', '.join(installed) or 'none'})"
        )
    return choice.value


def connection_limits(settings: ServerConfig, metrics: WebhookMetrics | None) -> ConnectionLimits:
    """The per-connection limits of ``settings``, refusals counted in ``metrics``."""
    on_refused = None
    if metrics is not None:
        children = {r: metrics.connections_refused.labels(reason=r) for r in REFUSAL_REASONS}

        def on_refused(reason: str) -> None:
            children[reason].inc()

    return ConnectionLimits(
        max_header_bytes=settings.max_header_bytes,
        header_timeout=settings.header_timeout_seconds,
        max_connections=settings.max_connections,
        on_refused=on_refused,
    )


def uvicorn_config(
    app: WebhookApp,
    tls: ReloadingServerContext,
    *,
    host: str = "0.0.0.0",
    port: int = 8443,
    log_level: str = "info",
    graceful_seconds: float = 20.0,
    settings: ServerConfig | None = None,
) -> uvicorn.Config:
    """A uvicorn configuration serving ``app`` over HTTPS with the reloading TLS context and
    the connection limits of ``settings`` (:mod:`cudasched.webhook.server.protocol`; the defaults of
    :class:`ServerConfig` when omitted).

    Logging is left to the caller (``log_config=None``) so embedding the server does not
    reconfigure the host program's loggers.
    """
    import uvicorn

    from cudasched.settings.config import ServerConfig

    settings = settings if settings is not None else ServerConfig()
    metrics = getattr(app, "metrics", None)
    limits = connection_limits(settings, metrics if isinstance(metrics, WebhookMetrics) else None)
    parser = http_parser(settings.http_parser)
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=protocol_class(parser, limits),
        h11_max_incomplete_event_size=h11_event_limit(limits),
        loop=_best_loop(),
        ws="none",
        lifespan="on",
        ssl_context_factory=lambda _config, _default: tls.context,
        log_config=None,
        log_level=log_level,
        access_log=False,
        server_header=False,
        date_header=False,
        timeout_keep_alive=5,
        # uvicorn declares an int but waits with asyncio.wait_for, which takes any number.
        timeout_graceful_shutdown=graceful_seconds,  # type: ignore[arg-type]
    )


def make_server(config: uvicorn.Config, handshake_timeout: float) -> uvicorn.Server:
    """A uvicorn server whose listening sockets drop a TLS handshake that has not completed
    within ``handshake_timeout`` seconds (asyncio's default is 60 s, during which a silent
    client holds a connection and its buffers), and give a TLS close as long."""
    import uvicorn

    class _Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            loop = asyncio.get_running_loop()
            create_server = loop.create_server

            async def with_timeout(*args: Any, **kwargs: Any) -> Any:
                if kwargs.get("ssl") is not None:
                    kwargs.setdefault("ssl_handshake_timeout", handshake_timeout)
                    # A TLS close waits this long for the client's close_notify, reading and
                    # dropping whatever it still sends (30 s by default).
                    kwargs.setdefault("ssl_shutdown_timeout", handshake_timeout)
                return await create_server(*args, **kwargs)

            # uvicorn calls loop.create_server itself; the loop instance's method is shadowed
            # only while it does.
            loop.create_server = with_timeout  # type: ignore[method-assign]
            try:
                await super().startup(sockets=sockets)
            finally:
                del loop.create_server

    return _Server(config)


def plain_server(app: Any, host: str, port: int) -> uvicorn.Server:
    """A plain-HTTP uvicorn server of the ASGI ``app`` on ``host:port`` for the caller's event
    loop (the policy controller's probes and metrics): no lifespan, no access log, and no
    signal handlers of its own (the caller handles SIGTERM and sets ``should_exit``)."""
    import uvicorn

    class _Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    config = uvicorn.Config(
        app, host=host, port=port, lifespan="off", access_log=False, log_level="warning"
    )
    return _Server(config)


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


def bind_socket(host: str, port: int, *, named: str | None = None) -> socket.socket:
    """A socket bound to ``host:port`` for a uvicorn server (which listens on it), bound by the
    caller so a port in use is one clear error before anything starts; ``named`` is how the
    error names the address (default ``host:port``)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        where = named or f"{host}:{port}"
        raise InputError(f"cannot listen on {where}: {exc.strerror}") from None
    sock.set_inheritable(True)
    return sock


def _test_tls_files(
    tmp: str,
    cert_file: str | os.PathLike[str] | None,
    key_file: str | os.PathLike[str] | None,
    ca_pem: bytes | None,
) -> tuple[Path, Path, Path, bytes]:
    """``(cert, key, CA file, CA PEM)`` for :func:`serve_in_thread`: the given pair (trusted
    through ``ca_pem``, else through the certificate itself), or a fresh self-signed one for
    ``localhost`` and ``127.0.0.1``, written to ``tmp``."""
    if cert_file is None or key_file is None:
        bundle = generate_self_signed(ip_addresses=("127.0.0.1", "::1"))
        cert_path, key_path, ca_path = write_self_signed(tmp, bundle)
        return cert_path, key_path, ca_path, bundle.ca_pem
    cert_path, key_path = Path(cert_file), Path(key_file)
    trust = ca_pem if ca_pem is not None else cert_path.read_bytes()
    ca_path = Path(tmp) / "ca.crt"
    ca_path.write_bytes(trust)
    return cert_path, key_path, ca_path, trust


@contextlib.contextmanager
def serve_in_thread(
    state: ClusterState | StateSource,
    *,
    config: WebhookConfig | None = None,
    admission: StagedAdmission[Any] | None = None,
    kb: KnowledgeBase | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    cert_file: str | os.PathLike[str] | None = None,
    key_file: str | os.PathLike[str] | None = None,
    ca_pem: bytes | None = None,
    startup_timeout: float = 15.0,
    knowledge: FollowedKnowledge | None = None,
) -> Iterator[RunningServer]:
    """Run the real HTTPS server in a background thread until the block exits.

    With no ``cert_file``/``key_file`` a fresh self-signed CA and certificate (valid for
    ``localhost`` and ``127.0.0.1``) are written to a temporary directory; the returned
    :class:`RunningServer` carries the CA PEM to verify against. ``port=0`` picks a free port.
    A :class:`ClusterState` is served as a fixed, synced snapshot (no Kubernetes needed).
    ``admission`` decides (default: the production one, over ``kb`` when given);
    ``knowledge`` is followed while the server runs (``build_app``).
    """

    from cudasched.settings.config import WebhookConfig

    cfg = config if config is not None else WebhookConfig()
    source = state if isinstance(state, StateSource) else StaticStateSource(state)
    with tempfile.TemporaryDirectory(prefix="cudasched-tls-") as tmp:
        cert_path, key_path, ca_path, trust = _test_tls_files(tmp, cert_file, key_file, ca_pem)
        tls = ReloadingServerContext(cert_path, key_path)
        shared = getattr(source, "metrics", None)  # a cache reports into the same registry
        metrics = shared if isinstance(shared, WebhookMetrics) else None
        app = build_app(
            cfg, source, admission=admission, kb=kb, metrics=metrics, knowledge=knowledge
        )
        sock = bind_socket(host, port)
        bound_port = sock.getsockname()[1]
        server = make_server(
            uvicorn_config(app, tls, host=host, port=bound_port, settings=cfg.server),
            cfg.server.header_timeout_seconds,
        )
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
    kb: KnowledgeBase | None = None,
    images: ImageTable | None = None,
    self_signed_dir: str | os.PathLike[str] | None = None,
    host: str | None = None,
    port: int | None = None,
    knowledge: FollowedKnowledge | None = None,
) -> None:
    """Blocking entry point of ``cudasched webhook``.

    TLS comes from ``server.certFile``/``keyFile`` (followed across rotations) or, with
    ``server.selfSigned``, from a fresh self-signed pair written to ``self_signed_dir`` (a
    temporary directory when ``None``). With ``server.workers`` > 1 the listening socket is
    bound once and that many processes are forked to accept on it, each with its own cache,
    event loop and metrics; SIGTERM/SIGINT are forwarded to them and each drains gracefully.
    Each process builds its own admission (and image resolver) over ``kb`` and ``images``,
    loaded once before the fork when given, and follows ``knowledge`` on its own.
    """
    host = host or config.server.host
    port = port or config.server.port
    workers = config.server.workers or 1
    with contextlib.ExitStack() as stack:
        cert, key = server_tls_files(config.server, self_signed_dir, stack)
        if workers == 1:
            _serve_process(config, source_factory, (kb, images, knowledge), cert, key, host, port)
            return
        sock = bind_socket(host, port)
        _prefork(
            workers,
            sock,
            lambda: _serve_process(
                config, source_factory, (kb, images, knowledge), cert, key, host, port, [sock]
            ),
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
    judging: tuple[KnowledgeBase | None, ImageTable | None, FollowedKnowledge | None],
    cert: Path,
    key: Path,
    host: str,
    port: int,
    sockets: list[socket.socket] | None = None,
) -> None:
    import signal

    # uvicorn drains on SIGTERM, then re-raises the signal with the previous handler in place;
    # this handler turns that into a clean exit status 0 (and a SIGTERM during start-up too).
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _exit_cleanly)
    metrics = WebhookMetrics()
    tls = ReloadingServerContext(cert, key)
    kb, images, knowledge = judging
    source = source_factory(metrics)
    app = build_app(config, source, kb=kb, images=images, metrics=metrics, knowledge=knowledge)
    freeze_heap()
    server = make_server(
        uvicorn_config(app, tls, host=host, port=port, settings=config.server),
        config.server.header_timeout_seconds,
    )
    server.run(sockets=sockets)
    if not server.started:
        raise SystemExit(1)


def freeze_heap() -> None:
    """Move everything built so far (the knowledge base, the image table, the admission's
    rules: tens of thousands of objects that live as long as the process) out of the garbage
    collector's reach. A full collection walks every tracked object; with that heap in it, one
    took about 250 ms on the shared 2-core machine, a pause every request in flight waits
    through, and the watch cache's snapshot rebuilds trigger such collections now and then.
    Frozen, a full collection walks only what came after (measured: under a millisecond).
    Before a fork it also keeps the frozen pages shared between the worker processes."""
    gc.collect()
    gc.freeze()


def _exit_cleanly(_signum: int, _frame: object) -> None:
    raise SystemExit(0)
