"""Admission decisions: an AdmissionReview v1 request in, the AdmissionReview response out.

This module is pure (bytes in, bytes out, no clock, no network) so the HTTPS server, the
``cudasched mutate`` command and the tests all run exactly the same code.

Two entry points, one per webhook path:

* **Pod CREATE** is authoritative. It is the only place where the final, merged pod spec is
  visible: KServe replaces runtime ``nodeSelectorTerms`` with InferenceService ones instead of
  ANDing them, and Knative rejects affinity on its Services unless feature flags are on. The
  requirement is ANDed into the pod's own required (or preferred) node affinity.
* **InferenceService CREATE/UPDATE** only records the resolved requirement in an annotation and
  warns, at ``kubectl apply`` time, when no node can run it (writing affinity there is opt-in).

The API server fails the user's request with HTTP 500 when a webhook returns a patch that does
not apply, even under ``failurePolicy: Ignore``. Patches therefore come from
:mod:`cudasched.webhook.patch`, which only adds keys under existing parents, and the mutation is
idempotent so ``reinvocationPolicy: IfNeeded`` and KServe's dry-run updates see no change the
second time.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import orjson

from cudasched import labels as L
from cudasched.errors import InputError
from cudasched.jsontree import copy_json
from cudasched.kserve import is_kserve_pod, is_predictor_pod, isvc_name_of
from cudasched.objects import metadata_of as _meta
from cudasched.placement import compile_requirement, merge_preferred, merge_required
from cudasched.requirements import Policy, Requirement
from cudasched.resolution import (
    declared_by_annotation,
    resolve_isvc,
    resolve_pod,
    uses_gpu,
    wants_constraint,
)
from cudasched.webhook.config import Mode, OnNoFit, WebhookConfig
from cudasched.webhook.memo import Answer, DecisionMemo
from cudasched.webhook.patch import Op, Scope, diff

if TYPE_CHECKING:
    from cudasched.images import ImageTable
    from cudasched.knowledge import KnowledgeBase
    from cudasched.webhook.state import ClusterState

__all__ = [
    "API_VERSION",
    "MAX_WARNING_CHARS",
    "MEMO_MAX_BODY_BYTES",
    "Admitter",
    "BadReviewError",
    "Decision",
    "Kind",
    "Outcome",
    "Prepared",
]

log = logging.getLogger(__name__)

API_VERSION = "admission.k8s.io/v1"
REVIEW_KIND = "AdmissionReview"

#: Kubernetes asks webhooks to keep each warning to 120 characters (longer ones may be cut).
MAX_WARNING_CHARS = 120

Kind = Literal["pod", "isvc"]
Outcome = Literal["patched", "unchanged", "denied", "error"]

_EXPECTED_KIND = {"pod": ("", "Pod"), "isvc": ("serving.kserve.io", "InferenceService")}
_PREFERRED_WEIGHT = 100
_MEMO_LIMIT = 4096

#: Pre-`model:` predictor fields; KServe's defaulter rewrites them into `model`, but our
#: InferenceService webhook may run before it. Each carries a container inline.
_LEGACY_FRAMEWORKS = (
    "sklearn",
    "xgboost",
    "tensorflow",
    "pytorch",
    "triton",
    "onnx",
    "huggingface",
    "pmml",
    "lightgbm",
    "paddle",
)

#: Annotations cudasched writes or reads as switches; they do not declare a requirement.
_NOT_DECLARING = frozenset({L.ANN_REQUIREMENT, L.ANN_SKIP})


# A miss in the merge memo (whose values may be None).
_MISSING: Any = object()

# The uid a remembered answer is rendered with before it is cut in two around it. NUL cannot
# occur unescaped in JSON text, so the serialised placeholder appears exactly once unless a
# request quotes it verbatim (then the answer is simply not remembered).
_UID_PLACEHOLDER = "\x00cudasched-uid\x00"
_UID_PLACEHOLDER_JSON = orjson.dumps(_UID_PLACEHOLDER)

# How the API server writes a review: Go's encoder emits struct fields in declaration order and
# no whitespace, so every body starts with the type fields and then the request's uid (a UUID).
# A body that starts this way is the uid plus everything after it; two such bodies with equal
# rests differ only in the uid, so the rest identifies the decision without decoding anything.
# The order produced by Python clients (apiVersion first) is accepted too; any other layout is
# simply decoded first.
_CANONICAL_HEAD = re.compile(
    rb'\{"(?:kind":"AdmissionReview","apiVersion":"admission\.k8s\.io/v1'
    rb'|apiVersion":"admission\.k8s\.io/v1","kind":"AdmissionReview)'
    rb'","request":\{"uid":"([0-9A-Za-z-]{1,128})",'
)
_RAW_KEY_PREFIX = {"pod": b"raw:pod:", "isvc": b"raw:isvc:"}
#: Requests larger than this are decided every time: their keys would crowd the memo, and the
#: server only looks bodies up on the event loop up to this size.
MEMO_MAX_BODY_BYTES = 65_536
# Merge-memo keys embed the pod's own affinity; unusually large ones are merged every time.
_MERGE_MEMO_MAX_KEY_BYTES = 16_384
_PROBE_HEAD = b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"'


class BadReviewError(InputError):
    """The body is not an AdmissionReview v1 request (the server answers HTTP 400)."""


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

    def response(self) -> dict[str, Any]:
        """The AdmissionReview v1 response object (``patch`` base64-encoded JSON)."""
        resp: dict[str, Any] = {"uid": self.uid, "allowed": self.allowed}
        if self.patch:
            resp["patchType"] = "JSONPatch"
            resp["patch"] = base64.b64encode(orjson.dumps(list(self.patch))).decode("ascii")
        if not self.allowed:
            resp["status"] = {
                "metadata": {},
                "status": "Failure",
                "message": self.message,
                "reason": "Forbidden" if self.code == 403 else "InternalError",
                "code": self.code or 403,
            }
        if self.warnings:
            resp["warnings"] = list(self.warnings)
        if self.audit:
            resp["auditAnnotations"] = dict(self.audit)
        return {"apiVersion": API_VERSION, "kind": REVIEW_KIND, "response": resp}

    def render(self) -> bytes:
        return orjson.dumps(self.response(), option=orjson.OPT_SORT_KEYS)


class _Request(NamedTuple):
    """The fields of an AdmissionReview request that admission reads (a named tuple: built
    once per request on the event loop, where a frozen dataclass costs three times more)."""

    uid: str
    operation: str
    namespace: str
    group: str
    kind: str
    sub_resource: str
    obj: Mapping[str, Any] | None


class Prepared(NamedTuple):
    """A parsed review ready to be decided: what :meth:`Admitter.prepare` returns.

    ``key`` identifies everything the decision reads except the uid (``None`` when the request
    cannot be remembered, e.g. an object nested too deeply to serialise)."""

    kind: Kind
    request: _Request
    key: bytes | None
    raw_rest: bytes | None = None  # the body after its uid, when written like the API server

    @property
    def uid(self) -> str:
        return self.request.uid


def _canonical_split(body: bytes | str) -> tuple[bytes, bytes] | None:
    """``(uid, rest)`` of a body laid out the way the API server writes reviews (see
    ``_CANONICAL_HEAD``), or ``None`` for any other layout."""
    if not isinstance(body, bytes):
        return None
    head = _CANONICAL_HEAD.match(body)
    return None if head is None else (head.group(1), body[head.end() :])


def clip(text: str, limit: int = MAX_WARNING_CHARS) -> str:
    """Shorten ``text`` to ``limit`` characters, marking the cut with an ellipsis."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def parse_review(body: bytes | str) -> _Request:
    """Validate the envelope; anything the API server would never send is a
    :class:`BadReviewError` naming what is wrong."""
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
    req = doc.get("request")
    if not isinstance(req, dict):
        raise BadReviewError("AdmissionReview has no 'request' object")
    uid = req.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReviewError(f"AdmissionReview request.uid must be a non-empty string, got {uid!r}")
    op = req.get("operation")
    if not isinstance(op, str) or not op:
        raise BadReviewError(f"AdmissionReview request.operation must be a string, got {op!r}")
    gvk = req.get("kind") if isinstance(req.get("kind"), dict) else {}
    obj = req.get("object")
    ns = req.get("namespace")
    sub = req.get("subResource")
    return _Request(
        uid=uid,
        operation=op,
        namespace=ns if isinstance(ns, str) else "",
        group=str(gvk.get("group") or ""),
        kind=str(gvk.get("kind") or ""),
        sub_resource=sub if isinstance(sub, str) else "",
        obj=obj if isinstance(obj, dict) else None,
    )


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    ann = _meta(obj).get("annotations")
    return ann if isinstance(ann, Mapping) else {}


def _is_true(value: object) -> bool:
    return isinstance(value, str) and value.strip().lower() in ("true", "yes", "1")


def _declares_requirement(obj: Mapping[str, Any]) -> bool:
    """Whether the object carries one of our annotations that states a need (a skip switch or
    our own output annotation does not count)."""
    return any(
        isinstance(k, str) and k.startswith(L.PREFIX) and k not in _NOT_DECLARING
        for k in _annotations(obj)
    )


def _copy_decoded(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of an object that :func:`parse_review` decoded with orjson (plain JSON data
    by construction): an orjson round trip in C is several times faster than walking the tree
    in Python, and each review copies its object twice."""
    try:
        copied = orjson.loads(orjson.dumps(obj))
    except TypeError:  # not plain JSON data after all: copy it the general way
        return copy_json(obj)
    return copied if isinstance(copied, dict) else copy_json(obj)


def _with_namespace(obj: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """``obj`` with metadata.namespace filled in: pods arrive with an empty namespace (the
    request carries it) and resolution looks runtimes up by namespace. Only the object and its
    metadata are new dicts; everything below is shared, because resolution only reads."""
    out = dict(obj)
    meta = out.get("metadata")
    meta = dict(meta) if isinstance(meta, Mapping) else {}
    out["metadata"] = meta
    if namespace and not meta.get("namespace"):
        meta["namespace"] = namespace
    return out


def _pod_for_mutation(pod: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``pod`` that admission may change where a pod mutation writes (the top level,
    ``metadata`` and ``spec`` are new dicts; ``_set_annotation`` and ``_merge`` build new
    annotation and affinity values instead of editing): deep-copying the whole pod cost more
    than a quarter of a first-seen decision."""
    out = dict(pod)
    for key in ("metadata", "spec"):
        value = out.get(key)
        if isinstance(value, Mapping):
            out[key] = dict(value)
    return out


def _set_annotation(obj: dict[str, Any], key: str, value: str | None) -> None:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        if value is None:
            return  # nothing to remove; creating metadata would be a no-op patch
        meta = {}  # a malformed value is replaced whole, never walked into
        obj["metadata"] = meta
    current = meta.get("annotations")
    ann = dict(current) if isinstance(current, Mapping) else {}
    if value is None:
        ann.pop(key, None)
    else:
        ann[key] = value
    if ann or "annotations" in meta:
        meta["annotations"] = ann


def _kserve_merge(runtime: Any, isvc: Any) -> Any:
    """KServe merges runtime and InferenceService scheduling fields with a strategic merge
    patch whose affinity lists carry no merge key: objects merge key by key, lists (and
    scalars) from the InferenceService replace the runtime's."""
    if isinstance(runtime, Mapping) and isinstance(isvc, Mapping):
        out = {k: copy_json(v) for k, v in runtime.items()}
        for k, v in isvc.items():
            out[k] = _kserve_merge(runtime.get(k), v) if k in runtime else copy_json(v)
        return out
    return copy_json(isvc if isvc is not None else runtime)


class Admitter:
    """Decides admission for pods and InferenceServices under one configuration.

    ``kb`` and ``images`` are loaded once by the caller and shared across requests; the cluster
    snapshot is passed per request because the cache replaces it while the server runs.
    """

    def __init__(self, config: WebhookConfig, kb: KnowledgeBase, images: ImageTable) -> None:
        self.config = config
        self.kb = kb
        self.images = images
        # Compiled terms per (requirement, policy, scheme, GFD key generation): pure, so valid
        # across snapshots; bounded, and a race between threads only computes an entry twice.
        self._compiled: dict[tuple[Any, ...], tuple[list[dict[str, Any]] | None, str]] = {}
        # Merged affinity per (the object's own affinity, our terms), as JSON: pods of one
        # Deployment or InferenceService repeat the same pair, and the merge re-validates our
        # terms and copies the spec every time. Bounded like the compiled terms.
        self._merged: dict[bytes, bytes | None] = {}
        # Whole answers per request-without-uid for the current snapshot (see memo.py).
        self.memo = DecisionMemo(config.decision_cache_bytes)
        # A uid no request can contain: decoding a rest behind it proves that the head's uid
        # is the one the decoder keeps (see _rest_keeps_head_uid).
        self._probe_uid = "cudasched-probe-" + secrets.token_hex(16)

    @classmethod
    def from_config(cls, config: WebhookConfig, kb: KnowledgeBase | None = None) -> Admitter:
        """The production Admitter: the bundled knowledge base (unless given) and the built-in
        image table with the configuration's ``imageOverrides`` in front. Reads package data,
        so call it once at start-up, never per request."""
        from cudasched.images import ImageTable
        from cudasched.knowledge import KnowledgeBase

        kb = kb if kb is not None else KnowledgeBase.load()
        images = ImageTable.from_config(config, kb=kb)
        return cls(config, kb, images)

    # ------------------------------------------------------------------ entry points

    def review(self, kind: Kind, body: bytes | str, state: ClusterState) -> bytes:
        """The AdmissionReview response for ``body``. Raises :class:`BadReviewError` only for
        bodies that are not an AdmissionReview v1; never anything else."""
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
        prefix = _RAW_KEY_PREFIX.get(kind)
        split = _canonical_split(body) if self.memo.max_bytes else None
        if split is None or prefix is None:
            return None
        uid, rest = split
        found = self.memo.get(state, prefix + rest)
        if found is None:
            return None
        outcome: Outcome = found.outcome  # type: ignore[assignment]
        return found.render(b'"' + uid + b'"'), outcome

    def prepare(self, kind: Kind, body: bytes | str, *, key: bool = True) -> Prepared:
        """Parse and validate ``body`` (:class:`BadReviewError` when it is not an AdmissionReview
        v1) and compute its memo key."""
        if kind not in _EXPECTED_KIND:
            raise InputError(f"invalid admission kind {kind!r}: expected 'pod' or 'isvc'")
        req = parse_review(body)
        memo_key: bytes | None = None
        if key and self.memo.max_bytes and len(body) <= MEMO_MAX_BODY_BYTES:
            try:
                memo_key = orjson.dumps(
                    (
                        kind,
                        req.operation,
                        req.namespace,
                        req.group,
                        req.kind,
                        req.sub_resource,
                        req.obj,
                    )
                )
            except (TypeError, orjson.JSONEncodeError):
                memo_key = None  # deeper than orjson writes: decided every time
        raw_rest: bytes | None = None
        split = _canonical_split(body) if memo_key is not None else None
        # Only when the head's uid is the one the decoder kept; `_rest_keeps_head_uid` proves
        # it for every uid before the rest is used as a key.
        if split is not None and split[0] == req.uid.encode():
            raw_rest = split[1]
        return Prepared(kind, req, memo_key, raw_rest)

    def recall(self, prepared: Prepared, state: ClusterState) -> tuple[bytes, Outcome] | None:
        """The remembered answer for ``prepared`` under ``state`` with its outcome, or ``None``."""
        if prepared.key is None:
            return None
        found = self.memo.get(state, prepared.key)
        if found is None:
            return None
        outcome: Outcome = found.outcome  # type: ignore[assignment]
        return found.render(orjson.dumps(prepared.uid)), outcome

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
        if prepared.key is not None and decision.outcome != "error":
            self._remember(prepared, decision, state)
        return rendered, decision.outcome

    def _remember(self, prepared: Prepared, decision: Decision, state: ClusterState) -> None:
        template = dataclasses.replace(decision, uid=_UID_PLACEHOLDER).render()
        parts = template.split(_UID_PLACEHOLDER_JSON)
        if len(parts) != 2:
            return
        answer = Answer(parts[0], parts[1], decision.outcome)
        if prepared.key is not None:
            self.memo.put(state, prepared.key, answer)
        rest = prepared.raw_rest
        if rest is not None and self._rest_keeps_head_uid(rest):
            self.memo.put(state, _RAW_KEY_PREFIX[prepared.kind] + rest, answer)

    def _rest_keeps_head_uid(self, rest: bytes) -> bool:
        """Whether every body made of a canonical head and this rest decodes to the same
        request with the head's uid. True when the rest behind a uid nobody can know still
        decodes to that uid: no later duplicate (equal to the head's uid or not, escaped or
        not, in this request or a repeated one) can then override it."""
        try:
            doc = orjson.loads(_PROBE_HEAD + self._probe_uid.encode() + b'",' + rest)
        except orjson.JSONDecodeError:
            return False
        req = doc.get("request") if isinstance(doc, dict) else None
        return isinstance(req, dict) and req.get("uid") == self._probe_uid

    def _decide(self, prepared: Prepared, state: ClusterState) -> Decision:
        req = prepared.request
        kind = prepared.kind
        try:
            if (req.group, req.kind) != _EXPECTED_KIND[kind] or req.sub_resource:
                return Decision(req.uid, reason=f"not handled: {req.group}/{req.kind}")
            if req.obj is None:
                return Decision(req.uid, reason="request has no object")
            if kind == "pod":
                return self._pod(req, req.obj, state)
            return self._isvc(req, req.obj, state)
        except Exception as exc:  # the API server must always get an answer
            log.exception("admission of %s uid=%s failed", kind, req.uid)
            return self._internal_error(req.uid, exc)

    def _internal_error(self, uid: str, exc: BaseException) -> Decision:
        """The failure mode's answer when admission itself failed."""
        text = clip(
            f"cudasched: internal error ({type(exc).__name__}); "
            + ("request denied (failClosed)" if self.config.fail_closed else "admitted unchanged")
        )
        if self.config.fail_closed:
            return Decision(
                uid,
                allowed=False,
                code=500,
                message=text,
                warnings=(text,),
                outcome="error",
                reason="internal error",
            )
        return Decision(uid, warnings=(text,), outcome="error", reason="internal error")

    # ------------------------------------------------------------------ shared steps

    def _skipped(self, req: _Request, obj: Mapping[str, Any]) -> str | None:
        """Why the object is left alone before anything is resolved, or ``None``."""
        if _is_true(_annotations(obj).get(L.ANN_SKIP)):
            return f"annotation {L.ANN_SKIP}"
        ns = req.namespace or str(_meta(obj).get("namespace") or "")
        if not self.config.namespaces.admits(ns):
            return f"namespace {ns!r} excluded"
        if _meta(obj).get("deletionTimestamp"):
            return "being deleted"
        return None

    def _policy(self, requirement: Requirement) -> Policy:
        return requirement.policy if requirement.policy is not None else self.config.policy

    @staticmethod
    def _record(requirement: Requirement, policy: Policy) -> str:
        """The ``cudasched.io/requirement`` value: what is needed, why, under which policy."""
        text = requirement.describe()
        if policy is not Policy.STRICT:
            text += f" [{policy.value}]"
        if requirement.source:
            text += f" ({requirement.source})"
        return text

    def _compile(
        self, requirement: Requirement, policy: Policy, state: ClusterState
    ) -> tuple[list[dict[str, Any]] | None, str | None]:
        """The node-selector terms for ``requirement`` in the cluster's label scheme, and the
        "no node can run it" message when it applies.

        Terms are ``None`` when no selector can exist (a toolkit or compute capability no GPU
        could ever satisfy): the pod is then annotated but its affinity is left alone, and the
        message always applies. Otherwise the message needs a synced snapshot, because an
        empty or half-listed cache must never produce warnings or denials.
        """
        what = (
            f"CUDA {requirement.cuda.release}"
            if requirement.cuda is not None
            and requirement.min_compute is None
            and requirement.framework is None
            else requirement.describe()
        )
        scheme = state.scheme(self.config.label_scheme)
        key = (requirement, policy, scheme, state.gfd_keys)
        compiled = self._compiled.get(key)
        if compiled is None:
            try:
                compiled = (
                    compile_requirement(requirement, policy, scheme, self.kb, state.gfd_keys),
                    "",
                )
            except InputError as exc:
                compiled = (None, str(exc))
            if len(self._compiled) >= _MEMO_LIMIT:
                self._compiled.clear()
            self._compiled[key] = compiled
        terms, error = compiled
        if terms is None:
            return None, f"cudasched: no node can ever run {what}: {error}"
        if not state.synced or not terms:
            return terms, None
        if state.fits(key, terms):
            return terms, None
        return terms, f"cudasched: no node can run {what}; {state.drivers.describe()}"

    def _merge(self, spec: Mapping[str, Any], terms: list[dict[str, Any]]) -> dict[str, Any]:
        """``spec`` with ``terms`` merged into its node affinity (required or preferred, per
        ``mode``). The merge only ever changes ``spec.affinity`` (everything else is copied
        as it is), so it runs on the affinity alone and its result is memoised by the JSON of
        (affinity, terms); each call still gets its own copy of the merged affinity."""
        out = dict(spec)
        try:
            key = orjson.dumps(["affinity" in out, out.get("affinity"), terms])
        except TypeError:  # not plain JSON data: no memo
            return self._merge_affinity(out, terms)
        if len(key) > _MERGE_MEMO_MAX_KEY_BYTES:
            return self._merge_affinity(out, terms)
        found = self._merged.get(key, _MISSING)
        if found is _MISSING:
            merged = self._merge_affinity(
                {"affinity": out["affinity"]} if "affinity" in out else {}, terms
            )
            found = orjson.dumps(merged["affinity"]) if "affinity" in merged else None
            if len(self._merged) >= _MEMO_LIMIT:
                self._merged.clear()
            self._merged[key] = found
        if found is None:
            out.pop("affinity", None)
        else:
            out["affinity"] = orjson.loads(found)
        return out

    def _merge_affinity(self, spec: dict[str, Any], terms: list[dict[str, Any]]) -> dict[str, Any]:
        if self.config.mode is Mode.PREFERRED:
            return merge_preferred(spec, terms, _PREFERRED_WEIGHT)
        return merge_required(spec, terms)

    def _finish(
        self,
        req: _Request,
        original: Mapping[str, Any],
        mutated: Mapping[str, Any],
        scopes: Sequence[Scope],
        *,
        record: str,
        no_fit: str | None,
        may_deny: bool,
    ) -> Decision:
        """Apply ``onNoFit`` and turn the mutation into a patch (none when nothing changed)."""
        warnings: tuple[str, ...] = ()
        audit = {"requirement": record} if record else {}
        if no_fit is not None:
            if self.config.on_no_fit is OnNoFit.DENY and may_deny:
                return Decision(
                    req.uid,
                    allowed=False,
                    code=403,
                    message=no_fit,
                    outcome="denied",
                    requirement=record,
                    reason="no node fits",
                    audit=audit,
                )
            if self.config.on_no_fit is not OnNoFit.ALLOW:
                warnings = (clip(no_fit),)
        ops = diff(original, mutated, scopes)
        return Decision(
            req.uid,
            patch=tuple(ops),
            warnings=warnings,
            outcome="patched" if ops else "unchanged",
            requirement=record,
            reason="constrained" if ops else "already constrained",
            audit=audit,
        )

    # ------------------------------------------------------------------ pods

    def _pod(self, req: _Request, pod: Mapping[str, Any], state: ClusterState) -> Decision:
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
        req: _Request,
        pod: Mapping[str, Any],
        spec: Mapping[str, Any],
        state: ClusterState,
    ) -> Decision:
        declared = _declares_requirement(pod)
        if not declared and not uses_gpu(spec):
            # Only pods that use a GPU, or say what they need, are ever constrained.
            return Decision(req.uid, reason="no GPU and no declared requirement")
        kserve_pod = is_kserve_pod(pod)
        if not (kserve_pod or declared or self.config.constrain_gpu_pods_by_image):
            return Decision(req.uid, reason="GPU pod outside KServe (constrainGpuPodsByImage off)")

        full = _with_namespace(pod, req.namespace)
        ns = str(full["metadata"].get("namespace") or "")
        choice = None
        if is_predictor_pod(pod):
            isvc_name = isvc_name_of(pod)
            choice = state.runtime_of(ns, isvc_name) if isvc_name else None
        requirement = resolve_pod(full, choice, self.images, self.kb)
        if not wants_constraint(full, requirement):
            return Decision(req.uid, reason="no requirement to enforce")

        policy = self._policy(requirement)
        record = self._record(requirement, policy)
        terms, no_fit = self._compile(requirement, policy, state)

        mutated = _pod_for_mutation(pod)
        if terms is not None:
            try:
                # Called even when `terms` is empty: the merge also strips stale expressions on
                # the keys cudasched owns (hand-written CUDA affinity is replaced, never kept).
                mutated["spec"] = self._merge(spec, terms)
            except InputError as exc:
                # The pod's own affinity cannot be combined with ours (malformed, or the cross
                # product would explode): admit it as it is and say why.
                return self._unconstrained(req, record, str(exc))
        _set_annotation(mutated, L.ANN_REQUIREMENT, record)
        scopes = (Scope(("metadata", "annotations")), Scope(("spec", "affinity")))
        return self._finish(
            req,
            pod,
            mutated,
            scopes,
            record=record,
            no_fit=no_fit,
            may_deny=True,
        )

    def _unconstrained(self, req: _Request, record: str, why: str) -> Decision:
        # The reason first: a clipped warning must still say what went wrong.
        text = clip(f"cudasched: not constrained ({why}); requirement {record}")
        return Decision(req.uid, warnings=(text,), requirement=record, reason=why)

    # ------------------------------------------------------------------ InferenceServices

    def _isvc(self, req: _Request, isvc: Mapping[str, Any], state: ClusterState) -> Decision:
        if req.operation not in ("CREATE", "UPDATE"):
            return Decision(req.uid, reason=f"operation {req.operation}")
        why = self._skipped(req, isvc)
        if why is not None:
            return Decision(req.uid, reason=f"skipped: {why}")
        try:
            return self._isvc_checked(req, isvc, state)
        except InputError as exc:
            return Decision(
                req.uid,
                warnings=(clip(f"cudasched: requirement not resolved: {exc}"),),
                reason=f"unreadable: {exc}",
            )

    def _isvc_checked(
        self, req: _Request, isvc: Mapping[str, Any], state: ClusterState
    ) -> Decision:
        full = _with_namespace(isvc, req.namespace)
        choice = state.select_runtime_for(full)
        requirement = resolve_isvc(full, choice, self.images, self.kb)
        runtime = choice.obj if choice is not None else None

        mutated = _copy_decoded(isvc)
        ann_scope = Scope(("metadata", "annotations"))
        if requirement.is_empty or not (
            declared_by_annotation(requirement) or self._isvc_uses_gpu(isvc, runtime)
        ):
            # Nothing to record: drop a stale record left by an earlier version of the object.
            _set_annotation(mutated, L.ANN_REQUIREMENT, None)
            ops = diff(isvc, mutated, (ann_scope,))
            return Decision(
                req.uid,
                patch=tuple(ops),
                outcome="patched" if ops else "unchanged",
                reason="no requirement to enforce",
            )

        policy = self._policy(requirement)
        record = self._record(requirement, policy)
        terms, no_fit = self._compile(requirement, policy, state)
        _set_annotation(mutated, L.ANN_REQUIREMENT, record)
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
            base = _kserve_merge(runtime_aff, predictor.get("affinity"))
            try:
                merged = self._merge({"affinity": base} if base else {}, terms)
            except InputError as exc:
                return self._unconstrained(req, record, str(exc))
            if merged.get("affinity"):
                predictor["affinity"] = merged["affinity"]
                scopes.append(Scope(("spec", "predictor", "affinity")))
        # Denying an UPDATE could wedge a service whose nodes went away (finalizer removal is
        # an UPDATE too), so only a CREATE is ever refused.
        return self._finish(
            req,
            isvc,
            mutated,
            scopes,
            record=record,
            no_fit=no_fit,
            may_deny=req.operation == "CREATE",
        )

    @staticmethod
    def _isvc_uses_gpu(isvc: Mapping[str, Any], runtime: Mapping[str, Any] | None) -> bool:
        """Whether the predictor's pods will request a GPU. KServe merges the runtime's
        container into the model container (resource maps merge key by key), so a GPU limit on
        either side reaches the pod; the union is checked."""
        spec = isvc.get("spec")
        predictor = spec.get("predictor") if isinstance(spec, Mapping) else None
        if not isinstance(predictor, Mapping):
            return False
        containers: list[Any] = []
        model = predictor.get("model")
        if isinstance(model, Mapping):
            containers.append(model)
        for key in _LEGACY_FRAMEWORKS:
            legacy = predictor.get(key)
            if isinstance(legacy, Mapping):
                containers.append(legacy)
        containers.extend(c for c in predictor.get("containers") or () if isinstance(c, Mapping))
        rt_spec = (runtime or {}).get("spec")
        if isinstance(rt_spec, Mapping):
            containers.extend(c for c in rt_spec.get("containers") or () if isinstance(c, Mapping))
        worker = predictor.get("workerSpec")
        if isinstance(worker, Mapping):
            containers.extend(c for c in worker.get("containers") or () if isinstance(c, Mapping))
        pseudo = {"containers": containers, "resourceClaims": predictor.get("resourceClaims") or []}
        return bool(uses_gpu(pseudo))
