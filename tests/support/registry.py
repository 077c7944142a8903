"""A real registry for the tests: Debian's ``docker-registry`` (the CNCF distribution server)
started on 127.0.0.1 with a temporary config, optionally with TLS (a trustme CA), htpasswd
(bcrypt) basic auth, or token auth served by a small token server of our own (ES256 JWTs with
an ``x5c`` chain the registry trusts through ``rootcertbundle``). Images are pushed with the
distribution API itself: blobs, manifests, indexes built here.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import orjson
import pytest

from cudasched.registry.auth import parse_challenge
from tests.harness.controlplane.processes import free_port

REGISTRY_BIN = "/usr/bin/docker-registry"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
SERVICE = "cudasched-test-registry"


def need_registry() -> str:
    """The registry binary, or skip (outside CI) saying how to get it."""
    found = shutil.which("docker-registry") or (
        REGISTRY_BIN if os.path.exists(REGISTRY_BIN) else None
    )
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("docker-registry is missing on CI (.ci/run installs it)")
        pytest.skip("docker-registry not installed (apt-get install docker-registry)")
    return found


def _wait_port(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    end = time.monotonic() + 20
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"docker-registry exited: {log.read_text()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"docker-registry did not listen on {port}: {log.read_text()[-2000:]}")


# ---------------------------------------------------------------------- token server


@contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[int]:
    """``handler`` served by a threaded HTTP server on 127.0.0.1 while the block runs; its
    port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


class TokenIssuer:
    """Signs registry tokens (ES256, ``x5c`` header) for a self-signed certificate."""

    def __init__(self, directory: Path) -> None:
        import datetime

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self._key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cudasched-token-issuer")])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self._der = cert.public_bytes(serialization.Encoding.DER)
        self.bundle = directory / "token-root.pem"
        self.bundle.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        self.issuer = "cudasched-test-issuer"

    def token(self, subject: str, access: list[dict[str, Any]]) -> str:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

        now = int(time.time())
        header = {"typ": "JWT", "alg": "ES256", "x5c": [base64.b64encode(self._der).decode()]}
        claims = {
            "iss": self.issuer,
            "sub": subject,
            "aud": SERVICE,
            "exp": now + 300,
            "nbf": now - 10,
            "iat": now,
            "jti": uuid.uuid4().hex,
            "access": access,
        }
        signing = f"{_b64url(orjson.dumps(header))}.{_b64url(orjson.dumps(claims))}"
        der = self._key.sign(signing.encode(), ec.ECDSA(hashes.SHA256()))
        r, s = decode_dss_signature(der)
        return f"{signing}.{_b64url(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


@dataclass
class TokenServer:
    """The realm: grants pull (and push to ``user``) tokens; counts the requests."""

    issuer: TokenIssuer
    users: Mapping[str, str]
    anonymous_pull: bool = True
    port: int = 0
    requests: list[str] = field(default_factory=list)

    @property
    def realm(self) -> str:
        return f"http://127.0.0.1:{self.port}/token"

    @contextmanager
    def running(self) -> Iterator[TokenServer]:
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return

            def do_GET(self) -> None:
                owner.requests.append(self.path)
                query = parse_qs(urlsplit(self.path).query)
                user = None
                header = self.headers.get("authorization", "")
                if header.lower().startswith("basic "):
                    raw = base64.b64decode(header[6:]).decode()
                    name, _, password = raw.partition(":")
                    if owner.users.get(name) != password:
                        self.send_response(401)
                        self.end_headers()
                        return
                    user = name
                if user is None and not owner.anonymous_pull:
                    self.send_response(401)
                    self.end_headers()
                    return
                access = []
                for scope in query.get("scope", []):
                    kind, name, actions = scope.split(":", 2)
                    wanted = actions.split(",")
                    granted = [a for a in wanted if a == "pull" or user is not None]
                    access.append({"type": kind, "name": name, "actions": granted})
                body = orjson.dumps(
                    {"token": owner.issuer.token(user or "anonymous", access), "expires_in": 300}
                )
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        with serving(Handler) as self.port:
            yield self


# ---------------------------------------------------------------------- the registry


@dataclass
class Registry:
    """A running registry: ``host`` (127.0.0.1:port), its scheme, how to push to it."""

    host: str
    scheme: str
    verify: Any
    push_auth: tuple[str, str] | None = None
    ca_pem: bytes = b""
    storage: Path | None = None  # the registry's storage root (to damage a blob on disk)

    def blob_file(self, digest: str) -> Path:
        """Where the registry keeps the blob ``digest`` (the filesystem driver's layout)."""
        assert self.storage is not None
        hexa = digest.split(":", 1)[1]
        return self.storage / "docker/registry/v2/blobs/sha256" / hexa[:2] / hexa / "data"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}"

    def _client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, verify=self.verify, timeout=10)

    def _authorised(self, client: httpx.Client, method: str, url: str, **kw: Any) -> httpx.Response:
        """One request, answering a Basic or Bearer challenge with the push credentials."""
        response = client.request(method, url, **kw)
        if response.status_code != 401:
            return response
        challenge = response.headers.get("www-authenticate", "")
        headers = dict(kw.pop("headers", {}) or {})
        if challenge.lower().startswith("basic"):
            assert self.push_auth is not None
            headers["authorization"] = httpx.BasicAuth(*self.push_auth)._auth_header
        else:
            found = parse_challenge(challenge)
            assert found is not None, challenge
            params = dict(found.params)
            scope = params.get("scope", "")
            if ":push" not in scope and method != "GET":
                scope = scope.replace(":pull", ":pull,push")
            auth = httpx.BasicAuth(*self.push_auth) if self.push_auth else None
            token = httpx.get(
                params["realm"],
                params={"service": params.get("service", ""), "scope": scope},
                auth=auth,
            ).json()["token"]
            headers["authorization"] = f"Bearer {token}"
        return client.request(method, url, headers=headers, **kw)

    def push_blob(self, repo: str, data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        with self._client() as client:
            start = self._authorised(client, "POST", f"/v2/{repo}/blobs/uploads/")
            assert start.status_code == 202, start.text
            location = start.headers["location"]
            sep = "&" if "?" in location else "?"
            put = self._authorised(
                client,
                "PUT",
                f"{location}{sep}digest={digest}",
                content=data,
                headers={"content-type": "application/octet-stream"},
            )
            assert put.status_code == 201, put.text
        return digest

    def push_manifest(self, repo: str, reference: str, manifest: Mapping[str, Any]) -> str:
        body = orjson.dumps(manifest)
        with self._client() as client:
            put = self._authorised(
                client,
                "PUT",
                f"/v2/{repo}/manifests/{reference}",
                content=body,
                headers={"content-type": str(manifest["mediaType"])},
            )
            assert put.status_code == 201, put.text
        return "sha256:" + hashlib.sha256(body).hexdigest()

    def push_image(
        self,
        repo: str,
        tag: str | None,
        env: Sequence[str],
        *,
        labels: Mapping[str, str] | None = None,
        arch: str = "amd64",
        docker: bool = False,
        annotations: Mapping[str, str] | None = None,
    ) -> str:
        """One image (a config with ``env`` and ``labels``, one small layer); the digest of
        its manifest. ``docker``: Docker v2 schema 2 media types instead of OCI's."""
        config = {
            "architecture": arch,
            "os": "linux",
            "config": {"Env": list(env), "Labels": dict(labels or {})},
            "rootfs": {"type": "layers", "diff_ids": []},
        }
        config_bytes = orjson.dumps(config)
        config_digest = self.push_blob(repo, config_bytes)
        layer = f"layer of {repo} {arch} {uuid.uuid4()}".encode()
        layer_digest = self.push_blob(repo, layer)
        manifest: dict[str, Any] = {
            "schemaVersion": 2,
            "mediaType": DOCKER_MANIFEST if docker else OCI_MANIFEST,
            "config": {
                "mediaType": DOCKER_CONFIG if docker else OCI_CONFIG,
                "digest": config_digest,
                "size": len(config_bytes),
            },
            "layers": [{"mediaType": LAYER, "digest": layer_digest, "size": len(layer)}],
        }
        if annotations:
            manifest["annotations"] = dict(annotations)
        digest = "sha256:" + hashlib.sha256(orjson.dumps(manifest)).hexdigest()
        self.push_manifest(repo, tag or digest, manifest)
        return digest

    def push_index(
        self, repo: str, tag: str, images: Mapping[str, str], *, docker: bool = False
    ) -> str:
        """An index (Docker manifest list with ``docker``) over ``{arch: manifest digest}``."""
        manifests = []
        with self._client() as client:
            for arch, digest in images.items():
                got = self._authorised(
                    client,
                    "GET",
                    f"/v2/{repo}/manifests/{digest}",
                    headers={"accept": f"{OCI_MANIFEST}, {DOCKER_MANIFEST}"},
                )
                assert got.status_code == 200, got.text
                manifests.append(
                    {
                        "mediaType": got.headers["content-type"],
                        "digest": digest,
                        "size": len(got.content),
                        "platform": {"os": "linux", "architecture": arch},
                    }
                )
        index = {
            "schemaVersion": 2,
            "mediaType": DOCKER_LIST if docker else OCI_INDEX,
            "manifests": manifests,
        }
        return self.push_manifest(repo, tag, index)


def _htpasswd(users: Mapping[str, str], path: Path) -> None:
    import bcrypt

    lines = [
        f"{u}:{bcrypt.hashpw(p.encode(), bcrypt.gensalt(rounds=4)).decode()}"
        for u, p in users.items()
    ]
    path.write_text("\n".join(lines) + "\n")


@contextmanager
def run_registry(
    *,
    tls: bool = False,
    basic: Mapping[str, str] | None = None,
    token: TokenServer | None = None,
) -> Iterator[Registry]:
    """Start the real registry on 127.0.0.1 (TLS with a trustme CA when ``tls``; htpasswd
    ``basic`` users, or ``token`` auth through a running :class:`TokenServer`)."""
    binary = need_registry()
    with tempfile.TemporaryDirectory(prefix="cudasched-registry-") as tmp:
        root = Path(tmp)
        port = free_port()
        config: dict[str, Any] = {
            "version": 0.1,
            "log": {"level": os.environ.get("REGLOG", "error"), "accesslog": {"disabled": True}},
            "storage": {
                "filesystem": {"rootdirectory": str(root / "data")},
                "delete": {"enabled": True},
            },
            "http": {"addr": f"127.0.0.1:{port}", "secret": uuid.uuid4().hex},
        }
        verify: Any = True
        ca_pem = b""
        if tls:
            import trustme

            ca = trustme.CA()
            cert = ca.issue_cert("127.0.0.1", "localhost")
            cert.private_key_pem.write_to_path(str(root / "key.pem"))
            cert.cert_chain_pems[0].write_to_path(str(root / "cert.pem"))
            config["http"]["tls"] = {
                "certificate": str(root / "cert.pem"),
                "key": str(root / "key.pem"),
            }
            ca_pem = ca.cert_pem.bytes()
            (root / "ca.pem").write_bytes(ca_pem)
            verify = ssl.create_default_context(cafile=str(root / "ca.pem"))
        push_auth = None
        if basic is not None:
            _htpasswd(basic, root / "htpasswd")
            config["auth"] = {
                "htpasswd": {"realm": "cudasched-test", "path": str(root / "htpasswd")}
            }
            push_auth = next(iter(basic.items()))
        elif token is not None:
            config["auth"] = {
                "token": {
                    "realm": token.realm,
                    "service": SERVICE,
                    "issuer": token.issuer.issuer,
                    "rootcertbundle": str(token.issuer.bundle),
                }
            }
            push_auth = next(iter(token.users.items()))
        (root / "config.yml").write_bytes(orjson.dumps(config))  # JSON is YAML
        log = root / "registry.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [binary, "serve", str(root / "config.yml")], stdout=out, stderr=subprocess.STDOUT
            )
        try:
            _wait_port(port, proc, log)
            scheme = "https" if tls else "http"
            yield Registry(f"127.0.0.1:{port}", scheme, verify, push_auth, ca_pem, root / "data")
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# ---------------------------------------------------------------------- stand-ins


@contextmanager
def hanging_server() -> Iterator[str]:
    """A TCP listener on 127.0.0.1 that accepts and never answers (a hung registry); its
    ``host:port``."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(2)
        for conn in held:
            conn.close()
        listener.close()


@contextmanager
def blob_storage(registry: Registry) -> Iterator[tuple[str, list[dict[str, str]]]]:
    """Blob storage on another host:port, as a CDN behind a registry is: it serves
    ``GET /v2/<repo>/blobs/<digest>`` with the registry's blob (read with the push
    credentials, as a signed URL would grant) and records the headers of every request; its
    ``host:port`` and the headers it saw."""
    seen: list[dict[str, str]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            return

        def do_GET(self) -> None:
            seen.append({k.lower(): v for k, v in self.headers.items()})
            with registry._client() as client:
                reply = registry._authorised(client, "GET", self.path)
            self.send_response(reply.status_code)
            self.send_header("content-length", str(len(reply.content)))
            self.end_headers()
            self.wfile.write(reply.content)

    with serving(Handler) as port:
        yield f"127.0.0.1:{port}", seen


@contextmanager
def redirecting_front(
    target: str, *, blobs_at: str | None = None
) -> Iterator[tuple[str, list[str]]]:
    """A plain-HTTP stand-in in front of the registry at ``target`` (host:port): it answers
    every blob GET with a 307 to ``blobs_at`` (default: the registry itself; either is
    another host:port, as blob storage on a CDN would be) and proxies everything else; its
    ``host:port`` and the paths it redirected are in ``redirected``."""
    redirected: list[str] = []
    blobs = blobs_at if blobs_at is not None else target

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            return

        def do_GET(self) -> None:
            if "/blobs/" in self.path:
                redirected.append(self.path)
                self.send_response(307)
                self.send_header("location", f"http://{blobs}{self.path}")
                self.send_header("content-length", "0")
                self.end_headers()
                return
            headers = {
                k: v for k, v in self.headers.items() if k.lower() in ("accept", "authorization")
            }
            reply = httpx.get(f"http://{target}{self.path}", headers=headers)
            self.send_response(reply.status_code)
            for key in ("content-type", "docker-content-digest", "www-authenticate"):
                if key in reply.headers:
                    self.send_header(key, reply.headers[key])
            self.send_header("content-length", str(len(reply.content)))
            self.end_headers()
            self.wfile.write(reply.content)

    with serving(Handler) as port:
        yield f"127.0.0.1:{port}", redirected


@contextmanager
def hostile_registry(
    status: int, headers: Mapping[str, str], asked: list[str] | None = None
) -> Iterator[str]:
    """A plain-HTTP registry that answers every GET with ``status`` and ``headers`` and an
    empty body (a registry that sends a challenge or a redirect of its choosing); its
    ``host:port``. The paths asked are added to ``asked`` when given."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            return

        def do_GET(self) -> None:
            if asked is not None:
                asked.append(self.path)
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("content-length", "0")
            self.end_headers()

    with serving(Handler) as port:
        yield f"127.0.0.1:{port}"


@contextmanager
def scripted_registry(answers: Mapping[str, Mapping[str, Any]]) -> Iterator[tuple[str, list[str]]]:
    """A plain-HTTP registry that answers a GET of a path in ``answers`` with that JSON
    document (its ``mediaType`` as the content type) and any other path with 404; its
    ``host:port`` and the paths asked, in order (a registry whose manifests say what it
    chooses)."""
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            return

        def do_GET(self) -> None:
            asked.append(self.path)
            doc = answers.get(self.path)
            body = orjson.dumps(doc) if doc is not None else b""
            self.send_response(200 if doc is not None else 404)
            if doc is not None:
                self.send_header("content-type", str(doc.get("mediaType", "application/json")))
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with serving(Handler) as port:
        yield f"127.0.0.1:{port}", asked
