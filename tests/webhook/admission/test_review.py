"""The AdmissionReview v1 envelope: parsing names what is wrong, every answer (decision or
failure) carries the request's uid, warnings are clipped, and the admitter and the server write
their answers with the same code.
"""

from __future__ import annotations

import base64
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.knowledge import KnowledgeBase
from cudasched.settings.config import WebhookConfig
from cudasched.webhook.admission import placer as placer_module
from cudasched.webhook.admission.admitter import Admitter
from cudasched.webhook.admission.review import (
    API_VERSION,
    MAX_WARNING_CHARS,
    REVIEW_KIND,
    BadReviewError,
    Decision,
    ReviewRequest,
    clip,
    failure,
    parse_review,
    review_uid,
)
from cudasched.webhook.server.app import POD_PATH, WebhookApp
from cudasched.webhook.state.clusterstate import ClusterState
from tests.support.admission import Unsynced, call_app, review
from tests.support.fakeadmission import FakeAdmission

DATA = Path(__file__).parents[2] / "data" / "admission"


def envelope(request: Any) -> bytes:
    return orjson.dumps({"apiVersion": API_VERSION, "kind": REVIEW_KIND, "request": request})


# --------------------------------------------------------------------------- requests

_BAD_ENVELOPES = [
    (b"not json", "not JSON"),
    (b"[1, 2]", "must be a JSON object, got list"),
    (b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}', "apiVersion"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "Pod"}', "kind"),
]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        *_BAD_ENVELOPES,
        (orjson.dumps({"apiVersion": API_VERSION, "kind": REVIEW_KIND}), "'request'"),
        (envelope([]), "'request'"),
        (envelope({"operation": "CREATE"}), "request.uid"),
        (envelope({"uid": "", "operation": "CREATE"}), "request.uid"),
        (envelope({"uid": 7, "operation": "CREATE"}), "request.uid"),
        (envelope({"uid": "u"}), "request.operation"),
        (envelope({"uid": "u", "operation": ["CREATE"]}), "request.operation"),
    ],
)
def test_parse_errors_name_the_field(body: bytes, field: str) -> None:
    with pytest.raises(BadReviewError) as caught:
        parse_review(body)
    assert field in str(caught.value)


def test_parse_reads_the_fields_admission_needs() -> None:
    obj = {"metadata": {"name": "p"}}
    body = envelope(
        {
            "uid": "u-1",
            "operation": "CREATE",
            "namespace": "ns",
            "kind": {"group": "serving.kserve.io", "version": "v1beta1", "kind": "Foo"},
            "subResource": "status",
            "object": obj,
            "dryRun": False,
        }
    )
    assert parse_review(body) == ReviewRequest(
        uid="u-1",
        operation="CREATE",
        namespace="ns",
        group="serving.kserve.io",
        kind="Foo",
        sub_resource="status",
        obj=obj,
        dry_run=False,
    )
    # Fields of the wrong type read as absent; they never raise.
    odd = envelope(
        {"uid": "u", "operation": "DELETE", "namespace": 3, "kind": "Pod", "object": [1]}
    )
    # A request that does not say it is not a dry run is treated as one (no side effects).
    assert parse_review(odd) == ReviewRequest("u", "DELETE", "", "", "", "", None, dry_run=True)


@pytest.mark.parametrize(("body", "field"), _BAD_ENVELOPES)
def test_review_uid_refuses_what_is_not_a_review(body: bytes, field: str) -> None:
    with pytest.raises(BadReviewError) as caught:
        review_uid(body)
    assert field in str(caught.value)


def test_review_uid_needs_only_the_uid() -> None:
    """A failure answer needs no more than the uid: a request missing its operation (which
    admission would refuse) still gets one."""
    assert review_uid(envelope({"uid": "only-uid"})) == "only-uid"
    with pytest.raises(BadReviewError, match=r"request\.uid"):
        review_uid(envelope({"operation": "CREATE"}))
    with pytest.raises(BadReviewError, match=r"request\.uid .* got None"):
        review_uid(envelope("not an object"))


# --------------------------------------------------------------------------- responses


def test_clip_keeps_short_text_and_marks_a_cut() -> None:
    assert clip("short") == "short"
    exact = "x" * MAX_WARNING_CHARS
    assert clip(exact) == exact
    cut = clip("x" * 500)
    assert len(cut) == MAX_WARNING_CHARS and cut.endswith("…")
    # Whitespace before the cut is dropped so the ellipsis follows a word.
    assert clip("a" * 10 + " " * 200, limit=20) == "a" * 10 + "…"
    assert clip("abcdef", limit=4) == "abc…"


def test_clip_cuts_between_words_and_keeps_what_was_expected() -> None:
    # The API server passes 256 characters of a warning on whole (k8s.io/apiserver's
    # warning recorder); 120 is only what webhooks are asked to aim for.
    assert MAX_WARNING_CHARS == 256
    words = clip("word " * 100)
    assert len(words) <= MAX_WARNING_CHARS and words.endswith("word…")
    # A warning cut at the 120th character used to end "invalid CU…", mid-word and before
    # what the value should have been (issue 27).
    message = (
        "cudasched: pod not constrained: invalid cudasched.io/cuda-version on pod "
        "triton-resnet-predictor-6c9f7d8b5-: invalid CUDA version 'not-a-version': expected "
        "MAJOR[.MINOR[.PATCH]] (12, 12.4, 12.4.1), a wheel tag (cu124) or a code (12040)"
    )
    assert clip(message) == message
    # A long quoted value gives way to what was expected, which is kept whole.
    quoted = f"cudasched: invalid value {'x' * 400!r}: expected a CUDA version such as 12.4"
    clipped = clip(quoted)
    assert len(clipped) <= MAX_WARNING_CHARS
    assert clipped.startswith("cudasched: invalid value 'xxx")
    assert clipped.endswith("…: expected a CUDA version such as 12.4")


@settings(max_examples=50)
@given(uid=st.text(min_size=1, max_size=40), message=st.text(max_size=300), deny=st.booleans())
def test_failure_answer_carries_the_uid(uid: str, message: str, deny: bool) -> None:
    decision = failure(uid, message, deny=deny, code=503)
    doc = orjson.loads(decision.render())
    assert doc["apiVersion"] == API_VERSION and doc["kind"] == REVIEW_KIND
    response = doc["response"]
    assert response["uid"] == uid
    assert response["allowed"] is (not deny)
    assert response["warnings"] == [clip(message)]
    assert len(response["warnings"][0]) <= MAX_WARNING_CHARS
    assert decision.outcome == "error" and "patch" not in response
    if deny:
        assert response["status"] == {
            "code": 503,
            "message": clip(message),
            "metadata": {},
            "reason": "InternalError",
            "status": "Failure",
        }
    else:
        assert "status" not in response


_TRICKY = st.text(alphabet='"patch:\\{}, \x00é', max_size=30)


@given(
    st.lists(st.dictionaries(_TRICKY, _TRICKY, max_size=3), max_size=3),
    st.lists(_TRICKY, max_size=3),
    st.dictionaries(_TRICKY, _TRICKY, max_size=3),
    st.booleans(),
    _TRICKY,
)
def test_render_splices_the_patch_exactly_where_the_sorted_response_has_it(
    ops: list[dict[str, str]], warnings: list[str], audit: dict[str, str], allowed: bool, uid: str
) -> None:
    """Issue 22: the base64 patch is written into the rendered bytes directly; the bytes are
    exactly the sorted response's, whatever the other fields quote (``"patch":""`` included)."""
    decision = Decision(
        uid or "u",
        allowed=allowed,
        patch=tuple(ops),
        warnings=tuple(warnings),
        audit=audit,
        code=0 if allowed else 403,
        message="" if allowed else '"patch":""',
    )
    assert decision.render() == orjson.dumps(decision.response(), option=orjson.OPT_SORT_KEYS)
    quoting = replace(decision, patch=(*ops, {}), audit={**audit, "patch": ""})
    assert quoting.render() == orjson.dumps(quoting.response(), option=orjson.OPT_SORT_KEYS)


def test_decision_render_is_the_sorted_response() -> None:
    ops = ({"op": "add", "path": "/metadata/annotations", "value": {"a": "b"}},)
    decision = Decision("u", patch=ops, warnings=("w",), audit={"requirement": "r"})
    rendered = decision.render()
    assert rendered == orjson.dumps(decision.response(), option=orjson.OPT_SORT_KEYS)
    response = orjson.loads(rendered)["response"]
    assert response["patchType"] == "JSONPatch"
    assert orjson.loads(base64.b64decode(response["patch"])) == list(ops)
    assert response["auditAnnotations"] == {"requirement": "r"}
    denied = orjson.loads(Decision("u", allowed=False, code=403, message="no").render())
    assert denied["response"]["status"]["reason"] == "Forbidden"
    assert denied["response"]["status"]["code"] == 403


# --------------------------------------------------------------------------- one writer


@pytest.mark.parametrize("fail_closed", [False, True])
def test_the_servers_failure_answer_is_rendered_by_review(fail_closed: bool) -> None:
    """The server's answer while the cache is not synced is byte for byte the rendered
    failure Decision: the server writes no answer of its own."""
    app = WebhookApp(FakeAdmission(), Unsynced(), fail_closed=fail_closed)  # type: ignore[arg-type]
    try:
        status, body = call_app(app, POD_PATH, review("u-9"))
    finally:
        app.close()
    outcome = "request denied (failClosed)" if fail_closed else "admitted without CUDA placement"
    message = f"cudasched: cluster state not ready (waiting for the first list of nodes); {outcome}"
    assert status == 200
    assert body == failure("u-9", message, deny=fail_closed, code=503).render()


@pytest.mark.parametrize("fail_closed", [False, True])
def test_the_admitters_failure_answer_is_the_same_code(
    fail_closed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When admission itself fails, the Admitter answers with the same failure Decision the
    server uses, rendered the same way."""

    def boom(*_: Any, **__: Any) -> Any:
        raise RuntimeError("kaboom")

    kb = KnowledgeBase.load()
    admitter = Admitter.from_config(
        WebhookConfig.from_mapping({"failClosed": fail_closed, "decisionCacheBytes": 0}), kb
    )
    state = ClusterState.from_objects([], [], [], [], kb=kb)
    monkeypatch.setattr(placer_module, "compile_requirement", boom)
    body = (DATA / "pod-predictor-triton.json").read_bytes()
    uid = orjson.loads(body)["request"]["uid"]
    outcome = "request denied (failClosed)" if fail_closed else "admitted unchanged"
    expected = failure(
        uid,
        f"cudasched: internal error (RuntimeError); {outcome}",
        deny=fail_closed,
        code=500,
        reason="internal error",
    )
    assert admitter.decide("pod", body, state) == expected
    assert admitter.review("pod", body, state) == expected.render()


def test_the_admitters_answer_is_its_decision_rendered() -> None:
    kb = KnowledgeBase.load()
    admitter = Admitter.from_config(WebhookConfig.from_mapping({"decisionCacheBytes": 0}), kb)
    state = ClusterState.from_objects([], [], [], [], kb=kb)
    for name in ("pod-predictor-triton.json", "pod-job-gpu.json", "pod-predictor-cpu.json"):
        body = (DATA / name).read_bytes()
        assert admitter.review("pod", body, state) == admitter.decide("pod", body, state).render()
