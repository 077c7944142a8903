"""Coverage-guided fuzzing of admission with atheris (libFuzzer for Python).

The hypothesis tests in ``tests/webhook/admission/test_admitter_fuzz.py`` explore damage we
thought of; this target lets libFuzzer explore byte-level mutations guided by coverage, for as
long as anyone cares to run it. Each input is used two ways:

* as the raw request body (exercises the JSON parser and envelope checks);
* spliced into a real AdmissionReview as the pod or InferenceService object, after being
  decoded leniently, so coverage can grow inside resolution, placement and patching too.

The checks are the contract the API server relies on: :meth:`Admitter.review` either raises
``BadReviewError`` (the server's 400) or answers for the request's uid, and any patch applies
to the request object (RFC 6902, via ``jsonpatch``). Anything else raises, which libFuzzer
reports as a crash with the input that caused it.

Run (see ``fuzz/README.md``)::

    python fuzz/admission_fuzz.py /tmp/corpus -max_total_time=300

``check_one(data)`` runs one input without atheris; the test suite replays the seeds with it.
"""

from __future__ import annotations

import base64
import json
import logging
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

SEEDS = Path(__file__).resolve().parent.parent / "tests" / "data" / "admission"


class _Target:
    """The admitter, cluster and seed reviews, built once per fuzzing process."""

    def __init__(self) -> None:
        from cudasched.cluster.snapshot import bundled_snapshot
        from cudasched.knowledge import KnowledgeBase
        from cudasched.settings.config import WebhookConfig
        from cudasched.webhook.admission.admitter import Admitter
        from cudasched.webhook.admission.review import BadReviewError
        from cudasched.webhook.state.clusterstate import ClusterState

        kb = KnowledgeBase.load()
        snap = bundled_snapshot()
        self.state = ClusterState.from_objects(
            snap.nodes,
            snap.inference_services,
            snap.serving_runtimes,
            snap.cluster_serving_runtimes,
            kb=kb,
        )
        self.admitters = [
            Admitter.from_config(WebhookConfig(), kb=kb),
            Admitter.from_config(
                WebhookConfig.from_mapping(
                    {"mode": "preferred", "isvcAffinity": True, "failClosed": True}
                ),
                kb=kb,
            ),
        ]
        self.bad_review = BadReviewError
        self.seeds: list[tuple[str, dict[str, Any]]] = []
        for path in sorted(SEEDS.glob("*.json")):
            review = json.loads(path.read_text(encoding="utf-8"))
            kind = "isvc" if review["request"]["kind"]["kind"] == "InferenceService" else "pod"
            self.seeds.append((kind, review))


_TARGET: _Target | None = None


def _target() -> _Target:
    global _TARGET  # one per process: building it reads package data, far too slow per input
    if _TARGET is None:
        _TARGET = _Target()
    return _TARGET


def _lenient(data: bytes) -> Any:
    """Bytes as JSON if they parse, else as a string: every input yields some object."""
    try:
        return json.loads(data.decode("utf-8", errors="replace"))
    except (ValueError, RecursionError):
        return data.decode("utf-8", errors="replace")


#: Where the decoded input is planted: the fields admission reads (index 0: the top level).
_GRAFTS: tuple[tuple[str, ...], ...] = (
    (),
    ("metadata", "annotations"),
    ("metadata", "labels"),
    ("metadata",),
    ("spec",),
    ("spec", "containers"),
    ("spec", "initContainers"),
    ("spec", "affinity"),
    ("spec", "affinity", "nodeAffinity"),
    ("spec", "nodeSelector"),
    ("spec", "resourceClaims"),
    ("spec", "predictor"),
    ("spec", "predictor", "model"),
    ("spec", "predictor", "affinity"),
    ("status",),
)


def _bodies(data: bytes) -> Iterator[tuple[str, bytes, dict[str, Any] | None]]:
    """(kind, body, review-or-None) pairs to try for one fuzz input."""
    import orjson

    target = _target()
    yield "pod", data, None
    if not target.seeds:
        return
    kind, seed = target.seeds[data[0] % len(target.seeds) if data else 0]
    review = json.loads(json.dumps(seed))
    obj = review["request"].get("object")
    if not isinstance(obj, dict):  # a DELETE carries no object: nothing to graft onto
        return
    where = _GRAFTS[data[1] % len(_GRAFTS)] if len(data) > 1 else ()
    value = _lenient(data[2:])
    if not where:
        if isinstance(value, dict):
            obj.update(value)  # over the top level: metadata, spec, kind ...
    else:
        parent = obj
        for key in where[:-1]:
            child = parent.get(key) if isinstance(parent, dict) else None
            if not isinstance(child, dict):
                child = {}
                if isinstance(parent, dict):
                    parent[key] = child
            parent = child
        parent[where[-1]] = value
    try:
        body = orjson.dumps(review)
    except (TypeError, orjson.JSONEncodeError):
        return
    yield kind, body, review


def check_one(data: bytes) -> None:
    """Run one input through every admitter; raise AssertionError on a broken contract."""
    import jsonpatch
    import orjson

    target = _target()
    for kind, body, review in _bodies(data):
        for admitter in target.admitters:
            try:
                answer = admitter.review(kind, body, target.state)  # type: ignore[arg-type]
            except target.bad_review:
                assert review is None or not isinstance(review["request"].get("operation"), str), (
                    "a well-formed envelope was refused"
                )
                continue
            response = orjson.loads(answer)["response"]
            request = orjson.loads(body)["request"]
            assert response["uid"] == request["uid"], "answer for the wrong uid"
            if "patch" in response:
                ops = json.loads(base64.b64decode(response["patch"]))
                jsonpatch.apply_patch(request["object"], ops)


def main(argv: list[str]) -> None:
    import atheris

    with atheris.instrument_imports():
        import cudasched.webhook.admission.admitter  # noqa: F401  (instrumented for coverage)
        import cudasched.webhook.admission.patch  # noqa: F401

    # Damaged inputs legitimately end in logged internal errors; tracebacks for each of
    # thousands of inputs per second would drown libFuzzer's own output.
    logging.disable(logging.CRITICAL)
    _target()  # build before fuzzing starts, so start-up is not mistaken for a slow input
    run: Callable[[bytes], None] = check_one
    atheris.Setup(argv, run)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
