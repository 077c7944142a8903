"""The webhook's ASGI application: admission endpoints, health, readiness and metrics.

Why no web framework: the API server calls the webhook synchronously on every GPU pod
creation, so per-request overhead is latency every user pays. The application is one
dictionary lookup on ``scope["path"]``, orjson for the little JSON it reads itself, and the
admission decision from :class:`~cudasched.webhook.admission.admitter.Admitter`. How the application
is served (uvicorn, threads, worker processes) is :mod:`cudasched.webhook.server.serving`.

Failure behaviour (what the API server sees):

* malformed input is answered with HTTP 400 and a one-line reason (the API server then applies
  the webhook's ``failurePolicy``); oversized bodies get 413 before the rest is read;
* while the cluster cache has not completed its first list of every kind, admission requests
  are answered by the failure mode (:func:`~cudasched.webhook.admission.review.failure`): allowed
  with a warning, or denied when ``failClosed``;
* a repeat of an object already decided under the current snapshot (another replica of the
  same template) is answered on the event loop from admission's memo: parsing a body of at
  most 64 KiB, building its key and splicing the uid cost microseconds;
* a first-seen pod of at most 64 KiB whose costly steps are all remembered (its
  requirement's terms, whether any node fits them, their merge with its own affinity: see
  ``Admitter.answer_inline``) is decided on the event loop too: what is left is bounded by the
  body, tens of microseconds, less than the hop to a thread and back (issue 22);
* every other review runs in a worker thread under a deadline (``requestTimeoutSeconds``, kept below
  the API server's ``timeoutSeconds``). If the decision is not ready in time the request is
  answered by the failure mode at once and the late result is discarded: a slow or stuck
  decision can never make the API server wait for its own timeout, and the event loop stays
  free to answer health checks and other requests meanwhile.

The cluster snapshot is read from a :class:`~cudasched.webhook.state.source.StateSource` (the
watch cache in production, a fixed snapshot in the demo and tests); request handling never
calls the Kubernetes API. The app is assembled from the configuration by
:mod:`cudasched.webhook.server.assembly`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from cudasched.vocab.errors import InputError
from cudasched.webhook.admission.recall import MEMO_MAX_BODY_BYTES
from cudasched.webhook.admission.review import (
    BadReviewError,
    Outcome,
    Placement,
    failure,
    review_uid,
)
from cudasched.webhook.background.nofit import NoFitReporter
from cudasched.webhook.metrics import CONTENT_TYPE, WebhookMetrics, kept_children
from cudasched.webhook.state.source import StateSource

if TYPE_CHECKING:
    from cudasched.registry.resolver import BackgroundResolver
    from cudasched.settings.config import EventSettings
    from cudasched.webhook.admission.admitter import Kind
    from cudasched.webhook.background.following import FollowedKnowledge
    from cudasched.webhook.background.runtimereader import RuntimeReader
    from cudasched.webhook.state.clusterstate import ClusterState

__all__ = [
    "HEALTH_PATH",
    "ISVC_PATH",
    "LARGE_BODY_BYTES",
    "LLMISVC_PATH",
    "METRICS_PATH",
    "POD_PATH",
    "READY_PATH",
    "WORKLOAD_PATH",
    "StagedAdmission",
    "WebhookApp",
]

log = logging.getLogger(__name__)

POD_PATH = "/mutate/pods"
ISVC_PATH = "/mutate/inferenceservices"
LLMISVC_PATH = "/mutate/llminferenceservices"
#: Deployments, StatefulSets, Jobs, CronJobs and LeaderWorkerSets: their templates, warn-only.
WORKLOAD_PATH = "/mutate/workloads"
#: ResourceClaims made for pods from their templates, narrowed to the pod's class (dra.mode).
CLAIM_PATH = "/mutate/resourceclaims"

#: What each admission path decides.
_ENDPOINTS: dict[str, Kind] = {
    POD_PATH: "pod",
    ISVC_PATH: "isvc",
    LLMISVC_PATH: "llmisvc",
    WORKLOAD_PATH: "workload",
    CLAIM_PATH: "claim",
}
HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"
METRICS_PATH = "/metrics"

# Bodies up to this size are parsed on the event loop to look for a remembered answer (about
# 10 us per 4 KiB with orjson); larger ones are parsed in the review thread, under the deadline,
# and never remembered.
_INLINE_PARSE_BYTES = MEMO_MAX_BODY_BYTES

#: Bodies larger than this are *large*: decided in their own lane (``large_review_threads``)
#: and counted against ``large_bodies_in_flight_bytes`` while they are held. A real pod's
#: review is a few KiB.
LARGE_BODY_BYTES = MEMO_MAX_BODY_BYTES

Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]


#: What a prepared review is to the admission that prepared it; the server only hands it back.
P = TypeVar("P")

#: An answer as sent: the AdmissionReview response's bytes and its outcome for the metrics.
Reply = tuple[bytes, Outcome]


class StagedAdmission(Protocol[P]):
    """The one way the server calls admission: a review split into cheap steps the event loop
    may run and the decision itself, which runs in a review thread under the deadline.

    * ``recall_body``: a remembered answer found without decoding the body;
    * ``prepare``: decode and key the body (:class:`~cudasched.vocab.errors.InputError` when it
      is not an AdmissionReview v1: HTTP 400); what it returns only goes back to admission;
    * ``recall``: a remembered answer for the prepared review;
    * ``answer_inline``: the decision when it is cheap enough for the event loop, else ``None``;
    * ``answer``: the decision, in a review thread.

    Only the event loop calls the ``recall`` steps and ``answer_inline``. Admission tells the
    server through two hooks the server sets once: ``on_placement`` (where a decided object of
    a reported kind can run, for the NoCompatibleNode reporter; any thread) and
    ``on_unknown`` (``(kind, reason)`` of each answer that admits a GPU workload whose
    requirement is unknown, for the metrics). ``Admitter`` is the production one; the tests and
    the benchmarks' floor use ``tests.support.fakeadmission.FakeAdmission``."""

    on_placement: Callable[[Placement], None] | None
    on_unknown: Callable[[str, str], None] | None

    def recall_body(self, kind: Kind, body: bytes, state: ClusterState) -> Reply | None: ...

    def prepare(self, kind: Kind, body: bytes) -> P: ...

    def recall(self, prepared: P, state: ClusterState) -> Reply | None: ...

    def answer_inline(self, prepared: P, state: ClusterState) -> Reply | None: ...

    def answer(self, prepared: P, state: ClusterState) -> Reply: ...


class _BadRequest(Exception):
    """A request the server refuses before admission (status + one-line message)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class WebhookApp:
    """The ASGI application. One instance per server; nothing global.

    ``admission`` decides, ``source`` supplies the cluster snapshot, ``metrics`` holds this
    server's private Prometheus registry, ``image_resolver`` (the one in admission's image
    table, when it is on) is warmed from each new snapshot and closed with the app, and
    ``runtime_reader`` (where admission reads runtimes the snapshot lacks) learns the loop.
    """

    def __init__(
        self,
        admission: StagedAdmission[Any],
        source: StateSource,
        *,
        max_body_bytes: int = 3_145_728,
        request_timeout: float = 2.5,
        fail_closed: bool = False,
        metrics: WebhookMetrics | None = None,
        review_threads: int = 4,
        large_review_threads: int = 1,
        large_bodies_in_flight_bytes: int = 16 * 1024 * 1024,
        max_headers: int = 100,
        max_header_bytes: int = 16_384,
        events: EventSettings | None = None,
        reporting_instance: str = "cudasched-webhook",
        image_resolver: BackgroundResolver | None = None,
        runtime_reader: RuntimeReader | None = None,
    ) -> None:
        if max_body_bytes < 1:
            raise InputError(f"invalid max_body_bytes {max_body_bytes!r}: expected >= 1")
        if not request_timeout > 0:
            raise InputError(f"invalid request_timeout {request_timeout!r}: expected > 0 seconds")
        self.admission = admission
        self.source = source
        if large_bodies_in_flight_bytes < max_body_bytes:
            raise InputError(
                f"invalid large_bodies_in_flight_bytes {large_bodies_in_flight_bytes!r}: "
                f"expected at least max_body_bytes ({max_body_bytes})"
            )
        self.max_body_bytes, self.request_timeout = max_body_bytes, request_timeout
        self.fail_closed = fail_closed
        self.metrics = metrics if metrics is not None else WebhookMetrics()
        self.max_headers, self.max_header_bytes = max_headers, max_header_bytes
        self.large_bodies_in_flight_bytes = large_bodies_in_flight_bytes
        self._large_in_flight = 0  # bytes of large bodies held now (only the loop changes it)
        self._executor = ThreadPoolExecutor(
            max_workers=max(1, review_threads), thread_name_prefix="cudasched-review"
        )
        # Bodies over LARGE_BODY_BYTES are decided in their own lane, so however many arrive
        # they occupy at most these threads (and the memory of that many decodes) while the
        # ordinary reviews keep theirs.
        self._large_executor = ThreadPoolExecutor(
            max_workers=max(1, large_review_threads), thread_name_prefix="cudasched-large"
        )
        self._admission: dict[str, Kind] = dict(_ENDPOINTS)
        self._plain: dict[str, Callable[[], tuple[int, bytes, bytes]]] = {
            HEALTH_PATH: self._healthz,
            READY_PATH: self._readyz,
            METRICS_PATH: self._metrics,
        }
        # Children of labelled metrics are looked up once, not per request.
        self._latency = {p: self.metrics.latency.labels(endpoint=p) for p in self._admission}
        self._requests = kept_children(self.metrics.requests)  # (endpoint, outcome)
        self._unknowns = kept_children(self.metrics.unknown_requirement)  # (kind, reason)
        self._remembered = {
            p: self.metrics.remembered_answers.labels(endpoint=p) for p in self._admission
        }
        # Events and the gauge of admitted objects no node can run (nofit.py).
        self.reporter: NoFitReporter | None = None
        if events is not None and events.no_compatible_node:
            self.reporter = NoFitReporter(
                metrics=self.metrics,
                client_of=lambda: getattr(source, "client", None),
                lookup=_lookup_in(source),
                state_of=lambda: source.state,
                reporting_instance=reporting_instance,
                interval=events.per_object_interval_seconds,
            )
        # The image resolver (imageresolver.py), warmed from each new snapshot.
        self.image_resolver = image_resolver
        # Where admission reads runtimes the snapshot lacks (runtimereader.py): told the loop.
        self.runtime_reader = runtime_reader
        self._warmed: ClusterState | None = None
        self._hook(admission)
        # The knowledge followed in the background (background/following.py): started and
        # stopped with the server, said in /readyz; it replaces `admission` at a swap.
        self.knowledge: FollowedKnowledge | None = None

    def _hook(self, admission: StagedAdmission[Any]) -> None:
        """Tell ``admission`` where placements (the NoCompatibleNode reporter) and workloads
        admitted with an unknown requirement (counted by kind and reason) go."""
        if self.reporter is not None:
            admission.on_placement = self.reporter.observe
        admission.on_unknown = self._count_unknown

    def use_admission(self, admission: StagedAdmission[Any]) -> None:
        """Answer with ``admission`` from now on (a knowledge swap; any thread): hooked first,
        then put in place in one assignment. A review reads ``self.admission`` once when it
        starts, so one in flight finishes with the admission it started with."""
        self._hook(admission)
        self.admission = admission

    def _count_unknown(self, kind: str, reason: str) -> None:
        self._unknowns(kind, reason).inc()

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
                    if self.reporter is not None:
                        await self.reporter.start()
                    if self.runtime_reader is not None:
                        await self.runtime_reader.start()
                    if self.knowledge is not None:
                        await self.knowledge.start()
                except Exception as exc:
                    log.exception("start-up failed")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                try:
                    if self.knowledge is not None:
                        await self.knowledge.stop()
                    if self.reporter is not None:
                        await self.reporter.stop()
                    await self.source.stop()
                finally:
                    self.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        refused = self._head_refusal(scope)
        if refused is not None:
            self.metrics.connections_refused.labels(reason="header_too_large").inc()
            await _respond(send, 431, refused.encode(), close=True)
            return
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

    def _head_refusal(self, scope: dict[str, Any]) -> str | None:
        """Why the request head is refused (431), or ``None``. The HTTP protocol already cuts
        a head that grows past ``max_header_bytes`` while it arrives, but a head that comes in
        one read of the transport (up to 256 KiB) is only complete here; the number of fields
        is the same for every parser here too."""
        headers = scope["headers"]
        if len(headers) > self.max_headers:
            return f"{len(headers)} request header fields (at most {self.max_headers})\n"
        size = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
        for name, value in headers:
            size += len(name) + len(value) + 4
        if size > self.max_header_bytes:
            return f"request head of {size} bytes (at most {self.max_header_bytes})\n"
        return None

    # ------------------------------------------------------------------ plain endpoints

    def _healthz(self) -> tuple[int, bytes, bytes]:
        return 200, b"ok\n", b"text/plain; charset=utf-8"

    def _readyz(self) -> tuple[int, bytes, bytes]:
        # The knowledge's lines say which bundle answers and how its following goes; a
        # failure to follow never makes a replica unready (it answers with the last good one).
        detail = "".join(f"{line}\n" for line in self.knowledge.detail()) if self.knowledge else ""
        if self.source.synced:
            return 200, f"ok\n{detail}".encode(), b"text/plain; charset=utf-8"
        reason = self.source.not_ready_reason or "cluster cache not synced"
        return 503, f"not ready: {reason}\n{detail}".encode(), b"text/plain; charset=utf-8"

    def _metrics(self) -> tuple[int, bytes, bytes]:
        if self.reporter is not None:
            try:
                self.reporter.refresh()
            except Exception:  # the other metrics must still be served
                log.exception("refreshing the no-compatible-node gauge failed")
        return 200, self.metrics.render(), CONTENT_TYPE.encode()

    # ------------------------------------------------------------------ admission

    async def _admit(
        self, kind: Kind, path: str, scope: dict[str, Any], receive: Receive, send: Send
    ) -> None:
        started = time.perf_counter()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.request_timeout
        outcome = "error"
        held = [0]  # bytes of this request counted against large_bodies_in_flight_bytes
        try:
            body = await self._read_body(scope, receive, deadline, held)
            answer, outcome = await self._decide(kind, path, body, deadline)
        except _BadRequest as exc:
            await _respond(
                send,
                exc.status,
                (exc.message.replace("\n", " ") + "\n").encode(),
                close=exc.status in (413, 429),
            )
        else:
            await _respond(send, 200, answer, content_type=b"application/json")
        finally:
            self._large_in_flight -= held[0]
            self._requests(path, outcome).inc()
            self._latency[path].observe(time.perf_counter() - started)

    def _hold(self, size: int, held: list[int]) -> None:
        """Count ``size`` more bytes of a large body against the in-flight budget, or refuse
        the request (429: the API server applies its failure policy) when it is spent."""
        if self._large_in_flight + size > self.large_bodies_in_flight_bytes:
            raise _BadRequest(
                429,
                "too many large admission requests in flight "
                f"({self._large_in_flight} of {self.large_bodies_in_flight_bytes} bytes held)",
            )
        self._large_in_flight += size
        held[0] += size

    async def _read_body(
        self, scope: dict[str, Any], receive: Receive, deadline: float, held: list[int]
    ) -> bytes:
        limit = self.max_body_bytes
        declared = None
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
        if declared is not None and declared > LARGE_BODY_BYTES:
            self._hold(declared, held)
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
                    if size > LARGE_BODY_BYTES and size > held[0]:
                        # No (or a lying) Content-Length: hold what arrives as it arrives.
                        self._hold(size - held[0], held)
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            # Without the body there is no uid to answer with; the API server applies its
            # failurePolicy to this error.
            raise _BadRequest(408, "request body not received within the time budget") from None
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def _decide(self, kind: Kind, path: str, body: bytes, deadline: float) -> Reply:
        """The answer and its outcome label; raises :class:`_BadRequest` for bad bodies."""
        source = self.source
        if not source.synced:
            reason = source.not_ready_reason or "cluster cache not synced"
            return self._fallback(
                body, path, "not_synced", f"cluster state not ready ({reason})", 503
            )
        state = source.state
        loop = asyncio.get_running_loop()
        if self.image_resolver is not None and state is not self._warmed:
            self._warmed = state
            loop.run_in_executor(None, self._warm, state)
        admission = self.admission
        if len(body) <= _INLINE_PARSE_BYTES:
            # Repeats of a template are answered here without a thread hop, and so is a
            # first-seen review whose costly steps are all remembered; the rest goes to a
            # review thread with the request already parsed.
            try:
                found = admission.recall_body(kind, body, state)
                if found is not None:
                    self._remembered[path].inc()
                    return found
                prepared = admission.prepare(kind, body)
                found = admission.recall(prepared, state)
                if found is not None:
                    self._remembered[path].inc()
                    return found
                found = admission.answer_inline(prepared, state)
                if found is not None:
                    return found
            except InputError as exc:  # BadReviewError: not an AdmissionReview v1
                raise _BadRequest(400, str(exc)) from None
            except Exception:
                log.exception("admission of %s failed", path)
                return self._fallback(body, path, "internal", "internal error", 500)
            future = loop.run_in_executor(self._executor, admission.answer, prepared, state)
        else:
            lane = self._executor if len(body) <= LARGE_BODY_BYTES else self._large_executor
            future = loop.run_in_executor(lane, self._review, kind, body, state)
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

    def _review(self, kind: Kind, body: bytes, state: ClusterState) -> Reply:
        """A body too large to decode on the event loop, prepared and decided in a review
        thread. No lookup here: only the event loop, which reads snapshots in the order the
        source publishes them, moves the memo to a new snapshot (a review thread may hold an
        older one). Bodies this large are not looked up on the loop either."""
        admission = self.admission
        return admission.answer(admission.prepare(kind, body), state)

    def _fallback(self, body: bytes, path: str, reason: str, what: str, code: int) -> Reply:
        try:
            uid = review_uid(body)
        except BadReviewError as exc:
            raise _BadRequest(400, str(exc)) from None
        self.metrics.fallbacks.labels(endpoint=path, reason=reason).inc()
        if self.fail_closed:
            message = f"cudasched: {what}; request denied (failClosed)"
        else:
            message = f"cudasched: {what}; admitted without CUDA placement"
        answer = failure(uid, message, deny=self.fail_closed, code=code, reason=what)
        return answer.render(), answer.outcome

    def _warm(self, state: ClusterState) -> None:
        """Queue the images of a new snapshot's runtimes and services (a default-executor
        thread: never the event loop, never a review thread)."""
        from cudasched.webhook.background.imageresolver import images_of

        resolver = self.image_resolver
        if resolver is None:
            return
        try:
            resolver.warm(images_of(state))
        except Exception:
            log.exception("warming the image resolver failed")

    def close(self) -> None:
        """Release the review threads (lifespan shutdown does this when served by uvicorn)."""
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._large_executor.shutdown(wait=False, cancel_futures=True)
        if self.image_resolver is not None:
            self.image_resolver.close()


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


#: The snapshot's lookup of each reported kind the cache holds.
_CACHED_KINDS = {
    "InferenceService": "inference_service",
    "LLMInferenceService": "llm_inference_service",
}


def _lookup_in(source: StateSource) -> Callable[[Placement], Any]:
    """Find a reported object in the source's current snapshot: the cached object or ``None``
    for InferenceServices and LLMInferenceServices (the cache holds them), ``...`` for kinds
    it does not hold."""

    def lookup(placement: Placement) -> Any:
        method = _CACHED_KINDS.get(placement.kind)
        if method is None:
            return ...
        find = getattr(source.state, method, None)
        return find(placement.namespace, placement.name) if find is not None else ...

    return lookup
