"""Admission over HTTPS on loopback: the real webhook server against a no-op floor.

What is measured, and why this way:

* **Server**: one uvicorn process (the stack ``cudasched webhook`` runs: httptools, uvloop when
  installed, the reloading TLS context) pinned to one CPU, holding a synthetic cluster of
  ``--nodes`` nodes, ``--runtimes`` runtimes and ``--isvcs`` InferenceServices
  (:mod:`tests.support.synth`). It answers realistic KServe predictor-pod AdmissionReviews.
* **Floor**: the same uvicorn + TLS configuration serving the smallest valid webhook: it reads
  the body, decodes it with orjson to find ``request.uid`` and allows the request with that uid
  (the API server rejects an answer whose uid differs, so a webhook cannot do less). Whatever
  the floor costs is HTTP + TLS + one JSON decode + the load generator.
* **Stack floor** (``noop-stack``): cudasched's own server (the ASGI app with its body cap,
  time budget, metrics and event-loop fast path) around a reviewer that decodes the review and
  allows it with its uid: the same server stack as the mutation server, with a decision that
  costs nothing. The ratio mutation/noop-stack is what the admission decision itself adds;
  mutation/noop adds cudasched's request handling too.
* **Two mutation servers**: ``mutation`` is the production configuration, whose decision memo
  answers a repeated object (a replica of the same template) without deciding again;
  ``mutation-nomemo`` turns the memo off (``decisionCacheBytes: 0``), so every request is
  decided: the cost of a first-seen object. The reviews are ``--isvcs`` distinct predictor pods
  cycled to ``--bodies`` requests, each with its own uid, as ReplicaSets create them.
* **Load**: a separate process pinned to the other CPU. ``wrk`` (when installed) measures
  saturation with a Lua script that POSTs the recorded reviews in turn; a Python generator
  (aiohttp, keep-alive, several connections, uvloop when installed) measures saturation too,
  and latency at fixed arrival rates (open loop: each request's latency counts from when it was
  *scheduled*, so a stalled server cannot hide its queueing). Both are bounded by a request
  count and a duration, and only ever talk to 127.0.0.1.

Run ``python -m benchmarks.admission --help``; ``--quick`` is a small smoke run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from benchmarks.common import (
    Table,
    comma_list,
    cpu_seconds,
    loadavg,
    percentile,
    pin,
    progress,
    report,
)
from cudasched.webhook.state.source import StaticStateSource

__all__ = ["AdmissionResult", "LoadResult", "main", "run"]

HOST = "127.0.0.1"  # loopback only, by design: the load generator never targets anything else
PATH = "/mutate/pods"

_ALLOW_HEAD = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":'
_ALLOW_TAIL = b',"allowed":true}}'
_FLOORS = ("noop", "noop-stack")
_MUTATION = ("mutation", "mutation-nomemo")
_SERVERS = _FLOORS + _MUTATION
# The noop-stack floor on uvicorn's own httptools protocol, without cudasched's connection
# limits (benchmarks/protocol.py compares the two).
_UNLIMITED = "noop-stack-unlimited"

_WRK_LUA = """
-- POST the recorded AdmissionReviews (one JSON document per line) in turn.
local bodies = {}
local index = 0
init = function(args)
  for line in io.lines(args[1]) do
    if #line > 0 then bodies[#bodies + 1] = line end
  end
end
request = function()
  index = index % #bodies + 1
  return wrk.format("POST", nil, {["Content-Type"] = "application/json"}, bodies[index])
end
"""


# --------------------------------------------------------------------------- server side


class NoopApp:
    """The floor: reads the whole request body, decodes it and allows it with its uid."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        chunks = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        if scope["method"] == "POST":
            uid = orjson.loads(b"".join(chunks))["request"]["uid"]
            answer = _ALLOW_HEAD + orjson.dumps(uid) + _ALLOW_TAIL
        else:  # the readiness probe's GET /healthz
            answer = b"ok\n"
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(answer)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": answer})


def build_noop_stack_app() -> Any:
    """cudasched's ASGI app (limits, time budget, metrics) with the tests' fake admission, which
    allows every request with its uid, changes nothing, and answers on the event loop the way
    the Admitter answers a remembered request (``inline``): the stack's floor."""
    from tests.support.fakeadmission import FakeAdmission

    from cudasched.settings.config import WebhookConfig
    from cudasched.webhook.server.assembly import build_app
    from cudasched.webhook.state.clusterstate import ClusterState

    return build_app(
        WebhookConfig(),
        StaticStateSource(ClusterState.empty()),
        admission=FakeAdmission(inline=True),
    )


class RetainingSource(StaticStateSource):
    """A synced snapshot that also keeps the listed objects the way the watch cache does
    (nodes trimmed to identity, labels and capacity; other kinds whole), so the server's
    resident memory is what a production process with that cluster would hold."""

    def __init__(self, state: Any, objects: Sequence[Any]) -> None:
        super().__init__(state)
        self.objects = objects


def _trim_node(node: dict[str, Any]) -> dict[str, Any]:
    """What ``cudasched.webhook.background.watchcache`` keeps of a Node (see its ``_plain``)."""
    meta = node.get("metadata") or {}
    status = node.get("status") or {}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {k: meta[k] for k in ("name", "uid", "resourceVersion", "labels") if k in meta},
        "status": {k: status[k] for k in ("capacity", "allocatable") if k in status},
    }


def write_cluster(cluster: Any, path: Path) -> None:
    """Save what the watch cache would hold for ``cluster`` (Nodes trimmed as the cache trims
    them) as JSON; the server process decodes it the way the API client decodes a list."""
    import orjson

    data = {
        "nodes": [_trim_node(n) for n in cluster.nodes],
        "inference_services": list(cluster.inference_services),
        "serving_runtimes": list(cluster.serving_runtimes),
        "cluster_serving_runtimes": list(cluster.cluster_serving_runtimes),
    }
    path.write_bytes(orjson.dumps(data))


def build_mutation_app(cluster_file: str | None, *, memo: bool = True) -> Any:
    """The production ASGI app (Admitter, metrics, review threads) over the saved cluster
    (an empty, synced cache when ``cluster_file`` is ``None``); ``memo=False`` turns the
    decision memo off."""
    from cudasched.knowledge import KnowledgeBase
    from cudasched.settings.config import WebhookConfig
    from cudasched.webhook.server.assembly import build_app
    from cudasched.webhook.state.clusterstate import ClusterState

    kb = KnowledgeBase.load()
    kept: list[list[Any]] = [[], [], [], []]
    if cluster_file:
        data = orjson.loads(Path(cluster_file).read_bytes())
        kept = [
            data["nodes"],
            data["inference_services"],
            data["serving_runtimes"],
            data["cluster_serving_runtimes"],
        ]
        del data
    state = ClusterState.from_objects(*kept, kb=kb)
    config = WebhookConfig() if memo else WebhookConfig.from_mapping({"decisionCacheBytes": 0})
    return build_app(config, RetainingSource(state, kept))


def serve_main(args: argparse.Namespace) -> None:
    """The server process: build the app, bind, publish the port, serve until killed."""
    import uvicorn

    from cudasched.webhook.server.serving import uvicorn_config
    from cudasched.webhook.server.tls import ReloadingServerContext

    pin(args.cpu)
    app: Any
    if args.app == "noop":
        app = NoopApp()
    elif args.app in ("noop-stack", _UNLIMITED):
        app = build_noop_stack_app()
    else:
        app = build_mutation_app(args.cluster_file, memo=args.app == "mutation")
    tls = ReloadingServerContext(args.cert, args.key)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, 0))
    port = sock.getsockname()[1]
    config = uvicorn_config(app, tls, host=HOST, port=port, log_level="warning")
    if args.app == _UNLIMITED:
        config.http = "httptools"
    server = uvicorn.Server(config)
    tmp = Path(args.port_file + ".tmp")
    tmp.write_text(str(port))
    tmp.replace(args.port_file)
    server.run(sockets=[sock])


@dataclass(slots=True)
class _Server:
    process: subprocess.Popen[bytes]
    port: int

    @property
    def url(self) -> str:
        return f"https://{HOST}:{self.port}{PATH}"


@contextlib.contextmanager
def start_server(
    app: str,
    cert: Path,
    key: Path,
    ca: Path,
    *,
    cluster_file: Path | None = None,
    cpu: int | None = 0,
    timeout: float = 120.0,
) -> Iterator[_Server]:
    """Start a server process and wait until it answers over HTTPS; stop it on exit."""
    with tempfile.TemporaryDirectory(prefix="cudasched-bench-") as tmp:
        port_file = Path(tmp) / "port"
        cmd = [
            sys.executable,
            "-m",
            "benchmarks.admission",
            "--role=server",
            f"--app={app}",
            f"--cert={cert}",
            f"--key={key}",
            f"--port-file={port_file}",
        ]
        if cluster_file is not None:
            cmd.append(f"--cluster-file={cluster_file}")
        if cpu is not None:
            cmd.append(f"--cpu={cpu}")
        proc = subprocess.Popen(cmd, cwd=_repo_root(), env=_child_env())
        try:
            port = _wait_ready(proc, port_file, ca, timeout)
            yield _Server(proc, port)
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def _wait_ready(proc: subprocess.Popen[bytes], port_file: Path, ca: Path, timeout: float) -> int:
    limit = time.monotonic() + timeout
    context = ssl.create_default_context(cafile=str(ca))
    while time.monotonic() < limit:
        if proc.poll() is not None:
            raise RuntimeError(f"benchmark server exited with status {proc.returncode}")
        if port_file.exists():
            port = int(port_file.read_text())
            with (
                contextlib.suppress(OSError),
                socket.create_connection((HOST, port), timeout=1) as raw,
                context.wrap_socket(raw, server_hostname=HOST) as tls,
            ):
                tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                if tls.recv(64).startswith(b"HTTP/1.1 200"):
                    return port
        time.sleep(0.05)
    raise RuntimeError(f"benchmark server not ready within {timeout:.0f}s")


def _repo_root() -> str:
    return str(Path(__file__).resolve().parent.parent)


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    root = _repo_root()
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


# --------------------------------------------------------------------------- load generation


@dataclass(slots=True)
class LoadResult:
    """One load run: how many answers, how fast, how late."""

    generator: str
    mode: str  # "saturation" or "rate=<n>/s"
    sent: int = 0
    ok: int = 0
    errors: int = 0
    patched: int = 0
    seconds: float = 0.0
    p50_ms: float = float("nan")
    p99_ms: float = float("nan")
    max_ms: float = float("nan")
    # The server process's CPU time (all threads) per answered request during the run: on a
    # shared machine it moves much less than the rates do.
    server_cpu_us: float = float("nan")

    @property
    def rps(self) -> float:
        return self.ok / self.seconds if self.seconds > 0 else 0.0


async def _python_load(
    url: str,
    ca: str,
    bodies: list[bytes],
    *,
    connections: int,
    duration: float,
    max_requests: int,
    rate: float | None,
) -> LoadResult:
    import aiohttp

    context = ssl.create_default_context(cafile=ca)
    connector = aiohttp.TCPConnector(ssl=context, limit=connections, force_close=False)
    headers = {"Content-Type": "application/json"}
    latencies: list[float] = []
    result = LoadResult("python", "saturation" if rate is None else f"rate={rate:g}/s")
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(index: int, scheduled: float) -> None:
            body = bodies[index % len(bodies)]
            try:
                async with session.post(url, data=body, headers=headers) as response:
                    payload = await response.read()
                    if response.status == 200:
                        result.ok += 1
                        if b'"patch":' in payload:
                            result.patched += 1
                    else:
                        result.errors += 1
            except (aiohttp.ClientError, OSError):
                result.errors += 1
            latencies.append(time.perf_counter() - scheduled)

        # Warm-up: open every connection (TLS handshakes) before anything is measured.
        await asyncio.gather(*(one(i, time.perf_counter()) for i in range(connections * 4)))
        latencies.clear()
        result.ok = result.errors = result.patched = 0

        start = time.perf_counter()
        deadline = start + duration
        if rate is None:
            counter = iter(range(max_requests))

            async def worker() -> None:
                for index in counter:
                    if time.perf_counter() >= deadline:
                        return
                    await one(index, time.perf_counter())

            await asyncio.gather(*(worker() for _ in range(connections)))
            result.sent = len(latencies)
        else:
            total = min(max_requests, int(rate * duration))
            tasks = []
            for index in range(total):
                scheduled = start + index / rate
                delay = scheduled - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.ensure_future(one(index, scheduled)))
            await asyncio.gather(*tasks)
            result.sent = total
        result.seconds = time.perf_counter() - start
    result.p50_ms = percentile(latencies, 0.50) * 1e3
    result.p99_ms = percentile(latencies, 0.99) * 1e3
    result.max_ms = max(latencies) * 1e3 if latencies else float("nan")
    return result


def client_main(args: argparse.Namespace) -> None:
    """The load-generator process: run one load and print its result as JSON."""
    pin(args.cpu)
    bodies = [line for line in Path(args.bodies_file).read_bytes().splitlines() if line]
    coro = _python_load(
        args.url,
        args.ca,
        bodies,
        connections=args.connections,
        duration=args.duration,
        max_requests=args.max_requests,
        rate=args.rate,
    )
    try:
        import uvloop

        result = uvloop.run(coro)
    except ImportError:
        result = asyncio.run(coro)
    print(json.dumps(asdict(result)))


def python_load(
    url: str,
    ca: Path,
    bodies_file: Path,
    *,
    connections: int,
    duration: float,
    max_requests: int,
    rate: float | None = None,
    cpu: int | None = 1,
) -> LoadResult:
    """Run the Python load generator in its own (pinned) process."""
    if not url.startswith(f"https://{HOST}:"):
        raise ValueError(f"refusing to load {url!r}: the benchmark only targets {HOST}")
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.admission",
        "--role=client",
        f"--url={url}",
        f"--ca={ca}",
        f"--bodies-file={bodies_file}",
        f"--connections={connections}",
        f"--duration={duration}",
        f"--max-requests={max_requests}",
    ]
    if rate is not None:
        cmd.append(f"--rate={rate}")
    if cpu is not None:
        cmd.append(f"--cpu={cpu}")
    out = subprocess.run(
        cmd,
        cwd=_repo_root(),
        env=_child_env(),
        capture_output=True,
        check=True,
        timeout=duration * 4 + 60,
    )
    return LoadResult(**json.loads(out.stdout.decode().strip().splitlines()[-1]))


def wrk_load(
    url: str,
    bodies_file: Path,
    lua_file: Path,
    *,
    connections: int,
    duration: float,
    cpu: int | None = 1,
) -> LoadResult | None:
    """Saturation with ``wrk`` (one thread), or ``None`` when wrk is not installed."""
    wrk = shutil.which("wrk")
    if wrk is None:
        return None
    if not url.startswith(f"https://{HOST}:"):
        raise ValueError(f"refusing to load {url!r}: the benchmark only targets {HOST}")
    seconds = max(1, round(duration))
    cmd = [wrk, "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(lua_file)]
    cmd += [url, "--", str(bodies_file)]

    def pin_child() -> None:
        if cpu is not None and hasattr(os, "sched_setaffinity"):
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, {cpu})

    out = subprocess.run(
        cmd, capture_output=True, check=True, timeout=seconds + 60, preexec_fn=pin_child
    ).stdout.decode()
    return _parse_wrk(out)


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def _parse_wrk(out: str) -> LoadResult:
    result = LoadResult("wrk", "saturation")
    total = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m)", out)
    if total:
        result.sent = int(total.group(1))
        factor = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}[total.group(3)]
        result.seconds = float(total.group(2)) * factor
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    result.errors = (int(bad.group(1)) if bad else 0) + (
        sum(int(g) for g in errors.groups()) if errors else 0
    )
    result.ok = max(0, result.sent - (int(bad.group(1)) if bad else 0))
    for name, attr in (("50%", "p50_ms"), ("99%", "p99_ms")):
        found = re.search(rf"{re.escape(name)}\s+([\d.]+)(us|ms|s)", out)
        if found:
            setattr(result, attr, float(found.group(1)) * _UNITS[found.group(2)])
    return result


# --------------------------------------------------------------------------- orchestration


@dataclass(slots=True)
class AdmissionResult:
    """Everything one run measured, and the ratios against the floor."""

    settings: dict[str, Any]
    runs: dict[str, list[LoadResult]] = field(default_factory=dict)  # by server
    in_process: float = 0.0  # reviews/s of the Admitter called directly
    in_process_nomemo: float = 0.0  # the same with the decision memo off
    ratios: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def table(self) -> str:
        columns = ["server", "generator", "load", "ok", "errors", "req/s", "p50 ms", "p99 ms"]
        t = Table([*columns, "CPU us/req"])
        for server, runs in self.runs.items():
            for r in runs:
                t.add(
                    server,
                    r.generator,
                    r.mode,
                    r.ok,
                    r.errors,
                    r.rps,
                    r.p50_ms,
                    r.p99_ms,
                    r.server_cpu_us,
                )
        for name, rate in (
            ("in-process", self.in_process),
            ("in-process-nomemo", self.in_process_nomemo),
        ):
            if rate:
                t.add(name, "-", "Admitter.review loop", "-", "-", rate, "-", "-", 1e6 / rate)
        ratios = Table(["ratio", "value"])
        for name, value in self.ratios.items():
            ratios.add(name, value)
        return t.render() + "\n\n" + ratios.render() + "\n\n" + "\n".join(self.notes)


def in_process_rate(
    cluster_file: Path, bodies: Sequence[bytes], duration: float, *, memo: bool = True
) -> float:
    """Reviews per CPU second of the production Admitter called directly (no HTTP, TLS or
    threads), cycling through ``bodies`` for about ``duration`` seconds after one warm-up
    pass: what the decision itself costs, to set against the server's rate. ``memo=False``
    decides every request (the decision memo off)."""
    from cudasched.knowledge import KnowledgeBase
    from cudasched.settings.config import WebhookConfig
    from cudasched.webhook.admission.admitter import Admitter

    app = build_mutation_app(str(cluster_file))
    state = app.source.state
    config = WebhookConfig() if memo else WebhookConfig.from_mapping({"decisionCacheBytes": 0})
    admitter = Admitter.from_config(config, KnowledgeBase.load())
    for body in bodies:
        admitter.review("pod", body, state)
    done = 0
    started = time.perf_counter()
    deadline = started + duration
    cpu = time.thread_time()
    # Every body in turn, as the load generators send them: a memo smaller than the working
    # set must show here too (the first 200 alone always fitted).
    while time.perf_counter() < deadline:
        start = done % len(bodies)
        for body in bodies[start : start + 200]:
            admitter.review("pod", body, state)
        done += len(bodies[start : start + 200])
    # CPU time, not wall time: on a shared machine the wall clock also counts the time other
    # processes had the CPU.
    elapsed = time.thread_time() - cpu
    app.close()
    return done / elapsed


def _with_cpu(result: LoadResult, seconds: float) -> LoadResult:
    """``result`` with the server's CPU time per answered request (the Python generator's
    warm-up requests are counted in the CPU time, not in ``ok``: a few percent at most)."""
    result.server_cpu_us = seconds / result.ok * 1e6 if result.ok else float("nan")
    return result


def _median(runs: Sequence[LoadResult]) -> LoadResult:
    """One row for several runs of one load: the median of each number."""
    import statistics

    first = runs[0]
    out = LoadResult(first.generator, first.mode)
    for name in ("sent", "errors", "patched"):
        setattr(out, name, round(statistics.median(getattr(r, name) for r in runs)))
    out.seconds = statistics.median(r.seconds for r in runs)
    out.ok = round(statistics.median(r.rps for r in runs) * out.seconds)  # the median rate
    for name in ("p50_ms", "p99_ms", "max_ms", "server_cpu_us"):
        setattr(out, name, statistics.median(getattr(r, name) for r in runs))
    return out


def _find(runs: list[LoadResult], generator: str, mode: str) -> LoadResult | None:
    return next((r for r in runs if r.generator == generator and r.mode == mode), None)


def run(
    *,
    nodes: int = 5000,
    runtimes: int = 200,
    isvcs: int = 1000,
    bodies: int = 2000,
    duration: float = 10.0,
    rates: Sequence[float] = (500.0, 1000.0),
    connections: int = 8,
    max_requests: int = 200_000,
    use_wrk: bool = True,
    server_cpu: int | None = 0,
    client_cpu: int | None = 1,
    servers: Sequence[str] = _SERVERS,
    rounds: int = 1,
) -> AdmissionResult:
    """Measure the no-op floor and the mutation server with the same load; return the table
    data and the ratios mutation/no-op (throughput: floor req/s over mutation req/s; latency:
    mutation p50 over floor p50 at the same rate)."""
    from tests.support import synth

    from cudasched.webhook.server.tls import generate_self_signed, write_self_signed

    settings = {
        "nodes": nodes,
        "runtimes": runtimes,
        "isvcs": isvcs,
        "bodies": bodies,
        "duration_s": duration,
        "rates": list(rates),
        "connections": connections,
        "max_requests": max_requests,
        "wrk": bool(use_wrk and shutil.which("wrk")),
        "servers": [a for a in _SERVERS if a in servers],
        "rounds": rounds,
        "cpus": len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
    }
    result = AdmissionResult(settings)
    settings["loadavg_before"] = loadavg()
    with tempfile.TemporaryDirectory(prefix="cudasched-bench-") as tmp:
        cert, key, ca = write_self_signed(tmp, generate_self_signed(ip_addresses=(HOST,)))
        progress(f"generating {bodies} AdmissionReviews from a {nodes}-node synthetic cluster")
        cluster = synth.make_cluster(nodes, runtimes, max(isvcs, 1))
        body_list = synth.review_bodies(cluster, bodies)
        cluster_file = Path(tmp) / "cluster.json"
        write_cluster(cluster, cluster_file)
        del cluster
        bodies_file = Path(tmp) / "bodies.jsonl"
        bodies_file.write_bytes(b"\n".join(body_list) + b"\n")
        lua_file = Path(tmp) / "post.lua"
        lua_file.write_text(_WRK_LUA)
        progress("in-process: Admitter.review over the same reviews, no HTTP")
        result.in_process = in_process_rate(cluster_file, body_list, duration)
        progress("in-process: the same with the decision memo off")
        result.in_process_nomemo = in_process_rate(cluster_file, body_list, duration, memo=False)
        chosen = [a for a in _SERVERS if a in servers]

        @contextlib.contextmanager
        def serve(app: str) -> Iterator[_Server]:
            progress(f"starting the {app} server")
            with start_server(
                app,
                cert,
                key,
                ca,
                cluster_file=cluster_file if app in _MUTATION else None,
                cpu=server_cpu,
            ) as server:
                # Every review once before anything is measured: the templates of the
                # replicas have been seen, as in a running cluster (the no-memo server decides
                # every request anyway).
                progress(f"{app}: warm-up, every review once")
                python_load(
                    server.url,
                    ca,
                    bodies_file,
                    connections=connections,
                    duration=max(duration, 60.0),
                    max_requests=len(body_list),
                    cpu=client_cpu,
                )
                yield server

        def measure(server: _Server, rate: float | None, *, wrk: bool = False) -> LoadResult:
            pid = server.process.pid
            before = cpu_seconds(pid)
            if wrk:
                found = wrk_load(
                    server.url,
                    bodies_file,
                    lua_file,
                    connections=connections,
                    duration=duration,
                    cpu=client_cpu,
                )
                assert found is not None
            else:
                found = python_load(
                    server.url,
                    ca,
                    bodies_file,
                    connections=connections,
                    duration=duration,
                    max_requests=max_requests,
                    rate=rate,
                    cpu=client_cpu,
                )
            return _with_cpu(found, cpu_seconds(pid) - before)

        def python_runs(app: str, server: _Server) -> None:
            runs = result.runs.setdefault(app, [])
            progress(f"{app}: python saturation for {duration:g}s")
            runs.append(measure(server, None))
            for rate in rates:
                progress(f"{app}: python at {rate:g} req/s for {duration:g}s")
                runs.append(measure(server, rate))

        wrk = use_wrk and shutil.which("wrk") is not None
        if rounds > 1 and wrk:
            # Every server up at once and wrk saturating each in turn, round after round:
            # whatever else runs on the machine weighs on all of them alike. Medians kept.
            with contextlib.ExitStack() as stack:
                up = {app: stack.enter_context(serve(app)) for app in chosen}
                seen: dict[str, list[LoadResult]] = {app: [] for app in chosen}
                for number in range(1, rounds + 1):
                    for app in chosen:
                        found = measure(up[app], None, wrk=True)
                        seen[app].append(found)
                        progress(
                            f"round {number}: {app} {found.rps:,.0f}/s, "
                            f"{found.server_cpu_us:.0f} us CPU per request"
                        )
                for app in chosen:
                    result.runs[app] = [_median(seen[app])]
                    python_runs(app, up[app])
        else:
            for app in chosen:
                with serve(app) as server:
                    if wrk:
                        progress(f"{app}: wrk saturation for {duration:g}s")
                        result.runs[app] = [measure(server, None, wrk=True)]
                    python_runs(app, server)
    settings["loadavg_after"] = loadavg()
    _ratios(result, rates)
    return result


def _ratios(result: AdmissionResult, rates: Sequence[float]) -> None:
    for floor in _FLOORS:
        base = result.runs.get(floor, [])
        for server in _MUTATION:
            runs = result.runs.get(server, [])
            for generator in ("wrk", "python"):
                a, b = _find(base, generator, "saturation"), _find(runs, generator, "saturation")
                if a and b and b.rps > 0:
                    result.ratios[f"throughput {floor}/{server} ({generator})"] = a.rps / b.rps
                if a and b and a.server_cpu_us > 0:
                    result.ratios[f"server CPU per request {server}/{floor} ({generator})"] = (
                        b.server_cpu_us / a.server_cpu_us
                    )
            for rate in rates:
                mode = f"rate={rate:g}/s"
                a, b = _find(base, "python", mode), _find(runs, "python", mode)
                if a and b and a.p50_ms > 0:
                    result.ratios[f"p50 {server}/{floor} at {rate:g}/s"] = b.p50_ms / a.p50_ms
                    result.ratios[f"p99 {server}/{floor} at {rate:g}/s"] = b.p99_ms / a.p99_ms
    for server, rate in (
        ("mutation", result.in_process),
        ("mutation-nomemo", result.in_process_nomemo),
    ):
        runs = result.runs.get(server, [])
        best = _find(runs, "wrk", "saturation") or _find(runs, "python", "saturation")
        if best and rate:
            result.ratios[f"in-process/server reviews per second ({server})"] = rate / best.rps
    noop = result.runs.get("noop", [])
    py, wrk = _find(noop, "python", "saturation"), _find(noop, "wrk", "saturation")
    if py and wrk and wrk.rps > 0:
        share = py.rps / wrk.rps
        result.ratios["python/wrk generator on the no-op floor"] = share
        if share < 0.8:
            result.notes.append(
                f"The Python generator reaches only {share:.0%} of wrk's rate against the no-op "
                "floor: it is the bottleneck there; use the wrk rows for saturation."
            )
    elif py:
        result.notes.append(
            "wrk is not installed: saturation comes from the Python generator only, which may "
            "itself be the bottleneck (compare its no-op row with the mutation row)."
        )
    for server, runs in result.runs.items():
        for r in runs:
            if r.errors:
                result.notes.append(f"{server} {r.generator} {r.mode}: {r.errors} errors")


# --------------------------------------------------------------------------- command line


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.admission",
        description="Admission throughput and latency over HTTPS on loopback, "
        "against a no-op webhook on the same server stack.",
    )
    p.add_argument("--quick", action="store_true", help="small, fast smoke run")
    p.add_argument("--nodes", type=int, default=None)
    p.add_argument("--runtimes", type=int, default=None)
    p.add_argument("--isvcs", type=int, default=None)
    p.add_argument("--bodies", type=int, default=None, help="distinct AdmissionReviews")
    p.add_argument("--duration", type=float, default=None, help="seconds per load run")
    p.add_argument(
        "--rates", default=None, help="fixed arrival rates, e.g. 500,1000 (none: no rate runs)"
    )
    p.add_argument("--connections", type=int, default=8)
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="with wrk: start every server at once and saturate each in turn this many "
        "times, keeping medians (steadier on a shared machine)",
    )
    p.add_argument("--max-requests", type=int, default=200_000)
    p.add_argument("--no-wrk", action="store_true", help="do not use wrk even if installed")
    p.add_argument(
        "--servers",
        default=None,
        help=f"which servers to measure (default all: {','.join(_SERVERS)})",
    )
    p.add_argument("--server-cpu", type=int, default=0)
    p.add_argument("--client-cpu", type=int, default=1)
    p.add_argument("--json", default=None, help="also write the results to this file")
    # internal roles (the server and the load generator run in their own processes)
    p.add_argument("--role", choices=("main", "server", "client"), default="main")
    p.add_argument("--app", choices=(*_SERVERS, _UNLIMITED), default="noop")
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--port-file")
    p.add_argument("--cluster-file")
    p.add_argument("--cpu", type=int, default=None)
    p.add_argument("--url")
    p.add_argument("--ca")
    p.add_argument("--bodies-file")
    p.add_argument("--rate", type=float, default=None)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.role == "server":
        serve_main(args)
        return 0
    if args.role == "client":
        client_main(args)
        return 0
    quick = args.quick
    rates = (
        ()
        if args.rates == "none"
        else comma_list(args.rates, float, (200.0,) if quick else (500.0, 1000.0))
    )
    result = run(
        nodes=args.nodes if args.nodes is not None else (500 if quick else 5000),
        runtimes=args.runtimes if args.runtimes is not None else (40 if quick else 200),
        isvcs=args.isvcs if args.isvcs is not None else (200 if quick else 1000),
        bodies=args.bodies if args.bodies is not None else (200 if quick else 2000),
        duration=args.duration if args.duration is not None else (2.0 if quick else 10.0),
        rates=rates,
        connections=args.connections,
        max_requests=args.max_requests,
        use_wrk=not args.no_wrk,
        server_cpu=args.server_cpu,
        client_cpu=args.client_cpu,
        servers=comma_list(args.servers, str, _SERVERS),
        rounds=args.rounds,
    )
    report(
        "admission",
        argv,
        result.settings,
        result.table(),
        args.json,
        {
            "settings": result.settings,
            "runs": {k: [asdict(r) for r in v] for k, v in result.runs.items()},
            "ratios": result.ratios,
            "in_process_rps": result.in_process,
            "in_process_nomemo_rps": result.in_process_nomemo,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
