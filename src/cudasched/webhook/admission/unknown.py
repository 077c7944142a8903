"""The answer for a GPU workload whose CUDA requirement is unknown (``onUnknownRequirement``).

Such a workload is never constrained (a guess would be worse than nothing), but it must not pass
silently either: KServe's default images and in-house ones used to be admitted with no word.
So the answer names the image and the fix, in two warnings written to fit 120 characters each
(what is unknown, then what to write where), or refuses the object on CREATE under ``deny``
with the same words, or says nothing under ``allow``. Every such answer carries its
``(kind, reason)`` for the ``cudasched_webhook_unknown_requirement_total`` metric, whichever
the setting. Pure: a decision in, a decision out.
"""

from __future__ import annotations

from dataclasses import replace

from cudasched.settings.config import OnUnknownRequirement
from cudasched.webhook.admission.review import Decision, clip
from cudasched.workloads.resolution import UnknownRequirement

__all__ = ["unknown_answer"]

#: A denial quotes an image reference of any length; the API server shows the message whole.
DENIAL_CHARS = 1024


def unknown_answer(
    decision: Decision,
    kind: str,
    unknown: UnknownRequirement,
    setting: OnUnknownRequirement,
    *,
    may_deny: bool,
) -> Decision:
    """``decision`` (nothing to enforce) for a ``kind`` object whose requirement is
    ``unknown``: warned (``warn``), silent (``allow``) or, when ``may_deny`` (a CREATE),
    refused with HTTP 403 (``deny``)."""
    tag = (kind, unknown.reason)
    if setting is OnUnknownRequirement.DENY and may_deny:
        message = (
            f"cudasched: {kind} refused (onUnknownRequirement: deny): its CUDA requirement "
            f"is unknown, {unknown.describe()}; {unknown.fix}"
        )
        return replace(
            decision,
            allowed=False,
            code=403,
            message=clip(message, DENIAL_CHARS),
            patch=(),
            outcome="denied",
            reason="unknown requirement",
            unknown=tag,
        )
    warnings = decision.warnings
    if setting is not OnUnknownRequirement.ALLOW:
        warnings = (*warnings, *(clip(w) for w in unknown.warnings()))
    return replace(
        decision,
        warnings=warnings,
        reason=f"unknown requirement: {unknown.reason}",
        unknown=tag,
    )
