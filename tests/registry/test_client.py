"""The registry client against the real distribution server (Debian's docker-registry) on
127.0.0.1: TLS, basic and token auth, OCI and Docker media types, a multi-arch index, a tag
that moves, and the failures (404, wrong credentials, a registry that hangs, an oversized
manifest, a redirect to blob storage)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from cudasched.knowledge.imageconfig import config_cuda
from cudasched.registry.auth import Credentials, Keychain
from cudasched.registry.client import Limits, Platform, RegistryClient
from cudasched.registry.configcache import ConfigCache
from cudasched.registry.distribution import RegistryError, repository_of
from cudasched.registry.resolver import resolve_one
from cudasched.vocab.errors import InputError
from cudasched.vocab.versions import parse_cuda
from tests.support.registry import (
    OCI_CONFIG,
    OCI_MANIFEST,
    Registry,
    TokenIssuer,
    TokenServer,
    blob_storage,
    hanging_server,
    hostile_registry,
    redirecting_front,
    run_registry,
    scripted_registry,
)

REQUIRE_126 = "cuda>=12.6 brand=tesla,driver>=470,driver<471"
CUDA_126 = ["PATH=/usr/bin", "CUDA_VERSION=12.6.3", f"NVIDIA_REQUIRE_CUDA={REQUIRE_126}"]
CUDA_128 = ["CUDA_VERSION=12.8.1", "NVIDIA_REQUIRE_CUDA=cuda>=12.8"]
USERS = {"alice": "s3cret"}


@pytest.fixture(scope="module")
def tls_basic() -> Iterator[Registry]:
    with run_registry(tls=True, basic=USERS) as registry:
        yield registry


@pytest.fixture(scope="module")
def plain() -> Iterator[Registry]:
    with run_registry() as registry:
        yield registry


def client(registry: Registry, creds: tuple[str, str] | None = None, **kw: Any) -> RegistryClient:
    keychain = Keychain([(registry.host, Credentials(*creds))]) if creds else Keychain()
    return RegistryClient(
        keychain=keychain,
        plain_http=[registry.host] if registry.scheme == "http" else [],
        verify=registry.verify,
        **kw,
    )


def test_multi_arch_oci_index_over_tls_with_basic_auth(tls_basic: Registry) -> None:
    amd = tls_basic.push_image("ml/llm", None, CUDA_126, labels={"team": "ml"})
    arm = tls_basic.push_image("ml/llm", None, CUDA_128, arch="arm64")
    index = tls_basic.push_index("ml/llm", "7", {"amd64": amd, "arm64": arm})
    image = f"{tls_basic.host}/ml/llm:7"
    with client(tls_basic, ("alice", "s3cret")) as c:
        x86 = c.resolve(image)
        aarch = c.resolve(image, Platform.parse("linux/arm64"))
        by_digest = c.resolve(f"{tls_basic.host}/ml/llm@{index}", Platform.parse("linux/arm64"))
    assert (x86.digest, x86.platform) == (amd, "linux/amd64")
    assert x86.env["NVIDIA_REQUIRE_CUDA"] == REQUIRE_126 and x86.labels == {"team": "ml"}
    assert config_cuda(x86) == (parse_cuda("12.6.3"), "CUDA_VERSION=12.6.3")
    assert (aarch.digest, aarch.platform) == (arm, "linux/arm64")
    assert config_cuda(aarch)[0] == parse_cuda("12.8.1")
    assert by_digest.digest == arm
    with client(tls_basic, ("alice", "s3cret")) as c, pytest.raises(RegistryError) as missing:
        c.resolve(image, Platform.parse("linux/ppc64le"))
    assert missing.value.kind == "no-platform" and "linux/amd64, linux/arm64" in str(missing.value)


def test_docker_media_types_anonymous_plain_http(plain: Registry) -> None:
    amd = plain.push_image("vllm/vllm-openai", None, CUDA_128, docker=True)
    plain.push_index("vllm/vllm-openai", "v0.9.0", {"amd64": amd}, docker=True)
    single = plain.push_image("tools/plain", "1", CUDA_126, docker=True)
    with client(plain) as c:
        listed = c.resolve(f"{plain.host}/vllm/vllm-openai:v0.9.0")
        direct = c.resolve(f"{plain.host}/tools/plain:1")
    assert listed.digest == amd and config_cuda(listed)[0] == parse_cuda("12.8.1")
    assert direct.digest == single and direct.env["CUDA_VERSION"] == "12.6.3"


def test_an_image_without_cuda_env(plain: Registry) -> None:
    plain.push_image("web/frontend", "2", ["PATH=/usr/bin", "LANG=C.UTF-8"])
    with client(plain) as c:
        config = c.resolve(f"{plain.host}/web/frontend:2")
    assert config.ok and config.env == {"PATH": "/usr/bin", "LANG": "C.UTF-8"}
    assert config_cuda(config) == (None, "")


def test_latest_moves_to_a_new_digest(plain: Registry) -> None:
    now = [0.0]
    cache = ConfigCache(tag_ttl=60, clock=lambda: now[0])
    image = f"{plain.host}/ml/moving"  # no tag: latest, as a runtime pulls it
    first = plain.push_image("ml/moving", "latest", CUDA_126)
    with client(plain) as c:
        cache.put(image, "linux/amd64", c.resolve(image))
        second = plain.push_image("ml/moving", "latest", CUDA_128)
        moved = c.resolve(image)
    assert first != second and moved.digest == second
    remembered = cache.get(image, "linux/amd64")
    assert remembered is not None and remembered.digest == first  # within the tag's TTL
    now[0] = 61.0
    assert cache.get(image, "linux/amd64") is None  # a moved tag is asked again


def test_not_found_and_wrong_credentials(tls_basic: Registry) -> None:
    tls_basic.push_image("ml/present", "1", CUDA_126)
    with client(tls_basic, ("alice", "s3cret")) as c, pytest.raises(RegistryError) as missing:
        c.resolve(f"{tls_basic.host}/ml/absent:1")
    assert missing.value.kind == "not-found" and "HTTP 404" in str(missing.value)
    for creds in (("alice", "wrong"), None):
        with client(tls_basic, creds) as c, pytest.raises(RegistryError) as denied:
            c.resolve(f"{tls_basic.host}/ml/present:1")
        assert denied.value.kind == "unauthorized", creds


def test_token_auth_401_then_token(tmp_path: Any) -> None:
    tokens = TokenServer(TokenIssuer(tmp_path), USERS)
    with tokens.running(), run_registry(token=tokens) as registry:
        digest = registry.push_image("public/cuda", "12.6", CUDA_126)
        tokens.requests.clear()
        image = f"{registry.host}/public/cuda:12.6"
        with client(registry) as c:  # anonymous pull token
            assert c.resolve(image).digest == digest
            assert c.resolve(image).digest == digest
        # One token for both resolutions (kept per repository until it expires).
        assert (
            len(tokens.requests) == 1
            and "scope=repository%3Apublic%2Fcuda%3Apull" in (tokens.requests[0])
        )
        with client(registry, ("alice", "wrong")) as c, pytest.raises(RegistryError) as denied:
            c.resolve(image)
        assert denied.value.kind == "unauthorized" and "given credentials" in str(denied.value)
        tokens.anonymous_pull = False
        with client(registry) as c, pytest.raises(RegistryError) as anonymous:
            c.resolve(image)
        assert "anonymous access" in str(anonymous.value)
        with client(registry, ("alice", "s3cret")) as c:
            assert c.resolve(image).digest == digest


def test_a_registry_that_hangs_is_bounded_in_time() -> None:
    limits = Limits(deadline_seconds=0.5, request_seconds=0.3, retries=0)
    with (
        hanging_server() as host,
        RegistryClient(plain_http=[host], limits=limits) as c,
        pytest.raises(RegistryError) as hung,
    ):
        c.resolve(f"{host}/ml/llm:7")
    assert hung.value.kind == "timeout"


def test_an_oversized_manifest_is_refused(plain: Registry) -> None:
    plain.push_image("ml/huge", "1", CUDA_126, annotations={"padding": "x" * 8192})
    with (
        client(plain, limits=Limits(max_manifest_bytes=4096)) as c,
        pytest.raises(RegistryError) as big,
    ):
        c.resolve(f"{plain.host}/ml/huge:1")
    assert big.value.kind == "too-large" and "4096" in str(big.value)
    with client(plain) as c:  # the default limit reads it
        assert c.resolve(f"{plain.host}/ml/huge:1").env["CUDA_VERSION"] == "12.6.3"


def test_a_redirect_to_blob_storage_is_followed(plain: Registry) -> None:
    digest = plain.push_image("ml/redirected", "1", CUDA_128)
    with (
        redirecting_front(plain.host) as (front, redirected),
        RegistryClient(plain_http=[front, plain.host]) as c,
    ):
        config = c.resolve(f"{front}/ml/redirected:1")
    assert config.digest == digest and config.env["CUDA_VERSION"] == "12.8.1"
    assert len(redirected) == 1 and "/blobs/sha256:" in redirected[0]
    with (
        redirecting_front(plain.host) as (front, _),
        RegistryClient(plain_http=[front, plain.host], limits=Limits(max_redirects=0)) as c,
        pytest.raises(RegistryError) as too_many,
    ):
        c.resolve(f"{front}/ml/redirected:1")
    assert "more than 0 redirects" in str(too_many.value)


def test_credentials_never_follow_a_redirect_to_blob_storage() -> None:
    """A registry that wants Basic auth redirects its blobs to storage on another host: the
    manifest is read with the credentials, the blob without them (the storage saw no
    ``Authorization``), and the config is read."""
    with run_registry(basic=USERS) as locked:
        digest = locked.push_image("ml/private", "1", CUDA_126)
        with (
            blob_storage(locked) as (storage, seen),
            redirecting_front(locked.host, blobs_at=storage) as (front, redirected),
        ):
            keychain = Keychain([(front, Credentials(*next(iter(USERS.items()))))])
            with RegistryClient(keychain=keychain, plain_http=[front, storage]) as c:
                config = c.resolve(f"{front}/ml/private:1")
    assert config.digest == digest and len(redirected) == 1
    assert len(seen) == 1 and "authorization" not in seen[0]


def test_a_token_got_with_a_workloads_credentials_serves_only_them(tmp_path: Any) -> None:
    """Token auth without anonymous pulls: a look-up with one namespace's pull secret gets a
    token; the same client's next look-up without that secret is refused, not handed the
    cached token (tokens are kept per credential holder)."""
    tokens = TokenServer(TokenIssuer(tmp_path), USERS, anonymous_pull=False)
    with tokens.running(), run_registry(token=tokens) as registry:
        digest = registry.push_image("private/llm", "1", CUDA_126)
        image = f"{registry.host}/private/llm:1"
        secret = Keychain([(registry.host, Credentials(*next(iter(USERS.items()))))])
        with client(registry) as c:
            found = c.resolve(image, keychain=secret).digest
            with pytest.raises(RegistryError) as refused:
                c.resolve(image)
            again = c.resolve(image, keychain=secret).digest
    assert found == again == digest
    assert refused.value.kind == "unauthorized"


def test_a_registry_host_is_a_host_and_nothing_more() -> None:
    """The host of an image reference becomes the authority of a URL: a ``#``, ``?``, ``%``,
    ``\\`` or ``_`` in it is not a registry name (distribution/reference's domain grammar),
    and would send the GET to a path outside the distribution API (``https://svc.internal#/v2/
    ...`` asks for ``/``). Such references are refused before any request; real hosts, ports
    and IPv6 literals still resolve to repositories."""
    odd = (
        "svc.internal#/ml/llm:1",
        "svc.internal?/ml/llm:1",
        "svc.internal%2f/ml/llm",
        "svc.internal\\/ml/llm",
        "a_b.internal/ml/llm",
        "svc.internal:99x/ml/llm",
    )
    refused = []
    for image in odd:
        with pytest.raises(InputError) as bad:
            repository_of(image)
        refused.append(str(bad.value))
    assert [m for m in refused if "registry host" not in m] == []
    hosts = [repository_of(i).host for i in ("localhost:5000/a", "[::1]:5000/a", "nvcr.io/n/t")]
    assert hosts == ["localhost:5000", "[::1]:5000", "nvcr.io"]


def test_a_url_httpx_cannot_build_is_a_bad_answer_not_an_escape() -> None:
    """A registry names the token realm and the redirect targets: a realm httpx cannot make a
    URL of (``https://[zz]/token``) raises ``httpx.InvalidURL``, which is neither a transport
    error nor a timeout. It must end the look-up as a RegistryError (cached, counted, logged
    like any bad answer), not escape the resolver's worker, which then caches nothing and
    asks the registry again at every review. (A redirect there fails as unreachable.)"""
    answers = [
        (401, {"www-authenticate": 'Bearer realm="https://[zz]/token",service="r"'}),
        (307, {"location": "http://[zz]/v2/ml/llm/manifests/1"}),
    ]
    outcomes = []
    for status, headers in answers:
        with hostile_registry(status, headers) as host, RegistryClient(plain_http=[host]) as c:
            config, outcome = resolve_one(c, f"{host}/ml/llm:1", Platform())
        outcomes.append((outcome, config.ok))
    assert outcomes == [("unauthorized", False), ("unreachable", False)]


def test_a_config_whose_env_is_not_a_list_has_no_env(plain: Registry) -> None:
    """An image config is the registry's JSON: ``Env`` should be a list of strings; a number
    (or any other non-list) is read as no environment, not a TypeError out of the client,
    which ``resolve_one`` does not turn into an answer (the resolver's worker would fail
    and cache nothing, and every review would ask the registry again)."""
    outcomes = []
    for tag, inner in (("env-int", {"Env": 5}), ("env-map", {"Env": {"CUDA_VERSION": "12.8"}})):
        config = orjson.dumps({"architecture": "amd64", "os": "linux", "config": inner})
        manifest = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {
                "mediaType": OCI_CONFIG,
                "digest": plain.push_blob("ml/odd", config),
                "size": len(config),
            },
            "layers": [],
        }
        plain.push_manifest("ml/odd", tag, manifest)
        with client(plain) as c:
            found, outcome = resolve_one(c, f"{plain.host}/ml/odd:{tag}", Platform())
        outcomes.append((outcome, dict(found.env)))
    assert outcomes == [("ok", {}), ("ok", {})]


def test_a_digest_a_registry_names_must_be_a_digest_before_it_is_a_path() -> None:
    """The digests of an index's manifests and of a manifest's config come from the registry
    and become URL path segments: ``sha256:x/../../../admin`` (or a ``?``, ``#``, ``%2f``) would
    send our request, with our token, to any path of that host. Each is checked against the
    OCI digest grammar (a registered algorithm's encoded form: sha256 is 64 lowercase hex)
    before it is used; the look-up fails naming the value, and nothing outside the manifest
    asked for is requested."""
    odd = (
        "sha256:../../../../admin/" + "a" * 64,
        "sha256:" + "a" * 63 + "?x=1",
        "sha256:" + "A" * 64,
        "sha256:" + "a" * 64 + "%2f..",
        "sha256:" + "a" * 64 + "#",
        "md5:" + "a" * 32,
        "../../token",
    )
    outcomes = []
    for digest in odd:
        index = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": OCI_MANIFEST,
                    "digest": digest,
                    "size": 1,
                    "platform": {"os": "linux", "architecture": "amd64"},
                }
            ],
        }
        manifest = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": digest, "size": 1},
            "layers": [],
        }
        answers = {"/v2/ml/llm/manifests/index": index, "/v2/ml/llm/manifests/single": manifest}
        with scripted_registry(answers) as (host, asked), RegistryClient(plain_http=[host]) as c:
            for tag in ("index", "single"):
                config, outcome = resolve_one(c, f"{host}/ml/llm:{tag}", Platform())
                outcomes.append((outcome, repr(digest) in config.error, asked[-1]))
    expected = [("bad-response", True, f"/v2/ml/llm/manifests/{t}") for t in ("index", "single")]
    assert outcomes == expected * len(odd)
