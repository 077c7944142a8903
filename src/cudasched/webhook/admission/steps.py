"""What every admission rule takes, and the steps they share: the skip switch, the policy, what
to say when a GPU workload's CUDA is unknown, and turning a mutation into an answer (``onNoFit``,
the patch).

The rules (``podrules``, ``servicerules``) are functions of a :class:`RuleContext`, the
request and the snapshot, the way kopf hands an admission handler its ``settings``,
``memories`` and ``registry``: what they read is in their arguments, built once by
:class:`~cudasched.webhook.admission.admitter.Admitter` and never changed after. The steps
below take only the settings they read."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from cudasched.settings.config import OnNoFit, WebhookConfig
from cudasched.vocab import labels as L
from cudasched.vocab.objects import annotations_of, metadata_of
from cudasched.vocab.requirements import Policy, Requirement
from cudasched.webhook.admission.once import FirstSeen
from cudasched.webhook.admission.patch import Op, Scope, diff
from cudasched.webhook.admission.placer import Placer
from cudasched.webhook.admission.review import (
    Decision,
    ReviewRequest,
    clip,
)
from cudasched.webhook.admission.unknown import unknown_answer
from cudasched.workloads.declared import misspelt_keys
from cudasched.workloads.pods import is_skipped
from cudasched.workloads.resolution import (
    UnknownRequirement,
)

if TYPE_CHECKING:
    from cudasched.knowledge import KnowledgeBase
    from cudasched.knowledge.images import ImageTable


__all__ = [
    "PodSource",
    "RuleContext",
    "RuntimeSource",
    "finish",
    "policy_of",
    "skipped",
    "unconstrained",
    "with_misspellings",
    "with_unknown",
]


class RuntimeSource(Protocol):
    """Where admission reads a namespace's serving runtimes when the snapshot lacks the one an
    InferenceService needs (``webhook/background/runtimereader``: the API server, within a
    budget). ``read`` returns (ServingRuntimes of the namespace, ClusterServingRuntimes), or
    ``None`` when they could not be read in time."""

    def read(
        self, namespace: str
    ) -> tuple[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]]] | None: ...


class PodSource(Protocol):
    """Where admission of a ResourceClaim reads the pod it was made for
    (``webhook/background/runtimereader``: the API server, within a budget). ``read_pod``
    returns the pod, or ``None`` and why it could not be read."""

    def read_pod(self, namespace: str, name: str) -> tuple[Mapping[str, Any] | None, str]: ...


@dataclass(frozen=True, slots=True)
class RuleContext:
    """What the admission rules read besides the request and the snapshot: the settings, the
    knowledge, the image table (with the image resolver in it when that is on), the placer
    (compiled terms and merged affinities, remembered) and the warnings this process has
    given once, and where runtimes the snapshot lacks are read (``None``: nowhere; the
    snapshot is all there is), and where the pod a claim was made for is read (``None``:
    nowhere, and claims are left as they are). One per Admitter, built with it; the placer
    and ``said`` remember across requests and are safe to share between review threads."""

    config: WebhookConfig
    kb: KnowledgeBase
    images: ImageTable
    placer: Placer
    said: FirstSeen
    runtimes: RuntimeSource | None = None
    pods: PodSource | None = None


def with_unknown(
    config: WebhookConfig,
    decision: Decision,
    kind: str,
    unknown: UnknownRequirement | None,
    *,
    may_deny: bool,
) -> Decision:
    """``decision`` for a workload whose requirement may be ``unknown`` (unknown.py)."""
    if unknown is None:
        return decision
    setting = config.on_unknown_requirement
    return unknown_answer(decision, kind, unknown, setting, may_deny=may_deny)


def with_misspellings(decision: Decision, obj: Mapping[str, Any]) -> Decision:
    """``decision`` with a warning for each ``cudasched.io/*`` annotation of ``obj`` that
    cudasched does not read, naming the key it most likely meant: a misspelt key would
    otherwise leave the workload unconstrained without a word."""
    notes = tuple(
        clip(
            f"cudasched: annotation {key} is not one cudasched reads; did you mean {close}?"
            if close is not None
            else f"cudasched: annotation {key} is not one cudasched reads; it is ignored"
        )
        for key, close in misspelt_keys(annotations_of(obj))
    )
    return replace(decision, warnings=(*decision.warnings, *notes)) if notes else decision


def skipped(config: WebhookConfig, req: ReviewRequest, obj: Mapping[str, Any]) -> str | None:
    """Why the object is left alone before anything is resolved, or ``None``."""
    if is_skipped(annotations_of(obj)):
        return f"annotation {L.ANN_SKIP}"
    ns = req.namespace or str(metadata_of(obj).get("namespace") or "")
    if not config.namespaces.admits(ns):
        return f"namespace {ns!r} excluded"
    if metadata_of(obj).get("deletionTimestamp"):
        return "being deleted"
    return None


def policy_of(config: WebhookConfig, requirement: Requirement) -> Policy:
    """The requirement's own policy, else the configured one."""
    return requirement.policy if requirement.policy is not None else config.policy


def finish(
    config: WebhookConfig,
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
    check: tuple[Any, Callable[[], Any]] | None = None,
) -> Decision:
    """Apply ``onNoFit`` and turn the mutation into a patch (none when nothing changed): the
    diff within ``scopes``, then the operations ``then`` already found for a later scope (the
    placer's patch of the affinity). ``notes`` are warnings given once
    (:func:`~cudasched.webhook.admission.once.said_once`), kept whatever the outcome. The
    decision carries ``no_fit`` and its ``check`` (for a controller's template)."""
    warnings: tuple[str, ...] = notes
    audit = {"requirement": record} if record else {}
    if no_fit is not None:
        if config.on_no_fit is OnNoFit.DENY and may_deny:
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
                no_fit=no_fit,
                fit_check=check,
            )
        if config.on_no_fit is not OnNoFit.ALLOW:
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
        no_fit=no_fit,
        fit_check=check,
    )


def unconstrained(
    req: ReviewRequest, record: str, why: str, notes: tuple[str, ...] = ()
) -> Decision:
    """An object admitted as it is, saying why it could not be constrained."""
    # The reason first: a clipped warning must still say what went wrong.
    text = clip(f"cudasched: not constrained ({why}); requirement {record}")
    return Decision(
        req.uid,
        warnings=(*notes, text),
        requirement=record,
        reason=why,
        once=bool(notes),
    )
