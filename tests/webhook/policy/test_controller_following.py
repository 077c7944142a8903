"""The policy controller following a knowledge bundle through a real registry (Debian's
``docker-registry``), as the webhook does: a bundle that adds an image row is swapped in
within the interval, the key of a pod with that image (unknown to the built-in knowledge) is
decided again and its table written with the requirement; a bundle that fails its checks is
refused and the tables keep the answers of the last good one. The e2e test on Kubernetes 1.37
runs the same through ``cudasched policy-controller``
(``tests/e2e/k8s137/test_e2e_policy_controller.py``)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import pytest

from cudasched.cli.knowledgesource import Following, FollowPlan
from cudasched.knowledge.bundle import Bundle, builtin_bundle
from cudasched.knowledge.bundlecheck import builtin_knowledge
from cudasched.knowledge.following import FollowResult
from cudasched.settings.config import WebhookConfig
from cudasched.webhook.background.following import FollowedKnowledge
from cudasched.webhook.metrics import WebhookMetrics
from cudasched.webhook.policy.table import held_placements
from cudasched.webhook.server.assembly import admission_builder, build_admission
from cudasched.workloads.policykey import KEY_VERSION, pod_key
from tests.support.admission import nodes_state
from tests.support.bundles import planted, push_to
from tests.support.policyfakes import FakeApi, FakeCache, controller_of, gpu_pod, listed
from tests.support.registry import Registry, run_registry

BUILTIN = builtin_knowledge()
#: A GPU pod whose image only the planted image row knows (built for CUDA 12.6).
TEAM = gpu_pod("team-llm", "registry.example.com/team/llm:cu12.6")


@pytest.fixture(scope="module")
def registry() -> Iterator[Registry]:
    with run_registry() as found:
        yield found


def _requirement(api: FakeApi) -> str | None:
    held = held_placements(api.tables().values(), KEY_VERSION)
    key = pod_key(TEAM, "team")
    found = held.get(key) if key is not None else None
    return found.as_json()["requirement"] if found is not None else None


def _schema_2(bundle: Bundle) -> Any:
    return dataclasses.replace(bundle.meta, schema=2)


def _refused(knowledge: FollowedKnowledge) -> bool:
    last = knowledge.last
    return last is not None and last.result is FollowResult.REFUSED


async def _until(api: FakeApi, controller: Any, done: Any, seconds: float = 20.0) -> None:
    """Run the controller's rounds until ``done()`` (a swap is noticed at the next round)."""
    end = time.monotonic() + seconds
    while not done() and time.monotonic() < end:
        controller._decided_at = 0.0  # every round is due: the test waits on the follower
        await controller.step()
        await asyncio.sleep(0.1)
    assert done(), "not within the interval"


def test_a_bundle_swapped_in_is_decided_again_and_a_refused_one_changes_nothing(
    registry: Registry,
) -> None:
    ref = f"{registry.host}/cudasched/policy-follow:stable"
    push_to(registry, ref, builtin_bundle())
    config = WebhookConfig()
    knowledge = FollowedKnowledge(config, BUILTIN, FollowPlan(Following(ref)), interval_seconds=0.3)
    judging = knowledge.current
    admitter, resolver = build_admission(config, WebhookMetrics(), judging.kb, judging.images)
    cache = FakeCache(nodes_state(judging.kb), rebuild=nodes_state)
    api = FakeApi()
    controller = controller_of(api, admitter, cache, "a")
    controller.follow(knowledge, admission_builder(config, resolver))
    listed(controller.sources, TEAM)

    async def run() -> tuple[str | None, str | None, str | None]:
        await knowledge.start()
        try:
            await _until(api, controller, lambda: knowledge.last is not None)
            before = _requirement(api)
            push_to(registry, ref, planted(["image-row"], version="2026.09.15"))
            await _until(api, controller, lambda: (_requirement(api) or "").startswith("cuda"))
            swapped, swaps = _requirement(api), controller._swaps
            # A bundle of a schema this version cannot read: refused, the last good one kept.
            newer = planted(["image-row", "toolkit-minimum"], version="schema.2")
            push_to(registry, ref, dataclasses.replace(newer, meta=_schema_2(newer)))
            await _until(api, controller, lambda: _refused(knowledge))
            assert controller._swaps == swaps  # the refused bundle made no admitter
            return before, swapped, _requirement(api)
        finally:
            await knowledge.stop()

    before, swapped, after = asyncio.run(run())
    assert before is not None and before.startswith("unknown (image not in the image table")
    assert swapped is not None and swapped.startswith("cuda>=12.6")
    assert after == swapped
    assert cache.generation > 1  # the snapshot was rebuilt with the bundle's knowledge
