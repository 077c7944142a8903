"""Image facts shared through the cluster (issue 29 item 3): what one replica reads of an image
is kept in its digest's ImageFacts object, so another replica, or a restart, does not read its
layers again, and a person's override reaches every replica; a cluster that refuses costs the
sharing, never an answer. The layers come from the real registry; the API is a small in-memory
one with the API server's answers (404, 409, 403), since the e2e suite runs the real one
(tests/e2e/test_e2e_imagefacts.py)."""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from cudasched.knowledge.imagefacts import facts_name
from cudasched.registry.client import Platform, RegistryClient
from cudasched.registry.configcache import ConfigCache
from cudasched.registry.factstore import SharedFacts
from cudasched.registry.layerreads import LayerReads
from cudasched.registry.layers import LayerBudget
from cudasched.registry.resolver import BackgroundResolver
from tests.support.apierror import ApiError
from tests.support.layers import RUNNERS, layer, push_layered
from tests.support.registry import Registry, run_registry
from tests.support.versions import cv

BASE = layer({"etc/os-release": b"ID=ubuntu\n"})


class ImageFactsApi:
    """ImageFacts objects in memory, answered as the API server answers: a missing object is
    404, a second create 409, a status patch merges into ``status`` only; ``refuse`` makes every
    call fail with that status (no RBAC, no CRD)."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.calls: list[str] = []
        self.refuse: int | None = None

    def client(self) -> ImageFactsApi:
        return self

    def _check(self, verb: str) -> None:
        self.calls.append(verb)
        if self.refuse is not None:
            raise ApiError(self.refuse)

    async def get(self, resource: Any, name: str) -> dict[str, Any]:
        self._check("get")
        if name not in self.objects:
            raise ApiError(404)
        return copy.deepcopy(self.objects[name])

    async def create(self, obj: dict[str, Any], field_manager: str | None = None) -> dict[str, Any]:
        self._check("create")
        name = obj["metadata"]["name"]
        if name in self.objects:
            raise ApiError(409)
        made = {k: copy.deepcopy(v) for k, v in obj.items() if k != "status"}
        self.objects[name] = made
        return copy.deepcopy(made)

    async def patch(
        self, resource: Any, name: str, obj: dict[str, Any], **kw: Any
    ) -> dict[str, Any]:
        self._check("patch")
        assert resource.__name__ == "ImageFactsStatus"  # the status subresource
        if name not in self.objects:
            raise ApiError(404)
        self.objects[name]["status"] = {**self.objects[name].get("status", {}), **obj["status"]}
        return copy.deepcopy(self.objects[name])

    async def close(self) -> None:
        return None


class CountedLayers:
    def __init__(self) -> None:
        self.reads: list[str] = []

    def layer_read(self, outcome: str, seconds: float, fetched: int) -> None:
        self.reads.append(outcome)

    def layer_reads_in_flight(self, count: int) -> None:
        return None


@pytest.fixture(scope="module")
def registry() -> Iterator[Registry]:
    with run_registry() as running:
        yield running


def replica(registry: Registry, api: ImageFactsApi) -> tuple[BackgroundResolver, CountedLayers]:
    """One webhook replica's resolver: its own caches and layer reads, the cluster's facts."""
    counted = CountedLayers()
    client = RegistryClient(plain_http=[registry.host])
    layers = LayerReads(client, Platform(), LayerBudget(), observer=counted)
    shared = SharedFacts(api.client, ttl_seconds=300)
    return BackgroundResolver(client, ConfigCache(), layers=layers, shared=shared), counted


def settled(resolver: BackgroundResolver, image: str) -> Any:
    resolver.config_for(image)
    assert resolver.wait_idle(30)
    return resolver.config_for(image)


def test_replicas_and_restarts_do_not_read_the_layers_again(registry: Registry) -> None:
    digest = push_layered(registry, "acme/ollama-build", "0.12.3", [BASE, RUNNERS])
    image = f"{registry.host}/acme/ollama-build:0.12.3"
    api = ImageFactsApi()
    first, first_reads = replica(registry, api)
    try:
        found = settled(first, image)
    finally:
        first.close()
    assert found.contents.cuda == cv("12.8") and first_reads.reads == ["answered"]
    kept = api.objects[facts_name(digest)]
    assert kept["status"]["contents"]["cuda"] == "12.8"
    assert kept["status"]["references"] == [image]
    # A second replica (or this one restarted): the facts come from the cluster.
    second, second_reads = replica(registry, api)
    try:
        again = settled(second, image)
    finally:
        second.close()
    assert again.contents.cuda == cv("12.8") and second_reads.reads == []
    assert api.calls.count("create") == 1


def test_a_persons_override_reaches_every_replica_and_reads_no_layer(registry: Registry) -> None:
    digest = push_layered(registry, "ml/corrected", "1", [BASE, RUNNERS])
    api = ImageFactsApi()
    api.objects[facts_name(digest)] = {
        "apiVersion": "cudasched.io/v1alpha1",
        "kind": "ImageFacts",
        "metadata": {"name": facts_name(digest)},
        "spec": {"override": {"cuda": "13.0", "reason": "needs the cuda_v13 runner"}},
    }
    resolver, counted = replica(registry, api)
    try:
        found = settled(resolver, f"{registry.host}/ml/corrected:1")
    finally:
        resolver.close()
    assert found.correction is not None and found.correction.cuda == cv("13.0")
    assert counted.reads == []  # corrected: its layers are not read
    status = api.objects[facts_name(digest)]["status"]
    assert status["digest"] == digest and "contents" not in status


def test_a_cluster_that_refuses_costs_the_sharing_not_the_answer(
    registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    push_layered(registry, "ml/refused", "1", [BASE, RUNNERS])
    api = ImageFactsApi()
    api.refuse = 403
    resolver, counted = replica(registry, api)
    caplog.set_level(logging.WARNING, logger="cudasched.registry.factstore")
    try:
        found = settled(resolver, f"{registry.host}/ml/refused:1")
    finally:
        resolver.close()
    assert found.contents.cuda == cv("12.8") and counted.reads == ["answered"]
    # Asked once, then paused: one warning, no request at every resolution.
    assert api.calls == ["get"]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "HTTP 403" in warnings[0] and "not shared for 300s" in warnings[0]


def test_nothing_is_written_again_when_the_cluster_already_says_it() -> None:
    api = ImageFactsApi()
    shared = SharedFacts(api.client)
    from cudasched.knowledge.imageconfig import ImageConfig

    digest = "sha256:" + "ef" * 32
    config = ImageConfig("r/x:1", digest=digest, env={"CUDA_VERSION": "12.4.1"})
    try:
        shared.record(config, "r/x:1")
        shared.record(config, "r/x:1")
        shared.record(config, "r/x:2")  # a new reference: one more write
    finally:
        shared.close()
    assert api.calls == ["get", "create", "patch", "patch"]
    assert api.objects[facts_name(digest)]["status"]["references"] == ["r/x:2", "r/x:1"]
