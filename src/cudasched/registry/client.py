"""An image's config, read from its registry through the OCI distribution API.

Reference -> manifest (an image index or Docker manifest list is narrowed to the platform's
manifest) -> config blob -> ``config.Env`` and ``config.Labels``. Both OCI and Docker v2
schema 2 media types are read. Plain ``httpx`` (already a dependency) with the protocol written
out here, because every request must be bounded, which the OCI libraries on PyPI do not offer
(``docs/design.md``, issue 19):

* **time**: one deadline for the whole resolution (``Limits.deadline_seconds``); each request
  gets what is left of it (at most ``request_seconds``), a body is read in chunks against it;
* **size**: a manifest or index over ``max_manifest_bytes``, a config over
  ``max_config_bytes`` is refused as soon as its length (declared or read) passes the limit;
* **redirects**: followed by hand, at most ``max_redirects``, and ``Authorization`` is never
  sent to another host (blob storage on a CDN gets a signed URL, not our token);
* **retries**: a connection error, 429 or 5xx is retried ``retries`` times with exponential
  backoff, inside the deadline;
* **integrity**: a manifest fetched by digest and every config blob are checked against their
  digest;
* **paths**: every digest (the image reference's, and those an index or a manifest names) must
  follow the OCI digest grammar with a registered algorithm (sha256, sha512: lowercase hex of
  the algorithm's length) before it is put into a URL, so a registry cannot steer our requests
  (and our token) to another path of its host.

Auth: a 401's ``WWW-Authenticate`` challenge is answered once per request, Basic with the
host's credentials, Bearer by asking the realm for a pull token (anonymously, or with the
host's credentials); tokens are kept per repository until they expire
(:mod:`cudasched.registry.tokens`).

Besides an image's config, the client serves what :mod:`cudasched.registry.layers` reads: the
platform's manifest (:meth:`RegistryClient.manifest`), small blobs read whole
(:meth:`RegistryClient.read_blob`), and a layer blob as an open stream
(:meth:`RegistryClient.open_blob`), each through the same auth, redirects and retries.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urljoin, urlsplit

import httpx

from cudasched.knowledge.imageconfig import ImageConfig
from cudasched.knowledge.mirrors import Mirror
from cudasched.registry.auth import Keychain, canonical_host
from cudasched.registry.distribution import (
    ACCEPT,
    INDEX_TYPES,
    MANIFEST_TYPES,
    DigestMismatch,
    RegistryError,
    Repository,
    checked_digest,
    digest_of,
    json_object,
    repository_of,
    status_error,
)
from cudasched.registry.mirrors import routes_of
from cudasched.registry.tokens import RegistryTokens
from cudasched.vocab.errors import InputError

__all__ = [
    "Deadline",
    "ImageManifest",
    "Limits",
    "Platform",
    "RegistryClient",
    "WriteRequest",
]

_T = TypeVar("_T")
_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds of one resolution (see the module's docstring)."""

    deadline_seconds: float = 10.0
    request_seconds: float = 5.0
    max_manifest_bytes: int = 4 * 1024 * 1024
    max_config_bytes: int = 8 * 1024 * 1024
    max_redirects: int = 3
    retries: int = 2
    backoff_seconds: float = 0.2

    def __post_init__(self) -> None:
        if not (self.deadline_seconds > 0 and self.request_seconds > 0):
            raise InputError("invalid registry limits: time limits must be > 0 seconds")
        if self.max_manifest_bytes < 1024 or self.max_config_bytes < 1024:
            raise InputError("invalid registry limits: size limits must be at least 1024 bytes")
        if self.max_redirects < 0 or self.retries < 0 or self.backoff_seconds < 0:
            raise InputError("invalid registry limits: redirects, retries, backoff must be >= 0")


@dataclass(frozen=True, slots=True)
class Platform:
    """``os/architecture[/variant]``, as an image index names its manifests."""

    os: str = "linux"
    architecture: str = "amd64"
    variant: str = ""

    @classmethod
    def parse(cls, text: str) -> Platform:
        parts = text.strip().split("/")
        if len(parts) not in (2, 3) or not all(parts):
            raise InputError(
                f"invalid platform {text!r}: expected os/architecture[/variant] such as "
                "linux/amd64 or linux/arm64/v8"
            )
        return cls(parts[0], parts[1], parts[2] if len(parts) == 3 else "")

    def __str__(self) -> str:
        return "/".join(p for p in (self.os, self.architecture, self.variant) if p)

    def matches(self, entry: Mapping[str, Any]) -> bool:
        if entry.get("os") != self.os or entry.get("architecture") != self.architecture:
            return False
        return not self.variant or entry.get("variant") in (None, self.variant)


@dataclass(frozen=True, slots=True)
class ImageManifest:
    """The manifest a node would pull for one platform: where it was read (``repo``: the
    image's own repository or a mirror's), its digest, its document, and the image index it
    was picked from (``None`` when the reference named a manifest)."""

    image: str
    repo: Repository
    digest: str
    doc: Mapping[str, Any]
    index: Mapping[str, Any] | None
    platform: Platform

    @property
    def layers(self) -> list[Mapping[str, Any]]:
        """The layer descriptors, base layer first (as the manifest lists them)."""
        found = self.doc.get("layers")
        return [d for d in found if isinstance(d, Mapping)] if isinstance(found, list) else []


@dataclass(frozen=True, slots=True)
class WriteRequest:
    """A request :meth:`RegistryClient.send` makes: method, URL, body, the statuses that
    answer it, the token actions it needs, and whether it may be sent again."""

    method: str
    url: str
    what: str
    content: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    ok: frozenset[int] = frozenset({200, 201, 202, 204})
    actions: str = "pull,push"
    retry: bool = True


class Deadline:
    """One deadline shared by every request of a look-up."""

    def __init__(self, seconds: float, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._end = clock() + seconds
        self.seconds = seconds

    def left(self) -> float:
        return self._end - self._clock()

    def check(self, what: str) -> float:
        left = self.left()
        if left <= 0:
            raise RegistryError("timeout", f"{what}: no answer within {self.seconds:g}s")
        return left


class RegistryClient:
    """Reads image configs; one client per process (it keeps a connection pool and tokens).

    ``keychain`` gives credentials per host; ``plain_http`` names hosts (``host[:port]``)
    reached over plain HTTP; ``verify`` is httpx's (a CA bundle path or an ``SSLContext``
    for a private registry); ``mirrors`` (``imageMirrors`` entries) are asked before the
    canonical registry (:mod:`cudasched.registry.mirrors`). Thread-safe: the webhook's
    resolver calls it from its workers.
    """

    def __init__(
        self,
        *,
        keychain: Keychain | None = None,
        plain_http: Iterable[str] = (),
        limits: Limits | None = None,
        verify: Any = True,
        mirrors: Iterable[Mirror] = (),
        transport: httpx.BaseTransport | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.keychain = keychain if keychain is not None else Keychain()
        self.plain_http = frozenset(canonical_host(h) for h in plain_http)
        self.limits = limits if limits is not None else Limits()
        self.mirrors = tuple(mirrors)
        self._clock = clock
        self._sleep = sleep
        self._http = httpx.Client(
            follow_redirects=False,
            verify=verify,
            transport=transport,
            timeout=self.limits.request_seconds,
            headers={"user-agent": "cudasched"},
        )
        self._tokens = RegistryTokens(clock, self.plain_http)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the protocol

    def resolve(
        self,
        image: str,
        platform: Platform | None = None,
        *,
        keychain: Keychain | None = None,
    ) -> ImageConfig:
        """The config of ``image`` for ``platform`` (linux/amd64 unless given). Raises
        :class:`RegistryError` (an :class:`InputError`) saying what failed, and
        :class:`InputError` for a string that is not an image reference. ``keychain`` adds
        credentials for this call (a pod's pull secrets) in front of the client's."""
        plat = platform if platform is not None else Platform()

        def read(repo: Repository, chain: Keychain) -> ImageConfig:
            deadline = Deadline(self.limits.deadline_seconds, self._clock)
            return self._config(
                self._manifest_of(repo, image, plat, chain, deadline), chain, deadline
            )

        return self._routed(image, keychain, read)

    def manifest(
        self,
        image: str,
        platform: Platform | None = None,
        *,
        keychain: Keychain | None = None,
        deadline: Deadline | None = None,
    ) -> tuple[ImageManifest, Keychain]:
        """The manifest of ``image`` for ``platform`` (through its mirrors first, as
        :meth:`resolve`), and the keychain to read its blobs with (:meth:`open_blob`)."""
        plat = platform if platform is not None else Platform()

        def read(repo: Repository, chain: Keychain) -> tuple[ImageManifest, Keychain]:
            within = deadline or Deadline(self.limits.deadline_seconds, self._clock)
            return self._manifest_of(repo, image, plat, chain, within), chain

        return self._routed(image, keychain, read)

    def _routed(
        self,
        image: str,
        keychain: Keychain | None,
        read: Callable[[Repository, Keychain], _T],
    ) -> _T:
        """``read`` from each mirror of ``image`` in turn, then from its own repository: the
        first answer, else the last failure naming the mirrors passed."""
        repo = repository_of(image)
        chain = keychain.merged(self.keychain) if keychain is not None else self.keychain
        passed = []
        for route in routes_of(repo.host, repo.path, self.mirrors):
            mirrored = Repository(route.host, route.path, repo.reference, repo.is_digest)
            try:
                found = read(mirrored, chain)
            except RegistryError as exc:
                passed.append(f"mirror {mirrored.name}: {exc}")
                continue
            return found
        try:
            return read(repo, chain)
        except RegistryError as exc:
            if not passed:
                raise
            raise RegistryError(exc.kind, f"{exc} (after {'; '.join(passed)})") from None

    def hosts_of(self, image: str) -> list[str]:
        """The registry hosts a look-up of ``image`` may ask: its mirrors', then its own.
        Raises :class:`InputError` for a string that is not an image reference."""
        repo = repository_of(image)
        routes = routes_of(repo.host, repo.path, self.mirrors)
        return [*dict.fromkeys(r.host for r in routes), repo.host]

    def _manifest_of(
        self, repo: Repository, image: str, plat: Platform, chain: Keychain, deadline: Deadline
    ) -> ImageManifest:
        """The platform's manifest of ``image`` read from ``repo`` (its own repository or a
        mirror's), an image index narrowed to ``plat``."""
        body, media, digest = self._manifest(repo, repo.reference, chain, deadline)
        doc = json_object(body, f"manifest of {image}")
        media = str(doc.get("mediaType") or media)
        index = None
        if media in INDEX_TYPES or "manifests" in doc:
            index = doc
            entry = _pick(doc, plat, image)
            digest = checked_digest(entry["digest"], f"index of {image}")
            body, media, _ = self._manifest(repo, digest, chain, deadline)
            doc = json_object(body, f"manifest {digest} of {image}")
            media = str(doc.get("mediaType") or media)
        if media not in MANIFEST_TYPES and "config" not in doc:
            raise RegistryError(
                "bad-response", f"manifest of {image}: unsupported media type {media!r}"
            )
        return ImageManifest(image.strip(), repo, digest, doc, index, plat)

    def _config(self, found: ImageManifest, chain: Keychain, deadline: Deadline) -> ImageConfig:
        """The config blob that ``found`` names, read within ``deadline``."""
        image, doc = found.image, found.doc
        config = doc.get("config")
        if not isinstance(config, Mapping) or not isinstance(config.get("digest"), str):
            raise RegistryError("bad-response", f"manifest of {image} names no config blob")
        blob = self._blob(found.repo, str(config["digest"]), chain, deadline)
        cfg = json_object(blob, f"config of {image}")
        inner = cfg.get("config")
        inner = inner if isinstance(inner, Mapping) else {}
        env: dict[str, str] = {}
        listed = inner.get("Env")
        for item in listed if isinstance(listed, list) else ():
            if isinstance(item, str) and "=" in item:
                key, _, value = item.partition("=")
                env[key] = value
        labels = inner.get("Labels")
        labels = labels if isinstance(labels, Mapping) else {}
        described = str(found.platform)
        if isinstance(cfg.get("architecture"), str) and isinstance(cfg.get("os"), str):
            variant = cfg.get("variant") if isinstance(cfg.get("variant"), str) else ""
            described = "/".join(p for p in (cfg["os"], cfg["architecture"], variant) if p)
        repo = repository_of(image)
        return ImageConfig(
            image=image,
            digest=found.digest,
            platform=described,
            env=env,
            labels={str(k): str(v) for k, v in labels.items()},
            mirror=found.repo.name if found.repo != repo else "",
        )

    def _manifest(
        self, repo: Repository, reference: str, chain: Keychain, deadline: Deadline
    ) -> tuple[bytes, str, str]:
        by_digest = ":" in reference  # a tag has no colon (distribution/reference)
        what = (
            f"manifest {repo.name}@{reference}"
            if by_digest
            else f"manifest {repo.name}:{reference}"
        )
        if by_digest:
            checked_digest(reference, what)
        url = f"{self._base(repo.host)}/v2/{repo.path}/manifests/{reference}"
        response, body = self._get(
            url, repo, chain, deadline, self.limits.max_manifest_bytes, what, {"accept": ACCEPT}
        )
        media = response.headers.get("content-type", "").split(";")[0].strip()
        if by_digest:
            if digest_of(body, reference) != reference:
                raise DigestMismatch(f"{what}: content does not match its digest")
            return body, media, reference
        actual = "sha256:" + hashlib.sha256(body).hexdigest()
        digest = actual
        declared = response.headers.get("docker-content-digest", "")
        if declared.startswith("sha256:"):
            if declared != actual:
                raise DigestMismatch(f"{what}: Docker-Content-Digest does not match the content")
            digest = declared
        return body, media, digest

    def read_manifest(
        self, repo: Repository, reference: str, chain: Keychain, deadline: Deadline
    ) -> tuple[bytes, str, str]:
        """A manifest of ``repo`` by tag or digest (checked against it): body, media type,
        digest."""
        return self._manifest(repo, reference, chain, deadline)

    def read_blob(
        self, repo: Repository, digest: str, chain: Keychain, deadline: Deadline, limit: int
    ) -> bytes:
        """A small blob of ``repo`` read whole within ``limit`` bytes, checked against its
        digest."""
        return self._blob(repo, digest, chain, deadline, limit, "blob")

    def _blob(
        self,
        repo: Repository,
        digest: str,
        chain: Keychain,
        deadline: Deadline,
        limit: int | None = None,
        kind: str = "config blob",
    ) -> bytes:
        checked_digest(digest, f"manifest of {repo.name}:{repo.reference} (its {kind})")
        url = f"{self._base(repo.host)}/v2/{repo.path}/blobs/{digest}"
        what = f"{kind} {digest} of {repo.name}"
        bound = limit if limit is not None else self.limits.max_config_bytes
        _, body = self._get(url, repo, chain, deadline, bound, what, {})
        if digest_of(body, digest) != digest:
            raise DigestMismatch(f"{what}: content does not match its digest")
        return body

    def _base(self, host: str) -> str:
        scheme = "http" if host in self.plain_http else "https"
        return f"{scheme}://{host}"

    # ------------------------------------------------------------------ HTTP

    def _get(
        self,
        url: str,
        repo: Repository,
        chain: Keychain,
        deadline: Deadline,
        limit: int,
        what: str,
        headers: Mapping[str, str],
        *,
        keep_open: bool = False,
    ) -> tuple[httpx.Response, bytes]:
        """GET with auth, redirects and retries; the body read whole within ``limit``, or with
        ``keep_open`` a 200's body left unread in the open response (the caller closes it)."""
        auth = self._tokens.cached(repo, chain.get(repo.host))
        answered = False
        attempt = 0
        current = url
        redirects = 0
        while True:
            send = dict(headers)
            here, origin = urlsplit(current), urlsplit(url)
            # Credentials go only where they were asked for: the same scheme, host and port.
            same_host = (here.scheme, here.netloc) == (origin.scheme, origin.netloc)
            if auth is not None and same_host:
                send["authorization"] = auth
            try:
                response, body = self._fetch(current, send, deadline, limit, what, keep_open)
            except RegistryError as exc:
                if exc.kind == "unreachable" and attempt < self.limits.retries:
                    attempt += 1
                    self._backoff(attempt, deadline, what)
                    continue
                raise
            status = response.status_code
            if status in _REDIRECTS and response.headers.get("location"):
                redirects += 1
                if redirects > self.limits.max_redirects:
                    raise RegistryError(
                        "bad-response", f"{what}: more than {self.limits.max_redirects} redirects"
                    )
                current = urljoin(current, response.headers["location"])
                continue
            if status == 401 and not answered and same_host:
                answered = True
                auth = self._tokens.answer(response, repo, chain, deadline, what, self._fetch)
                continue
            if status in _RETRY_STATUS and attempt < self.limits.retries:
                attempt += 1
                self._backoff(attempt, deadline, what)
                continue
            if status == 200:
                return response, body
            raise status_error(status, what, body)

    def _fetch(
        self,
        url: str,
        headers: Mapping[str, str],
        deadline: Deadline,
        limit: int,
        what: str,
        keep_open: bool = False,
    ) -> tuple[httpx.Response, bytes]:
        left = deadline.check(what)
        timeout = httpx.Timeout(min(left, self.limits.request_seconds))
        request = self._http.build_request("GET", url, headers=headers, timeout=timeout)
        response: httpx.Response | None = None
        try:
            response = self._http.send(request, stream=True)
            if keep_open and response.status_code == 200:
                opened, response = response, None
                return opened, b""
            declared = response.headers.get("content-length")
            too_long = bool(declared and declared.isdigit() and int(declared) > limit)
            if response.status_code == 200 and too_long:
                raise RegistryError(
                    "too-large", f"{what}: {declared} bytes, more than the {limit} allowed"
                )
            chunks: list[bytes] = []
            size = 0
            for chunk in response.iter_bytes(_CHUNK):
                size += len(chunk)
                if size > limit:
                    raise RegistryError("too-large", f"{what}: more than the {limit} bytes allowed")
                deadline.check(what)
                chunks.append(chunk)
            return response, b"".join(chunks)
        except httpx.TimeoutException:
            raise RegistryError(
                "timeout", f"{what}: no answer within {min(left, self.limits.request_seconds):.3g}s"
            ) from None
        except httpx.TransportError as exc:
            raise RegistryError("unreachable", f"{what}: {type(exc).__name__}: {exc}") from None
        finally:
            if response is not None:
                response.close()

    def open_blob(
        self, repo: Repository, digest: str, chain: Keychain, deadline: Deadline, what: str
    ) -> httpx.Response:
        """The blob ``digest`` of ``repo`` as an open streaming response (status 200; the
        caller reads it within ``deadline`` and closes it), after auth, redirects and
        retries as every request."""
        checked_digest(digest, what)
        url = f"{self._base(repo.host)}/v2/{repo.path}/blobs/{digest}"
        response, _ = self._get(url, repo, chain, deadline, 1024 * 1024, what, {}, keep_open=True)
        return response

    def deadline(self) -> Deadline:
        """A deadline of :attr:`limits` ``deadline_seconds`` from now, for one operation's
        requests together."""
        return Deadline(self.limits.deadline_seconds, self._clock)

    def url(self, repo: Repository, path: str) -> str:
        """The distribution API's URL of ``path`` (``blobs/uploads/``, ``manifests/v1``) in
        ``repo``, over HTTPS unless the host is listed as plain HTTP."""
        return f"{self._base(repo.host)}/v2/{repo.path}/{path}"

    def send(
        self, request: WriteRequest, repo: Repository, chain: Keychain, deadline: Deadline
    ) -> httpx.Response:
        """One request that writes (or asks before writing: ``HEAD``), with a token for
        ``request.actions`` on ``repo`` (a 401's challenge answered once), retried on a
        connection error, 429 or 5xx when ``request.retry``; the response when its status is
        one of ``request.ok``, else a :class:`RegistryError`. Redirects are not followed: the
        upload protocol answers with ``Location`` headers, never with a 3xx."""
        creds = chain.get(repo.host)
        auth = self._tokens.cached(repo, creds, request.actions)
        answered = False
        attempt = 0
        while True:
            headers = dict(request.headers)
            if auth is not None:
                headers["authorization"] = auth
            try:
                response = self._write(request, headers, deadline)
            except RegistryError as exc:
                if exc.kind != "unreachable" or not request.retry or attempt >= self.limits.retries:
                    raise
                attempt += 1
                self._backoff(attempt, deadline, request.what)
                continue
            status = response.status_code
            if status == 401 and not answered:
                answered = True
                auth = self._tokens.answer(
                    response, repo, chain, deadline, request.what, self._fetch, request.actions
                )
                continue
            if status in _RETRY_STATUS and request.retry and attempt < self.limits.retries:
                attempt += 1
                self._backoff(attempt, deadline, request.what)
                continue
            if status in request.ok:
                return response
            raise status_error(status, request.what, response.content)

    def _write(
        self, request: WriteRequest, headers: Mapping[str, str], deadline: Deadline
    ) -> httpx.Response:
        left = deadline.check(request.what)
        timeout = httpx.Timeout(min(left, self.limits.request_seconds))
        try:
            return self._http.request(
                request.method,
                request.url,
                headers=headers,
                content=request.content,
                timeout=timeout,
            )
        except httpx.TimeoutException:
            raise RegistryError(
                "timeout", f"{request.what}: no answer within {timeout.read:.3g}s"
            ) from None
        except httpx.TransportError as exc:
            raise RegistryError(
                "unreachable", f"{request.what}: {type(exc).__name__}: {exc}"
            ) from None

    def _backoff(self, attempt: int, deadline: Deadline, what: str) -> None:
        pause = self.limits.backoff_seconds * (2 ** (attempt - 1))
        if pause >= deadline.left():
            raise RegistryError("timeout", f"{what}: no answer within {deadline.seconds:g}s")
        self._sleep(pause)


def _pick(index: Mapping[str, Any], platform: Platform, image: str) -> Mapping[str, Any]:
    manifests = index.get("manifests")
    if not isinstance(manifests, list):
        raise RegistryError("bad-response", f"index of {image} has no manifests list")
    offered = []
    for entry in manifests:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("digest"), str):
            continue
        plat = entry.get("platform")
        plat = plat if isinstance(plat, Mapping) else {}
        if plat.get("os") == "unknown":  # attestation manifests (buildx) are not images
            continue
        offered.append("/".join(str(plat.get(k)) for k in ("os", "architecture") if plat.get(k)))
        if platform.matches(plat):
            return entry
    raise RegistryError(
        "no-platform",
        f"{image} has no {platform} image (it offers {', '.join(offered) or 'none'})",
    )
