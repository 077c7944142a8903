"""Admission decisions: what cudasched answers for a pod, an InferenceService or an
LLMInferenceService.

:class:`Admitter` turns a parsed request (:mod:`cudasched.webhook.review`) and a cluster
snapshot into a :class:`~cudasched.webhook.review.Decision`: resolve the requirement, compile
node-selector terms, merge them into the object's affinity and diff the result into a patch.
Repeats are answered from the memo through :mod:`cudasched.webhook.recall`. The module is pure
(bytes in, bytes out, no clock, no network) so the HTTPS server, the ``cudasched mutate``
command and the tests all run exactly the same code.

Three entry points, one per webhook path:

* **Pod CREATE** is authoritative. It is the only place where the final, merged pod spec is
  visible: KServe replaces runtime ``nodeSelectorTerms`` with InferenceService ones instead of
  ANDing them, and Knative rejects affinity on its Services unless feature flags are on. The
  requirement is ANDed into the pod's own required (or preferred) node affinity.
* **InferenceService CREATE/UPDATE** only records the resolved requirement in an annotation and
  warns, at ``kubectl apply`` time, when no node can run it (writing affinity there is opt-in).
* **LLMInferenceService CREATE/UPDATE** does the same from the service's ``cudasched.io/*``
  annotations or the image its ``template`` names; its pods are constrained on the pod path,
  judged with the service's annotations (from the watch cache) and their ``main`` image.

A GPU workload whose requirement cannot be found is never guessed at: it is admitted
unconstrained with a warning naming the image and the fix (``onUnknownRequirement``: ``warn``,
``allow`` silently, or ``deny`` on CREATE), and counted for the metrics. A runtime whose label
declares less than its image needs is judged by the stricter of the two and said once per
process (:mod:`cudasched.webhook.once`).

The API server fails the user's request with HTTP 500 when a webhook returns a patch that does
not apply, even under ``failurePolicy: Ignore``. Patches therefore come from
:mod:`cudasched.webhook.patch`, which only adds keys under existing parents, and the mutation is
idempotent so ``reinvocationPolicy: IfNeeded`` and KServe's dry-run updates see no change the
second time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import orjson

from cudasched.compat.engine import check
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.vocab.kinds import INFERENCE_SERVICE, LLM_INFERENCE_SERVICE, POD
from cudasched.vocab.objects import annotations_of, metadata_of
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.webhook.config import OnNoFit, WebhookConfig
from cudasched.webhook.limits import (
    body_over_limits,
    over_limits,
    small_body_checks,
    too_deep,
)
from cudasched.webhook.memo import DecisionMemo
from cudasched.webhook.nofit import Placement
from cudasched.webhook.once import FirstSeen, said_once
from cudasched.webhook.patch import Scope, diff
from cudasched.webhook.placer import Placer
from cudasched.webhook.recall import MEMO_MAX_BODY_BYTES, RememberedAnswers, canonical_split
from cudasched.webhook.review import (
    BadReviewError,
    Decision,
    Outcome,
    ReviewRequest,
    clip,
    failure,
    parse_review,
)
from cudasched.webhook.reviewed import (
    copy_decoded,
    declares_requirement,
    placement_of,
    pod_for_mutation,
    set_annotation,
    with_namespace,
)
from cudasched.webhook.unknown import unknown_answer
from cudasched.workloads.kserve import (
    is_kserve_pod,
    merge_scheduling,
)
from cudasched.workloads.kserve.llm import llmisvc_name_of
from cudasched.workloads.pods import is_skipped
from cudasched.workloads.resolution import (
    NeedStatus,
    UnknownRequirement,
    isvc_need,
    llmisvc_need,
    pod_need,
)
from cudasched.workloads.view import Role, view_pod

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.knowledge.images import ImageTable
    from cudasched.webhook.state import ClusterState

__all__ = ["Admitter", "Kind", "Prepared"]

log = logging.getLogger(__name__)

Kind = Literal["pod", "isvc", "llmisvc"]

_EXPECTED_KIND = {
    "pod": (POD.group, POD.kind),
    "isvc": (INFERENCE_SERVICE.group, INFERENCE_SERVICE.kind),
    "llmisvc": (LLM_INFERENCE_SERVICE.group, LLM_INFERENCE_SERVICE.kind),
}


class Prepared(NamedTuple):
    """A parsed review ready to be decided: what :meth:`Admitter.prepare` returns.

    ``key`` identifies everything the decision reads except the uid (``None`` when the request
    cannot be remembered, e.g. an object nested too deeply to serialise)."""

    kind: Kind
    request: ReviewRequest
    key: bytes | None
    raw_rest: bytes | None = None  # the body after its uid, when written like the API server
    problem: str | None = None  # a work limit the body exceeds (then it is not decoded)
    count: bool = True  # whether the object needs the full count of work limits

    @property
    def uid(self) -> str:
        return self.request.uid


class Admitter:
    """Decides admission for pods, InferenceServices and LLMInferenceServices under one
    configuration.

    ``kb`` and ``images`` are loaded once by the caller and shared across requests; the cluster
    snapshot is passed per request because the cache replaces it while the server runs.
    """

    def __init__(self, config: WebhookConfig, kb: KnowledgeBase, images: ImageTable) -> None:
        self.config = config
        self.kb = kb
        self.images = images
        # Compiled terms and merged affinities, remembered (placer.py).
        self.placer = Placer(config, kb)
        # Whole answers per request-without-uid for the current snapshot (see memo.py), found
        # and stored through recall.py.
        self.memo = DecisionMemo(config.decision_cache_bytes)
        self._remembered = RememberedAnswers(self.memo, self._count_unknown)
        # Told where each decided object of a reported kind can run (nofit.py), from the
        # review thread; the server sets it. Never called for dry runs.
        self.on_placement: Callable[[Placement], None] | None = None
        # Told (kind, reason) of every answer, first or remembered, that admits a GPU
        # workload with an unknown requirement (the server counts them); any thread.
        self.on_unknown: Callable[[str, str], None] | None = None
        # Warnings about shared objects already given by this process (once.py).
        self._said = FirstSeen()

    @classmethod
    def from_config(cls, config: WebhookConfig, kb: KnowledgeBase | None = None) -> Admitter:
        """The production Admitter: the bundled knowledge base (unless given) and the built-in
        image table with the configuration's ``imageOverrides`` in front. Reads package data,
        so call it once at start-up, never per request."""
        from cudasched.knowledge import KnowledgeBase
        from cudasched.knowledge.images import ImageTable

        kb = kb if kb is not None else KnowledgeBase.load()
        images = ImageTable.from_config(config, kb=kb)
        return cls(config, kb, images)

    # ------------------------------------------------------------------ entry points

    def review(self, kind: Kind, body: bytes | str, state: ClusterState) -> bytes:
        """The AdmissionReview response for ``body``. Raises
        :class:`~cudasched.webhook.review.BadReviewError` only for bodies that are not an
        AdmissionReview v1; never anything else."""
        found = self.recall_body(kind, body, state)
        if found is not None:
            return found[0]
        prepared = self.prepare(kind, body)
        found = self.recall(prepared, state)
        if found is not None:
            return found[0]
        return self.answer(prepared, state)[0]

    def decide(self, kind: Kind, body: bytes | str, state: ClusterState) -> Decision:
        """Like :meth:`review`, returning the unserialised :class:`Decision` (never
        remembered: the CLI's ``--explain`` and the tests read its fields)."""
        return self._decide(self.prepare(kind, body, key=False), state)

    # The server's path: `recall_body` (no decoding), `prepare` and `recall` are cheap and run
    # on the event loop; `answer` is the decision itself and runs in a review thread under the
    # deadline. `review` chains them for callers without a loop.

    def recall_body(
        self, kind: Kind, body: bytes | str, state: ClusterState
    ) -> tuple[bytes, Outcome] | None:
        """The remembered answer for a body written the way the API server writes reviews,
        found without decoding it, or ``None`` (then :meth:`prepare` and :meth:`recall`)."""
        return self._remembered.find_by_body(kind, body, state)

    def prepare(self, kind: Kind, body: bytes | str, *, key: bool = True) -> Prepared:
        """Parse and validate ``body`` (:class:`~cudasched.webhook.review.BadReviewError` when
        it is not an AdmissionReview v1) and compute its memo keys."""
        if kind not in _EXPECTED_KIND:
            raise InputError(
                f"invalid admission kind {kind!r}: expected 'pod', 'isvc' or 'llmisvc'"
            )
        limits = self.config.limits
        count = True
        if isinstance(body, bytes):
            if len(body) > MEMO_MAX_BODY_BYTES:
                problem = body_over_limits(body, limits)
                if problem is not None:
                    split = canonical_split(body)
                    if split is None:  # no uid to answer with without decoding
                        raise BadReviewError(f"request body too complex: {problem}")
                    uid = split[0].decode("ascii")
                    empty = ReviewRequest(uid, "", "", "", "", "", None)
                    return Prepared(kind, empty, None, None, problem)
            else:
                count = small_body_checks(body, limits)
        req = parse_review(body)
        memo_key = self._remembered.request_key(kind, req, body) if key else None
        raw_rest = self._remembered.raw_rest(body, req.uid) if memo_key is not None else None
        return Prepared(kind, req, memo_key, raw_rest, count=count)

    def recall(self, prepared: Prepared, state: ClusterState) -> tuple[bytes, Outcome] | None:
        """The remembered answer for ``prepared`` under ``state`` with its outcome, or ``None``."""
        if prepared.key is None:
            return None
        return self._remembered.find(prepared.key, prepared.uid, state)

    def answer(self, prepared: Prepared, state: ClusterState) -> tuple[bytes, Outcome]:
        """Decide ``prepared``, serialise the answer and remember it for repeats."""
        decision = self._decide(prepared, state)
        try:
            rendered = decision.render()
        except (TypeError, orjson.JSONEncodeError) as exc:
            # orjson writes at most 254 levels of nesting and a patch may carry the object's
            # own deeper fields: answer by the failure mode rather than raise.
            log.warning("answer for uid=%s could not be written: %s", decision.uid, exc)
            failed = self._internal_error(decision.uid, exc)
            return failed.render(), failed.outcome
        # Decisions that report a placement are not remembered: a repeat (the real request
        # after a server-side dry run) must reach the reporter too. They are InferenceService
        # admissions, rare next to the pods of their replicas. Nor are answers carrying a
        # warning given once: a repeat must not replay it.
        # Nor, with the image resolver on, an unknown answer: the image may be resolved by
        # the next replica, which must then be constrained (docs/design.md, issue 19).
        if (
            prepared.key is not None
            and decision.outcome != "error"
            and decision.placement is None
            and not decision.once
            and not (decision.unknown is not None and self.images.configs is not None)
        ):
            self._remembered.store(prepared.kind, prepared.key, prepared.raw_rest, decision, state)
        if decision.unknown is not None:
            self._count_unknown(decision.unknown)
        observer = self.on_placement
        placement = decision.placement
        if observer is not None and placement is not None and not prepared.request.dry_run:
            observer(placement)
        return rendered, decision.outcome

    def _decide(self, prepared: Prepared, state: ClusterState) -> Decision:
        req = prepared.request
        kind = prepared.kind
        if prepared.problem is not None:
            return self._over_limits(req.uid, prepared.problem)
        try:
            if (req.group, req.kind) != _EXPECTED_KIND[kind] or req.sub_resource:
                return Decision(req.uid, reason=f"not handled: {req.group}/{req.kind}")
            if req.obj is None:
                return Decision(req.uid, reason="request has no object")
            if prepared.count:
                problem = over_limits(req.obj, self.config.limits)
            else:  # the body's bytes already bound every count; only nesting is left
                problem = None if prepared.key is not None else too_deep(req.obj)
            if problem is not None:
                return self._over_limits(req.uid, problem)
            if kind == "pod":
                return self._pod(req, req.obj, state)
            if kind == "llmisvc":
                return self._llmisvc(req, req.obj, state)
            return self._isvc(req, req.obj, state)
        except Exception as exc:  # the API server must always get an answer
            log.exception("admission of %s uid=%s failed", kind, req.uid)
            return self._internal_error(req.uid, exc)

    def _over_limits(self, uid: str, problem: str) -> Decision:
        """The failure mode's answer for an object over the work limits (bad input: HTTP 400
        when denied)."""
        fail_closed = self.config.fail_closed
        return failure(
            uid,
            f"cudasched: {problem}; "
            + ("request denied (failClosed)" if fail_closed else "admitted unchanged"),
            deny=fail_closed,
            code=400,
            reason="over limits",
        )

    def _internal_error(self, uid: str, exc: BaseException) -> Decision:
        """The failure mode's answer when admission itself failed."""
        fail_closed = self.config.fail_closed
        return failure(
            uid,
            f"cudasched: internal error ({type(exc).__name__}); "
            + ("request denied (failClosed)" if fail_closed else "admitted unchanged"),
            deny=fail_closed,
            code=500,
            reason="internal error",
        )

    def _unknown(
        self,
        decision: Decision,
        kind: str,
        unknown: UnknownRequirement | None,
        *,
        may_deny: bool,
    ) -> Decision:
        """``decision`` for a workload whose requirement may be ``unknown`` (unknown.py)."""
        if unknown is None:
            return decision
        setting = self.config.on_unknown_requirement
        return unknown_answer(decision, kind, unknown, setting, may_deny=may_deny)

    def _count_unknown(self, tag: tuple[str, str]) -> None:
        hook = self.on_unknown
        if hook is not None:
            hook(*tag)

    # ------------------------------------------------------------------ shared steps

    def _skipped(self, req: ReviewRequest, obj: Mapping[str, Any]) -> str | None:
        """Why the object is left alone before anything is resolved, or ``None``."""
        if is_skipped(annotations_of(obj)):
            return f"annotation {L.ANN_SKIP}"
        ns = req.namespace or str(metadata_of(obj).get("namespace") or "")
        if not self.config.namespaces.admits(ns):
            return f"namespace {ns!r} excluded"
        if metadata_of(obj).get("deletionTimestamp"):
            return "being deleted"
        return None

    def _policy(self, requirement: Requirement) -> Policy:
        return requirement.policy if requirement.policy is not None else self.config.policy

    def _finish(
        self,
        req: ReviewRequest,
        original: Mapping[str, Any],
        mutated: Mapping[str, Any],
        scopes: Sequence[Scope],
        *,
        record: str,
        no_fit: str | None,
        may_deny: bool,
        notes: tuple[str, ...] = (),
    ) -> Decision:
        """Apply ``onNoFit`` and turn the mutation into a patch (none when nothing changed).
        ``notes`` are warnings given once (:func:`~cudasched.webhook.once.said_once`), kept
        whatever the outcome."""
        warnings: tuple[str, ...] = notes
        audit = {"requirement": record} if record else {}
        if no_fit is not None:
            if self.config.on_no_fit is OnNoFit.DENY and may_deny:
                return Decision(
                    req.uid,
                    allowed=False,
                    code=403,
                    message=no_fit,
                    warnings=notes,
                    outcome="denied",
                    requirement=record,
                    reason="no node fits",
                    audit=audit,
                    once=bool(notes),
                )
            if self.config.on_no_fit is not OnNoFit.ALLOW:
                warnings = (clip(no_fit), *notes)
        ops = diff(original, mutated, scopes)
        return Decision(
            req.uid,
            patch=tuple(ops),
            warnings=warnings,
            outcome="patched" if ops else "unchanged",
            requirement=record,
            reason="constrained" if ops else "already constrained",
            audit=audit,
            once=bool(notes),
        )

    # ------------------------------------------------------------------ pods

    def _pod(self, req: ReviewRequest, pod: Mapping[str, Any], state: ClusterState) -> Decision:
        if req.operation != "CREATE":
            return Decision(req.uid, reason=f"operation {req.operation}")
        why = self._skipped(req, pod)
        if why is not None:
            return Decision(req.uid, reason=f"skipped: {why}")
        spec = pod.get("spec")
        if not isinstance(spec, Mapping):
            return Decision(req.uid, reason="pod has no spec")
        try:
            return self._pod_checked(req, pod, spec, state)
        except InputError as exc:
            # The pod says something we cannot read (a bad annotation value, a malformed
            # quantity): never block it for that, but tell the user at once.
            return Decision(
                req.uid,
                warnings=(clip(f"cudasched: pod not constrained: {exc}"),),
                reason=f"unreadable: {exc}",
            )

    def _pod_checked(
        self,
        req: ReviewRequest,
        pod: Mapping[str, Any],
        spec: Mapping[str, Any],
        state: ClusterState,
    ) -> Decision:
        declared = declares_requirement(pod)
        view = view_pod(pod)
        if not declared:
            view.checked()  # an undeclared pod is judged by what it requests: read it all
        model_server = view.role is Role.MODEL_SERVER  # may take its GPUs from the configs
        if not declared and not view.requests_gpu and not model_server:
            # Only pods that use a GPU, or say what they need, are ever constrained.
            return Decision(req.uid, reason="no GPU and no declared requirement")
        kserve_pod = is_kserve_pod(pod) or model_server
        if not (kserve_pod or declared or self.config.constrain_gpu_pods_by_image):
            return Decision(req.uid, reason="GPU pod outside KServe (constrainGpuPodsByImage off)")

        full = with_namespace(pod, req.namespace)
        ns = str(full["metadata"].get("namespace") or "")
        choice = service = None
        if model_server:
            service_name = llmisvc_name_of(pod)
            service = state.llm_inference_service(ns, service_name) if service_name else None
        elif view.role is Role.PREDICTOR:
            isvc_name = view.owner
            choice = state.runtime_of(ns, isvc_name) if isvc_name else None
        need = pod_need(full, choice, self.images.per_request(), self.kb, service=service)
        if need.status is not NeedStatus.KNOWN:
            nothing = Decision(req.uid, reason="no requirement to enforce")
            return self._unknown(nothing, "Pod", need.unknown, may_deny=True)
        requirement = need.requirement

        policy = self._policy(requirement)
        record = requirement.record(policy)
        node_name = spec.get("nodeName")
        if isinstance(node_name, str) and node_name:
            return self._named_node(req, node_name, requirement, policy, record, state)
        terms, no_fit, _key = self.placer.compile(requirement, policy, state)
        notes = said_once(self._said, requirement, "Pod", choice, ns)

        mutated = pod_for_mutation(pod)
        if terms is not None:
            try:
                # Called even when `terms` is empty: the merge also replaces cudasched's own
                # earlier terms (recognised by their marker); the pod's own expressions, on any
                # key, are kept and ANDed with ours.
                mutated["spec"] = self.placer.merge(spec, terms)
            except InputError as exc:
                # The pod's own affinity cannot be combined with ours (malformed, or the cross
                # product would explode): admit it as it is and say why.
                return self._unconstrained(req, record, str(exc), notes)
        set_annotation(mutated, L.ANN_REQUIREMENT, record)
        scopes = (Scope(("metadata", "annotations")), Scope(("spec", "affinity")))
        return self._finish(
            req,
            pod,
            mutated,
            scopes,
            record=record,
            no_fit=no_fit,
            may_deny=True,
            notes=notes,
        )

    def _named_node(
        self,
        req: ReviewRequest,
        node: str,
        requirement: Requirement,
        policy: Policy,
        record: str,
        state: ClusterState,
    ) -> Decision:
        """A pod whose creator named its node (``spec.nodeName``) skips the scheduler: the
        kubelet rejects a pod whose required node affinity excludes its own node, so no affinity
        is added; when the cache knows the node cannot run the pod, the answer warns."""
        facts = state.facts_of(node)
        reason = f"spec.nodeName {node} set: not scheduled, left alone"
        if facts is None:
            return Decision(req.uid, requirement=record, reason=reason)
        verdict = check(facts, requirement, policy, self.kb)
        if verdict.compatible:
            return Decision(req.uid, requirement=record, reason=reason)
        why = "; ".join(dict.fromkeys(r.message for r in verdict.reasons if r.blocking))
        return Decision(
            req.uid,
            warnings=(clip(f"cudasched: node {node} (spec.nodeName) cannot run {record}: {why}"),),
            requirement=record,
            reason=reason,
        )

    def _unconstrained(
        self, req: ReviewRequest, record: str, why: str, notes: tuple[str, ...] = ()
    ) -> Decision:
        # The reason first: a clipped warning must still say what went wrong.
        text = clip(f"cudasched: not constrained ({why}); requirement {record}")
        return Decision(
            req.uid,
            warnings=(*notes, text),
            requirement=record,
            reason=why,
            once=bool(notes),
        )

    # ------------------------------------------------------------------ InferenceServices

    def _isvc(self, req: ReviewRequest, isvc: Mapping[str, Any], state: ClusterState) -> Decision:
        return self._service(req, isvc, state, self._isvc_checked)

    def _service(
        self,
        req: ReviewRequest,
        service: Mapping[str, Any],
        state: ClusterState,
        checked: Callable[[ReviewRequest, Mapping[str, Any], ClusterState], Decision],
    ) -> Decision:
        """The gate every service kind shares: CREATE and UPDATE only, the skip rules, and a
        value that does not parse answered with a warning instead of an error."""
        if req.operation not in ("CREATE", "UPDATE"):
            return Decision(req.uid, reason=f"operation {req.operation}")
        why = self._skipped(req, service)
        if why is not None:
            return Decision(req.uid, reason=f"skipped: {why}")
        try:
            return checked(req, service, state)
        except InputError as exc:
            return Decision(
                req.uid,
                warnings=(clip(f"cudasched: requirement not resolved: {exc}"),),
                reason=f"unreadable: {exc}",
            )

    def _isvc_checked(
        self, req: ReviewRequest, isvc: Mapping[str, Any], state: ClusterState
    ) -> Decision:
        full = with_namespace(isvc, req.namespace)
        choice = state.select_runtime_for(full)
        need = isvc_need(full, choice, self.images.per_request(), self.kb)
        runtime = choice.obj if choice is not None else None

        mutated = copy_decoded(isvc)
        ann_scope = Scope(("metadata", "annotations"))
        if need.status is not NeedStatus.KNOWN:
            return self._unknown(
                self._nothing_to_record(req, isvc, full, mutated),
                "InferenceService",
                need.unknown,
                may_deny=req.operation == "CREATE",
            )
        requirement = need.requirement

        policy = self._policy(requirement)
        record = requirement.record(policy)
        terms, no_fit, key = self.placer.compile(requirement, policy, state)
        ns = str(full["metadata"].get("namespace") or "")
        notes = said_once(self._said, requirement, "InferenceService", choice, ns)
        placement = placement_of(req, full, no_fit, (key, terms) if terms is not None else None)
        set_annotation(mutated, L.ANN_REQUIREMENT, record)
        scopes = [ann_scope]
        spec = mutated.get("spec")
        predictor = spec.get("predictor") if isinstance(spec, dict) else None
        if self.config.isvc_affinity and terms is not None and isinstance(predictor, dict):
            # KServe replaces the runtime's node-selector terms with the InferenceService's
            # (strategic merge, no merge key), so the runtime's affinity is folded in first.
            runtime_spec = (runtime or {}).get("spec")
            runtime_aff = (
                runtime_spec.get("affinity") if isinstance(runtime_spec, Mapping) else None
            )
            base = merge_scheduling(runtime_aff, predictor.get("affinity"))
            try:
                merged = self.placer.merge({"affinity": base} if base else {}, terms)
            except InputError as exc:
                unconstrained = self._unconstrained(req, record, str(exc), notes)
                return replace(unconstrained, placement=placement)
            if merged.get("affinity"):
                predictor["affinity"] = merged["affinity"]
                scopes.append(Scope(("spec", "predictor", "affinity")))
        # Denying an UPDATE could wedge a service whose nodes went away (finalizer removal is
        # an UPDATE too), so only a CREATE is ever refused.
        decision = self._finish(
            req,
            isvc,
            mutated,
            scopes,
            record=record,
            no_fit=no_fit,
            may_deny=req.operation == "CREATE",
            notes=notes,
        )
        return replace(decision, placement=placement)

    def _nothing_to_record(
        self,
        req: ReviewRequest,
        original: Mapping[str, Any],
        full: Mapping[str, Any],
        mutated: dict[str, Any],
    ) -> Decision:
        """A service with no requirement to enforce: drop a stale record left by an earlier
        version of the object, and clear what the no-fit reporter knew of it."""
        set_annotation(mutated, L.ANN_REQUIREMENT, None)
        ops = diff(original, mutated, (Scope(("metadata", "annotations")),))
        return Decision(
            req.uid,
            patch=tuple(ops),
            outcome="patched" if ops else "unchanged",
            reason="no requirement to enforce",
            placement=placement_of(req, full, None, None),
        )

    # ------------------------------------------------------------------ LLMInferenceServices

    def _llmisvc(
        self, req: ReviewRequest, service: Mapping[str, Any], state: ClusterState
    ) -> Decision:
        return self._service(req, service, state, self._llmisvc_checked)

    def _llmisvc_checked(
        self, req: ReviewRequest, service: Mapping[str, Any], state: ClusterState
    ) -> Decision:
        """Like an InferenceService: the requirement recorded in an annotation and the no-fit
        warning (and Event). Its pods are constrained on the pod path; no affinity is written
        into the service."""
        full = with_namespace(service, req.namespace)
        need = llmisvc_need(full, self.images.per_request(), self.kb)
        mutated = copy_decoded(service)
        if need.status is not NeedStatus.KNOWN:
            return self._unknown(
                self._nothing_to_record(req, service, full, mutated),
                "LLMInferenceService",
                need.unknown,
                may_deny=req.operation == "CREATE",
            )
        requirement = need.requirement
        policy = self._policy(requirement)
        record = requirement.record(policy)
        terms, no_fit, key = self.placer.compile(requirement, policy, state)
        placement = placement_of(req, full, no_fit, (key, terms) if terms is not None else None)
        set_annotation(mutated, L.ANN_REQUIREMENT, record)
        decision = self._finish(
            req,
            service,
            mutated,
            (Scope(("metadata", "annotations")),),
            record=record,
            no_fit=no_fit,
            may_deny=req.operation == "CREATE",
        )
        return replace(decision, placement=placement)
