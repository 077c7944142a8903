"""TLS of the webhook: self-signed material, atomic 0600 files, the files a server process
serves, certificate rotation under load, and the TLS 1.2 floor — against the real server where
it matters."""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import socket
import ssl
import stat
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, load_pem_private_key
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.settings.config import WebhookConfig
from cudasched.vocab.errors import InputError
from cudasched.webhook.server.serving import serve_in_thread
from cudasched.webhook.server.tls import (
    CA_KEY_USAGES,
    ReloadingServerContext,
    Signer,
    TLSConfigError,
    generate_self_signed,
    issue_certificate,
    load_server_context,
    server_tls_files,
    service_dns_names,
    write_atomic,
    write_self_signed,
)
from tests.support import builders
from tests.support.fakeadmission import FakeAdmission


def review(uid: str) -> bytes:
    return orjson.dumps(builders.review(builders.pod(), uid=uid))


def leaf_of(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificates(pem)[0]


# ---------------------------------------------------------------------- self-signed material


def test_self_signed_bundle_is_a_ca_and_a_serving_certificate() -> None:
    bundle = generate_self_signed(service="hook", namespace="gpu-system")
    ca = x509.load_pem_x509_certificate(bundle.ca_pem)
    chain = x509.load_pem_x509_certificates(bundle.cert_pem)
    leaf = chain[0]
    assert chain[1] == ca  # the served chain ends with the CA
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    leaf.verify_directly_issued_by(ca)
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    dns = set(sans.get_values_for_type(x509.DNSName))
    assert {"localhost", "hook.gpu-system.svc", "hook.gpu-system.svc.cluster.local"} <= dns
    assert ipaddress.ip_address("127.0.0.1") in sans.get_values_for_type(x509.IPAddress)
    usage = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert x509.oid.ExtendedKeyUsageOID.SERVER_AUTH in usage
    key = load_pem_private_key(bundle.key_pem, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp256r1"
    assert key.public_key() == leaf.public_key()
    assert leaf.not_valid_after_utc - leaf.not_valid_before_utc >= dt.timedelta(days=365)


def test_service_names() -> None:
    assert "svc.ns.svc" in service_dns_names("svc", "ns")


@pytest.mark.parametrize(
    "kwargs",
    [{"days": 0}, {"ip_addresses": ("localhost",)}, {"extra_dns_names": ("bad name",)}],
)
def test_bad_self_signed_parameters(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InputError):
        generate_self_signed(**kwargs)


START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
END = START + dt.timedelta(days=30)


def dev_ca() -> Signer:
    key = ec.generate_private_key(ec.SECP256R1())
    return Signer(key, issue_certificate(key, "test CA", not_before=START, not_after=END, ca=True))


def key_usages(cert: x509.Certificate) -> set[str]:
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    return {
        name
        for name in ("digital_signature", "key_cert_sign", "crl_sign", "key_encipherment")
        if getattr(usage, name)
    }


def test_a_ca_is_self_signed_and_signs_leaves_only() -> None:
    ca = dev_ca().certificate
    ca.verify_directly_issued_by(ca)
    constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert (constraints.ca, constraints.path_length) == (True, 0)
    assert key_usages(ca) == CA_KEY_USAGES
    assert (ca.not_valid_before_utc, ca.not_valid_after_utc) == (START, END)


@settings(max_examples=20, deadline=None)
@given(
    organizations=st.lists(st.sampled_from(["system:masters", "system:nodes", "team"]), max_size=2),
    dns_names=st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,10}(\.[a-z]{2,5}){0,2}", fullmatch=True)),
    ip_addresses=st.lists(st.ip_addresses().map(str), max_size=3),
    client=st.booleans(),
)
def test_a_signed_certificate_carries_its_subject_names_and_usages(
    organizations: list[str], dns_names: list[str], ip_addresses: list[str], client: bool
) -> None:
    ca = dev_ca()
    key = ec.generate_private_key(ec.SECP256R1())
    usages = (x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH,) if client else ()
    cert = issue_certificate(
        key,
        "system:kube-scheduler",
        not_before=START,
        not_after=END,
        organizations=organizations,
        dns_names=dns_names,
        ip_addresses=ip_addresses,
        signer=ca,
        extended_usages=usages,
    )
    cert.verify_directly_issued_by(ca.certificate)
    assert cert.public_key() == key.public_key()
    subject = cert.subject
    assert [a.value for a in subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)] == [
        "system:kube-scheduler"
    ]
    assert [
        a.value for a in subject.get_attributes_for_oid(x509.NameOID.ORGANIZATION_NAME)
    ] == organizations
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    assert key_usages(cert) == {"digital_signature"}
    found = {ext.oid for ext in cert.extensions}
    assert (x509.oid.ExtensionOID.EXTENDED_KEY_USAGE in found) is client
    assert (x509.oid.ExtensionOID.SUBJECT_ALTERNATIVE_NAME in found) is bool(
        dns_names or ip_addresses
    )
    if dns_names or ip_addresses:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert sans.get_values_for_type(x509.DNSName) == dns_names
        assert sans.get_values_for_type(x509.IPAddress) == [
            ipaddress.ip_address(ip) for ip in ip_addresses
        ]
    issuer_id = cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    own_id = ca.certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    assert issuer_id.key_identifier == own_id.digest


def test_key_usages_can_be_chosen() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = issue_certificate(
        key,
        "kubelet",
        not_before=START,
        not_after=END,
        signer=dev_ca(),
        key_usages={"digital_signature", "key_encipherment"},
    )
    assert key_usages(cert) == {"digital_signature", "key_encipherment"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ip_addresses": ("localhost",)}, "invalid IP address 'localhost'"),
        ({"key_usages": ("sign_everything",)}, "unknown key usage 'sign_everything'"),
        ({"not_after": START}, "expected the end after the start"),
    ],
)
def test_bad_certificate_requests_name_the_value(kwargs: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {"not_before": START, "not_after": END, **kwargs}
    with pytest.raises(InputError, match=message):
        issue_certificate(ec.generate_private_key(ec.SECP256R1()), "x", **arguments)


def test_files_are_written_0600_and_atomically(tmp_path: Path) -> None:
    bundle = generate_self_signed()
    cert, key, ca = write_self_signed(tmp_path / "tls", bundle)
    for path in (cert, key, ca):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert key.read_bytes() == bundle.key_pem and ca.read_bytes() == bundle.ca_pem
    inode = cert.stat().st_ino
    write_atomic(cert, b"new")
    # Replaced by rename (a new inode), so a reader never sees a half-written file.
    assert cert.read_bytes() == b"new" and cert.stat().st_ino != inode
    assert sorted(p.name for p in (tmp_path / "tls").iterdir()) == ["ca.crt", "tls.crt", "tls.key"]


@settings(max_examples=25)
@given(data=st.binary(max_size=2048), mode=st.sampled_from([0o600, 0o640, 0o400]))
def test_write_atomic_roundtrip(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, mode: int
) -> None:
    target = tmp_path_factory.mktemp("atomic") / "file"
    write_atomic(target, b"old")
    write_atomic(target, data, mode)
    assert target.read_bytes() == data
    assert stat.S_IMODE(target.stat().st_mode) == mode
    assert [p.name for p in target.parent.iterdir()] == ["file"]


def test_unusable_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(TLSConfigError, match="does not exist"):
        load_server_context(tmp_path / "missing.crt", tmp_path / "missing.key")
    one, other = generate_self_signed(), generate_self_signed()
    cert, _, _ = write_self_signed(tmp_path / "a", one)
    _, key, _ = write_self_signed(tmp_path / "b", other)
    with pytest.raises(TLSConfigError, match="matching private key"):
        load_server_context(cert, key)
    with pytest.raises(TLSConfigError):
        ReloadingServerContext(tmp_path / "missing.crt", tmp_path / "missing.key")


def test_server_tls_files_are_the_configured_pair_checked_at_start_up(tmp_path: Path) -> None:
    cert, key, _ = write_self_signed(tmp_path, generate_self_signed())
    server = WebhookConfig.from_mapping(
        {"server": {"certFile": str(cert), "keyFile": str(key)}}
    ).server
    with contextlib.ExitStack() as stack:
        assert server_tls_files(server, None, stack) == (cert, key)
    with contextlib.ExitStack() as stack, pytest.raises(InputError, match=r"server\.certFile"):
        server_tls_files(WebhookConfig().server, None, stack)
    missing = WebhookConfig.from_mapping(
        {"server": {"certFile": str(tmp_path / "gone.crt"), "keyFile": str(key)}}
    ).server
    with contextlib.ExitStack() as stack, pytest.raises(TLSConfigError, match=r"gone\.crt"):
        server_tls_files(missing, None, stack)


def test_server_tls_files_self_signed(tmp_path: Path) -> None:
    """With ``selfSigned`` a fresh pair goes into the given directory (kept), or into a
    temporary one that is removed when the stack closes."""
    server = WebhookConfig.from_mapping({"server": {"selfSigned": True}}).server
    with contextlib.ExitStack() as stack:
        cert, key = server_tls_files(server, tmp_path / "tls", stack)
    assert (cert, key) == (tmp_path / "tls" / "tls.crt", tmp_path / "tls" / "tls.key")
    assert (tmp_path / "tls" / "ca.crt").exists() and cert.exists()
    load_server_context(cert, key)
    with contextlib.ExitStack() as stack:
        cert, key = server_tls_files(server, None, stack)
        load_server_context(cert, key)
    assert not cert.exists() and not key.exists()


def test_context_refuses_old_protocols(tmp_path: Path) -> None:
    cert, key, _ = write_self_signed(tmp_path, generate_self_signed())
    tls = ReloadingServerContext(cert, key)
    assert tls.context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert tls.current.minimum_version == ssl.TLSVersion.TLSv1_2


def test_half_written_rotation_keeps_the_last_good_certificate(tmp_path: Path) -> None:
    first, second = generate_self_signed(), generate_self_signed()
    cert, key, _ = write_self_signed(tmp_path, first)
    tls = ReloadingServerContext(cert, key)
    before = tls.current
    write_atomic(cert, second.cert_pem)  # new certificate, old key: not usable yet
    assert tls.check() is False
    assert tls.current is before and tls.failures == 1
    assert tls.check() is False and tls.failures == 1  # not retried until a file changes
    write_atomic(key, second.key_pem)
    assert tls.check() is True
    assert tls.current is not before and tls.reloads == 1
    assert tls.check() is False  # nothing changed since


# ---------------------------------------------------------------------- against the server


def _peer_certificate(port: int, trust: ssl.SSLContext) -> bytes:
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        trust.wrap_socket(raw, server_hostname="127.0.0.1") as conn,
    ):
        der = conn.getpeercert(binary_form=True)
    assert der is not None
    return der


def test_rotation_under_load_fails_no_request(tmp_path: Path) -> None:
    first, second = generate_self_signed(), generate_self_signed()
    cert, key, _ = write_self_signed(tmp_path, first)
    # Clients trust both CAs, as during a CA rollover.
    trust = ssl.create_default_context(cadata=(first.ca_pem + second.ca_pem).decode())
    failures: list[BaseException] = []
    answered: list[str] = []
    stop = threading.Event()

    with serve_in_thread(
        object(), admission=FakeAdmission(), cert_file=cert, key_file=key, ca_pem=first.ca_pem
    ) as srv:

        def hammer() -> None:
            # No keep-alive: every request is a new TLS handshake, the case rotation affects.
            limits = httpx.Limits(max_keepalive_connections=0)
            with httpx.Client(base_url=srv.url, verify=trust, limits=limits, timeout=10) as c:
                i = 0
                while not stop.is_set():
                    i += 1
                    try:
                        resp = c.post("/mutate/pods", content=review(f"r-{i}"))
                        resp.raise_for_status()
                        answered.append(resp.json()["response"]["uid"])
                    except Exception as exc:
                        failures.append(exc)

        workers = [threading.Thread(target=hammer) for _ in range(2)]
        for w in workers:
            w.start()
        try:
            _wait(lambda: len(answered) >= 20)
            assert _peer_certificate(srv.port, trust) == leaf_of(first.cert_pem).public_bytes(
                Encoding.DER
            )
            # Rotate the way a secret update would land, certificate first, then key.
            write_self_signed(tmp_path, second)
            seen = len(answered)
            _wait(lambda: len(answered) >= seen + 20)
            served = _peer_certificate(srv.port, trust)
        finally:
            stop.set()
            for w in workers:
                w.join(10)
    assert failures == []
    assert served == leaf_of(second.cert_pem).public_bytes(Encoding.DER)
    assert srv.tls.reloads >= 1


def _wait(predicate: Any, timeout: float = 20.0) -> None:
    """Poll until ``predicate()`` holds; the timeout only guards against a hang."""
    limit = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > limit:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


def _tls11_client(trust_pem: bytes | None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if trust_pem is not None:
        ctx.load_verify_locations(cadata=trust_pem.decode())
    ctx.minimum_version = ssl.TLSVersion.TLSv1
    ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    return ctx


def _tls11_control_server(cert: Path, key: Path) -> tuple[int, threading.Thread, list[str]]:
    """A bare server that does accept TLS 1.1, proving the test client can speak it."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    ctx.load_cert_chain(cert, key)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    versions: list[str] = []

    def accept() -> None:
        conn, _ = listener.accept()
        try:
            with ctx.wrap_socket(conn, server_side=True) as tls:
                versions.append(str(tls.version()))
        except (ssl.SSLError, OSError):
            versions.append("failed")
        finally:
            listener.close()

    thread = threading.Thread(target=accept)
    thread.start()
    return listener.getsockname()[1], thread, versions


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion:DeprecationWarning")
def test_tls_1_1_is_refused(tmp_path: Path) -> None:
    bundle = generate_self_signed()
    cert, key, _ = write_self_signed(tmp_path, bundle)
    port, thread, versions = _tls11_control_server(cert, key)
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            _tls11_client(bundle.ca_pem).wrap_socket(raw) as conn,
        ):
            control = conn.version()
    except ssl.SSLError:
        control = None
    thread.join(5)
    if control != "TLSv1.1":
        pytest.skip(f"this OpenSSL build cannot negotiate TLS 1.1 at all ({versions})")

    with serve_in_thread(object(), admission=FakeAdmission()) as srv:
        with (
            pytest.raises(ssl.SSLError),
            socket.create_connection(("127.0.0.1", srv.port), timeout=5) as raw,
            _tls11_client(srv.ca_pem).wrap_socket(raw),
        ):
            pass
        # The same server accepts TLS 1.2+ from a default client.
        trust = ssl.create_default_context(cadata=srv.ca_pem.decode())
        with httpx.Client(verify=trust) as c:
            assert c.get(f"{srv.url}/healthz").status_code == 200


# --------------------------------------------------------------------------- cipher suites


def _tls12_suites() -> list[str]:
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    probe.set_ciphers("ALL:@SECLEVEL=0")
    return sorted({c["name"] for c in probe.get_ciphers() if c["protocol"] == "TLSv1.2"})


def _handshake(url_port: int, ca_pem: bytes, cipher: str) -> str | None:
    """The suite a TLS 1.2 client offering only ``cipher`` gets, or ``None`` when refused."""
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.set_ciphers(cipher + ":@SECLEVEL=0")
    except ssl.SSLError:
        return None  # this OpenSSL cannot offer it at all
    try:
        with (
            socket.create_connection(("127.0.0.1", url_port), timeout=5) as raw,
            ctx.wrap_socket(raw, server_hostname="localhost") as tls,
        ):
            return tls.cipher()[0]
    except (ssl.SSLError, OSError):
        return None


def test_tls12_offers_aead_suites_only() -> None:
    """CBC (and any other non-AEAD) suite is refused; GCM and ChaCha20-Poly1305 are served.
    TLS 1.3 suites are all AEAD."""
    admission = FakeAdmission()
    with serve_in_thread(object(), admission=admission) as srv:  # type: ignore[arg-type]
        accepted = [c for c in _tls12_suites() if _handshake(srv.port, srv.ca_pem, c)]
    assert admission.calls == 0  # handshakes only: no admission request is sent
    assert accepted, "no TLS 1.2 suite accepted at all"
    assert all("GCM" in c or "CHACHA20-POLY1305" in c for c in accepted), accepted
    assert any("GCM" in c for c in accepted)
