"""The webhook following a knowledge bundle through a real registry (Debian's
``docker-registry``): the real HTTPS server (``serve_in_thread``) picks a new fact up within
its interval and answers with it, refuses a corrupted or schema-invalid bundle and keeps
answering with the last good one (metrics, ``/readyz``), never makes a review wait while the
registry hangs, and the background audit reports the placements a swap moves."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import logging
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml

from cudasched.cli.knowledgesource import Following, FollowPlan
from cudasched.cluster.snapshot import ClusterSnapshot, bundled_snapshot
from cudasched.knowledge.bundle import Bundle, builtin_bundle
from cudasched.knowledge.bundlecheck import BundleKnowledge, builtin_knowledge
from cudasched.knowledge.following import FollowOutcome
from cudasched.registry.bundles import push_bundle
from cudasched.registry.client import Limits, RegistryClient
from cudasched.registry.following import BundleFollower
from cudasched.settings.config import WebhookConfig
from cudasched.vocab.requirements import Policy
from cudasched.webhook.admission.review import creation_review
from cudasched.webhook.background.following import FollowedKnowledge
from cudasched.webhook.background.periodic import AuditLoop
from cudasched.webhook.metrics import WebhookMetrics
from cudasched.webhook.server.app import POD_PATH
from cudasched.webhook.server.serving import RunningServer, serve_in_thread
from cudasched.webhook.state.clusterstate import ClusterState
from tests.support.admission import admitted_pod, client, fleet_node, nodes, ops_of
from tests.support.builders import pod
from tests.support.bundles import PLANTS, builtin_tables, bundle_of, planted, push_to, raised_12_4
from tests.support.registry import Registry, hanging_server, run_registry
from tests.support.webhook_process import webhook_process

BUILTIN = builtin_knowledge()
#: A pod built for CUDA 13.4, whose minimum driver the built-in knowledge does not state, and
#: one whose image only the planted image row knows.
CUDA_13_4 = pod("llm-13-4", image="x/serve:1", annotations={"cudasched.io/cuda-version": "13.4.1"})
TEAM_LLM = pod("team-llm", image="registry.example.com/team/llm:cu12.6")
#: The new facts: the R615 release that states CUDA 13.4's minimum, and the image row.
NEW_FACTS = ["new-release", "toolkit-minimum", "image-row"]


@pytest.fixture(scope="module")
def registry() -> Iterator[Registry]:
    with run_registry() as found:
        yield found


def _state() -> ClusterState:
    fleet = [*nodes(), fleet_node("b200-r615", "NVIDIA-B200", "615.20.01")]
    return ClusterState.from_objects(fleet, [], [], [], kb=BUILTIN.kb)


def _followed(reference: str, interval: float = 0.3) -> FollowedKnowledge:
    plan = FollowPlan(Following(reference))
    return FollowedKnowledge(WebhookConfig(), BUILTIN, plan, interval_seconds=interval)


def _answer(http: httpx.Client, obj: dict[str, Any], uid: str = "uid-1") -> dict[str, Any]:
    body = orjson.dumps(creation_review(obj, uid=uid))
    found: dict[str, Any] = http.post(POD_PATH, content=body).json()["response"]
    return found


def _new_facts_used(http: httpx.Client) -> bool:
    """Whether both reviews are answered with the new facts: CUDA 13.4 placed on the R615
    node, the team image constrained to CUDA 12.6."""
    llm, team = _answer(http, CUDA_13_4), _answer(http, TEAM_LLM)
    return not llm.get("warnings") and "cuda>=12.6" in str(ops_of(team))


def _metric(text: str, name: str, **labels: str) -> float | None:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}(?:\{{(.*)\}})? (\S+)", line)
        if match and ",".join(sorted((match[1] or "").split(","))).strip(",") == want:
            return float(match[2])
    return None


def _wait(condition: Callable[[], bool], seconds: float = 20.0) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end and not condition():
        time.sleep(0.1)
    assert condition(), "not within the interval"


def _served(knowledge: FollowedKnowledge) -> Any:
    return serve_in_thread(_state(), knowledge=knowledge)


def test_a_running_webhook_answers_with_a_new_bundle_and_keeps_it_through_bad_ones(
    registry: Registry,
) -> None:
    ref = f"{registry.host}/cudasched/webhook-follow:stable"
    push_to(registry, ref, builtin_bundle())
    knowledge = _followed(ref)
    with _served(knowledge) as srv, client(srv) as http:
        _wait(lambda: knowledge.last is not None)
        llm, team = _answer(http, CUDA_13_4), _answer(http, TEAM_LLM)
        push_to(registry, ref, planted(NEW_FACTS, version="2026.09.15"))
        _wait(lambda: _new_facts_used(http))
        placed = _answer(http, CUDA_13_4)
        updated = http.get("/readyz").text
        # A bundle of another schema, then one whose blob the registry's storage altered.
        newer = planted(NEW_FACTS, version="schema.2")
        push_to(registry, ref, dataclasses.replace(newer, meta=_schema_2(newer)))
        _wait(lambda: _failures(srv, "schema") == 1)
        push_to(registry, ref, _corrupted(registry))
        _wait(lambda: _failures(srv, "digest") >= 1)
        refused = http.get("/readyz")
        kept = _new_facts_used(http)
        metrics = http.get("/metrics").text
    assert "no node can run CUDA 13.4" in str(llm["warnings"]) and "warnings" not in placed
    assert "615.20.01" not in str(ops_of(llm)) and ops_of(placed) != ops_of(llm)
    assert "image not in the image table" in str(team["warnings"])
    assert "cuda>=12.6" not in str(ops_of(team)), "recorded as unknown, constrained to nothing"
    assert "knowledge: knowledge 2026.09.15 of 2026-09-15" in updated
    assert re.search(r"last check \d+s ago: (updated|unchanged)\n", updated)
    assert refused.status_code == 200 and kept, "the last good bundle still answers"
    assert "knowledge 2026.09.15" in refused.text and "refused (digest)" in refused.text
    assert "answering with the last good knowledge" in refused.text
    assert (_metric(metrics, "cudasched_knowledge_checks_total", outcome="updated") or 0) >= 2
    assert (_metric(metrics, "cudasched_knowledge_checks_total", outcome="refused") or 0) >= 2
    assert (_metric(metrics, "cudasched_knowledge_consecutive_failures") or 0) >= 1
    info = {"version": "2026.09.15", "digest": knowledge.current.provenance.digest}
    assert _metric(metrics, "cudasched_knowledge_info", origin=_pinned(ref, info), **info) == 1
    age = _metric(metrics, "cudasched_knowledge_bundle_age_seconds")
    assert age is not None and age > 0
    refused_events = 'cudasched_webhook_events_total{reason="KnowledgeRefused",result="no_client"}'
    assert refused_events in metrics, "said as an Event (logged here: no API server)"


def _pinned(ref: str, info: dict[str, str]) -> str:
    return f"{ref.rsplit(':', 1)[0]}@{info['digest']}"


def _schema_2(bundle: Bundle) -> Any:
    return dataclasses.replace(bundle.meta, schema=2)


def _corrupted(registry: Registry) -> Bundle:
    """A bundle whose gpus.yaml (a blob no other bundle holds) the registry's storage has
    altered (pushed to another repository first, so no follower reads it before)."""
    tables = builtin_tables()
    PLANTS["new-gpu"].edit(tables)
    tables["gpus.yaml"]["gpus"][-1]["names"].append("NVIDIA Z100 (corrupted)")
    bundle = bundle_of(tables, version="corrupt.1")
    layer = next(d for d in bundle.layers() if d.title == "gpus.yaml")
    with RegistryClient(plain_http=[registry.host]) as c:
        push_bundle(c, f"{registry.host}/cudasched/scratch:corrupt", bundle)
    blob = registry.blob_file(layer.digest)
    blob.write_bytes(blob.read_bytes().replace(b"(corrupted)", b"(corrupted!)"))
    return bundle


def _failures(srv: RunningServer, reason: str) -> float:
    text = srv.app.metrics.render().decode()
    return _metric(text, "cudasched_knowledge_check_failures_total", reason=reason) or 0.0


def test_a_review_never_waits_while_the_registry_hangs() -> None:
    with hanging_server() as host:
        plan = _ShortPlan(FollowPlan(Following(f"{host}/cudasched/knowledge:stable")))
        knowledge = FollowedKnowledge(WebhookConfig(), BUILTIN, plan, interval_seconds=60)
        with _served(knowledge) as srv, client(srv) as http:
            _wait(lambda: knowledge.follower is not None)
            time.sleep(0.3)  # the first check hangs on the registry now
            started = time.monotonic()
            answers = [_answer(http, CUDA_13_4, uid=f"uid-{i}") for i in range(20)]
            took = time.monotonic() - started
            ready = http.get("/readyz")
            checking = knowledge.last is None
    assert checking, "the check was still hanging while the reviews were answered"
    assert all(a["allowed"] for a in answers) and took < 5.0
    assert ready.status_code == 200 and "not checked yet" in ready.text


@dataclasses.dataclass
class _ShortPlan:
    """The production plan with a client that gives up on a hung registry in 2 seconds (the
    production one waits 30), so the test's shutdown does not wait for it."""

    plan: FollowPlan

    @property
    def reference(self) -> str:
        return self.plan.reference

    def follower(self, initial: BundleKnowledge, **kw: Any) -> BundleFollower:
        host = self.plan.reference.split("/", 1)[0]
        limits = Limits(deadline_seconds=2.0, request_seconds=2.0)
        c = RegistryClient(plain_http=[host], limits=limits)
        return BundleFollower(self.plan.reference, c, initial, owns_client=True, **kw)


def test_the_background_audit_reports_the_placements_a_swap_moves(
    registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    sample = bundled_snapshot()
    admitted = admitted_pod(BUILTIN.kb, sample)
    snapshot = ClusterSnapshot.from_objects([*sample.nodes, admitted])
    ref = f"{registry.host}/cudasched/audit-follow:stable"
    push_to(registry, ref, builtin_bundle())
    knowledge = _followed(ref)
    current = knowledge.current
    audit = AuditLoop(
        interval_seconds=3600,
        read=lambda: snapshot,
        kb=current.kb,
        images=current.images,
        policy=Policy.STRICT,
        metrics=WebhookMetrics(),
    )
    knowledge.on_swap(lambda new, _built: audit.use(new.kb, new.images))
    caplog.set_level(logging.INFO)
    audit.start()
    try:
        with _served(knowledge):
            _wait(lambda: audit.last is not None and knowledge.last is not None)
            before = _moved(audit)
            push_to(registry, ref, raised_12_4("555.42.02"))
            _wait(lambda: bool(_moved(audit)))
            after = _moved(audit)
    finally:
        audit.stop()
    assert before == []
    ((ref_, message),) = after
    assert ref_ == "Pod/default/llm" and "no longer admits" in message
    logged = [r.getMessage() for r in caplog.records]
    assert any("placement-moved: Pod/default/llm" in line for line in logged)
    assert any("knowledge swapped in" in line and "2026.09.15" in line for line in logged)


def _moved(audit: AuditLoop) -> list[tuple[str, str]]:
    report = audit.last
    found = report.findings if report is not None else ()
    return [(f.object, f.message) for f in found if f.code == "placement-moved"]


def test_what_cannot_be_built_refuses_the_bundle(registry: Registry) -> None:
    ref = f"{registry.host}/cudasched/unbuildable:stable"
    push_to(registry, ref, planted(["new-gpu"], version="unbuildable.1"))
    outcomes: list[FollowOutcome] = []
    knowledge = _followed(ref)

    def build(_judging: Any) -> None:
        from cudasched.vocab.errors import InputError

        raise InputError("the image override's CUDA is unknown to this bundle")

    knowledge.build = build
    knowledge.on_swap(lambda *_: outcomes.append(knowledge.last))  # type: ignore[arg-type]
    asyncio.run(knowledge.start())
    try:
        _wait(lambda: knowledge.last is not None)
    finally:
        asyncio.run(knowledge.stop())
    last = knowledge.last
    assert last is not None and last.result.value == "refused" and last.reason == "content"
    assert knowledge.current.kb is BUILTIN.kb and outcomes == []


def test_the_patch_of_a_swapped_answer_is_the_new_knowledges(registry: Registry) -> None:
    """The first answer after a swap is decided again, not recalled from the memo of the
    knowledge before it (each Admitter has its own)."""
    ref = f"{registry.host}/cudasched/memo-follow:stable"
    push_to(registry, ref, builtin_bundle())
    knowledge = _followed(ref)
    with _served(knowledge) as srv, client(srv) as http:
        _wait(lambda: knowledge.last is not None)
        first = [_answer(http, TEAM_LLM, uid=f"a-{i}") for i in range(3)]
        old = srv.app.admission
        push_to(registry, ref, planted(["image-row"], version="memo.1"))
        _wait(lambda: srv.app.admission is not old)
        after = _answer(http, TEAM_LLM, uid="b-1")
    assert not [a for a in first if "cuda>=12.6" in str(ops_of(a))]
    patch = orjson.loads(base64.b64decode(after["patch"]))
    assert any("cuda>=12.6" in str(op.get("value")) for op in patch)


def test_the_webhook_process_follows_the_reference_its_settings_name(
    registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cudasched webhook`` itself, in its own process, told by its ``knowledge:`` settings
    (the ConfigMap's): it starts with the bundle the tag names, answers with the next one
    within ``intervalSeconds`` and keeps it when a schema-invalid one follows."""
    monkeypatch.setenv("CUDASCHED_CACHE_DIR", str(tmp_path / "cache"))
    ref = f"{registry.host}/cudasched/process-follow:stable"
    push_to(registry, ref, planted(["image-row"], version="first.1"))
    cluster = tmp_path / "cluster.yaml"
    fleet = [*nodes(), fleet_node("b200-r615", "NVIDIA-B200", "615.20.01")]
    cluster.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": fleet}))
    knowledge = {"reference": ref, "intervalSeconds": 10, "plainHttp": [registry.host]}
    with (
        webhook_process(
            tmp_path / "webhook", cluster=cluster, config={"knowledge": knowledge}
        ) as w,
        httpx.Client(base_url=w.url, verify=w.tls(), timeout=10) as http,
    ):
        started = http.get("/readyz").text
        before = _answer(http, CUDA_13_4)
        push_to(registry, ref, planted(NEW_FACTS, version="2026.09.15"))
        _wait(lambda: _new_facts_used(http), seconds=40)
        newer = planted(NEW_FACTS, version="schema.2")
        push_to(registry, ref, dataclasses.replace(newer, meta=_schema_2(newer)))
        _wait(lambda: "refused (schema)" in http.get("/readyz").text, seconds=40)
        kept = _new_facts_used(http)
        metrics = w.metrics()
    assert "knowledge: knowledge first.1" in started and f"following {ref} every 10s" in started
    assert "no node can run CUDA 13.4" in str(before["warnings"])
    assert kept, "the last good bundle still answers"
    assert _metric(metrics, "cudasched_knowledge_check_failures_total", reason="schema") == 1
    assert 'cudasched_knowledge_info{digest="sha256:' in metrics and "2026.09.15" in metrics


def test_what_reading_the_knowledge_noted_is_logged_when_the_server_starts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A refusal noted while the knowledge was read before the server started goes to the
    log when it starts (a long-running process has no exit to print it at), with the
    knowledge it judges with instead; nothing is logged before (a bad ``--cluster`` file
    stays one error line)."""
    note = "knowledge r.example.com/k:stable refused (digest): ...; judging with the built-in"
    caplog.set_level(logging.INFO, logger="cudasched.webhook.background.following")
    knowledge = FollowedKnowledge(WebhookConfig(), BUILTIN, notes=[note])
    before = list(caplog.records)
    asyncio.run(knowledge.start())
    asyncio.run(knowledge.stop())
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert before == []
    assert said[0] == ("WARNING", note)
    assert said[1] == ("INFO", f"judging with {BUILTIN.provenance.describe()}")
