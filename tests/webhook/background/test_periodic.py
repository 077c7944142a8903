"""The webhook's background audit: the findings gauge, PolicyReports applied to the API server
(kmock, recording what it is sent), stale namespaces cleared, failures counted; and the real
``cudasched webhook`` process exposing the gauge when ``audit.intervalMinutes`` is set."""

from __future__ import annotations

import asyncio
import json
import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import kmock as kmock_lib
import pytest
import yaml

from cudasched.cluster.snapshot import ClusterSnapshot, bundled_snapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.images import ImageTable
from cudasched.kube.reports import FIELD_MANAGER, apply_reports
from cudasched.settings.config import WebhookConfig
from cudasched.vocab.errors import InputError
from cudasched.vocab.requirements import Policy
from cudasched.webhook.background.periodic import AuditLoop
from cudasched.webhook.metrics import WebhookMetrics
from tests.support.kube_api import write_kubeconfig
from tests.support.webhook_process import webhook_process

SAMPLE = bundled_snapshot()
SCHEMA = yaml.safe_load(
    (Path(__file__).parents[2] / "data" / "policyreport" / "v1alpha2-schema.yaml").read_text(
        encoding="utf-8"
    )
)
WHEN = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def sample(metric: bytes, name: str, **labels: str) -> float | None:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in metric.decode().splitlines():
        match = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
        if match and ",".join(sorted(match[1].split(","))) == want:
            return float(match[2])
    return None


def loop(
    kb: KnowledgeBase, metrics: WebhookMetrics, read: Any, published: list[Any] | None
) -> AuditLoop:
    return AuditLoop(
        interval_seconds=60,
        read=read,
        kb=kb,
        images=ImageTable.builtin(kb),
        policy=Policy.STRICT,
        metrics=metrics,
        publish=published.append if published is not None else None,
        clock=lambda: WHEN,
    )


def test_one_round_sets_the_gauge_and_publishes_valid_reports(kb: KnowledgeBase) -> None:
    metrics, published = WebhookMetrics(), []
    report = loop(kb, metrics, lambda: SAMPLE, published).run_once()
    assert report is not None
    text = metrics.render()
    error = {"code": "no-compatible-node", "severity": "error"}
    assert sample(text, "cudasched_audit_findings", **error) == 1
    info = {"code": "labels-deprecated-only", "severity": "info"}
    assert sample(text, "cudasched_audit_findings", **info) == 4
    stale = {"code": "stale-requirement", "severity": "warning"}
    assert sample(text, "cudasched_audit_findings", **stale) == 0  # every code, zero included
    assert sample(text, "cudasched_audit_runs_total", result="ok") == 1
    (reports,) = published
    assert len(reports) == 3
    for doc in reports:
        jsonschema.validate(doc, SCHEMA)


def test_a_namespace_whose_findings_are_gone_gets_an_empty_report(kb: KnowledgeBase) -> None:
    metrics, published = WebhookMetrics(), []
    rounds = [SAMPLE, ClusterSnapshot(nodes=SAMPLE.nodes, source="nodes only")]
    audit_loop = loop(kb, metrics, lambda: rounds.pop(0), published)
    audit_loop.run_once()
    audit_loop.run_once()
    first, second = published
    assert {r["metadata"].get("namespace") for r in first} == {None, "team-nlp", "team-vision"}
    cleared = {r["metadata"]["namespace"]: r for r in second if r["kind"] == "PolicyReport"}
    assert set(cleared) == {"team-nlp", "team-vision"}
    assert all(r["results"] == [] and sum(r["summary"].values()) == 0 for r in cleared.values())
    error = {"code": "no-compatible-node", "severity": "error"}
    assert sample(metrics.render(), "cudasched_audit_findings", **error) == 0


def test_a_failed_round_is_counted_and_keeps_the_last_gauge(kb: KnowledgeBase) -> None:
    metrics = WebhookMetrics()
    answers: list[Any] = [SAMPLE, InputError("cannot reach the Kubernetes API server")]

    def read() -> ClusterSnapshot:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    audit_loop = loop(kb, metrics, read, None)
    assert audit_loop.run_once() is not None
    assert audit_loop.run_once() is None
    text = metrics.render()
    assert sample(text, "cudasched_audit_runs_total", result="failed") == 1
    error = {"code": "no-compatible-node", "severity": "error"}
    assert sample(text, "cudasched_audit_findings", **error) == 1


def test_the_audit_settings_default_off_and_refuse_nonsense() -> None:
    assert WebhookConfig().audit.interval_minutes == 0
    with pytest.raises(InputError):
        WebhookConfig.from_mapping({"audit": {"intervalMinutes": -1}})
    with pytest.raises(ValueError):
        AuditLoop(
            interval_seconds=0,
            read=lambda: SAMPLE,
            kb=None,  # type: ignore[arg-type]
            images=None,  # type: ignore[arg-type]
            policy=Policy.STRICT,
            metrics=WebhookMetrics(),
        )


async def test_reports_are_applied_server_side(
    kmock: kmock_lib.KubernetesEmulator, tmp_path: Path, kb: KnowledgeBase
) -> None:
    seen: list[tuple[str, str, str, dict[str, Any]]] = []

    def record(request: kmock_lib.Request) -> kmock_lib.Response:
        body = json.loads(request.text) if request.text else {}
        seen.append((request.method, str(request.url), request.headers.get("Content-Type"), body))
        return kmock_lib.Response(status=200, payload=body)

    config = write_kubeconfig(tmp_path, kmock.url)
    published: list[Any] = []
    loop(kb, WebhookMetrics(), lambda: SAMPLE, published).run_once()
    # The reports of an earlier round exist (kmock's emulator patches only stored objects;
    # a real API server's apply would also create them).
    base = str(kmock.url).rstrip("/") + "/apis/wgpolicyk8s.io/v1alpha2"
    async with httpx.AsyncClient() as client:
        for doc in published[0]:
            ns = doc["metadata"].get("namespace")
            where = f"/namespaces/{ns}/policyreports" if ns else "/clusterpolicyreports"
            stub = {k: doc[k] for k in ("apiVersion", "kind", "metadata")}
            assert (await client.post(base + where, json=stub)).status_code < 300
    kmock[kmock.action.UPDATE] << record
    await asyncio.to_thread(apply_reports, published[0], kubeconfig=config)
    assert len(seen) == 3
    paths = [re.sub(r"^https?://[^/]+", "", url).split("?")[0] for _, url, _, _ in seen]
    assert paths == [
        "/apis/wgpolicyk8s.io/v1alpha2/clusterpolicyreports/cudasched-audit",
        "/apis/wgpolicyk8s.io/v1alpha2/namespaces/team-nlp/policyreports/cudasched-audit",
        "/apis/wgpolicyk8s.io/v1alpha2/namespaces/team-vision/policyreports/cudasched-audit",
    ]
    for method, url, content_type, body in seen:
        assert method == "PATCH" and content_type == "application/apply-patch+yaml"
        assert f"fieldManager={FIELD_MANAGER}" in url and "force=true" in url
        jsonschema.validate(body, SCHEMA)


def test_the_webhook_process_exposes_the_audit_gauge(tmp_path: Path) -> None:
    config = {"audit": {"intervalMinutes": 60}}
    with webhook_process(tmp_path, config=config) as proc:
        found = None
        for _ in range(100):  # the first round runs at start, on its own thread
            text = httpx.get(proc.url + "/metrics", verify=proc.tls(), timeout=5).content
            found = sample(
                text, "cudasched_audit_findings", code="no-compatible-node", severity="error"
            )
            if found is not None:
                break
            time.sleep(0.2)
        assert found == 1, proc.log()
        assert sample(text, "cudasched_audit_runs_total", result="ok") == 1
