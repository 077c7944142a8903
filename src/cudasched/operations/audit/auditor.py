"""``audit``: what is wrong in a cluster right now, as findings with a fix.

Pure: a cluster snapshot and its fleet in, an
:class:`~cudasched.operations.audit.findings.AuditReport`
out. Every rule is an existing one, asked again of objects that already exist:

* a workload's requirement is what the webhook would enforce
  (:func:`cudasched.workloads.resolution.resolve_workload`, LLMInferenceServices included; runtimes
  through :func:`~cudasched.workloads.sources.resolve_runtime`), so a CPU workload has none and
  never
  gets a workload finding, and ``cudasched.io/skip`` leaves a workload out as it does at admission;
  LLMInferenceServices and their pods are read by :mod:`cudasched.workloads.kserve.llm`;
* verdicts are :func:`cudasched.compat.engine.check` on the fleet's node facts, under the workload's
  own policy when it names one, else the audit's
  (:class:`~cudasched.operations.reach.FleetVerdicts`);
* node facts and the label source decisions use are
:func:`cudasched.nodes.facts.facts_from_labels`'s;
* the recorded requirement is :meth:`cudasched.vocab.requirements.Requirement.record`'s text.

Objects a finding is about: pods bound to a node are judged one by one (each may sit on a
different node); "no node can run it" and "requirement unknown" are said once per service, so the
pods of an InferenceService or LLMInferenceService that the snapshot lists are covered by it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import date
from typing import TYPE_CHECKING

from cudasched.operations.audit.context import AuditContext
from cudasched.operations.audit.drarules import dra_findings
from cudasched.operations.audit.findings import (
    AuditReport,
    Finding,
)
from cudasched.operations.audit.knowledgerules import DEFAULT_MAX_AGE_DAYS, knowledge_findings
from cudasched.operations.audit.kueuerules import kueue_findings
from cudasched.operations.audit.lifecycle import lifecycle_findings
from cudasched.operations.audit.nodegroups import NodeGroup
from cudasched.operations.audit.noderules import node_findings
from cudasched.operations.audit.workloadrules import (
    pod_findings,
    runtime_findings,
    service_findings,
)
from cudasched.operations.pools import node_pools
from cudasched.operations.refs import object_ref
from cudasched.vocab.requirements import Policy

if TYPE_CHECKING:
    from cudasched.cluster.fleet import Fleet
    from cudasched.cluster.snapshot import ClusterSnapshot
    from cudasched.knowledge.images import ImageTable

__all__ = ["Progress", "audit", "object_ref"]

#: Called after each object is checked with (objects done, objects in all).
Progress = Callable[[int, int], None]


def audit(
    snapshot: ClusterSnapshot,
    fleet: Fleet,
    images: ImageTable,
    policy: Policy = Policy.STRICT,
    *,
    progress: Progress | None = None,
    node_groups: Sequence[NodeGroup] = (),
    today: date | None = None,
    min_support_months: int = 12,
    max_knowledge_age_days: int = DEFAULT_MAX_AGE_DAYS,
) -> AuditReport:
    """Audit a cluster: ``fleet`` must be built from ``snapshot`` (same nodes and KServe
    objects); ``policy`` is the default for workloads that do not name one, as the webhook's
    configured policy is. ``progress`` is told how far the audit has got. ``node_groups``
    (with the Karpenter and Cluster API groups the snapshot declares) may give a pending
    workload no node can run a home once scaled up from zero. With ``today`` each pool's driver
    branch is judged by its lifecycle on that date (ended, legacy, ending within
    ``min_support_months``), and the knowledge is reported when it is older than
    ``max_knowledge_age_days`` (:mod:`~cudasched.operations.audit.knowledgerules`)."""
    ctx = AuditContext(snapshot, fleet, images, policy, node_groups, today)
    services = len(snapshot.inference_services) + len(snapshot.llm_inference_services)
    runtimes = len(fleet.cluster_serving_runtimes) + sum(1 for _ in fleet.all_serving_runtimes())
    steps = (
        (node_findings, len(snapshot.nodes)),
        (runtime_findings, runtimes),
        (pod_findings, len(snapshot.pods)),
        (service_findings, services),
    )
    total = sum(count for _, count in steps)
    findings: list[Finding] = []
    done = 0
    for step, count in steps:
        findings.extend(step(ctx))
        done += count
        if progress is not None:
            progress(done, total)
    if today is not None:
        findings.extend(
            lifecycle_findings(node_pools(snapshot, fleet), fleet.kb, today, min_support_months)
        )
    findings.extend(knowledge_findings(ctx, today, max_knowledge_age_days))
    findings.extend(dra_findings(snapshot))
    findings.extend(kueue_findings(snapshot, fleet))
    return AuditReport.of(findings)
