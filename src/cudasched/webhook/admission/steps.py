"""The steps every admission rule shares: the skip switch, the policy, what to say when a GPU
workload's CUDA is unknown, and turning a mutation into an answer (``onNoFit``, the patch).

:class:`AdmissionSteps` holds what the rules read (configuration, knowledge, image table, the
placer, warnings already given); :class:`~cudasched.webhook.admission.admitter.Admitter` is built on
it together with the rules for pods (``podrules``) and for services (``servicerules``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cudasched.settings.config import OnNoFit, WebhookConfig
from cudasched.vocab import labels as L
from cudasched.vocab.objects import annotations_of, metadata_of
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.webhook.admission.once import FirstSeen
from cudasched.webhook.admission.patch import Op, Scope, diff
from cudasched.webhook.admission.placer import Placer
from cudasched.webhook.admission.review import (
    Decision,
    Placement,
    ReviewRequest,
    clip,
)
from cudasched.webhook.admission.unknown import unknown_answer
from cudasched.workloads.pods import is_skipped
from cudasched.workloads.resolution import (
    UnknownRequirement,
)

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.knowledge.images import ImageTable


__all__ = ["AdmissionSteps"]


class AdmissionSteps:
    """What the admission rules share (see the module doc)."""

    config: WebhookConfig
    kb: KnowledgeBase
    images: ImageTable
    placer: Placer
    on_placement: Callable[[Placement], None] | None
    on_unknown: Callable[[str, str], None] | None
    _said: FirstSeen

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
        then: Sequence[Op] = (),
    ) -> Decision:
        """Apply ``onNoFit`` and turn the mutation into a patch (none when nothing changed):
        the diff within ``scopes``, then the operations ``then`` already found for a later
        scope (the placer's patch of the affinity). ``notes`` are warnings given once
        (:func:`~cudasched.webhook.admission.once.said_once`), kept whatever the outcome."""
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
        ops.extend(then)
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
