"""Fuzzing the admission path: whatever arrives, the answer is well formed and harmless.

A mutating webhook sits on every pod creation. Its worst failures are not wrong decisions but
broken answers: an exception the API server sees as a 5xx, a JSON patch that does not apply
(the API server then fails the user's request even under ``failurePolicy: Ignore``), a patch
that leaves an object the API server rejects, or an answer for the wrong uid. So these tests
throw realistic requests with damaged parts at the admission code and check only those
contracts, never the placement decision itself (``test_admission.py`` covers decisions).

Three layers, cheapest first:

* structured damage (wrong types at every path, unicode keys, deep nesting, huge values) fed to
  the pure :meth:`Admitter.review`, many examples;
* raw bytes (NaN/Infinity literals, duplicate keys, invalid UTF-8, lone surrogates, truncation,
  nesting past the parser's depth limit) fed to the pure reviewer and the ASGI app;
* a smaller sample of both sent over real HTTPS to the in-process server.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cudasched.knowledge import KnowledgeBase
from cudasched.settings.config import WebhookConfig
from cudasched.vocab import labels as L
from cudasched.webhook.admission.admitter import Admitter
from cudasched.webhook.admission.review import MAX_WARNING_CHARS, BadReviewError
from cudasched.webhook.server.app import ISVC_PATH, POD_PATH, WebhookApp
from cudasched.webhook.server.serving import RunningServer, serve_in_thread
from cudasched.webhook.state.clusterstate import ClusterState
from cudasched.webhook.state.source import StaticStateSource
from tests.support.admission import isvcs, nodes, runtimes
from tests.support.k8s_schema import assert_valid, assert_valid_node_affinity

DATA = Path(__file__).parents[2] / "data" / "admission"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
NODE_AFFINITY = ("spec", "affinity", "nodeAffinity")
ISVC_NODE_AFFINITY = ("spec", "predictor", "affinity", "nodeAffinity")


def fuzz(examples: int) -> settings:
    """Modest example counts keep the suite fast on two cores; module fixtures are shared
    across examples on purpose (they hold no per-example state)."""
    return settings(
        max_examples=examples,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


# Requests whose objects cudasched constrains or annotates, so damage lands on live code paths.
SEEDS: dict[str, tuple[str, str]] = {
    "pod-predictor-triton.json": ("pod", POD_PATH),
    "pod-predictor-affinity.json": ("pod", POD_PATH),
    "pod-job-gpu.json": ("pod", POD_PATH),
    "pod-predictor-cpu.json": ("pod", POD_PATH),
    "isvc-create.json": ("isvc", ISVC_PATH),
}


def load(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def state(kb: KnowledgeBase) -> ClusterState:
    return ClusterState.from_objects(nodes(), isvcs(), [], runtimes(), kb=kb)


class Env:
    """The cluster and the admitters under test, with a short repr: hypothesis prints every
    argument of a failing example, and a full ClusterState would bury the damaged review."""

    def __init__(self, state: ClusterState, admitters: dict[str, Admitter]) -> None:
        self.state = state
        self.admitters = admitters

    def __repr__(self) -> str:
        return "Env(test_admission cluster)"


@pytest.fixture(scope="module")
def env(kb: KnowledgeBase, state: ClusterState) -> Env:
    """Configurations that take different code paths over the same request."""

    def make(**settings_: Any) -> Admitter:
        return Admitter.from_config(WebhookConfig.from_mapping(settings_), kb=kb)

    return Env(
        state,
        {
            "default": make(),
            "preferred": make(mode="preferred", isvcAffinity=True),
            "strict-deny": make(onNoFit="deny", failClosed=True, labelScheme="gfd"),
        },
    )


# --------------------------------------------------------------------------- damage


def _paths(doc: Any, limit: int = 24) -> list[tuple[Any, ...]]:
    """Paths to the values in ``doc`` (dict keys and list indexes), at most ``limit`` deep.

    Iterative and depth-limited: earlier damage may have planted a 200-level structure, and
    recursing through it inside hypothesis's own deep stack would hit the recursion limit."""
    out: list[tuple[Any, ...]] = []
    stack: list[tuple[tuple[Any, ...], Any]] = [((), doc)]
    while stack:
        prefix, value = stack.pop()
        out.append(prefix)
        if len(prefix) >= limit:
            continue
        if isinstance(value, dict):
            stack.extend(((*prefix, k), v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend(((*prefix, i), v) for i, v in enumerate(value))
    out.reverse()
    return out


def _deep(depth: int) -> Any:
    out: Any = "bottom"
    for i in range(depth):
        out = {"n": out} if i % 2 else [out]
    return out


_unicode = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=12
)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    _unicode,
    st.sampled_from(["x", "", "12.4", "-1", "1e3", "0x10", "∞", "nvidia.com/gpu", "In"]),
)
_weird = st.one_of(
    _scalars,
    st.builds(list),  # fresh objects: a shared one would alias two places in the review
    st.builds(dict),
    st.lists(_scalars, max_size=3),
    st.dictionaries(_unicode, _scalars, max_size=3),
    st.integers(1, 120).map(_deep),
    st.integers(1_000, 200_000).map(lambda n: "g" * n),
    st.integers(1, 2_000).map(lambda n: {f"k{i}": str(i) for i in range(n)}),
)

# Paths the admission code reads on purpose: damage there more often than elsewhere.
_HOT = [
    ("spec", "containers"),
    ("spec", "containers", 0),
    ("spec", "containers", 0, "image"),
    ("spec", "containers", 0, "resources"),
    ("spec", "containers", 0, "resources", "limits"),
    ("spec", "containers", 0, "resources", "limits", "nvidia.com/gpu"),
    ("spec", "containers", 0, "env"),
    ("spec", "initContainers"),
    ("spec", "resourceClaims"),
    ("spec", "nodeSelector"),
    ("spec", "affinity"),
    ("spec", "affinity", "nodeAffinity"),
    (*NODE_AFFINITY, "requiredDuringSchedulingIgnoredDuringExecution"),
    (*NODE_AFFINITY, "preferredDuringSchedulingIgnoredDuringExecution"),
    ("spec",),
    ("metadata",),
    ("metadata", "annotations"),
    ("metadata", "annotations", L.ANN_CUDA_VERSION),
    ("metadata", "annotations", L.ANN_REQUIREMENT),
    ("metadata", "labels"),
    ("metadata", "labels", "serving.kserve.io/inferenceservice"),
    ("metadata", "labels", "component"),
    ("metadata", "namespace"),
    ("metadata", "deletionTimestamp"),
    ("spec", "predictor"),
    ("spec", "predictor", "model"),
    ("spec", "predictor", "model", "runtime"),
    ("spec", "predictor", "model", "modelFormat"),
    ("spec", "predictor", "model", "resources", "limits"),
    ("spec", "predictor", "affinity"),
    ("status",),
]


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    """Put ``value`` at ``path``, creating dict parents; a path through a non-container (or a
    list index out of range) is left alone."""
    cur = doc
    for part in path[:-1]:
        if isinstance(cur, dict):
            cur = cur.setdefault(part, {}) if isinstance(part, str) else None
        elif isinstance(cur, list) and isinstance(part, int) and part < len(cur):
            cur = cur[part]
        else:
            return
    last = path[-1]
    in_dict = isinstance(cur, dict) and isinstance(last, str)
    if in_dict or (isinstance(cur, list) and isinstance(last, int) and last < len(cur)):
        cur[last] = value


@st.composite
def damaged_reviews(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    """A real AdmissionReview with one to three parts of its object damaged."""
    name = draw(st.sampled_from(sorted(SEEDS)))
    kind, path = SEEDS[name]
    review = load(name)
    review["request"]["uid"] = draw(st.one_of(st.just("fuzz-uid-1"), _unicode.filter(bool)))
    obj = review["request"]["object"]
    for _ in range(draw(st.integers(1, 3))):
        how = draw(st.sampled_from(["hot", "hot", "anywhere", "unicode-key", "delete"]))
        if how == "hot":
            _set(obj, draw(st.sampled_from(_HOT)), draw(_weird))
        elif how == "anywhere":
            where = draw(st.sampled_from([p for p in _paths(obj) if p]))
            _set(obj, where, draw(_weird))
        elif how == "unicode-key":
            dicts = [p for p in _paths(obj) if isinstance(_get(obj, p), dict)]
            parent = draw(st.sampled_from(dicts))
            _get(obj, parent)[draw(_unicode)] = draw(_scalars)
        else:
            where = draw(st.sampled_from([p for p in _paths(obj) if p]))
            parent = _get(obj, where[:-1])
            if isinstance(parent, dict):
                parent.pop(where[-1], None)
            elif isinstance(parent, list):
                del parent[where[-1]]
    # The envelope sometimes lies about the request too.
    if draw(st.integers(0, 5)) == 0:
        field = draw(st.sampled_from(["operation", "namespace", "kind", "subResource", "object"]))
        review["request"][field] = draw(_weird)
    return kind, path, review


def encode(review: dict[str, Any]) -> bytes:
    """The request body. orjson refuses to write more than 254 levels of nesting; damage can
    nest deeper, and such bodies are exactly the interesting ones, so fall back to json."""
    try:
        return orjson.dumps(review)
    except orjson.JSONEncodeError:
        return json.dumps(review).encode()


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        doc = doc[part]
    return doc


# --------------------------------------------------------------------------- checks


def _ops(response: dict[str, Any]) -> list[dict[str, Any]]:
    assert ("patch" in response) == ("patchType" in response), response
    if "patch" not in response:
        return []
    assert response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"], validate=True))
    assert isinstance(ops, list) and ops, "an empty patch must be sent as no patch at all"
    return ops


def _is_valid(check: Any, value: Any) -> bool:
    try:
        check(value)
    except Exception:  # the checker itself may choke on a damaged object: "not valid"
        return False
    return True


def _node_affinity(obj: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def check_answer(review: dict[str, Any], answer: bytes) -> dict[str, Any]:
    """What the API server relies on: envelope, uid, bounded warnings, a patch that applies to
    the request object, and an object no less acceptable than the one that came in."""
    # What the API server holds is the decoded body: no Python object shared between paths.
    review = json.loads(json.dumps(review))
    doc = orjson.loads(answer)
    assert doc["apiVersion"] == "admission.k8s.io/v1" and doc["kind"] == "AdmissionReview"
    response = doc["response"]
    assert response["uid"] == review["request"]["uid"]
    assert isinstance(response["allowed"], bool)
    for warning in response.get("warnings", []):
        assert isinstance(warning, str) and 0 < len(warning) <= MAX_WARNING_CHARS
    if not response["allowed"]:
        status = response["status"]
        assert 400 <= status["code"] <= 599 and status["message"]
        assert "patch" not in response
    ops = _ops(response)
    if not ops:
        return response
    original = review["request"]["object"]
    assert isinstance(original, dict), "a patch for a request without an object"
    patched = jsonpatch.apply_patch(original, ops)  # raises when it would not apply
    for op in ops:
        assert op["path"].startswith(("/metadata", "/spec")), op
    if _is_valid(assert_valid, original):
        # A valid object stays valid: the API server validates after mutation.
        assert_valid(patched)
    else:
        # A broken object may stay broken, but what cudasched owns must be well formed.
        for path in (NODE_AFFINITY, ISVC_NODE_AFFINITY):
            before = _node_affinity(original, path)
            after = _node_affinity(patched, path)
            if after is not None and after != before and _is_valid(_affinity_ok, before):
                assert_valid_node_affinity(after)
        annotations = patched["metadata"].get("annotations")
        if annotations is not None or original.get("metadata", {}).get("annotations"):
            assert isinstance(annotations, dict)
            assert isinstance(annotations.get(L.ANN_REQUIREMENT, ""), str)
    return response


def _affinity_ok(node_affinity: Any) -> None:
    if node_affinity is not None:
        assert_valid_node_affinity(node_affinity)


# --------------------------------------------------------------------------- pure reviewer


@fuzz(250)
@given(case=damaged_reviews(), which=st.sampled_from(["default", "preferred", "strict-deny"]))
def test_damaged_objects_get_well_formed_answers(
    env: Env, case: tuple[str, str, dict[str, Any]], which: str
) -> None:
    """Wrong types anywhere in the object never raise: the envelope is valid, so the
    reviewer must answer, for the same uid, with a patch that applies."""
    kind, _path, review = case
    body = encode(review)
    operation = review["request"]["operation"]
    if not (isinstance(operation, str) and operation):
        # The one envelope field the reviewer insists on: the server turns this into a 400.
        with pytest.raises(BadReviewError, match="operation"):
            env.admitters[which].review(kind, body, env.state)  # type: ignore[arg-type]
        return
    answer = env.admitters[which].review(kind, body, env.state)  # type: ignore[arg-type]
    response = check_answer(review, answer)
    event("patched" if "patch" in response else "denied" if not response["allowed"] else "as is")


@pytest.mark.parametrize(
    ("where", "value"),
    [
        (("spec", "containers"), "x"),
        (("spec", "containers", 0, "resources", "limits"), []),
        (("spec", "containers", 0, "resources", "limits", "nvidia.com/gpu"), 1),
        (("spec", "containers", 0, "resources", "limits", "nvidia.com/gpu"), "lots"),
        (("spec", "containers", 0, "image"), 42),
        (("metadata", "annotations"), 5),
        (("metadata", "annotations", L.ANN_CUDA_VERSION), 12.4),
        (("metadata", "annotations", L.ANN_CUDA_VERSION), "twelve"),
        (("metadata", "labels"), ["component", "predictor"]),
        (("spec", "affinity"), "anywhere"),
        (("spec", "affinity", "nodeAffinity"), []),
        ((*NODE_AFFINITY, "requiredDuringSchedulingIgnoredDuringExecution"), {"x": 1}),
        ((*NODE_AFFINITY, "requiredDuringSchedulingIgnoredDuringExecution"), {}),
        (
            (*NODE_AFFINITY, "requiredDuringSchedulingIgnoredDuringExecution"),
            {"nodeSelectorTerms": [{"matchExpressions": "k In v"}]},
        ),
        (
            (*NODE_AFFINITY, "preferredDuringSchedulingIgnoredDuringExecution"),
            [{"weight": "heavy", "preference": []}],
        ),
        (("spec", "nodeSelector"), {"kubernetes.io/os": 1}),
        (("metadata",), None),
        (("spec",), "pod"),
        (("metadata", "annotations"), {"ключ/ü": "値", "\u0000": "nul"}),
        (("metadata", "annotations", "deep"), _deep(200)),
    ],
    ids=lambda v: str(v)[:40],
)
@pytest.mark.parametrize("which", ["default", "preferred", "strict-deny"])
def test_named_wrong_types(
    env: Env,
    where: tuple[Any, ...],
    value: Any,
    which: str,
) -> None:
    """The malformations the issue names, on the predictor pod that is normally patched."""
    review = load("pod-predictor-triton.json")
    _set(review["request"]["object"], where, value)
    answer = env.admitters[which].review("pod", orjson.dumps(review), env.state)
    response = check_answer(review, answer)
    assert response["allowed"] or which == "strict-deny"


# --------------------------------------------------------------------------- raw bytes

_ENVELOPE = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":'


def _raw_cases() -> list[tuple[str, bytes]]:
    pod = orjson.dumps(load("pod-predictor-triton.json"))
    request = orjson.dumps(load("pod-predictor-triton.json")["request"])
    return [
        ("nan-literal", _ENVELOPE + request[:-1] + b',"x":NaN}}'),
        ("infinity-literal", _ENVELOPE + request[:-1] + b',"x":Infinity}}'),
        ("minus-infinity", _ENVELOPE + request[:-1] + b',"x":-Infinity}}'),
        ("huge-exponent", _ENVELOPE + request[:-1] + b',"x":1e999}}'),
        ("big-integer", _ENVELOPE + request[:-1] + b',"x":' + b"9" * 400 + b"}}"),
        ("duplicate-uid", _ENVELOPE + b'{"uid":"first","uid":"second",' + request[1:] + b"}"),
        (
            "duplicate-object",
            _ENVELOPE + request[:-1] + b',"object":{"kind":"Pod","spec":{}}}}',
        ),
        ("duplicate-envelope", pod[:-1] + b',"kind":"AdmissionReview"}'),
        ("invalid-utf8", pod.replace(b"kserve-container", b"kserve-\xff\xfe-container")),
        ("overlong-utf8", pod.replace(b"kserve-container", b"kserve-\xc0\xaf-container")),
        ("lone-surrogate", pod.replace(b"kserve-container", b"kserve-\\ud800-container")),
        ("lone-surrogate-uid", pod.replace(b"9e5b3c71", b"\\udc00")),
        ("nul-in-uid", pod.replace(b"9e5b3c71", b"\\u0000")),
        ("bom", b"\xef\xbb\xbf" + pod),
        ("utf16", pod.decode().encode("utf-16")),
        ("truncated", pod[: len(pod) // 2]),
        ("trailing-garbage", pod + b"}"),
        ("two-documents", pod + b"\n" + pod),
        ("deep-array", b"[" * 5000 + b"]" * 5000),
        ("deep-in-object", _ENVELOPE + request[:-1] + b',"x":' + b"[" * 2000 + b"]" * 2000 + b"}}"),
        (
            "deep-just-under-limit",
            _ENVELOPE + request[:-1] + b',"x":' + b"[" * 1000 + b"]" * 1000 + b"}}",
        ),
        ("empty", b""),
        ("whitespace", b" \n\t "),
        ("null", b"null"),
        ("number", b"7"),
        ("string", b'"AdmissionReview"'),
        ("uid-number", pod.replace(b'"9e5b3c71-5d8e-4a0f-b6d2-3c1f7a9e0b11"', b"12")),
        ("uid-empty", pod.replace(b'"9e5b3c71-5d8e-4a0f-b6d2-3c1f7a9e0b11"', b'""')),
        ("request-list", _ENVELOPE + b"[]}"),
    ]


RAW = _raw_cases()


def _expected_uid(body: bytes) -> str | None:
    """The uid the answer must carry: the string uid the API server's (Go) decoder would see,
    or ``None`` when the body is not a decodable AdmissionReview with one."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    request = doc.get("request") if isinstance(doc, dict) else None
    uid = request.get("uid") if isinstance(request, dict) else None
    return uid if isinstance(uid, str) and uid else None


@pytest.mark.parametrize(("name", "body"), RAW, ids=[name for name, _ in RAW])
def test_raw_bodies_pure(env: Env, name: str, body: bytes) -> None:
    """The pure reviewer either answers for the uid or raises BadReviewError (the server's
    400); no other exception escapes, whatever the bytes."""
    refused = answered = 0
    for admitter in env.admitters.values():
        try:
            answer = admitter.review("pod", body, env.state)
        except BadReviewError as exc:
            assert str(exc) and "\n" not in str(exc).strip()
            refused += 1
            continue
        uid = _expected_uid(body)
        assert uid is not None, f"{name}: answered a body without a uid"
        response = orjson.loads(answer)["response"]
        assert response["uid"] == uid
        if "patch" in response:
            jsonpatch.apply_patch(orjson.loads(body)["request"]["object"], _ops(response))
        answered += 1
    assert refused + answered == 3  # default, preferred, strict-deny


def _asgi(app: WebhookApp, path: str, body: bytes, chunk: int = 0) -> tuple[int, bytes]:
    """Drive the ASGI app in-process; ``chunk`` splits the body over several messages."""
    pieces = [body[i : i + chunk] for i in range(0, len(body), chunk)] if chunk else [body]
    messages = [
        {"type": "http.request", "body": p, "more_body": i < len(pieces) - 1}
        for i, p in enumerate(pieces or [b""])
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [] if chunk else [(b"content-length", str(len(body)).encode())]
    scope = {"type": "http", "method": "POST", "path": path, "headers": headers}
    asyncio.run(app(scope, receive, send))
    assert sent[0]["type"] == "http.response.start"
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


@pytest.fixture(scope="module")
def app(state: ClusterState) -> Iterator[WebhookApp]:

    cfg = WebhookConfig.from_mapping({"onNoFit": "deny"})
    application = WebhookApp(
        Admitter.from_config(cfg), StaticStateSource(state), request_timeout=20
    )
    yield application
    application.close()


def check_http(status: int, out: bytes, body: bytes, review: dict[str, Any] | None) -> None:
    """Never a 5xx; a 200 carries the uid (and a patch that applies); anything else is a
    one-line client error."""
    assert status < 500, out
    if status == 200:
        uid = _expected_uid(body)
        assert uid is not None
        response = orjson.loads(out)["response"]
        assert response["uid"] == uid
        if review is not None:
            check_answer(review, out)
    else:
        assert status in (400, 413), (status, out)
        assert out.endswith(b"\n") and out.count(b"\n") == 1


@pytest.mark.parametrize(("name", "body"), RAW, ids=[name for name, _ in RAW])
def test_raw_bodies_asgi(app: WebhookApp, name: str, body: bytes) -> None:
    for path in (POD_PATH, ISVC_PATH):
        status, out = _asgi(app, path, body, chunk=7 if name == "truncated" else 0)
        check_http(status, out, body, None)
        if _expected_uid(body) is not None and name != "uid-empty":
            assert status == 200, (name, out)


@fuzz(40)
@given(case=damaged_reviews(), chunk=st.sampled_from([0, 0, 1, 13, 4096]))
def test_damaged_reviews_asgi(
    app: WebhookApp, case: tuple[str, str, dict[str, Any]], chunk: int
) -> None:
    """The same damage through the ASGI app, the body split over many receive messages."""
    _kind, path, review = case
    body = encode(review)
    if chunk == 1:
        body = body[:2000]  # one message per byte: keep the event loop's work bounded
    status, out = _asgi(app, path, body, chunk=chunk)
    check_http(status, out, body, review if chunk != 1 else None)


# --------------------------------------------------------------------------- over HTTPS


@pytest.fixture(scope="module")
def https(state: ClusterState) -> Iterator[tuple[RunningServer, httpx.Client]]:
    cfg = WebhookConfig.from_mapping(
        {"server": {"maxBodyBytes": 262_144, "requestTimeoutSeconds": 20}}
    )
    with serve_in_thread(state, config=cfg) as srv:
        tls = ssl.create_default_context(cadata=srv.ca_pem.decode())
        with httpx.Client(base_url=srv.url, verify=tls, timeout=30) as c:
            yield srv, c


@fuzz(25)
@given(case=damaged_reviews())
def test_damaged_reviews_over_https(
    https: tuple[RunningServer, httpx.Client], case: tuple[str, str, dict[str, Any]]
) -> None:
    _kind, path, review = case
    body = encode(review)
    resp = https[1].post(path, content=body)
    check_http(resp.status_code, resp.content, body, review if len(body) <= 262_144 else None)


@pytest.mark.parametrize(("name", "body"), RAW[::3], ids=[name for name, _ in RAW[::3]])
def test_raw_bodies_over_https(
    https: tuple[RunningServer, httpx.Client], name: str, body: bytes
) -> None:
    resp = https[1].post(POD_PATH, content=body, headers={"content-type": "application/json"})
    check_http(resp.status_code, resp.content, body, None)
    # The connection and the server survive whatever the last body was.
    assert https[1].get("/healthz").status_code == 200


def test_random_bytes_and_json_over_https(https: tuple[RunningServer, httpx.Client]) -> None:
    """A burst of unstructured junk on one keep-alive connection, then a real review."""

    @settings(max_examples=30, suppress_health_check=[HealthCheck.too_slow])
    @given(
        st.one_of(
            st.binary(max_size=300),
            st.recursive(
                st.none() | st.booleans() | st.floats(allow_nan=False) | _unicode,
                lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_unicode, inner),
                max_leaves=15,
            ).map(lambda v: orjson.dumps({"apiVersion": "admission.k8s.io/v1", "request": v})),
        )
    )
    def junk(body: bytes) -> None:
        resp = https[1].post(ISVC_PATH, content=body)
        check_http(resp.status_code, resp.content, body, None)

    junk()
    review = load("pod-predictor-triton.json")
    resp = https[1].post(POD_PATH, content=orjson.dumps(review))
    assert resp.status_code == 200
    assert "patch" in check_answer(review, resp.content)


def test_nothing_to_change_means_no_patch(env: Env) -> None:
    """An InferenceService with nothing to record and no stale record is left without a
    patch: a no-op patch still counts as a mutation (metrics, reinvocation, audit)."""
    review = load("isvc-create.json")
    review["request"]["object"] = {"apiVersion": "serving.kserve.io/v1beta1"}
    response = check_answer(
        review, env.admitters["default"].review("isvc", orjson.dumps(review), env.state)
    )
    assert "patch" not in response, base64.b64decode(response["patch"])


def test_deep_value_copied_into_a_patch(env: Env) -> None:
    """The merge carries the pod's own nodeAffinity fields into the patch value; a body the
    parser accepted (<= 1024 levels) must not make writing the answer fail."""
    review = load("pod-predictor-triton.json")
    review["request"]["object"]["spec"]["affinity"] = {"nodeAffinity": {"x": _deep(400)}}
    for which in ("default", "strict-deny"):
        answer = env.admitters[which].review("pod", encode(review), env.state)
        response = orjson.loads(answer)["response"]
        assert response["uid"] == review["request"]["uid"]
        if "patch" in response:
            jsonpatch.apply_patch(review["request"]["object"], _ops(response))


def test_fuzz_target_replays_seeds() -> None:
    """The atheris target (fuzz/admission_fuzz.py) runs without atheris on its seeds and on
    inputs that reach each way it builds a body, so it cannot rot unnoticed."""
    import importlib.util

    path = Path(__file__).parents[3] / "fuzz" / "admission_fuzz.py"
    spec = importlib.util.spec_from_file_location("cudasched_admission_fuzz", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    inputs = [p.read_bytes() for p in sorted(DATA.glob("*.json"))]
    inputs += [
        b"",
        b"\x00",
        b"\x00\x05x",  # containers: "x"
        b"\x01\x01[]",  # annotations: []
        b'\x02\x08{"nodeAffinity": 5}',
        b'\x04\x00{"metadata": {"annotations": {"cudasched.io/cuda-version": 12}}}',
        b"\x03\x0b\xff\xfe\xfd",
        b"[" * 3000,
    ]
    for data in inputs:
        module.check_one(data)


def _huge(kind: str) -> dict[str, Any]:
    """Objects near the API server's 3 MiB request limit, each big in a different place."""
    review = load("pod-predictor-triton.json")
    pod = review["request"]["object"]
    container = pod["spec"]["containers"][0]
    exprs = [
        {"key": f"k{i}.example.com/x", "operator": "In", "values": ["a", "b", "c"]}
        for i in range(3)
    ]
    if kind == "annotation-value":
        pod["metadata"]["annotations"]["example.com/blob"] = "x" * 2_500_000
    elif kind == "many-annotations":
        pod["metadata"]["annotations"] = {f"k{i}.example.com/a": "v" for i in range(50_000)}
    elif kind == "many-containers":
        pod["spec"]["containers"] = [dict(container, name=f"c{i}") for i in range(500)]
    elif kind == "many-required-terms":
        terms = [
            # Past the merge's term limit (the pod is admitted unconstrained, with a warning).
            # Kept modest: the merge's duplicate check is quadratic in the number of terms.
            {"matchExpressions": [dict(e, values=[f"v{i}"]) for e in exprs]}
            for i in range(300)
        ]
        pod["spec"]["affinity"] = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": terms}}}
    elif kind == "many-preferred-terms":
        pref = [
            {"weight": 1 + i % 100, "preference": {"matchExpressions": exprs}} for i in range(2_000)
        ]
        pod["spec"]["affinity"] = {"nodeAffinity": {PREFERRED: pref}}
    elif kind == "long-expression":
        term = {
            "matchExpressions": [
                dict(e, key=f"k{i}.example.com/y") for i, e in enumerate(exprs * 1_000)
            ]
        }
        pod["spec"]["affinity"] = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [term]}}}
    return review


HUGE = [
    "annotation-value",
    "many-annotations",
    "many-containers",
    "many-required-terms",
    "many-preferred-terms",
    "long-expression",
]


@pytest.fixture(scope="module")
def default_https(state: ClusterState) -> Iterator[tuple[RunningServer, httpx.Client]]:
    """The server with production limits: 3 MiB bodies, a 2.5 s budget, fail open."""
    with serve_in_thread(state, config=WebhookConfig()) as srv:
        tls = ssl.create_default_context(cadata=srv.ca_pem.decode())
        with httpx.Client(base_url=srv.url, verify=tls, timeout=30) as c:
            yield srv, c


@pytest.mark.parametrize("kind", HUGE)
def test_huge_objects_within_the_default_limits(
    default_https: tuple[RunningServer, httpx.Client], kind: str
) -> None:
    """Objects as big as the API server lets through get an answer for their uid, within the
    time budget (a decision that overruns it is answered by the failure mode), and any patch
    applies and leaves a valid pod."""
    review = _huge(kind)
    body = orjson.dumps(review)
    assert len(body) <= 3_145_728, len(body)
    resp = default_https[1].post(POD_PATH, content=body)
    assert resp.status_code == 200, resp.text
    response = check_answer(review, resp.content)
    assert response["allowed"] is True
    if kind == "many-required-terms":
        assert "patch" not in response and "not constrained" in response["warnings"][0]


@fuzz(60)
@given(
    content_length=st.one_of(
        st.none(),
        st.integers(-(2**70), 2**70).map(lambda n: str(n).encode()),
        st.binary(max_size=12),
        st.sampled_from([b"", b" 12 ", b"1e3", b"0x10", b"\xff", "٣".encode()]),
    ),
    method=st.sampled_from(["POST", "GET", "PUT", "HEAD", "OPTIONS", "PATCH"]),
    path=st.sampled_from([POD_PATH, ISVC_PATH, "/healthz", "/readyz", "/metrics", "/", "/%00"]),
)
def test_request_heads_asgi(
    app: WebhookApp, content_length: bytes | None, method: str, path: str
) -> None:
    """Whatever the method, path and Content-Length header say, the app answers without a
    5xx and never with an exception."""
    body = encode(load("pod-predictor-triton.json"))
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [] if content_length is None else [(b"content-length", content_length)]
    scope = {"type": "http", "method": method, "path": path, "headers": headers}
    asyncio.run(app(scope, receive, send))
    status = sent[0]["status"]
    assert status < 500 or (path == "/readyz" and status == 503), status
    if path in (POD_PATH, ISVC_PATH) and method == "POST" and status == 200:
        assert orjson.loads(sent[1]["body"])["response"]["uid"]


# --------------------------------------------------------------------------- internal errors
# Damage that used to reach admission's internal-error path (fail open: admitted with a
# warning; failClosed: denied with code 500). The API server never sends such objects, so
# these are robustness gaps rather than outages.


def test_malformed_isvc_metadata_is_not_an_internal_error(env: Env) -> None:
    """An InferenceService whose metadata is not an object is answered normally (its record
    annotation replaces the bad value), not by the internal-error path."""
    review = load("isvc-create.json")
    review["request"]["object"]["metadata"] = "x"
    decision = env.admitters["strict-deny"].decide("isvc", encode(review), env.state)
    assert decision.outcome != "error", decision.warnings
    check_answer(review, decision.render())


def test_unhashable_expression_key_is_not_an_internal_error(env: Env) -> None:
    """A node-selector requirement whose key is a list is unreadable input (a warning), not
    an internal error that failClosed turns into a denial."""
    review = load("pod-predictor-triton.json")
    bad = {"key": [], "operator": "Exists"}
    affinity = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [bad]}]}}}
    review["request"]["object"]["spec"]["affinity"] = affinity
    decision = env.admitters["strict-deny"].decide("pod", encode(review), env.state)
    assert decision.outcome != "error", decision.warnings


# --------------------------------------------------------------------------- typed parsers
# Issue 13 item 7: values that used to raise from inside admission (an internal error: a 500
# denial under failClosed, with a traceback in the log). Each is planted in the request object
# and in the cluster objects admission reads (runtimes, nodes), where one bad ServingRuntime
# used to break every predictor pod that used it.


def _nested(depth: int) -> Any:
    out: Any = "x"
    for _ in range(depth):
        out = {"a": out}
    return out


_HOSTILE = st.sampled_from(
    [
        "9" * 5000,  # past Python's 4,300-digit int() limit
        "12." + "9" * 5000,
        "cu" + "1" * 5000,
        "١٢.٨",  # Arabic-Indic digits: not a version
        "²²²²",
        "12.4\n",
        {"a": 1},  # a label value that is an object
        ["12.4"],
        None,
        1e308,
        -1,
        True,
        "x" * 300_000,
        "\x00\x07",
    ]
).map(lambda v: v) | st.integers(120, 600).map(_nested)

_REQUEST_PATHS = [
    ("metadata", "annotations", L.ANN_CUDA_VERSION),
    ("metadata", "annotations", L.ANN_MIN_COMPUTE),
    ("metadata", "annotations", L.ANN_POLICY),
    ("metadata", "annotations", L.ANN_SHIPS_CUDA_COMPAT),
    ("metadata", "annotations", L.ANN_SKIP),
    ("metadata", "labels", "serving.kserve.io/inferenceservice"),
    ("metadata", "labels", "component"),
    ("metadata", "name"),
    ("metadata", "namespace"),
    ("spec", "containers", 0, "image"),
    ("spec", "containers", 0, "resources", "limits", "nvidia.com/gpu"),
    ("spec", "nodeSelector", "nvidia.com/cuda.runtime.major"),
]
_ISVC_PATHS = [
    ("metadata", "annotations", L.ANN_CUDA_VERSION),
    ("metadata", "labels", "team"),
    ("spec", "predictor", "model", "runtime"),
    ("spec", "predictor", "model", "modelFormat", "name"),
    ("spec", "predictor", "model", "modelFormat", "version"),
]
_CLUSTER_PLACES = [
    ("runtime", "labels", L.ANN_CUDA_VERSION),
    ("runtime", "annotations", "cpaas.io/cuda-version"),
    ("runtime", "labels", "cpaas.io/accelerator-type"),
    ("node", "labels", L.CUDA_CODE),
    ("node", "labels", "nvidia.com/cuda.driver.major"),
    ("node", "labels", "nvidia.com/gpu.product"),
]


def _not_an_internal_error(answer: bytes) -> dict[str, Any]:
    response = orjson.loads(answer)["response"]
    assert not any("internal error" in w for w in response.get("warnings", [])), response
    assert response.get("status", {}).get("code") != 500, response
    return response


@fuzz(120)
@given(
    where=st.sampled_from(
        [("pod", p) for p in _REQUEST_PATHS] + [("isvc", p) for p in _ISVC_PATHS]
    ),
    value=_HOSTILE,
    which=st.sampled_from(["default", "strict-deny"]),
)
def test_hostile_values_in_requests_are_bad_input(
    env: Env, where: tuple[str, tuple[Any, ...]], value: Any, which: str
) -> None:
    kind, path = where
    review = load("isvc-create.json" if kind == "isvc" else "pod-predictor-triton.json")
    _set(review["request"]["object"], path, value)
    answer = env.admitters[which].review(kind, encode(review), env.state)  # type: ignore[arg-type]
    _not_an_internal_error(answer)
    check_answer(review, answer)


@fuzz(60)
@given(place=st.sampled_from(_CLUSTER_PLACES), value=_HOSTILE)
def test_hostile_values_in_cluster_objects_are_bad_input(
    env: Env, kb: KnowledgeBase, place: tuple[str, str, str], value: Any
) -> None:
    """A ServingRuntime or Node carrying such a value never turns the admissions that read it
    into internal errors: the object is unreadable input for them, nothing more."""
    what, part, key = place
    cluster_runtimes, cluster_nodes = runtimes(), nodes()
    for obj in cluster_runtimes if what == "runtime" else cluster_nodes:
        obj["metadata"].setdefault(part, {})[key] = value
    state = ClusterState.from_objects(cluster_nodes, isvcs(), [], cluster_runtimes, kb=kb)
    admitter = env.admitters["strict-deny"]
    for kind, name in (("pod", "pod-predictor-triton.json"), ("isvc", "isvc-create.json")):
        review = load(name)
        answer = admitter.review(kind, encode(review), state)  # type: ignore[arg-type]
        _not_an_internal_error(answer)
        check_answer(review, answer)
