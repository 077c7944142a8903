"""``cudasched webhook --cluster FILE`` (issue 13, item 11), and what admission echoes back to
the API server (item 9).

The offline server is the real process serving decisions from a fixed snapshot: its answers
must be exactly what ``cudasched mutate`` gives for the same cluster and review, since both run
the same Admitter. Echoed text must survive the API server: a warning with control characters
is dropped by it, and an annotation that pushes an object past 256 KiB fails the request.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import orjson
import pytest
from typer.testing import CliRunner

from cudasched.cli import app
from cudasched.cluster.snapshot import bundled_snapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.settings.config import WebhookConfig
from cudasched.vocab import labels as L
from cudasched.vocab.requirements import RECORD_SOURCE_CHARS
from cudasched.webhook.admission.admitter import Admitter
from cudasched.webhook.state.clusterstate import ClusterState
from tests.support.webhook_process import sample_cluster_file, webhook_process

DATA = Path(__file__).parents[2] / "data" / "admission"
PATHS = {"Pod": "/mutate/pods", "InferenceService": "/mutate/inferenceservices"}


def test_offline_server_answers_exactly_like_mutate(tmp_path: Path) -> None:
    reviews = sorted(DATA.glob("*.json"))
    assert len(reviews) >= 6
    served = {}
    with (
        webhook_process(tmp_path) as proc,
        httpx.Client(base_url=proc.url, verify=proc.tls(), timeout=30) as client,
    ):
        for path in reviews:
            body = path.read_bytes()
            kind = json.loads(body)["request"]["kind"]["kind"]
            resp = client.post(PATHS[kind], content=body)
            assert resp.status_code == 200, resp.text
            served[path.name] = resp.json()
    assert len(served) == len(reviews)
    runner = CliRunner()
    for path in reviews:
        result = runner.invoke(app, ["mutate", "--cluster", str(sample_cluster_file()), str(path)])
        assert result.exit_code in (0, 1), result.output
        assert json.loads(result.stdout) == served[path.name], path.name


def test_offline_server_refuses_a_kubeconfig_too(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["webhook", "--cluster", str(sample_cluster_file()), "--kubeconfig", "x"]
    )
    assert result.exit_code == 2
    assert "give one" in result.stderr


@pytest.fixture(scope="module")
def sample() -> tuple[KnowledgeBase, ClusterState]:
    kb = KnowledgeBase.load()
    return kb, ClusterState.from_snapshot(bundled_snapshot(), kb=kb)


def _review(**changes: Any) -> dict[str, Any]:
    review = json.loads((DATA / "pod-predictor-triton.json").read_text(encoding="utf-8"))
    meta = review["request"]["object"]["metadata"]
    meta.update(changes.pop("metadata", {}))
    meta.setdefault("annotations", {}).update(changes.pop("annotations", {}))
    for key, value in changes.items():
        review["request"]["object"]["spec"]["containers"][0][key] = value
    return review


def test_warnings_echoing_control_characters_are_escaped(
    sample: tuple[KnowledgeBase, ClusterState],
) -> None:
    kb, state = sample
    admitter = Admitter.from_config(WebhookConfig(), kb=kb)
    review = _review(
        metadata={"name": "evil\x07\x1b[2J\u2028pod"},
        annotations={L.ANN_POLICY: "strict\x00\x85"},
    )
    answer = orjson.loads(admitter.review("pod", orjson.dumps(review), state))["response"]
    (warning,) = answer["warnings"]
    assert warning.isprintable(), warning
    assert "\\x07" in warning and "evil" in warning


def test_requirement_annotation_quotes_a_bounded_part_of_the_image(
    sample: tuple[KnowledgeBase, ClusterState],
) -> None:
    """A 300 KB image path matched by an override: the recorded requirement quotes at most
    RECORD_SOURCE_CHARS of it, so the patched pod stays far below the 256 KiB annotation
    limit, and the patch still applies."""
    kb, state = sample
    config = WebhookConfig.from_mapping(
        {"imageOverrides": [{"pattern": "registry.example.com/team/*", "cuda": "12.4"}]}
    )
    admitter = Admitter.from_config(config, kb=kb)
    image = "registry.example.com/team/" + "/".join(["a" * 60] * 5000) + ":1"
    assert len(image) > 300_000
    review = _review(image=image)
    answer = orjson.loads(admitter.review("pod", orjson.dumps(review), state))["response"]
    ops = json.loads(base64.b64decode(answer["patch"]))
    patched = jsonpatch.apply_patch(review["request"]["object"], ops)
    record = patched["metadata"]["annotations"][L.ANN_REQUIREMENT]
    assert record.startswith("cuda>=12.4") and len(record) < RECORD_SOURCE_CHARS + 64
    assert len(answer["auditAnnotations"]["requirement"]) == len(record)
    total = sum(len(k) + len(v) for k, v in patched["metadata"]["annotations"].items())
    assert total < 256 * 1024


def test_the_heap_built_before_serving_is_frozen(kb: KnowledgeBase) -> None:
    """What lives as long as the process (the knowledge base here) leaves the collector's
    reach, so a full collection no longer walks it (issue 30: 250 ms pauses)."""
    import gc

    from cudasched.webhook.server.serving import freeze_heap

    before = gc.get_freeze_count()
    try:
        freeze_heap()
        frozen = gc.get_freeze_count()
        assert frozen - before > 10_000  # the knowledge base's objects, and what else lived
        assert gc.get_count()[2] == 0  # nothing was left for the oldest generation
    finally:
        gc.unfreeze()
