"""The audit's rules about the knowledge itself: knowledge too old, facts the cluster
contradicts, and placements a change of knowledge would move.

* **knowledge-stale**: the bundle's date (the day its newest fact was read) is more than the
  allowed number of days before the audit's date: newer drivers, GPUs and images are then
  unknown to every decision.
* **driver-release-unknown**: a node runs a driver newer than every release of its branch the
  knowledge knows (or of a branch it does not know): the cluster is ahead of the knowledge.
* **gpu-unknown**: a node's GPU product is not in the knowledge: its first driver and
  data-center class are unknown, and without a compute-capability label its architecture too.
* **placement-moved**: a pod admitted under other knowledge. Its recorded requirement
  (``cudasched.io/requirement``) is what it resolves to now, but the node-affinity terms the
  webhook wrote (the part after ``cudasched.io/injected``) select other nodes than the current
  knowledge compiles for that requirement: a bundle changed a fact under it. The nodes each
  selects are compared, not the terms, so a change of wording (a term written another way, a
  label scheme) that selects the same nodes is no finding.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import date
from typing import Any

from cudasched.operations.audit.context import AuditContext
from cudasched.operations.audit.findings import (
    DRIVER_RELEASE_UNKNOWN,
    GPU_UNKNOWN,
    KNOWLEDGE_STALE,
    PLACEMENT_MOVED,
    Finding,
)
from cudasched.operations.refs import finished, names, node_name, object_ref
from cudasched.placement.compile import compile_requirement
from cudasched.placement.merge import INJECTED_KEY
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.vocab.labels import LabelScheme
from cudasched.vocab.nodeaffinity import NodeSelector
from cudasched.vocab.nodeterms import NodeSelectorError
from cudasched.vocab.objects import annotations_of, name_of
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.vocab.versions import DriverVersion

__all__ = ["DEFAULT_MAX_AGE_DAYS", "knowledge_findings"]

#: How old the knowledge may be before the audit says so: a quarter of NVIDIA's monthly driver
#: releases and then some.
DEFAULT_MAX_AGE_DAYS = 120


def knowledge_findings(
    ctx: AuditContext, today: date | None, max_age_days: int = DEFAULT_MAX_AGE_DAYS
) -> Iterator[Finding]:
    if today is not None:
        yield from _stale(ctx, today, max_age_days)
    yield from _contradicted(ctx)
    for pod in ctx.snapshot.pods:
        if not finished(pod):
            yield from _moved(ctx, pod)


def _stale(ctx: AuditContext, today: date, max_age_days: int) -> Iterator[Finding]:
    provenance = ctx.kb.provenance
    age = provenance.age_days(today)
    if age is None or age <= max_age_days:
        return
    yield Finding(
        KNOWLEDGE_STALE,
        f"KnowledgeBundle/{provenance.version}",
        f"the knowledge decisions rest on ({provenance.describe()}) is {age} days old on "
        f"{today.isoformat()}, more than the {max_age_days} allowed: drivers, GPUs and images "
        "published since are unknown to it",
        fix="follow a published knowledge bundle (cudasched --knowledge REF; the webhook's "
        "knowledge reference) or update cudasched (docs/guide/knowledge.md)",
    )


def _contradicted(ctx: AuditContext) -> Iterator[Finding]:
    for node in ctx.snapshot.nodes:
        ref, name = object_ref(node), name_of(node)
        facts = ctx.verdicts.facts_of(name)
        if facts is None or not facts.has_gpu:
            continue
        if facts.driver is not None:
            yield from _newer_driver(ctx, ref, name, facts.driver)
        for product in facts.products:
            if ctx.kb.gpu(product) is None and not ctx.kb.truncated_product(product):
                yield Finding(
                    GPU_UNKNOWN,
                    ref,
                    f"runs GPU {product!r}, which the knowledge does not know: its first driver "
                    "and data-center class are unknown"
                    + ("" if facts.compute is not None else ", and so is its architecture"),
                    node=name,
                    fix="add the GPU in a knowledge overlay (gpus.yaml) or follow a newer bundle "
                    "(docs/guide/knowledge.md)",
                )


def _newer_driver(
    ctx: AuditContext, ref: str, name: str, driver: DriverVersion
) -> Iterator[Finding]:
    branch = driver.major
    newest = ctx.kb.drivers.release_on(branch)
    if newest is not None and driver <= newest.version:
        return
    known = (
        f"its newest known release is {newest.version}"
        if newest is not None
        else f"it knows no release of R{branch}"
    )
    yield Finding(
        DRIVER_RELEASE_UNKNOWN,
        ref,
        f"runs driver {driver}, newer than every R{branch} release the knowledge knows ({known}): "
        "the cluster is ahead of the knowledge",
        node=name,
        fix="follow a newer knowledge bundle, or add the release in a knowledge overlay "
        "(drivers.yaml latest_releases; docs/guide/knowledge.md)",
    )


def _injected(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The node-selector terms the webhook wrote into ``pod``: each required term's
    expressions after the marker."""
    spec = pod.get("spec")
    affinity = spec.get("affinity") if isinstance(spec, Mapping) else None
    node = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    required = (
        node.get("requiredDuringSchedulingIgnoredDuringExecution")
        if isinstance(node, Mapping)
        else None
    )
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    ours: list[dict[str, Any]] = []
    for term in terms if isinstance(terms, list) else ():
        exprs = term.get("matchExpressions") if isinstance(term, Mapping) else None
        keys = [e.get("key") if isinstance(e, Mapping) else None for e in exprs or ()]
        if isinstance(exprs, list) and INJECTED_KEY in keys:
            after = exprs[keys.index(INJECTED_KEY) + 1 :]
            if after:
                ours.append({"matchExpressions": after})
    return ours


def _scheme_of(terms: list[dict[str, Any]]) -> tuple[LabelScheme, str]:
    """The label scheme (and GFD key generation) the recorded terms were written in."""
    keys = {e.get("key") for t in terms for e in t["matchExpressions"] if isinstance(e, Mapping)}
    if any(isinstance(k, str) and k.startswith(L.PREFIX) for k in keys):
        return LabelScheme.CUDASCHED, "new"
    deprecated = {L.GFD_OLD_CUDA_MAJOR, L.GFD_OLD_DRIVER_MAJOR, L.GFD_OLD_DRIVER_MINOR}
    return LabelScheme.GFD, "deprecated" if keys & deprecated else "new"


def _moved(ctx: AuditContext, pod: Mapping[str, Any]) -> Iterator[Finding]:
    recorded = annotations_of(pod).get(L.ANN_REQUIREMENT)
    written = _injected(pod)
    if not isinstance(recorded, str) or not written:
        return
    found = ctx.resolve_pod(pod)
    req = found.req
    policy = _recorded_policy(req, recorded)
    if found.error is not None or found.skipped or policy is None:
        return  # unreadable, skipped, or no longer the recorded requirement (stale-requirement)
    scheme, keys = _scheme_of(written)
    try:
        # written under placement.boundCudaClass when the terms bound the class: compare like
        bound = any(
            isinstance(e, Mapping) and e.get("key") == L.CUDA_CODE
            for t in written
            for e in t["matchExpressions"]
        )
        now = compile_requirement(req, policy, scheme, ctx.kb, keys, class_bound=bound)
        before = NodeSelector({"nodeSelectorTerms": written})
        after = NodeSelector({"nodeSelectorTerms": now})
    except (InputError, NodeSelectorError):
        return
    nodes = ctx.fleet.nodes
    was = {n.name for n in nodes if before.match(n)}
    is_now = {n.name for n in nodes if after.match(n)}
    if was == is_now:
        return
    yield _moved_finding(pod, recorded, sorted(was - is_now), sorted(is_now - was))


def _recorded_policy(req: Requirement, recorded: str) -> Policy | None:
    """The policy the recorded requirement was admitted under, when it is ``req``'s record."""
    if req.is_empty:
        return None
    return next((p for p in Policy if req.record(p) == recorded), None)


def _moved_finding(
    pod: Mapping[str, Any], recorded: str, excluded: list[str], admitted: list[str]
) -> Finding:
    parts = []
    if excluded:
        parts.append(
            f"the knowledge no longer admits {len(excluded)} node(s) it was placed for "
            f"({names(excluded)})"
        )
    if admitted:
        parts.append(f"it now admits {len(admitted)} more ({names(admitted)})")
    node = node_name(pod)
    where = f"; it runs on {node}" if node else ""
    if node in excluded:
        where += ", one of those"
    return Finding(
        PLACEMENT_MOVED,
        object_ref(pod),
        f"admitted for {recorded!r} under other knowledge: {'; '.join(parts)}{where}",
        node=node,
        fix="check what changed (cudasched knowledge diff OLD NEW); recreate the pod so "
        "admission writes the current placement, or pin the knowledge the cluster follows to "
        "the bundle it was admitted under",
    )
