"""The webhook's background resolver: whatever ends a resolution, the answer is cached, so a
registry is asked once per image per ``error_ttl``, never at every review."""

from __future__ import annotations

import logging

import pytest

from cudasched.registry.auth import Credentials, Keychain
from cudasched.registry.client import RegistryClient
from cudasched.registry.configcache import ConfigCache
from cudasched.registry.resolver import BackgroundResolver
from tests.support.registry import hostile_registry


def test_an_unexpected_failure_is_a_cached_failure(caplog: pytest.LogCaptureFixture) -> None:
    """A registry that redirects to ``http://[zz`` makes the URL parser raise ``ValueError``,
    which no part of the client expects. The worker must still answer: a failure of kind
    ``internal``, cached like any other (the registry is not asked again while it lasts),
    logged once with the exception's type and never with the credentials in use."""
    asked: list[str] = []
    with hostile_registry(307, {"location": "http://[zz"}, asked) as host:
        keychain = Keychain([(host, Credentials("robot", "t0ps3cret"))])
        client = RegistryClient(keychain=keychain, plain_http=[host])
        resolver = BackgroundResolver(client, ConfigCache(), budget_seconds=0)
        image = f"{host}/ml/llm:1"
        caplog.set_level(logging.DEBUG, logger="cudasched")
        try:
            first = resolver.config_for(image)
            idle = resolver.wait_idle(20)
            answers = [resolver.config_for(image) for _ in range(3)]
            resolver.wait_idle(20)
        finally:
            resolver.close()
    assert (first, idle) == (None, True)
    assert [(a.ok, a.error_kind) for a in answers if a is not None] == [(False, "internal")] * 3
    assert asked == ["/v2/ml/llm/manifests/1"]
    logged = [r.getMessage() for r in caplog.records if image in r.getMessage()]
    assert len(logged) == 1 and "ValueError" in logged[0]
    assert [m for m in caplog.messages if "t0ps3cret" in m] == []
