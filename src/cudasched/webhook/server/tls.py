"""TLS for the webhook: a server context that follows certificate rotation, and a self-signed
mode for development.

Rotation design
---------------
The API server only talks HTTPS to admission webhooks, and in a cluster the serving
certificate is a Secret that cert-manager (or an operator) renews: kubelet swaps the mounted
files in place while the pod keeps running. Restarting the process on every renewal would
drop in-flight admissions, so the listening socket keeps one *outer* :class:`ssl.SSLContext`
for its whole life and every TLS handshake goes through its SNI callback. OpenSSL calls that
callback for every ClientHello (``server_name`` is ``None`` when the client sent no SNI, as
for an IP address), before the server certificate is chosen. The callback:

1. ``stat``\\ s the certificate and key files (two cheap syscalls; a handshake costs far more);
2. if their (inode, mtime, size) signature changed, builds a *complete new* context from the
   files, and only when that succeeded (certificate and key parse and match) makes it the
   current one;
3. points the handshaking connection at the current context (``ssl_object.context = ...``),
   which is how OpenSSL's SNI support selects a certificate.

So a connection always gets a context that was fully built: never a half-updated one. While a
rotation is only half written (new certificate, old key), building fails, the previous good
context keeps serving, and the next handshake tries again. Established connections keep
their session; only new handshakes see the new certificate. No request fails during a
rotation, and no timer thread or event-loop task is needed. The protocol floor (TLS 1.2) and
the cipher suites (AEAD only: AES-GCM and ChaCha20-Poly1305) are set on the outer context and on
every inner one.

Self-signed mode
----------------
For development and the demo there is no cert-manager: :func:`generate_self_signed` makes a
small CA and a serving certificate signed by it (EC P-256), with the SANs the API server and
local clients use; both come from :func:`issue_certificate`, the one place certificates are
built (the end-to-end harness issues its control plane's certificates with it too). The CA
certificate is what goes into the webhook configuration's
``caBundle``. Files are written atomically with mode 0600 so a crash never leaves a partial key
and no other local user can read it. :func:`server_tls_files` picks the files a server
process uses: the configured pair, checked at start-up, or a fresh self-signed one.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import logging
import os
import ssl
import tempfile
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from cudasched.vocab.errors import InputError

if TYPE_CHECKING:
    from cudasched.settings.config import ServerConfig

__all__ = [
    "CA_KEY_USAGES",
    "LEAF_KEY_USAGES",
    "TLS12_CIPHERS",
    "ReloadingServerContext",
    "SelfSignedBundle",
    "Signer",
    "TLSConfigError",
    "generate_self_signed",
    "issue_certificate",
    "load_server_context",
    "server_tls_files",
    "service_dns_names",
    "write_atomic",
    "write_self_signed",
]

log = logging.getLogger(__name__)

DEFAULT_SERVICE = "cudasched-webhook"
DEFAULT_NAMESPACE = "cudasched"


class TLSConfigError(InputError):
    """Certificate or key files are missing, unreadable or do not belong together."""


# --------------------------------------------------------------------------- server contexts


#: The TLS 1.2 cipher suites served (OpenSSL cipher string).
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"


def load_server_context(
    cert_file: str | os.PathLike[str], key_file: str | os.PathLike[str]
) -> ssl.SSLContext:
    """A TLS >= 1.2 server context with the certificate chain and key from the files.

    Raises :class:`TLSConfigError` naming the files when they cannot be used.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    # TLS 1.2: forward-secret AEAD suites only (no CBC); TLS 1.3 suites are all AEAD. Go's
    # client, which the API server calls webhooks with, offers these first.
    ctx.set_ciphers(TLS12_CIPHERS)
    # HTTP/1.1 only: the API server's webhook client speaks it, and so does uvicorn.
    ctx.set_alpn_protocols(["http/1.1"])
    try:
        ctx.load_cert_chain(os.fspath(cert_file), os.fspath(key_file))
    except FileNotFoundError as exc:
        raise TLSConfigError(
            f"TLS file {exc.filename or os.fspath(cert_file)!r} does not exist: expected a PEM "
            "certificate (certFile) and private key (keyFile)"
        ) from None
    except (ssl.SSLError, OSError) as exc:
        raise TLSConfigError(
            f"cannot use certificate {os.fspath(cert_file)!r} with key {os.fspath(key_file)!r}: "
            f"{exc}; expected a PEM certificate chain and its matching private key"
        ) from None
    return ctx


_Signature = tuple[tuple[int, int, int, int], tuple[int, int, int, int]]


def _signature(cert_file: str, key_file: str) -> _Signature:
    def one(path: str) -> tuple[int, int, int, int]:
        st = os.stat(path)
        return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)

    return one(cert_file), one(key_file)


class ReloadingServerContext:
    """An SSL server context whose certificate follows the files on disk (see module docs).

    ``context`` is the object to hand to the listener (uvicorn's ``ssl_context_factory``
    returns it). ``reloads`` and ``failures`` count successful and failed rebuilds, for logs
    and tests.
    """

    def __init__(self, cert_file: str | os.PathLike[str], key_file: str | os.PathLike[str]) -> None:
        self.cert_file = os.fspath(cert_file)
        self.key_file = os.fspath(key_file)
        # Fail at start-up, loudly, if the initial files are unusable.
        signature = _signature_or_error(self.cert_file, self.key_file)
        self._current = load_server_context(self.cert_file, self.key_file)
        self._signature: _Signature | None = signature
        self._failed: _Signature | None = None
        self._last_warning: str | None = None
        self._lock = threading.Lock()  # handshakes may run on several loops (threads)
        self.reloads = 0
        self.failures = 0
        outer = load_server_context(self.cert_file, self.key_file)
        outer.sni_callback = self._on_client_hello
        self.context = outer

    @property
    def current(self) -> ssl.SSLContext:
        """The inner context new handshakes are pointed at."""
        return self._current

    def check(self) -> bool:
        """Rebuild the inner context if the files changed; True when a new one was installed.

        Never raises: a failed rebuild keeps the previous context (logged once per distinct
        file state), because refusing handshakes would turn a half-finished rotation into an
        outage.
        """
        try:
            signature = _signature(self.cert_file, self.key_file)
        except OSError as exc:
            # Mid-rotation a file can briefly be absent (kubelet swaps a symlink).
            self._warn_once(f"TLS files not readable, keeping the current certificate: {exc}")
            return False
        if signature == self._signature or signature == self._failed:
            return False
        with self._lock:
            if signature == self._signature or signature == self._failed:
                return False
            try:
                fresh = load_server_context(self.cert_file, self.key_file)
            except TLSConfigError as exc:
                self.failures += 1
                self._failed = signature  # retried once either file changes again
                self._warn_once(
                    f"TLS files changed but are not usable yet; keeping the current "
                    f"certificate: {exc}"
                )
                return False
            self._current = fresh
            self._signature = signature
            self._failed = None
            self._last_warning = None
            self.reloads += 1
        log.info("TLS certificate reloaded from %s", self.cert_file)
        return True

    def _warn_once(self, message: str) -> None:
        # A half-written rotation is seen by every handshake until it completes: log it once.
        if message != self._last_warning:
            self._last_warning = message
            log.warning("%s", message)

    def _on_client_hello(
        self, ssl_object: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _ctx: object
    ) -> None:
        self.check()
        ssl_object.context = self._current
        return None


def _signature_or_error(cert_file: str, key_file: str) -> _Signature:
    try:
        return _signature(cert_file, key_file)
    except OSError as exc:
        raise TLSConfigError(
            f"TLS file {exc.filename!r} is not readable ({exc.strerror}): expected a PEM "
            "certificate (certFile) and private key (keyFile)"
        ) from None


# --------------------------------------------------------------------------- self-signed


@dataclass(frozen=True, slots=True)
class SelfSignedBundle:
    """A development CA and a serving certificate it signed.

    ``cert_pem`` is the serving certificate followed by the CA (the chain a server presents);
    ``ca_pem`` is what clients trust and what the webhook configuration's ``caBundle`` holds.
    """

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    dns_names: tuple[str, ...]
    ip_addresses: tuple[str, ...]


def service_dns_names(service: str, namespace: str) -> tuple[str, ...]:
    """The names the API server may use to reach a webhook Service (it dials
    ``<service>.<namespace>.svc``; the longer form is what some proxies use)."""
    return (
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    )


#: The key usages (:class:`x509.KeyUsage` field names) a certificate gets unless told otherwise:
#: a CA signs certificates and revocation lists, a leaf (server or client) signs handshakes.
CA_KEY_USAGES = frozenset({"digital_signature", "key_cert_sign", "crl_sign"})
LEAF_KEY_USAGES = frozenset({"digital_signature"})
_KEY_USAGE_FIELDS = (
    "digital_signature",
    "content_commitment",
    "key_encipherment",
    "data_encipherment",
    "key_agreement",
    "key_cert_sign",
    "crl_sign",
    "encipher_only",
    "decipher_only",
)


@dataclass(frozen=True, slots=True)
class Signer:
    """A CA that issues certificates: its private key and its own certificate."""

    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate


def issue_certificate(
    key: ec.EllipticCurvePrivateKey,
    common_name: str,
    *,
    not_before: dt.datetime,
    not_after: dt.datetime,
    organizations: Sequence[str] = (),
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    ca: bool = False,
    signer: Signer | None = None,
    key_usages: Iterable[str] | None = None,
    extended_usages: Sequence[x509.ObjectIdentifier] = (),
) -> x509.Certificate:
    """A certificate for ``key``'s public key, signed by ``signer`` (self-signed when ``None``).

    The subject is ``O=<each organization>, CN=<common_name>`` (Kubernetes reads a client
    certificate's organizations as its groups); ``dns_names`` and ``ip_addresses`` become the
    subject alternative names. ``ca`` makes a CA that signs leaf certificates only (path length
    0). ``key_usages`` are :class:`x509.KeyUsage` field names (default
    :data:`CA_KEY_USAGES` or :data:`LEAF_KEY_USAGES`); ``extended_usages`` are OIDs such as
    ``ExtendedKeyUsageOID.SERVER_AUTH`` (none: no extension). Every certificate carries its
    subject key identifier, and a signed one its issuer's. Pure apart from randomness.
    """
    if not_after <= not_before:
        raise InputError(
            f"invalid certificate validity {not_before.isoformat()} .. {not_after.isoformat()}: "
            "expected the end after the start"
        )
    alternative: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    for ip in ip_addresses:
        try:
            alternative.append(x509.IPAddress(ipaddress.ip_address(ip)))
        except ValueError:
            raise InputError(
                f"invalid IP address {ip!r} for the certificate: expected e.g. 127.0.0.1"
            ) from None
    if key_usages is None:
        usages = CA_KEY_USAGES if ca else LEAF_KEY_USAGES
    else:
        usages = frozenset(key_usages)
    unknown = sorted(usages - set(_KEY_USAGE_FIELDS))
    if unknown:
        raise InputError(
            f"unknown key usage {unknown[0]!r}: expected one of {', '.join(_KEY_USAGE_FIELDS)}"
        )
    subject = x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
        + [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    )
    issuer_key = signer.key if signer is not None else key
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(signer.certificate.subject if signer is not None else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
        .add_extension(
            x509.KeyUsage(**{name: name in usages for name in _KEY_USAGE_FIELDS}), critical=True
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if extended_usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(extended_usages), critical=False)
    if alternative:
        builder = builder.add_extension(x509.SubjectAlternativeName(alternative), critical=False)
    if signer is not None:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.key.public_key()),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


def generate_self_signed(
    *,
    service: str = DEFAULT_SERVICE,
    namespace: str = DEFAULT_NAMESPACE,
    extra_dns_names: Iterable[str] = (),
    ip_addresses: Sequence[str] = ("127.0.0.1",),
    days: int = 365,
    now: dt.datetime | None = None,
) -> SelfSignedBundle:
    """Make a CA and a serving certificate for ``localhost``, the given IPs and the Service.

    Pure apart from randomness: nothing is written (see :func:`write_self_signed`).
    """
    if days < 1:
        raise InputError(f"invalid certificate lifetime {days!r}: expected at least 1 day")
    dns: list[str] = ["localhost", *service_dns_names(service, namespace)]
    for name in extra_dns_names:
        if not name or any(c.isspace() for c in name):
            raise InputError(f"invalid DNS name {name!r} for the certificate")
        if name not in dns:
            dns.append(name)

    start = (now or dt.datetime.now(dt.UTC)) - dt.timedelta(minutes=5)  # tolerate clock skew
    end = start + dt.timedelta(days=days)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = issue_certificate(
        ca_key, "cudasched development CA", not_before=start, not_after=end, ca=True
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = issue_certificate(
        key,
        f"{service}.{namespace}.svc",
        not_before=start,
        not_after=end,
        dns_names=dns,
        ip_addresses=ip_addresses,
        signer=Signer(ca_key, ca_cert),
        extended_usages=(ExtendedKeyUsageOID.SERVER_AUTH,),
    )
    ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM)
    return SelfSignedBundle(
        ca_pem=ca_pem,
        cert_pem=cert.public_bytes(serialization.Encoding.PEM) + ca_pem,
        key_pem=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
        dns_names=tuple(dns),
        ip_addresses=tuple(ip_addresses),
    )


def write_atomic(path: str | os.PathLike[str], data: bytes, mode: int = 0o600) -> Path:
    """Write ``data`` to ``path`` so readers see the old file or the new one, never a part.

    The temporary file is created with ``mode`` from the start (no window in which a key is
    world-readable), flushed to disk, then renamed over the target.
    """
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target


def write_self_signed(
    directory: str | os.PathLike[str], bundle: SelfSignedBundle
) -> tuple[Path, Path, Path]:
    """Write ``tls.crt``, ``tls.key`` and ``ca.crt`` (the names of a Kubernetes TLS Secret) into
    ``directory``; returns their paths. The key is written last: a reloading server that sees
    the new certificate before the new key keeps its old pair until both match."""
    d = Path(directory)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create TLS directory {str(d)!r}: {exc.strerror}") from None
    ca = write_atomic(d / "ca.crt", bundle.ca_pem)
    cert = write_atomic(d / "tls.crt", bundle.cert_pem)
    key = write_atomic(d / "tls.key", bundle.key_pem)
    return cert, key, ca


def server_tls_files(
    server: ServerConfig,
    self_signed_dir: str | os.PathLike[str] | None,
    stack: contextlib.ExitStack,
) -> tuple[Path, Path]:
    """The certificate and key files a webhook server serves: ``server.certFile`` and
    ``keyFile`` (loaded once now so a bad pair fails at start-up, naming the files), or with
    ``server.selfSigned`` a fresh self-signed pair written to ``self_signed_dir`` (a temporary
    directory removed when ``stack`` closes, when ``None``)."""
    if not server.self_signed:
        if not (server.cert_file and server.key_file):
            raise InputError(
                "no TLS certificate: set server.certFile and server.keyFile, "
                "or server.selfSigned (--self-signed)"
            )
        # Fail now, with the file names, rather than at the first handshake.
        load_server_context(server.cert_file, server.key_file)
        return Path(server.cert_file), Path(server.key_file)
    directory = self_signed_dir
    if directory is None:
        directory = stack.enter_context(tempfile.TemporaryDirectory(prefix="cudasched-tls-"))
    bundle = generate_self_signed()
    cert, key, ca = write_self_signed(directory, bundle)
    log.warning("serving a self-signed certificate (development only); its CA is %s", ca)
    return cert, key
