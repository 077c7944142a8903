"""The one fake of the server's admission seam
(:class:`~cudasched.webhook.server.app.StagedAdmission`), for tests of the server and for the
benchmarks' floor: it decodes a review and answers with its uid, deciding nothing.

Light on purpose (orjson and the seam's types), so a benchmark's server process can import it
without the test suite's support.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable
from typing import Any, Literal

import orjson

from cudasched.vocab.errors import InputError
from cudasched.webhook.admission.review import Outcome, Placement

__all__ = ["FakeAdmission", "Mode"]

#: How the fake answers: allow unchanged, allow with a patch, deny, block in the review thread
#: until ``release`` is set, or raise (a bug in admission).
Mode = Literal["unchanged", "patch", "deny", "block", "raise"]

_ALLOW_HEAD = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":'
_ALLOW_TAIL = b',"allowed":true}}'

#: What :meth:`FakeAdmission.prepare` returns: the kind and the uid as JSON text.
Prepared = tuple[str, bytes]


class FakeAdmission:
    """Answers every review with its uid; ``mode`` (changeable between requests) picks the
    answer. ``inline=True`` answers on the event loop at ``recall``, the way the Admitter answers
    a remembered review (the benchmarks' no-op floor); otherwise every review goes to a review
    thread (``answer``), where ``block`` and ``raise`` act.

    It keeps what reached it: ``calls`` (reviews prepared), ``last_state`` (the snapshot the
    last answer was given) and the hooks the server set. Bodies that are not an AdmissionReview
    raise :class:`InputError` from ``prepare`` (the server answers 400)."""

    def __init__(self, mode: Mode = "unchanged", *, inline: bool = False) -> None:
        self.mode: Mode = mode
        self.inline = inline
        self.calls = 0
        self.last_state: Any = None
        self.entered = threading.Event()
        self.release = threading.Event()
        self.on_placement: Callable[[Placement], None] | None = None
        self.on_unknown: Callable[[str, str], None] | None = None

    def recall_body(self, kind: str, body: bytes, state: Any) -> None:
        return None  # nothing is remembered: every review is decoded

    def prepare(self, kind: str, body: bytes) -> Prepared:
        self.calls += 1
        try:
            doc = orjson.loads(body)
            if doc.get("kind") != "AdmissionReview":
                raise InputError("not an AdmissionReview")
            return kind, orjson.dumps(doc["request"]["uid"])
        except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError) as exc:
            raise InputError(f"not an AdmissionReview ({type(exc).__name__})") from None

    def recall(self, prepared: Prepared, state: Any) -> tuple[bytes, Outcome] | None:
        return self._answer(prepared, state) if self.inline else None

    def answer_inline(self, prepared: Prepared, state: Any) -> None:
        return None

    def answer(self, prepared: Prepared, state: Any) -> tuple[bytes, Outcome]:
        if self.mode == "block":
            self.entered.set()
            self.release.wait(30)
        if self.mode == "raise":
            raise RuntimeError("bug in admission")
        return self._answer(prepared, state)

    def _answer(self, prepared: Prepared, state: Any) -> tuple[bytes, Outcome]:
        kind, uid = prepared
        self.last_state = state
        mode = self.mode
        if mode in ("unchanged", "block"):
            return _ALLOW_HEAD + uid + _ALLOW_TAIL, "unchanged"
        response: dict[str, Any] = {"uid": orjson.loads(uid), "allowed": mode != "deny"}
        if mode == "patch":
            ops = [{"op": "add", "path": "/metadata/annotations", "value": {"k": kind}}]
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(orjson.dumps(ops)).decode()
            outcome: Outcome = "patched"
        else:
            response["status"] = {"code": 403, "message": "no"}
            outcome = "denied"
        answer = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}
        return orjson.dumps({**answer, "response": response}), outcome
