"""Admission with the image resolver on and off, side by side in one run (issue 19).

``off``: the production Admitter deciding GPU pod reviews of in-house images that an
``imageOverrides`` entry declares CUDA 12.6 (so both sides constrain every pod the same way).
``on``: an Admitter without the override, the webhook's :class:`BackgroundResolver` as its source,
its cache warmed with every image's config (the steady state: replicas after the first), so
each review pays the cache look-up and the config reading on top. Decisions are made fresh
(no decision memo: every review has a new template) to measure the resolution path itself.
Reports the mean time per review for both and their ratio, plus the resolver's look-ups per
second from the cache. No registry is contacted (the cache answers every look-up).

Run ``python -m benchmarks.imageresolver [--reviews N]``.
"""

from __future__ import annotations

import argparse
import time
import uuid
from typing import Any

import orjson

from cudasched.cluster.snapshot import bundled_snapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.imageconfig import ImageConfig
from cudasched.knowledge.images import ImageTable
from cudasched.registry.client import RegistryClient
from cudasched.registry.configcache import ConfigCache
from cudasched.registry.resolver import BackgroundResolver
from cudasched.settings.config import WebhookConfig
from cudasched.webhook.admission.admitter import Admitter
from cudasched.webhook.admission.review import creation_review
from cudasched.webhook.state.clusterstate import ClusterState

__all__ = ["main", "run"]


def _pod(index: int) -> dict[str, Any]:
    image = f"registry.corp/team{index % 50}/llm:{index % 7}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"llm-{index}", "namespace": "ml", "labels": {"i": str(index)}},
        "spec": {
            "containers": [
                {"name": "llm", "image": image, "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ]
        },
    }


def _time(admitter: Admitter, state: ClusterState, bodies: list[bytes]) -> float:
    started = time.perf_counter()
    for body in bodies:
        admitter.decide("pod", body, state)
    return (time.perf_counter() - started) / len(bodies)


def run(reviews: int = 2000) -> dict[str, float]:
    kb = KnowledgeBase.load()
    state = ClusterState.from_snapshot(bundled_snapshot(), kb=kb)
    overridden = WebhookConfig.from_mapping(
        {"imageOverrides": [{"pattern": "registry.corp/*", "cuda": "12.6"}]}
    )
    off = Admitter.from_config(overridden, kb)
    cache = ConfigCache()
    resolver = BackgroundResolver(RegistryClient(), cache)
    pods = [_pod(i) for i in range(reviews)]
    for pod in pods:
        image = pod["spec"]["containers"][0]["image"]
        env = {"NVIDIA_REQUIRE_CUDA": "cuda>=12.6", "CUDA_VERSION": "12.6.3"}
        cache.put(
            image, "linux/amd64", ImageConfig(image, "sha256:" + "0" * 64, "linux/amd64", env)
        )
    plain = WebhookConfig()
    on = Admitter(plain, kb, ImageTable.from_config(plain, kb=kb).with_configs(resolver))
    bodies = [orjson.dumps(creation_review(p, uid=str(uuid.uuid4()))) for p in pods]
    _time(off, state, bodies[:50])  # warm both
    _time(on, state, bodies[:50])
    rounds = [(_time(off, state, bodies), _time(on, state, bodies)) for _ in range(3)]
    mean_off = min(r[0] for r in rounds)
    mean_on = min(r[1] for r in rounds)
    images = [p["spec"]["containers"][0]["image"] for p in pods]
    started = time.perf_counter()
    for image in images:
        resolver.config_for(image)
    lookups = len(images) / (time.perf_counter() - started)
    resolver.close()
    return {
        "off_ms_per_review": mean_off * 1000,
        "on_ms_per_review": mean_on * 1000,
        "on_over_off": mean_on / mean_off,
        "cached_lookups_per_s": lookups,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reviews", type=int, default=2000)
    args = parser.parse_args(argv)
    for key, value in run(args.reviews).items():
        print(f"{key}: {value:.3f}")


if __name__ == "__main__":
    main()
