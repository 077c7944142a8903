"""A published bundle followed through a real registry: a new fact picked up at the next
check, a corrupted or schema-invalid bundle refused with the last good one kept, and the
knowledge in use readable at once while a check hangs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from cudasched.knowledge.bundle import builtin_bundle
from cudasched.knowledge.bundlecheck import BundleKnowledge, Sourced, builtin_source, knowledge_of
from cudasched.knowledge.following import FollowOutcome, FollowResult
from cudasched.knowledge.signing import load_private_key, load_public_key
from cudasched.registry.bundles import push_bundle
from cudasched.registry.client import Limits, RegistryClient
from cudasched.registry.following import BundleFollower
from cudasched.vocab.errors import InputError
from tests.support.bundles import (
    NEW_610,
    builtin_tables,
    bundle_of,
    ed25519_pair,
    planted,
    release_overlay,
)
from tests.support.registry import Registry, hanging_server, run_registry

BUILTIN = knowledge_of(builtin_source())


@pytest.fixture(scope="module")
def registry() -> Iterator[Registry]:
    with run_registry() as found:
        yield found


def _client(host: str, **limits: float) -> RegistryClient:
    return RegistryClient(plain_http=[host], limits=Limits(**limits) if limits else None)


def _release(knowledge: BundleKnowledge) -> str:
    return str(knowledge.kb.drivers.latest_release(610))


def test_the_follower_picks_up_a_new_fact_and_keeps_the_last_good_bundle(
    registry: Registry,
) -> None:
    ref = f"{registry.host}/cudasched/follow:stable"
    outcomes: list[FollowOutcome] = []
    with _client(registry.host) as c:
        follower = BundleFollower(ref, c, BUILTIN, on_outcome=outcomes.append)
        push_bundle(c, ref, builtin_bundle())
        first = follower.check()
        push_bundle(c, ref, planted(["new-release", "image-row"]))
        second = follower.check()
        third = follower.check()
        tables = builtin_tables()
        tables["toolkits.yaml"]["releases"][0]["min_driver"] = "not a driver"
        push_bundle(c, ref, bundle_of(tables, version="broken.1"))
        refused = follower.check()
        good = planted(["toolkit-minimum"], version="2026.10.01")
        push_bundle(c, ref, good)
        layer = next(d for d in good.layers() if d.title == "toolkits.yaml")
        blob = registry.blob_file(layer.digest)
        blob.write_bytes(blob.read_bytes().replace(b"615.20.01", b"515.20.01"))
        corrupted = follower.check()
    assert first.result is FollowResult.UPDATED
    assert second.result is FollowResult.UPDATED and _release(follower.current) == NEW_610
    match = follower.current.images.cuda_for_image("registry.example.com/team/llm:cu12.6")
    assert match is not None and str(match.cuda) == "12.6", "the new image row answers"
    assert third.result is FollowResult.UNCHANGED
    assert refused.result is FollowResult.REFUSED and refused.reason == "content"
    assert corrupted.result is FollowResult.REFUSED and corrupted.reason == "digest"
    assert _release(follower.current) == NEW_610, "the last good bundle is kept"
    assert follower.state.failures == 2 and "still answering with knowledge" in corrupted.message
    assert [o.result for o in outcomes] == [
        FollowResult.UPDATED,
        FollowResult.UPDATED,
        FollowResult.UNCHANGED,
        FollowResult.REFUSED,
        FollowResult.REFUSED,
    ]


def test_a_pinned_digest_never_moves(registry: Registry) -> None:
    ref = f"{registry.host}/cudasched/pinned:stable"
    with _client(registry.host) as c:
        digest = push_bundle(c, ref, planted(["new-gpu"]))
        follower = BundleFollower(f"{registry.host}/cudasched/pinned@{digest}", c, BUILTIN)
        assert follower.check().result is FollowResult.UPDATED
        push_bundle(c, ref, planted(["new-release"]))
        again = follower.check()
    assert again.result is FollowResult.UNCHANGED and follower.state.digest == digest
    assert follower.current.kb.gpu("NVIDIA Z100") is not None


def test_signatures_and_overlays_apply_to_every_bundle(registry: Registry) -> None:
    private, public = ed25519_pair()
    signer = load_private_key(private, "k")
    ref = f"{registry.host}/cudasched/signed-follow:stable"
    bundle = planted(["new-gpu"])
    overlay = Sourced(release_overlay("610.90.01"), "overlay")
    with _client(registry.host) as c:
        push_bundle(c, ref, bundle)  # not signed yet
        follower = BundleFollower(
            ref, c, BUILTIN, trusted=[load_public_key(public, "p")], overlays=[overlay]
        )
        unsigned = follower.check()
        push_bundle(c, ref, bundle, [signer.sign(bundle.digest)])
        signed = follower.check()
    assert unsigned.result is FollowResult.REFUSED and unsigned.reason == "signature"
    assert signed.result is FollowResult.UPDATED
    assert _release(follower.current) == "610.90.01", "the overlay is merged over the bundle"
    assert follower.current.provenance.overlays == ("local.1 (overlay)",)


def test_an_unreachable_registry_keeps_the_knowledge_and_never_blocks_a_reader() -> None:
    with hanging_server() as host, _client(host, deadline_seconds=2.0, request_seconds=2.0) as c:
        follower = BundleFollower(f"{host}/cudasched/knowledge:stable", c, BUILTIN)
        checking = threading.Thread(target=follower.check)
        checking.start()
        time.sleep(0.2)  # the check hangs on the registry now
        started = time.monotonic()
        current = follower.current
        waited = time.monotonic() - started
        checking.join(10)
    assert current is BUILTIN and waited < 0.05
    assert follower.state.failures == 1 and follower.state.reason in ("timeout", "unreachable")


def test_the_thread_checks_every_interval(registry: Registry) -> None:
    ref = f"{registry.host}/cudasched/interval:stable"
    with _client(registry.host) as c:
        push_bundle(c, ref, planted(["new-gpu"]))
        follower = BundleFollower(ref, c, BUILTIN, interval_seconds=0.2)
        follower.start()
        try:
            _wait(lambda: follower.current is not BUILTIN)
            push_bundle(c, ref, planted(["new-release"]))
            _wait(lambda: _release(follower.current) == NEW_610)
        finally:
            follower.stop()
    assert follower.state.healthy and _release(follower.current) == NEW_610


def _wait(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end and not condition():
        time.sleep(0.05)
    assert condition(), "not within the interval"


def test_a_reference_that_does_not_parse_is_refused_at_once() -> None:
    with RegistryClient() as c, pytest.raises(InputError):
        BundleFollower("not a reference!", c, BUILTIN)
    with RegistryClient() as c, pytest.raises(InputError, match="more than 0 seconds"):
        BundleFollower("registry.example.com/k:v1", c, BUILTIN, interval_seconds=0)


def test_a_failing_listener_does_not_end_the_following(registry: Registry) -> None:
    ref = f"{registry.host}/cudasched/listener:stable"
    calls: list[FollowResult] = []

    def broken(outcome: FollowOutcome) -> None:
        calls.append(outcome.result)
        raise RuntimeError("the listener's own bug")

    with _client(registry.host) as c:
        push_bundle(c, ref, planted(["new-gpu"]))
        follower = BundleFollower(ref, c, BUILTIN, interval_seconds=0.1, on_outcome=broken)
        follower.start()
        try:
            _wait(lambda: len(calls) >= 3)
        finally:
            follower.stop()
    assert calls[0] is FollowResult.UPDATED and set(calls[1:]) == {FollowResult.UNCHANGED}
    assert follower.current is not BUILTIN
