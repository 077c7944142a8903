"""The AdmissionReview v1 envelope, typed once: requests in, responses out.

:func:`parse_review` validates a request body and returns the fields admission reads
(:class:`ReviewRequest`); :func:`review_uid` reads only the uid, for answers written when no
decision is made. Every response, whether a decision or a failure answer (:func:`failure`),
is a :class:`Decision` serialised by :meth:`Decision.render`, so the admitter and the server
write answers with the same code. Warnings are clipped to the length Kubernetes asks for.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import orjson
import pybase64

from cudasched.vocab.errors import InputError
from cudasched.vocab.kinds import INFERENCE_SERVICE, LLM_INFERENCE_SERVICE, POD
from cudasched.webhook.admission.patch import Op

__all__ = [
    "API_VERSION",
    "MAX_WARNING_CHARS",
    "REVIEW_KIND",
    "BadReviewError",
    "Decision",
    "Outcome",
    "Placement",
    "ReviewRequest",
    "clip",
    "creation_review",
    "decode_patch",
    "failure",
    "parse_review",
    "printable",
    "review_uid",
]

API_VERSION = "admission.k8s.io/v1"
REVIEW_KIND = "AdmissionReview"

#: The longest warning the API server passes on whole. Webhooks are asked to keep warnings to
#: 120 characters "if possible"; what the API server enforces is 256 characters per warning
#: once a request's warnings pass 4,096 characters in all (``truncateItemRunes`` and
#: ``truncateAtTotalRunes`` of k8s.io/apiserver/pkg/endpoints/filters/warning.go). A
#: warning is written to fit 120 and clipped only at this limit, at a word, so what it says
#: was expected is never cut off at the 120th character (issue 27).
MAX_WARNING_CHARS = 256

Outcome = Literal["patched", "unchanged", "denied", "error"]


class BadReviewError(InputError):
    """The body is not an AdmissionReview v1 request (the server answers HTTP 400)."""


class ReviewRequest(NamedTuple):
    """The fields of an AdmissionReview request that admission reads (a named tuple: built
    once per request on the event loop, where a frozen dataclass costs three times more)."""

    uid: str
    operation: str
    namespace: str
    group: str
    kind: str
    sub_resource: str
    obj: Mapping[str, Any] | None
    dry_run: bool = False  # a dry run: the answer is the same, side effects (Events) are not


@dataclass(frozen=True, slots=True)
class Placement:
    """What one admission found about where an object can run, for the NoCompatibleNode
    reporter (:mod:`cudasched.webhook.background.nofit`), which the decision carries to it.

    ``no_fit`` is the message when no node can run it (``None``: some node can). ``check`` is
    ``(key, selection)`` for :meth:`ClusterState.fits`, to re-check later snapshots; ``None``
    when no node selector can exist at all (the object can never run)."""

    group: str
    kind: str
    api_version: str
    namespace: str
    name: str
    uid: str | None
    no_fit: str | None
    check: tuple[Any, Callable[[], Any]] | None = None
    #: Reported for the controller that made a pod (``reviewed.owner_placement``): the pod's
    #: answer may still be remembered, since the controller's first replica reports it and
    #: its Events are rate-limited per controller anyway.
    for_owner: bool = False

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.group, self.kind, self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class Decision:
    """One admission answer before it is serialised; the server reads ``outcome`` for its
    metrics and the CLI reads ``requirement`` and ``patch`` for ``--explain``."""

    uid: str
    allowed: bool = True
    patch: tuple[Op, ...] = ()
    warnings: tuple[str, ...] = ()
    message: str = ""
    code: int = 0
    outcome: Outcome = "unchanged"
    requirement: str = ""
    reason: str = ""
    audit: Mapping[str, str] = field(default_factory=dict)
    placement: Placement | None = None  # for reported kinds (reviewed.py); never serialised
    # A pod's "no node can run it" and the check that asks it of a later snapshot (never
    # serialised): what a workload controller's template reports (templaterules.py).
    no_fit: str | None = None
    fit_check: tuple[Any, Callable[[], Any]] | None = None
    # (kind, reason) of a GPU workload admitted with an unknown requirement, for the metric;
    # never serialised, remembered with the answer so repeats are counted too.
    unknown: tuple[str, str] | None = None
    # Carries a warning given once per process (a runtime whose label and image disagree):
    # such an answer is never remembered, so repeats do not replay it.
    once: bool = False

    def response(self) -> dict[str, Any]:
        """The AdmissionReview v1 response object (``patch`` base64-encoded JSON)."""
        return self._response(self._encoded_patch().decode("ascii") if self.patch else "")

    def _encoded_patch(self) -> bytes:
        # pybase64: the same bytes as base64.b64encode, about twenty times faster (SIMD).
        return pybase64.b64encode(orjson.dumps(list(self.patch)))

    def _response(self, patch: str) -> dict[str, Any]:
        resp: dict[str, Any] = {"uid": self.uid, "allowed": self.allowed}
        if self.patch:
            resp["patchType"] = "JSONPatch"
            resp["patch"] = patch
        if not self.allowed:
            resp["status"] = {
                "metadata": {},
                "status": "Failure",
                "message": self.message,
                "reason": "Forbidden" if self.code == 403 else "InternalError",
                "code": self.code or 403,
            }
        if self.warnings:
            resp["warnings"] = [w if w.isprintable() else printable(w) for w in self.warnings]
        if self.audit:
            resp["auditAnnotations"] = dict(self.audit)
        return {"apiVersion": API_VERSION, "kind": REVIEW_KIND, "response": resp}

    def render(self) -> bytes:
        """The response as the bytes sent to the API server (keys sorted): the bytes of
        ``orjson.dumps(self.response(), option=OPT_SORT_KEYS)``, with the base64 patch (often
        kilobytes) spliced in as bytes rather than decoded to text and encoded again."""
        if not self.patch:
            return orjson.dumps(self._response(""), option=orjson.OPT_SORT_KEYS)
        out = orjson.dumps(self._response(""), option=orjson.OPT_SORT_KEYS)
        # The last `"patch":""` is the field's: keys sort, so only the audit annotations
        # (which may have any key) come before it, only fixed keys and strings after it, and
        # inside a JSON string every quote is escaped. Base64 needs no escaping.
        head, found, tail = out.rpartition(_EMPTY_PATCH)
        assert found, "a response with a patch has a patch field"
        return head + b'"patch":"' + self._encoded_patch() + b'"' + tail


_EMPTY_PATCH = b'"patch":""'


def clip(text: str, limit: int = MAX_WARNING_CHARS) -> str:
    """Shorten ``text`` to ``limit`` characters, marking the cut with an ellipsis; control and
    other unprintable characters (which a warning may quote from the user's object) are
    escaped first, because the API server drops a warning that contains them.

    The cut falls between words where one is near, never inside a word that fits. What a
    message says was expected (``...: expected 12.4 or a wheel tag``) is what the reader acts
    on, so when the cut would lose it the middle goes instead (usually a value quoted from the
    object): ``head…: expected ...``."""
    if not text.isprintable():
        text = printable(text)
    if len(text) <= limit:
        return text
    at = text.rfind(_EXPECTED)
    tail = text[at + 2 :] if at >= 0 else ""
    if tail and len(tail) <= limit // 2:
        return _cut(text[:at], limit - len(tail) - 2) + ": " + tail
    return _cut(text, limit)


#: Where a message says what it expected (the words an InputError ends with).
_EXPECTED = ": expected "


def _cut(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters, ending with an ellipsis after the last whole
    word that fits (mid-word only when that word is longer than a third of the room)."""
    if len(text) <= limit:
        return text
    room = text[: limit - 1]
    space = room.rfind(" ")
    if space >= (limit - 1) * 2 // 3 and not text[limit - 1].isspace():
        room = room[:space]
    return room.rstrip() + "…"


def printable(text: str) -> str:
    """``text`` with every unprintable character written as a ``\\xNN`` / ``\\uNNNN``
    escape (a tab or newline too: a warning is one line)."""
    return "".join(
        c if c.isprintable() else (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")
        for c in text
    )


def failure(uid: str, message: str, *, deny: bool, code: int, reason: str = "") -> Decision:
    """The failure mode's answer, used when no decision can be made (admission failed, timed
    out, or the cluster state is not ready): admitted with ``message`` as its warning, or,
    with ``deny``, refused with it as well under HTTP status ``code``."""
    text = clip(message)
    if deny:
        return Decision(
            uid,
            allowed=False,
            code=code,
            message=text,
            warnings=(text,),
            outcome="error",
            reason=reason,
        )
    return Decision(uid, warnings=(text,), outcome="error", reason=reason)


def _envelope(body: bytes | str) -> dict[str, Any]:
    """The decoded body after checking it is a JSON object of apiVersion/kind
    AdmissionReview v1."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadReviewError(f"request body is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise BadReviewError(f"request body must be a JSON object, got {type(doc).__name__}")
    if doc.get("apiVersion") != API_VERSION or doc.get("kind") != REVIEW_KIND:
        raise BadReviewError(
            f"expected apiVersion {API_VERSION!r} and kind {REVIEW_KIND!r}, "
            f"got {doc.get('apiVersion')!r} and {doc.get('kind')!r}"
        )
    return doc


def _checked_uid(uid: object) -> str:
    if not isinstance(uid, str) or not uid:
        raise BadReviewError(f"AdmissionReview request.uid must be a non-empty string, got {uid!r}")
    return uid


def parse_review(body: bytes | str) -> ReviewRequest:
    """Validate the envelope; anything the API server would never send is a
    :class:`BadReviewError` naming what is wrong."""
    doc = _envelope(body)
    req = doc.get("request")
    if not isinstance(req, dict):
        raise BadReviewError("AdmissionReview has no 'request' object")
    uid = _checked_uid(req.get("uid"))
    op = req.get("operation")
    if not isinstance(op, str) or not op:
        raise BadReviewError(f"AdmissionReview request.operation must be a string, got {op!r}")
    kind = req.get("kind")
    gvk = kind if isinstance(kind, dict) else {}
    obj = req.get("object")
    ns = req.get("namespace")
    sub = req.get("subResource")
    return ReviewRequest(
        uid=uid,
        operation=op,
        namespace=ns if isinstance(ns, str) else "",
        group=str(gvk.get("group") or ""),
        kind=str(gvk.get("kind") or ""),
        sub_resource=sub if isinstance(sub, str) else "",
        obj=obj if isinstance(obj, dict) else None,
        dry_run=req.get("dryRun") is not False,  # anything but an explicit false: assume one
    )


def review_uid(body: bytes | str) -> str:
    """The uid of an AdmissionReview v1 request, for answers written without a decision.

    Checks only the envelope and the uid (a request missing other fields still gets its
    answer); :class:`BadReviewError` says what is wrong when the body is not a review."""
    request = _envelope(body).get("request")
    return _checked_uid(request.get("uid") if isinstance(request, dict) else None)


#: Resource plurals of the kinds cudasched admits (for ``request.resource``).
_PLURALS = {k.kind: k.plural for k in (POD, INFERENCE_SERVICE, LLM_INFERENCE_SERVICE)}


def creation_review(obj: Mapping[str, Any], *, uid: str | None = None) -> dict[str, Any]:
    """The AdmissionReview v1 request the API server sends when ``obj`` is created (a Pod as a
    ReplicaSet creates it, or an InferenceService).

    Fields the API server only fills in after admission (uid, resourceVersion, creation time,
    status, node name) are removed from the stored object, as they would not exist yet.
    """
    copied = orjson.loads(orjson.dumps(obj))
    meta = copied.setdefault("metadata", {})
    for key in ("uid", "resourceVersion", "creationTimestamp", "generation"):
        meta.pop(key, None)
    copied.pop("status", None)
    if isinstance(copied.get("spec"), dict):
        copied["spec"].pop("nodeName", None)
    namespace = str(meta.get("namespace") or "default")
    kind = str(copied.get("kind") or "Pod")
    group, _, version = str(copied.get("apiVersion") or "v1").rpartition("/")
    gvk = {"group": group, "version": version, "kind": kind}
    gvr = {"group": group, "version": version, "resource": _PLURALS.get(kind, kind.lower() + "s")}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid or str(uuid.uuid4()),
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "name": str(meta.get("name") or ""),
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": _RS_CONTROLLER,
            "object": copied,
            "oldObject": None,
            "dryRun": False,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }


def decode_patch(response: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The JSON patch of an AdmissionReview response (``[]`` when there is none)."""
    raw = (response.get("response") or {}).get("patch")
    if not raw:
        return []
    ops = orjson.loads(base64.b64decode(raw))
    if not isinstance(ops, list):
        raise InputError("the response patch is not a JSON array")
    return ops


# The identity the API server reports for pods created by a Deployment's ReplicaSet.
_RS_CONTROLLER = {
    "username": "system:serviceaccount:kube-system:replicaset-controller",
    "groups": [
        "system:serviceaccounts",
        "system:serviceaccounts:kube-system",
        "system:authenticated",
    ],
}
