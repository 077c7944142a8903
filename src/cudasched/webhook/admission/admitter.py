"""Admission decisions: what cudasched answers for a pod, an InferenceService or an
LLMInferenceService.

:class:`Admitter` turns a parsed request (:mod:`cudasched.webhook.admission.review`) and a cluster
snapshot into a :class:`~cudasched.webhook.admission.review.Decision`: resolve the requirement,
compile node-selector terms, merge them into the object's affinity and diff the result into a patch.
Repeats are answered from the memo through :mod:`cudasched.webhook.admission.recall`. The module is
pure (bytes in, bytes out, no clock, no network) so the HTTPS server, the ``cudasched mutate``
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
process (:mod:`cudasched.webhook.admission.once`).

The API server fails the user's request with HTTP 500 when a webhook returns a patch that does
not apply, even under ``failurePolicy: Ignore``. Patches therefore come from
:mod:`cudasched.webhook.admission.patch`, which only adds keys under existing parents, and the
mutation is idempotent so ``reinvocationPolicy: IfNeeded`` and KServe's dry-run updates see no
change the second time."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Literal, NamedTuple, Self

import orjson

from cudasched.settings.config import WebhookConfig
from cudasched.vocab.errors import InputError
from cudasched.vocab.kinds import INFERENCE_SERVICE, LLM_INFERENCE_SERVICE, POD, RESOURCE_CLAIM
from cudasched.webhook.admission.claimrules import admit_claim
from cudasched.webhook.admission.limits import (
    body_over_limits,
    nesting_bounded,
    over_limits,
    small_body_checks,
    too_deep,
)
from cudasched.webhook.admission.once import FirstSeen
from cudasched.webhook.admission.placer import Deferred, Placer, cheap_only
from cudasched.webhook.admission.podrules import admit_pod
from cudasched.webhook.admission.recall import (
    MEMO_MAX_BODY_BYTES,
    RememberedAnswers,
    canonical_split,
)
from cudasched.webhook.admission.review import (
    BadReviewError,
    Decision,
    Outcome,
    Placement,
    ReviewRequest,
    failure,
    parse_review,
)
from cudasched.webhook.admission.reviewed import WORKLOAD_KINDS
from cudasched.webhook.admission.servicerules import admit_isvc, admit_llmisvc
from cudasched.webhook.admission.steps import PodSource, RuleContext, RuntimeSource
from cudasched.webhook.admission.templaterules import admit_template
from cudasched.webhook.memo.decisions import DecisionMemo

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.knowledge.images import ImageTable
    from cudasched.webhook.state.clusterstate import ClusterState

__all__ = ["Admitter", "Kind", "Prepared"]

log = logging.getLogger(__name__)

Kind = Literal["pod", "isvc", "llmisvc", "workload", "claim"]

#: The ``(group, kind)`` each endpoint decides.
_EXPECTED_KINDS: dict[str, frozenset[tuple[str, str]]] = {
    "pod": frozenset({(POD.group, POD.kind)}),
    "isvc": frozenset({(INFERENCE_SERVICE.group, INFERENCE_SERVICE.kind)}),
    "llmisvc": frozenset({(LLM_INFERENCE_SERVICE.group, LLM_INFERENCE_SERVICE.kind)}),
    "workload": WORKLOAD_KINDS,
    "claim": frozenset({(RESOURCE_CLAIM.group, RESOURCE_CLAIM.kind)}),
}
#: The kinds whose answers are never remembered: a claim's answer reads its pod, which the
#: request does not hold.
_NOT_REMEMBERED = frozenset({"claim"})


def _log_decision(req: ReviewRequest, decision: Decision) -> None:
    """One line per decision (``--log-level debug``): what was decided for which object, and
    why, to follow a live cluster's admissions. Answers the memo recalls are not decisions and
    are not logged."""
    meta = req.obj.get("metadata") if isinstance(req.obj, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else {}
    name = meta.get("name") or meta.get("generateName") or "?"
    log.debug(
        "decided %s %s %s/%s uid=%s: %s (%s)%s%s",
        req.operation,
        req.kind,
        req.namespace,
        name,
        req.uid,
        decision.outcome,
        decision.reason,
        f"; requirement {decision.requirement}" if decision.requirement else "",
        f"; {len(decision.warnings)} warning(s)" if decision.warnings else "",
    )


class Prepared(NamedTuple):
    """A parsed review ready to be decided: what :meth:`Admitter.prepare` returns.

    ``key`` identifies everything the decision reads except the uid (``None`` when the request
    cannot be remembered, e.g. an object nested too deeply to serialise)."""

    kind: Kind
    request: ReviewRequest
    key: bytes | None
    raw_rest: bytes | None = None  # the body after its uid, when written like the API server
    problem: str | None = None  # a work limit the body exceeds (then it is not decoded)
    full_count: bool = True  # whether the object needs the full count of work limits
    shallow: bool = False  # whether the body's bytes prove it nests within the limit

    @property
    def uid(self) -> str:
        return self.request.uid


class Admitter:
    """Decides admission for pods, InferenceServices and LLMInferenceServices under one
    configuration: the server's :class:`~cudasched.webhook.server.app.StagedAdmission`.

    ``kb`` and ``images`` are loaded once by the caller and shared across requests (``images``
    with the image resolver in it when that is on: ``server/assembly`` builds it so); the
    cluster snapshot is passed per request because the cache replaces it while the server
    runs. The rules (``podrules``, ``servicerules``) are handed what they read as one
    :class:`~cudasched.webhook.admission.steps.RuleContext`, built here once.
    """

    def __init__(
        self,
        config: WebhookConfig,
        kb: KnowledgeBase,
        images: ImageTable,
        runtimes: RuntimeSource | None = None,
        pods: PodSource | None = None,
    ) -> None:
        # What every rule reads: the settings, the knowledge, the image table, the placer
        # (compiled terms and merged affinities, remembered), the warnings about shared
        # objects this process has given once (once.py) and where runtimes the snapshot
        # lacks are read (the API server, when the server serves a live cluster).
        # The pod a ResourceClaim was made for is read the same way (claimrules.py).
        self.rules = RuleContext(
            config, kb, images, Placer(config, kb), FirstSeen(), runtimes, pods
        )
        self._limits = config.limits
        # With the image resolver on, a look-up may wait for a resolution in flight, and an
        # unknown answer is not remembered (the next replica may find the image resolved).
        self._resolving = images.configs is not None
        # Whole answers per request-without-uid for the current snapshot (memo/decisions.py),
        # found and stored through recall.py.
        self.memo = DecisionMemo(config.decision_cache_bytes)
        self._remembered = RememberedAnswers(self.memo, self._count_unknown, self._report)
        # Told where each decided object of a reported kind can run (nofit.py), from the
        # review thread; the server sets it. Never called for dry runs.
        self.on_placement: Callable[[Placement], None] | None = None
        # Told (kind, reason) of every answer, first or remembered, that admits a GPU
        # workload with an unknown requirement (the server counts them); any thread.
        self.on_unknown: Callable[[str, str], None] | None = None

    @property
    def config(self) -> WebhookConfig:
        return self.rules.config

    @property
    def kb(self) -> KnowledgeBase:
        return self.rules.kb

    @property
    def images(self) -> ImageTable:
        return self.rules.images

    @property
    def placer(self) -> Placer:
        return self.rules.placer

    def _report(self, placement: Placement) -> None:
        """Tell ``on_placement`` of a recalled answer's placement (a pod's report of its
        controller, so that every replica's pods are swept for their Events)."""
        observer = self.on_placement
        if observer is not None:
            observer(placement)

    def _count_unknown(self, tag: tuple[str, str]) -> None:
        hook = self.on_unknown
        if hook is not None:
            hook(*tag)

    @classmethod
    def from_config(cls, config: WebhookConfig, kb: KnowledgeBase | None = None) -> Self:
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
        :class:`~cudasched.webhook.admission.review.BadReviewError` only for bodies that are not an
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
        """Parse and validate ``body`` (:class:`~cudasched.webhook.admission.review.BadReviewError`
        when it is not an AdmissionReview v1) and compute its memo keys."""
        if kind not in _EXPECTED_KINDS:
            raise InputError(
                f"invalid admission kind {kind!r}: expected 'pod', 'isvc', 'llmisvc', "
                "'workload' or 'claim'"
            )
        limits = self._limits
        full_count = True
        shallow = False
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
                braces = body.count(b"{")  # read by both checks
                full_count = small_body_checks(body, limits, braces)
                shallow = not full_count and nesting_bounded(body, braces)
        req = parse_review(body)
        remembered = key and kind not in _NOT_REMEMBERED
        memo_key = self._remembered.request_key(kind, req, body) if remembered else None
        raw_rest = self._remembered.raw_rest(body, req.uid) if memo_key is not None else None
        return Prepared(kind, req, memo_key, raw_rest, full_count=full_count, shallow=shallow)

    def recall(self, prepared: Prepared, state: ClusterState) -> tuple[bytes, Outcome] | None:
        """The remembered answer for ``prepared`` under ``state`` with its outcome, or ``None``."""
        if prepared.key is None:
            return None
        return self._remembered.find(
            prepared.key, prepared.uid, state, dry_run=prepared.request.dry_run
        )

    def answer(self, prepared: Prepared, state: ClusterState) -> tuple[bytes, Outcome]:
        """Decide ``prepared``, serialise the answer and remember it for repeats."""
        return self._answered(prepared, self._decide(prepared, state), state)

    def answer_inline(
        self, prepared: Prepared, state: ClusterState
    ) -> tuple[bytes, Outcome] | None:
        """:meth:`answer` when the decision is cheap enough for the event loop, else ``None``
        (then :meth:`answer` in a review thread, under the deadline).

        Cheap means a pod whose every step that grows with the cluster or with our terms is
        remembered: its requirement's compiled terms, whether any node of the snapshot fits
        them, and the merge of those terms with the pod's own affinity. What is left (decode,
        resolve, diff, render) is bounded by the body, at most ``MEMO_MAX_BODY_BYTES`` here:
        a first-seen replica of a known kind of pod, tens of microseconds that a hop to a
        thread would add to (issue 22). Nothing is told to anyone before it is known to be
        cheap, so an abandoned attempt leaves no trace. Never with the image resolver on."""
        if prepared.kind != "pod" or prepared.problem is not None:
            return None
        if self._resolving:
            # With the image resolver on, a look-up may wait for a resolution in flight
            # (``imageResolver.budgetSeconds``): never on the event loop.
            return None
        try:
            with cheap_only():
                decision = self._decide(prepared, state)
        except Deferred:
            return None
        return self._answered(prepared, decision, state)

    def _answered(
        self, prepared: Prepared, decision: Decision, state: ClusterState
    ) -> tuple[bytes, Outcome]:
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
        # admissions, rare next to the pods of their replicas. (A pod's report of its
        # controller is the exception: it is remembered with the answer and reported again
        # at each recall, never for a dry run, so every replica's pods are swept.) Nor are answers
        # carrying a warning given once: a repeat must not replay it.
        # Nor, with the image resolver on, an unknown answer: the image may be resolved by
        # the next replica, which must then be constrained (docs/design.md, issue 19).
        if (
            prepared.key is not None
            and decision.outcome != "error"
            and (decision.placement is None or decision.placement.for_owner)
            and not decision.once
            and not (decision.unknown is not None and self._resolving)
        ):
            self._remembered.store(prepared.kind, prepared.key, prepared.raw_rest, decision, state)
        if decision.unknown is not None:
            self._count_unknown(decision.unknown)
        if log.isEnabledFor(logging.DEBUG):
            _log_decision(prepared.request, decision)
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
            if (req.group, req.kind) not in _EXPECTED_KINDS[kind] or req.sub_resource:
                return Decision(req.uid, reason=f"not handled: {req.group}/{req.kind}")
            if req.obj is None:
                return Decision(req.uid, reason="request has no object")
            if prepared.full_count:
                problem = over_limits(req.obj, self._limits)
            elif prepared.key is not None or prepared.shallow:
                # The body's bytes bound every count; its serialised key, or its brackets,
                # its nesting.
                problem = None
            else:  # the body's bytes already bound every count; only nesting is left
                problem = too_deep(req.obj)
            if problem is not None:
                return self._over_limits(req.uid, problem)
            if kind == "pod":
                return admit_pod(self.rules, req, req.obj, state)
            if kind == "llmisvc":
                return admit_llmisvc(self.rules, req, req.obj, state)
            if kind == "workload":
                return admit_template(self.rules, req, req.obj, state)
            if kind == "claim":
                return admit_claim(self.rules, req, req.obj, state)
            return admit_isvc(self.rules, req, req.obj, state)
        except Deferred:
            raise  # answer_inline: left to a review thread
        except Exception as exc:  # the API server must always get an answer
            log.exception("admission of %s uid=%s failed", kind, req.uid)
            return self._internal_error(req.uid, exc)

    def _over_limits(self, uid: str, problem: str) -> Decision:
        """The failure mode's answer for an object over the work limits (bad input: HTTP 400
        when denied)."""
        fail_closed = self.rules.config.fail_closed
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
        fail_closed = self.rules.config.fail_closed
        return failure(
            uid,
            f"cudasched: internal error ({type(exc).__name__}); "
            + ("request denied (failClosed)" if fail_closed else "admitted unchanged"),
            deny=fail_closed,
            code=500,
            reason="internal error",
        )
