"""Knowledge bundles pushed to a real registry (Debian's docker-registry) and pulled back: every
digest checked, signatures beside the bundle, and what is not a good bundle refused with the
reason."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from cudasched.knowledge.bundle import BundleError, builtin_bundle, read_layout
from cudasched.knowledge.bundlecheck import Sourced, knowledge_of
from cudasched.knowledge.signing import load_private_key, load_public_key
from cudasched.registry.auth import Credentials, Keychain
from cudasched.registry.bundles import pull_bundle, push_bundle, signature_tag
from cudasched.registry.client import RegistryClient
from cudasched.registry.distribution import RegistryError, repository_of
from cudasched.registry.upload import Uploader
from tests.support.bundles import NEW_610, builtin_tables, bundle_of, ed25519_pair, planted
from tests.support.registry import Registry, TokenIssuer, TokenServer, run_registry


@pytest.fixture(scope="module")
def registry() -> Iterator[Registry]:
    with run_registry() as found:
        yield found


def client(registry: Registry, creds: tuple[str, str] | None = None) -> RegistryClient:
    keychain = Keychain([(registry.host, Credentials(*creds))]) if creds else Keychain()
    plain = [registry.host] if registry.scheme == "http" else []
    return RegistryClient(keychain=keychain, plain_http=plain, verify=registry.verify)


def test_a_bundle_pushed_is_pulled_back_whole_by_tag_and_by_digest(registry: Registry) -> None:
    bundle = builtin_bundle()
    ref = f"{registry.host}/cudasched/knowledge:v1"
    with client(registry) as c:
        digest = push_bundle(c, ref, bundle)
        by_tag = pull_bundle(c, ref)
        by_digest = pull_bundle(c, f"{registry.host}/cudasched/knowledge@{digest}")
        held = pull_bundle(c, ref, held=digest)
    assert digest == bundle.digest
    assert by_tag is not None and by_digest is not None and held is None
    assert by_tag.bundle == bundle and by_tag.digest == digest
    assert by_tag.pinned == f"{registry.host}/cudasched/knowledge@{digest}"
    assert by_digest.bundle.tables == bundle.tables and by_tag.signatures == ()
    assert (
        knowledge_of(Sourced(by_tag.bundle, by_tag.pinned, digest)).kb.provenance.digest == digest
    )


def test_the_tag_moves_to_the_next_bundle(registry: Registry) -> None:
    ref = f"{registry.host}/cudasched/moving:stable"
    with client(registry) as c:
        first = push_bundle(c, ref, builtin_bundle())
        second = push_bundle(c, ref, planted(["new-release"]))
        pulled = pull_bundle(c, ref, held=first)
    assert pulled is not None and pulled.digest == second != first
    kb = knowledge_of(Sourced(pulled.bundle, pulled.pinned, pulled.digest)).kb
    assert str(kb.drivers.latest_release(610)) == NEW_610


def test_a_signed_bundle_verifies_only_with_a_trusted_key(registry: Registry) -> None:
    private, public = ed25519_pair()
    _, stranger = ed25519_pair()
    bundle = builtin_bundle()
    signature = load_private_key(private, "key").sign(bundle.digest)
    ref = f"{registry.host}/cudasched/signed:v1"
    with client(registry) as c:
        push_bundle(c, ref, bundle, [signature])
        trusted = load_public_key(public, "pub")
        pulled = pull_bundle(c, ref, trusted=[trusted])
        with pytest.raises(BundleError) as caught:
            pull_bundle(c, ref, trusted=[load_public_key(stranger, "other")])
        unsigned_ref = f"{registry.host}/cudasched/unsigned:v1"
        push_bundle(c, unsigned_ref, planted(["image-row"]))
        with pytest.raises(BundleError, match="not signed, and signatures are required"):
            pull_bundle(c, unsigned_ref, trusted=[trusted])
        tag = signature_tag(bundle.digest)
        body, _, _ = c.read_manifest(repository_of(ref), tag, c.keychain, c.deadline())
    assert pulled is not None and pulled.signed_by == trusted and pulled.signatures == (signature,)
    assert caught.value.reason == "signature" and "not a trusted key" in str(caught.value)
    doc = orjson.loads(body)
    assert doc["subject"]["digest"] == bundle.digest
    assert doc["artifactType"] == "application/vnd.cudasched.knowledge.signature.v1"


def test_a_second_signer_keeps_the_first_signature(registry: Registry) -> None:
    bundle = planted(["new-gpu"])
    keys = [ed25519_pair(), ed25519_pair()]
    signatures = [load_private_key(k, "k").sign(bundle.digest) for k, _ in keys]
    ref = f"{registry.host}/cudasched/two-signers:v1"
    with client(registry) as c:
        push_bundle(c, ref, bundle, signatures[:1])
        push_bundle(c, ref, bundle, signatures[1:])
        pulled = pull_bundle(c, ref, trusted=[load_public_key(keys[0][1], "first")])
    assert pulled is not None and set(pulled.signatures) == set(signatures)


def test_a_corrupted_blob_is_refused_by_its_digest(registry: Registry) -> None:
    bundle = planted(["toolkit-minimum"], version="corrupt.1")
    ref = f"{registry.host}/cudasched/corrupt:v1"
    with client(registry) as c:
        push_bundle(c, ref, bundle)
        layer = next(d for d in bundle.layers() if d.title == "toolkits.yaml")
        blob = registry.blob_file(layer.digest)
        data = blob.read_bytes()
        blob.write_bytes(data.replace(b"615.20.01", b"515.20.01"))
        with pytest.raises(BundleError) as caught:
            pull_bundle(c, ref)
    assert caught.value.reason == "digest"
    assert "does not match its digest" in str(caught.value)


def test_a_bundle_that_fails_a_check_is_pulled_but_refused(registry: Registry) -> None:
    tables = builtin_tables()
    tables["toolkits.yaml"]["releases"][0]["min_driver"] = "not a driver"
    ref = f"{registry.host}/cudasched/invalid:v1"
    with client(registry) as c:
        push_bundle(c, ref, bundle_of(tables, version="invalid.1"))
        pulled = pull_bundle(c, ref)
    assert pulled is not None
    with pytest.raises(BundleError) as caught:
        knowledge_of(Sourced(pulled.bundle, pulled.pinned, pulled.digest))
    assert caught.value.reason == "content"


def test_an_image_is_not_a_bundle(registry: Registry) -> None:
    registry.push_image("ml/llm", "v1", ["CUDA_VERSION=12.4.1"])
    with client(registry) as c, pytest.raises(BundleError) as caught:
        pull_bundle(c, f"{registry.host}/ml/llm:v1")
    assert caught.value.reason == "format" and "artifactType" in str(caught.value)


def test_a_missing_bundle_is_a_registry_error(registry: Registry) -> None:
    with client(registry) as c, pytest.raises(RegistryError) as caught:
        pull_bundle(c, f"{registry.host}/cudasched/nothing:v1")
    assert caught.value.kind == "not-found"


def test_a_large_blob_is_uploaded_in_chunks(registry: Registry) -> None:
    data = bytes(range(256)) * 1000
    repo = repository_of(f"{registry.host}/cudasched/chunks:v1")
    with client(registry) as c:
        up = Uploader(c, repo, c.keychain, c.deadline(), chunk_bytes=64 * 1024)
        digest = up.push_blob(data)
        again = up.push_blob(data)  # the repository has it: nothing is sent
        read = c.read_blob(repo, digest, c.keychain, c.deadline(), len(data))
    assert digest == again == "sha256:" + hashlib.sha256(data).hexdigest()
    assert read == data


def test_a_digest_reference_must_be_the_bundles(registry: Registry) -> None:
    with client(registry) as c, pytest.raises(BundleError, match="the bundle's digest is"):
        push_bundle(c, f"{registry.host}/cudasched/pinned@sha256:{'0' * 64}", builtin_bundle())


def test_push_asks_for_a_push_token_and_pull_does_with_none(tmp_path: Path) -> None:
    issuer = TokenIssuer(tmp_path)
    server = TokenServer(issuer, {"publisher": "secret"})
    with server.running(), run_registry(token=server) as registry:
        ref = f"{registry.host}/cudasched/token:v1"
        with client(registry, ("publisher", "secret")) as c:
            digest = push_bundle(c, ref, builtin_bundle())
        with client(registry) as anonymous:
            pulled = pull_bundle(anonymous, ref)
            with pytest.raises(RegistryError) as caught:
                push_bundle(anonymous, f"{registry.host}/cudasched/token:v2", builtin_bundle())
    assert pulled is not None and pulled.digest == digest
    assert caught.value.kind == "unauthorized"
    scopes = [r for r in server.requests if "push" in r]
    assert scopes, "a push token was asked for"


def test_basic_auth_over_tls(tmp_path: Path) -> None:
    with run_registry(tls=True, basic={"publisher": "secret"}) as registry:
        ref = f"{registry.host}/cudasched/basic:v1"
        with client(registry, ("publisher", "secret")) as c:
            digest = push_bundle(c, ref, builtin_bundle())
            pulled = pull_bundle(c, ref)
    assert pulled is not None and pulled.digest == digest


def test_the_layout_of_what_was_pushed_is_the_bundles(registry: Registry) -> None:
    bundle = builtin_bundle()
    ref = f"{registry.host}/cudasched/layout:v1"
    with client(registry) as c:
        push_bundle(c, ref, bundle)
        body, media, _ = c.read_manifest(repository_of(ref), "v1", c.keychain, c.deadline())
    layout = read_layout(body, ref)
    titles: list[Any] = [d.title for d in layout.layers]
    assert media == "application/vnd.oci.image.manifest.v1+json"
    assert titles == list(bundle.meta.tables) and body == bundle.manifest_bytes()
