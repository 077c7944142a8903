"""Admission answers, recorded: the guard that a refactoring changes no decision.

Decides a fixed set of AdmissionReviews with the production :class:`Admitter` and prints (or
checks) one digest (a SHA-256 prefix) per answer:

* the admission benchmark's inputs (:mod:`tests.support.synth`, seeded): 5,000 nodes, 200 runtimes,
  1,000 InferenceServices, their 2,000 predictor-pod CREATE reviews and one CREATE review per
  InferenceService;
* the bundled sample cluster: every pod and InferenceService as a CREATE review, plus the
  recorded reviews in ``tests/data/admission``;

each under several configurations (default, preferred mode, GFD keys, minor-compat with
``isvcAffinity``); and ``cudasched explain -o json`` on the sample cluster per policy.
Answers are bytes, so "the same answer" means byte-identical. The digests are
kept in ``tests/answers/answers.json``; ``tests/test_answers_recorded.py`` compares against them.
When a change *means* to alter decisions, re-record with ``--write`` and say why in the commit.

Run ``python -m tests.answers --check`` (about 20 s) or ``--write`` from the repository root.
"""

from __future__ import annotations

import argparse
import hashlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from tests.support.synth import admission_review, make_cluster, review_bodies

__all__ = ["CONFIGS", "RECORD", "answers", "cases", "main"]

RECORD = Path(__file__).with_name("answers.json")
ADMISSION_DATA = Path(__file__).resolve().parents[1] / "data" / "admission"

#: The configurations every review is decided under.
CONFIGS: dict[str, dict[str, Any]] = {
    "default": {},
    "preferred": {"mode": "preferred"},
    "gfd": {"labelScheme": "gfd"},
    "minor-isvc": {"policy": "minor-compat", "isvcAffinity": True, "onNoFit": "deny"},
}


def _isvc_review(isvc: dict[str, Any], uid: str) -> bytes:
    ns = isvc["metadata"].get("namespace", "default")
    return orjson.dumps(
        {
            "kind": "AdmissionReview",
            "apiVersion": "admission.k8s.io/v1",
            "request": {
                "uid": uid,
                "kind": {
                    "group": "serving.kserve.io",
                    "version": "v1beta1",
                    "kind": "InferenceService",
                },
                "resource": {
                    "group": "serving.kserve.io",
                    "version": "v1beta1",
                    "resource": "inferenceservices",
                },
                "namespace": ns,
                "operation": "CREATE",
                "object": isvc,
                "oldObject": None,
                "dryRun": False,
            },
        }
    )


def cases() -> Iterator[tuple[str, str, Any, list[bytes]]]:
    """(case name, kind, cluster objects, bodies) for every input set."""
    from cudasched.cluster.snapshot import bundled_snapshot

    synthetic = make_cluster(5000, runtimes=200, isvcs=1000)
    objects = (
        synthetic.nodes,
        synthetic.inference_services,
        synthetic.serving_runtimes,
        synthetic.cluster_serving_runtimes,
    )
    yield "synthetic-pods", "pod", objects, review_bodies(synthetic, 2000)
    isvc_bodies = [
        _isvc_review(dict(i), f"00000000-0000-4000-9000-{k:012d}")
        for k, i in enumerate(synthetic.inference_services)
    ]
    yield "synthetic-isvcs", "isvc", objects, isvc_bodies

    sample = bundled_snapshot()
    objects = (
        sample.nodes,
        sample.inference_services,
        sample.serving_runtimes,
        sample.cluster_serving_runtimes,
    )
    pods = [
        orjson.dumps(admission_review(p, f"00000000-0000-4000-a000-{k:012d}"))
        for k, p in enumerate(sample.pods)
    ]
    yield "sample-pods", "pod", objects, pods
    isvcs = [
        _isvc_review(dict(i), f"00000000-0000-4000-b000-{k:012d}")
        for k, i in enumerate(sample.inference_services)
    ]
    yield "sample-isvcs", "isvc", objects, isvcs
    for path in sorted(ADMISSION_DATA.glob("*.json")):
        body = path.read_bytes()
        kind = "isvc" if b'"InferenceService"' in body[:2000] else "pod"
        yield f"recorded-{path.stem}", kind, objects, [body]


def answers() -> dict[str, str]:
    """``{"CONFIG/CASE/NUMBER": digest of the answer}`` for every review and configuration, and
    ``{"explain/sample/POLICY": digest}`` of ``explain -o json`` on the sample cluster."""
    from cudasched.knowledge import KnowledgeBase
    from cudasched.settings.config import WebhookConfig
    from cudasched.webhook.admission.admitter import Admitter
    from cudasched.webhook.state.clusterstate import ClusterState

    kb = KnowledgeBase.load()
    out: dict[str, str] = {}
    for case, kind, objects, bodies in cases():
        state = ClusterState.from_objects(*objects, kb=kb)
        for config_name, settings in CONFIGS.items():
            # The memo off: every answer is decided (the memo's own tests prove it changes
            # nothing).
            config = WebhookConfig.from_mapping({**settings, "decisionCacheBytes": 0})
            admitter = Admitter.from_config(config, kb)
            for number, body in enumerate(bodies):
                answer = admitter.review(kind, body, state)
                out[f"{config_name}/{case}/{number}"] = _digest(answer)
    for policy in ("strict", "minor-compat", "forward-compat"):
        out[f"explain/sample/{policy}"] = _digest(_explain_json(policy))
    return out


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _explain_json(policy: str) -> bytes:
    """``cudasched explain -o json`` over the bundled sample cluster, run as a user runs it."""
    from typer.testing import CliRunner

    from cudasched.cli import app

    result = CliRunner().invoke(app, ["explain", "--policy", policy, "-o", "json"])
    if result.exit_code != 0:
        raise RuntimeError(f"explain failed ({result.exit_code}): {result.output}")
    return result.stdout.encode()


def compare(recorded: dict[str, str], now: dict[str, str]) -> list[str]:
    """The keys whose answer changed, appeared or disappeared, sorted."""
    return sorted(k for k in recorded.keys() | now.keys() if recorded.get(k) != now.get(k))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.answers", description=__doc__.split("\n\n")[0]
    )
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--check", action="store_true", help="compare with answers.json")
    group.add_argument("--write", action="store_true", help="record answers.json anew")
    args = parser.parse_args(argv)
    now = answers()
    if args.write:
        RECORD.write_bytes(orjson.dumps(now, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2))
        print(f"recorded {len(now)} answers in {RECORD}")
        return 0
    changed = compare(orjson.loads(RECORD.read_bytes()), now)
    if changed:
        print(f"{len(changed)} of {len(now)} answers differ, first: {', '.join(changed[:10])}")
        return 1
    print(f"all {len(now)} answers byte-identical to {RECORD.name}")
    return 0
