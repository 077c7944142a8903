"""Finding and storing remembered admission answers for review bodies.

:class:`DecisionMemo` holds answers per snapshot; this module decides what they are keyed by
and how a stored answer gets the new request's uid:

* the *request key*: the serialised request fields the decision reads (kind, operation,
  namespace, group/kind, sub-resource, the whole object), computed after decoding;
* the *raw key*: for a body laid out the way the API server writes reviews (type fields, then
  the request's uid first, no whitespace), the bytes after the uid. A repeat is then found
  without decoding anything. The rest is stored under that key only once a probe proves that
  the head's uid is the one a decoder keeps (no later duplicate ``uid`` can override it);
* the *answer template*: the answer rendered with a placeholder uid and cut around it, so a
  repeat is the template with its own uid spliced in.
"""

from __future__ import annotations

import dataclasses
import re
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import orjson

from cudasched.webhook.admission.review import Decision, Outcome, Placement, ReviewRequest
from cudasched.webhook.memo.decisions import Answer, DecisionMemo

if TYPE_CHECKING:
    from cudasched.webhook.state.clusterstate import ClusterState

__all__ = ["MEMO_MAX_BODY_BYTES", "RememberedAnswers", "canonical_split"]

#: Requests larger than this are decided every time: their keys would crowd the memo, and the
#: server only looks bodies up on the event loop up to this size.
MEMO_MAX_BODY_BYTES = 65_536

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
_RAW_KEY_PREFIX = {
    "pod": b"raw:pod:",
    "isvc": b"raw:isvc:",
    "llmisvc": b"raw:llmisvc:",
    "workload": b"raw:workload:",
}
# A dry run as the API server writes it: unescaped, these bytes can only be the request's key (a
# string value that holds them is written with escaped quotes); a false match only keeps a
# recalled answer from reporting.
_DRY_RUN = b'"dryRun":true'
_PROBE_HEAD = b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"'


def canonical_split(body: bytes | str) -> tuple[bytes, bytes] | None:
    """``(uid, rest)`` of a body laid out the way the API server writes reviews, or ``None``
    for any other layout."""
    if not isinstance(body, bytes):
        return None
    head = _CANONICAL_HEAD.match(body)
    return None if head is None else (head.group(1), body[head.end() :])


class RememberedAnswers:
    """The keys, lookups and stores of remembered answers in ``memo`` for one Admitter.

    Lookups return ``(answer bytes, outcome)`` with the request's own uid, or ``None``; a
    remembered answer of a workload with an unknown requirement is also told to
    ``on_unknown`` (its ``(kind, reason)``), so repeats are counted like first answers.
    """

    def __init__(
        self,
        memo: DecisionMemo,
        on_unknown: Callable[[tuple[str, str]], None] | None = None,
        on_placement: Callable[[Placement], None] | None = None,
    ) -> None:
        self.memo = memo
        self.on_unknown = on_unknown
        self.on_placement = on_placement
        # A uid no request can contain: decoding a rest behind it proves that the head's uid
        # is the one the decoder keeps (see _rest_keeps_head_uid).
        self._probe_uid = "cudasched-probe-" + secrets.token_hex(16)

    def find_by_body(
        self, kind: str, body: bytes | str, state: ClusterState
    ) -> tuple[bytes, Outcome] | None:
        """The answer remembered for a body written the way the API server writes reviews,
        found without decoding it."""
        prefix = _RAW_KEY_PREFIX.get(kind)
        split = canonical_split(body) if self.memo.max_bytes else None
        if split is None or prefix is None:
            return None
        uid, rest = split
        found = self.memo.get(state, prefix + rest)
        if found is None:
            return None
        # The API server writes a dry run's request with "dryRun":true (Go's encoding/json);
        # looked for only in the rare answer that reports something.
        self._told(found, dry_run=found.report is not None and _DRY_RUN in rest)
        return found.render(b'"' + uid + b'"'), cast(Outcome, found.outcome)

    def request_key(self, kind: str, request: ReviewRequest, body: bytes | str) -> bytes | None:
        """The key of a decoded request, or ``None`` when it is not remembered (memo off, body
        over :data:`MEMO_MAX_BODY_BYTES`, an object nested deeper than orjson writes)."""
        if not (self.memo.max_bytes and len(body) <= MEMO_MAX_BODY_BYTES):
            return None
        try:
            return orjson.dumps(
                (
                    kind,
                    request.operation,
                    request.namespace,
                    request.group,
                    request.kind,
                    request.sub_resource,
                    request.obj,
                )
            )
        except (TypeError, orjson.JSONEncodeError):
            return None  # deeper than orjson writes: decided every time

    @staticmethod
    def raw_rest(body: bytes | str, uid: str) -> bytes | None:
        """The body after its uid when it is written like the API server's and its head
        carries ``uid`` (the uid the decoder kept); ``None`` otherwise. Before the rest is
        used as a key, :meth:`store` proves it keeps the head's uid for every uid."""
        split = canonical_split(body)
        if split is not None and split[0] == uid.encode():
            return split[1]
        return None

    def find(
        self, key: bytes, uid: str, state: ClusterState, *, dry_run: bool = False
    ) -> tuple[bytes, Outcome] | None:
        """The answer remembered for a request key, with ``uid`` spliced in."""
        found = self.memo.get(state, key)
        if found is None:
            return None
        self._told(found, dry_run=dry_run)
        return found.render(orjson.dumps(uid)), cast(Outcome, found.outcome)

    def _told(self, found: Answer, *, dry_run: bool) -> None:
        if found.unknown is not None and self.on_unknown is not None:
            self.on_unknown(found.unknown)
        if isinstance(found.report, Placement) and self.on_placement is not None and not dry_run:
            self.on_placement(found.report)

    def store(
        self,
        kind: str,
        key: bytes,
        raw_rest: bytes | None,
        decision: Decision,
        state: ClusterState,
    ) -> None:
        """Remember ``decision`` under the request key and, when proven safe, the raw key."""
        template = dataclasses.replace(decision, uid=_UID_PLACEHOLDER).render()
        parts = template.split(_UID_PLACEHOLDER_JSON)
        if len(parts) != 2:
            return
        placement = decision.placement
        report = placement if placement is not None and placement.for_owner else None
        answer = Answer(parts[0], parts[1], decision.outcome, decision.unknown, report)
        keys = [key]
        if raw_rest is not None and self._rest_keeps_head_uid(raw_rest):
            keys.append(_RAW_KEY_PREFIX[kind] + raw_rest)
        self.memo.put(state, keys, answer)

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
