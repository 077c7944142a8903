"""One answer about a workload's requirement, everywhere (issue 19 item 1): for every workload
of the bundled sample cluster, ``mutate`` (the Admitter), ``explain``, ``audit`` and the
report's matrix say the same thing: known, unknown (with the same reason and words) or none.
"""

from __future__ import annotations

import orjson
import pytest

from cudasched.cli.explain import explain_snapshot
from cudasched.cluster.fleet import Fleet
from cudasched.cluster.snapshot import ClusterSnapshot, bundled_snapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.images import ImageTable
from cudasched.operations.audit import audit
from cudasched.operations.pools import node_pools
from cudasched.operations.refs import object_ref
from cudasched.operations.report.matrix import CellStatus, compatibility_matrix
from cudasched.operations.runtimes import runtime_rows
from cudasched.settings.config import WebhookConfig
from cudasched.vocab.labels import LabelScheme
from cudasched.vocab.requirements import Policy
from cudasched.webhook.admission.admitter import Admitter
from cudasched.webhook.admission.review import creation_review
from cudasched.webhook.state.clusterstate import ClusterState
from cudasched.workloads.pods import workload_id
from cudasched.workloads.resolution import NeedStatus, workload_need


@pytest.fixture(scope="module")
def sample() -> ClusterSnapshot:
    return bundled_snapshot()


def _mutate_status(admitter: Admitter, state: ClusterState, obj: dict, kind: str) -> str:
    body = orjson.dumps(creation_review(obj, uid="00000000-0000-4000-8000-000000000001"))
    decision = admitter.decide(kind, body, state)  # type: ignore[arg-type]
    if decision.unknown is not None:
        return "unknown"
    return "known" if decision.requirement else "none"


def test_every_command_gives_the_same_answer(sample: ClusterSnapshot, kb: KnowledgeBase) -> None:
    images = ImageTable.builtin(kb)
    fleet = Fleet.from_snapshot(sample, kb)
    admitter = Admitter(WebhookConfig(), kb, images)
    state = ClusterState.from_snapshot(sample, kb=kb)
    workloads = [*sample.pods, *sample.inference_services]
    explained = explain_snapshot(workloads, fleet, Policy.STRICT, LabelScheme.AUTO, images)
    findings = audit(sample, fleet, images).findings
    unknown_refs = {f.object for f in findings if f.code == "requirement-unknown"}
    statuses: dict[str, str] = {}
    for obj, item in zip(workloads, explained, strict=True):
        _, need = workload_need(obj, fleet, images)
        kind = "isvc" if obj.get("kind") == "InferenceService" else "pod"
        said = {
            "need": need.status.value,
            "explain": item.explanation.status.value,
            "mutate": _mutate_status(admitter, state, obj, kind),
        }
        assert len(set(said.values())) == 1, (workload_id(obj), said)
        statuses[workload_id(obj)] = need.status.value
        if need.unknown is not None:
            assert item.explanation.summary()["warnings"] == list(need.unknown.warnings())
        if kind == "isvc":  # the audit speaks of services (their pods are covered by them)
            assert (object_ref(obj) in unknown_refs) == (need.status is NeedStatus.UNKNOWN)
    # The sample holds all three answers, each more than a token number of times.
    counts = {s: list(statuses.values()).count(s) for s in ("known", "unknown", "none")}
    assert len(statuses) == len(workloads) == 17
    assert all(counts[s] >= 1 for s in counts), counts
    # The report's runtimes: a runtime of unknown CUDA is never shown as "no requirement".
    rows = runtime_rows(fleet, images)
    matrix = compatibility_matrix(rows, node_pools(sample, fleet), Policy.STRICT, kb)
    unknown_rows = [r.ref for r in rows if r.unknown is not None]
    assert unknown_rows == ["ClusterServingRuntime/kserve-torchserve"]
    for row, cells in zip(matrix.rows, matrix.cells, strict=True):
        if row.unknown is not None:
            assert {c.status for c in cells} == {CellStatus.UNKNOWN}
