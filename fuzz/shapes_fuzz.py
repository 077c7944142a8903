"""Admission fuzzed by shapes: any JSON planted where the code reads, many times over.

Independent of ``admission_fuzz.py`` (atheris, byte mutations of recorded reviews): this
generator starts from well-formed objects of every kind admission judges (the sample
cluster's pods and InferenceServices, KServe predictor, transformer and multi-node pods,
LLMInferenceServices and their model-server pods, pods with pull secrets, ServiceAccounts and
owner references) and replaces one to four of the fields the code reads (every field of the
object, and the ones admission looks for when absent: pull secrets, the ServiceAccount, owner
references, labels, ``cudasched.io/*`` annotations, containers, resources, KServe's predictor,
worker and model fields) with random JSON: scalars of every type, text that looks like what
belongs there, lists and mappings nested a few levels. Fields are also deleted, or their
parent replaced by a value of another shape.

Each review goes to the production decision path and is judged by the contract the API server
relies on, plus one more: no *internal-error fallback* (admission catching its own exception
and answering "internal error; admitted unchanged", which leaves the workload unconstrained):

* in process (``--reviews N``): :meth:`Admitter.review`, bytes in and bytes out, under two
  configurations (defaults; ``preferred``, ``isvcAffinity``, ``failClosed``);
* over HTTPS (``--https N``): the ``cudasched webhook`` console command in its own process,
  serving the sample cluster (with an LLMInferenceService added) on a self-signed
  certificate, each review POSTed to its path.

Counted: answers, HTTP 400s (``BadReviewError``: the body is not a review), 5xx, exceptions
out of :meth:`Admitter.review`, answers for a wrong uid, patches that do not apply (RFC 6902,
``jsonpatch``) and internal-error fallbacks, each with the exception and where it was raised
(in process, from admission's log record). The exit status is 1 when any of the last five is
not zero.

Run::

    .venv/bin/python fuzz/shapes_fuzz.py --reviews 100000 --https 5000 --seed 1
"""

from __future__ import annotations

import argparse
import base64
import collections
import contextlib
import copy
import itertools
import logging
import random
import ssl
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import orjson
import yaml

JSON = Any
Path_ = tuple[str | int, ...]

#: Text that looks like what belongs in the fields admission reads (and some that does not).
WORDS: tuple[str, ...] = (
    "",
    " ",
    "true",
    "True",
    "yes",
    "1",
    "0",
    "-1",
    "1.5",
    "1e3",
    "0x10",
    "12.4",
    " 12.8 ",
    "12.4.1",
    "cu124",
    "13",
    "twelve",
    "8.0",
    "sm_90",
    "strict",
    "minor-compat",
    "Pod",
    "InferenceService",
    "LLMInferenceService",
    "ServingRuntime",
    "predictor",
    "transformer",
    "explainer",
    "main",
    "kserve-container",
    "worker-container",
    "llminferenceservice",
    "llminferenceservice-workload",
    "nvidia.com/gpu",
    "nvidia.com/mig-1g.10gb",
    "default",
    "regcred",
    "runner",
    "vllm",
    "triton",
    "In",
    "NotIn",
    "Exists",
    "Gt",
    "Lt",
    "nvidia/cuda:12.4.1-runtime-ubuntu22.04",
    "vllm/vllm-openai:v0.6.3",
    "Bad Image",
    "registry.example.com/x:{{.Tag}}",
    "cuda>=12.2",
    "cuda>=12.2 brand=tesla,driver>=470",
    "ä\u00e9\u4e2d",
    "\u0000",
    "a" * 300,
)
#: Keys a random mapping is made of: the ones the code looks up, and any.
KEYS: tuple[str, ...] = (
    "name",
    "image",
    "resources",
    "limits",
    "requests",
    "env",
    "value",
    "containers",
    "initContainers",
    "nodeSelector",
    "affinity",
    "nodeAffinity",
    "nodeSelectorTerms",
    "matchExpressions",
    "key",
    "operator",
    "values",
    "kind",
    "apiVersion",
    "metadata",
    "spec",
    "labels",
    "annotations",
    "imagePullSecrets",
    "serviceAccountName",
    "serviceAccount",
    "ownerReferences",
    "controller",
    "predictor",
    "model",
    "modelFormat",
    "runtime",
    "workerSpec",
    "template",
    "worker",
    "prefill",
    "cudasched.io/cuda-version",
    "cudasched.io/skip",
    "nvidia.com/gpu",
    "x",
)
#: Fields admission reads that a well-formed object may lack, per kind.
ABSENT: dict[str, tuple[Path_, ...]] = {
    "pod": (
        ("metadata", "ownerReferences", 0, "kind"),
        ("metadata", "ownerReferences", 0, "name"),
        ("metadata", "ownerReferences", 0, "controller"),
        ("metadata", "labels", "serving.kserve.io/inferenceservice"),
        ("metadata", "labels", "component"),
        ("metadata", "labels", "app.kubernetes.io/part-of"),
        ("metadata", "labels", "app.kubernetes.io/component"),
        ("metadata", "labels", "app.kubernetes.io/name"),
        ("metadata", "annotations", "cudasched.io/cuda-version"),
        ("metadata", "annotations", "cudasched.io/min-compute-capability"),
        ("metadata", "annotations", "cudasched.io/policy"),
        ("metadata", "annotations", "cudasched.io/skip"),
        ("spec", "imagePullSecrets"),
        ("spec", "imagePullSecrets", 0, "name"),
        ("spec", "serviceAccountName"),
        ("spec", "serviceAccount"),
        ("spec", "initContainers", 0, "resources", "limits"),
        ("spec", "resourceClaims"),
        ("spec", "nodeName"),
        ("spec", "nodeSelector"),
        ("spec", "affinity", "nodeAffinity"),
        ("spec", "containers", 0, "env", 0, "value"),
    ),
    "isvc": (
        ("metadata", "annotations", "cudasched.io/cuda-version"),
        ("metadata", "annotations", "cudasched.io/skip"),
        ("spec", "predictor", "imagePullSecrets"),
        ("spec", "predictor", "imagePullSecrets", 0, "name"),
        ("spec", "predictor", "serviceAccountName"),
        ("spec", "predictor", "workerSpec"),
        ("spec", "predictor", "workerSpec", "containers"),
        ("spec", "predictor", "containers"),
        ("spec", "predictor", "model", "runtime"),
        ("spec", "predictor", "model", "modelFormat", "name"),
        ("spec", "predictor", "model", "resources", "limits"),
        ("spec", "predictor", "affinity"),
        ("spec", "predictor", "annotations"),
        ("spec", "predictor", "nodeSelector"),
        ("spec", "transformer"),
    ),
    "llmisvc": (
        ("metadata", "annotations", "cudasched.io/cuda-version"),
        ("spec", "template", "imagePullSecrets"),
        ("spec", "template", "serviceAccountName"),
        ("spec", "template", "containers", 0, "image"),
        ("spec", "template", "containers", 0, "resources"),
        ("spec", "worker"),
        ("spec", "worker", "containers"),
        ("spec", "prefill"),
        ("spec", "prefill", "template"),
        ("spec", "annotations"),
        ("spec", "labels"),
    ),
}
PATHS = {"pod": "/mutate/pods", "isvc": "/mutate/inferenceservices"}
PATHS["llmisvc"] = "/mutate/llminferenceservices"
INTERNAL = "cudasched: internal error ("


class Shapes:
    """Random JSON values and the mutations that plant them (seeded: a run is repeatable)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def value(self, depth: int = 0) -> JSON:
        """Any JSON value; containers only a few levels deep."""
        pick = self.rng.random()
        if pick < 0.08:
            return None
        if pick < 0.16:
            return self.rng.random() < 0.5
        if pick < 0.28:
            return self.rng.choice([0, 1, -1, 2, 7, 10**6, 2**31, -(2**40), 2**62])
        if pick < 0.34:
            return self.rng.choice([0.0, -0.0, 0.5, 1.5, -2.25, 1e300, 3.0])
        if pick < 0.62 or depth >= 3:
            return self.text()
        if pick < 0.80:
            return [self.value(depth + 1) for _ in range(self.rng.randint(0, 3))]
        keys = self.rng.sample(KEYS, self.rng.randint(0, 4))
        return {key: self.value(depth + 1) for key in keys}

    def text(self) -> str:
        if self.rng.random() < 0.8:
            return self.rng.choice(WORDS)
        alphabet = "abcXYZ09-_./:=, \t\u00e9\u2603"
        return "".join(self.rng.choice(alphabet) for _ in range(self.rng.randint(1, 12)))

    def mutate(self, obj: dict[str, Any], paths: list[Path_]) -> JSON:
        """``obj`` (a copy) with one to four of ``paths`` planted, deleted or reshaped (the
        empty path: the whole object replaced, by any JSON)."""
        out: JSON = copy.deepcopy(obj)
        for _ in range(self.rng.randint(1, 4)):
            path = self.rng.choice(paths)
            how = self.rng.random()
            if not path:  # the whole object: any JSON, or its top level overwritten
                top = {key: self.value(1) for key in self.rng.sample(KEYS, 2)}
                kept = out if isinstance(out, dict) else {}  # (a copy: never the corpus's)
                out = self.value() if how < 0.3 else {**kept, **top}
            elif how < 0.75:
                _plant(out, path, self.value())
            elif how < 0.88:
                _delete(out, path)
            elif len(path) > 1:
                _plant(out, path[:-1], self.rng.choice([[], {}, "", 0, None, [self.value()]]))
        return out


def _plant(obj: JSON, path: Path_, value: JSON) -> None:
    """``value`` at ``path``; parents that are missing or of another shape become mappings
    (lists, for an index), so it always lands."""
    parent = obj
    for key, after in itertools.pairwise(path):
        child = _get(parent, key)
        if not isinstance(child, dict if isinstance(after, str) else list):
            child = {} if isinstance(after, str) else []
            _set(parent, key, child)
        parent = child
    _set(parent, path[-1], value)


def _delete(obj: JSON, path: Path_) -> None:
    parent = obj
    for key in path[:-1]:
        parent = _get(parent, key)
    if isinstance(parent, dict):
        parent.pop(path[-1], None)
    elif isinstance(parent, list) and isinstance(path[-1], int) and path[-1] < len(parent):
        del parent[path[-1]]


def _get(parent: JSON, key: str | int) -> JSON:
    if isinstance(parent, dict):
        return parent.get(key)
    if isinstance(parent, list) and isinstance(key, int) and key < len(parent):
        return parent[key]
    return None


def _set(parent: JSON, key: str | int, value: JSON) -> None:
    if isinstance(parent, dict):
        parent[key] = value
    elif isinstance(parent, list) and isinstance(key, int):
        if key < len(parent):
            parent[key] = value
        else:
            parent.append(value)


def paths_of(obj: JSON, prefix: Path_ = (), depth: int = 7) -> Iterator[Path_]:
    """Every field of ``obj`` (keys and list positions), down to ``depth`` levels."""
    if depth == 0:
        return
    items = (
        obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    )
    for key, child in items:
        yield (*prefix, key)
        yield from paths_of(child, (*prefix, key), depth - 1)


# --------------------------------------------------------------------------- the objects


LLMISVC: dict[str, Any] = {
    "apiVersion": "serving.kserve.io/v1alpha1",
    "kind": "LLMInferenceService",
    "metadata": {"name": "qwen", "namespace": "team-llm", "annotations": {}},
    "spec": {
        "model": {"uri": "hf://Qwen/Qwen3-0.6B", "name": "Qwen/Qwen3-0.6B"},
        "template": {
            "containers": [
                {
                    "name": "main",
                    "image": "ghcr.io/llm-d/llm-d-cuda:v0.2.0",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ]
        },
    },
}


def _built_pods(sample: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pods the sample does not hold: a transformer, a multi-node worker, a model server, a
    pod with pull secrets, a ServiceAccount, an owner and init containers, a pod declaring
    its requirement, one with a resource claim."""
    predictor = copy.deepcopy(next(p for p in sample if "component" in p["metadata"]["labels"]))
    transformer = copy.deepcopy(predictor)
    transformer["metadata"]["labels"]["component"] = "transformer"
    worker = copy.deepcopy(predictor)
    worker["metadata"]["labels"]["app"] += "-worker"
    worker["spec"]["containers"][0]["name"] = "worker-container"
    gpu = {"limits": {"nvidia.com/gpu": "1"}}
    model_server = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "qwen-kserve-0",
            "namespace": "team-llm",
            "labels": {
                "app.kubernetes.io/part-of": "llminferenceservice",
                "app.kubernetes.io/component": "llminferenceservice-workload",
                "app.kubernetes.io/name": "qwen",
            },
        },
        "spec": {"containers": [{"name": "main", "image": "ghcr.io/llm-d/llm-d-cuda:v0.2.0"}]},
    }
    pulled = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "trainer",
            "namespace": "ml",
            "annotations": {"cudasched.io/cuda-version": "12.4", "cudasched.io/policy": "strict"},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "t", "controller": True}
            ],
        },
        "spec": {
            "serviceAccountName": "runner",
            "serviceAccount": "runner",
            "imagePullSecrets": [{"name": "regcred"}, {"name": "hub"}],
            "initContainers": [{"name": "fetch", "image": "busybox", "resources": gpu}],
            "containers": [{"name": "main", "image": "python:3.12", "resources": gpu}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one"}],
            "affinity": {"nodeAffinity": {}},
        },
    }
    return [transformer, worker, model_server, pulled]


@dataclass
class Corpus:
    """The well-formed objects mutated, with the paths each is mutated at."""

    objects: list[tuple[str, dict[str, Any], list[Path_]]] = field(default_factory=list)

    @classmethod
    def build(cls, snapshot: Any) -> Corpus:
        corpus = cls()
        pods = [dict(p) for p in snapshot.pods]
        for pod in [*pods, *_built_pods(pods)]:
            corpus.add("pod", pod)
        for isvc in snapshot.inference_services:
            corpus.add("isvc", isvc)
        corpus.add("llmisvc", LLMISVC)
        return corpus

    def add(self, kind: str, obj: dict[str, Any]) -> None:
        paths = [*paths_of(obj), *ABSENT[kind], ()]
        self.objects.append((kind, obj, paths))


def review_of(kind: str, obj: JSON, uid: str, rng: random.Random) -> dict[str, Any]:
    """The AdmissionReview the API server would send for ``obj``; now and then an UPDATE."""
    from cudasched.webhook.admission.review import creation_review  # (the one review builder)

    group = {"pod": ("", "v1", "Pod", "pods")}.get(
        kind, ("serving.kserve.io", "v1beta1", "InferenceService", "inferenceservices")
    )
    if kind == "llmisvc":
        group = ("serving.kserve.io", "v1alpha1", "LLMInferenceService", "llminferenceservices")
    shell = {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": "team-vision"}}
    review = creation_review(shell, uid=uid)
    request = review["request"]
    request["kind"] = {"group": group[0], "version": group[1], "kind": group[2]}
    request["resource"] = {"group": group[0], "version": group[1], "resource": group[3]}
    request["requestKind"], request["requestResource"] = request["kind"], request["resource"]
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    namespace = meta.get("namespace") if isinstance(meta, dict) else None
    request["namespace"] = namespace if isinstance(namespace, str) else "default"
    request["object"] = obj
    if kind != "pod" and rng.random() < 0.2:
        request["operation"] = "UPDATE"
        request["oldObject"] = obj
    return review


# --------------------------------------------------------------------------- judging


@dataclass
class Tally:
    """What the answers were, and every broken contract with an example."""

    reviews: int = 0
    answered: int = 0
    bad_request: int = 0  # not a review at all: HTTP 400, as the API server expects
    server_errors: int = 0  # HTTP 5xx (over HTTPS)
    raised: int = 0  # an exception out of Admitter.review (a 5xx at the server)
    wrong_uid: int = 0
    bad_patch: int = 0
    internal: int = 0  # the internal-error fallback: admitted unchanged (or denied, failClosed)
    where: collections.Counter[str] = field(default_factory=collections.Counter)
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    examples: list[str] = field(default_factory=list)

    @property
    def broken(self) -> int:
        return self.server_errors + self.raised + self.wrong_uid + self.bad_patch + self.internal

    def note(self, what: str, body: bytes) -> None:
        """Keep a few examples: what broke, and the object of the review."""
        if len(self.examples) < 5:
            try:
                shown = orjson.dumps(orjson.loads(body)["request"]["object"])
            except (orjson.JSONDecodeError, KeyError, TypeError):
                shown = body
            self.examples.append(f"{what}: {shown[:400]!r}")

    def judge(self, body: bytes, answer: bytes) -> None:
        """One answer against the contract (the request is ``body``)."""
        self.answered += 1
        response = orjson.loads(answer)["response"]
        request = orjson.loads(body)["request"]
        if response.get("uid") != request.get("uid"):
            self.wrong_uid += 1
            self.note("wrong uid", body)
        warnings = response.get("warnings") or []
        message = (response.get("status") or {}).get("message") or ""
        if any(INTERNAL in w for w in warnings) or INTERNAL in message:
            self.internal += 1
            self.note("internal error", body)
        self.outcomes[
            "patched" if "patch" in response else "allowed" if response["allowed"] else "denied"
        ] += 1
        if "patch" in response:
            try:
                ops = orjson.loads(base64.b64decode(response["patch"]))
                jsonpatch.apply_patch(request["object"], ops)
            except Exception as exc:  # any failure to apply is the API server's 500
                self.bad_patch += 1
                self.note(f"patch does not apply ({type(exc).__name__})", body)

    def summary(self, title: str) -> str:
        lines = [
            f"{title}: {self.reviews} reviews, {self.answered} answered, "
            f"{self.bad_request} HTTP 400 (not a review), {self.server_errors} HTTP 5xx, "
            f"{self.raised} raised, {self.wrong_uid} wrong uid, {self.bad_patch} bad patches, "
            f"{self.internal} internal-error fallbacks",
            f"  answers: {dict(self.outcomes)}",
        ]
        lines += [f"  raised at {where}: {n}" for where, n in self.where.most_common(10)]
        lines += [f"  e.g. {example}" for example in self.examples]
        return "\n".join(lines)


class _Raised(logging.Handler):
    """Where admission's caught exceptions were raised (its ``log.exception`` records)."""

    def __init__(self, tally: Tally) -> None:
        super().__init__(logging.ERROR)
        self.tally = tally

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            frames = traceback.extract_tb(exc.__traceback__)
            last = frames[-1] if frames else None
            at = f"{Path(last.filename).name}:{last.lineno} {last.name}" if last else "?"
            self.tally.where[f"{type(exc).__name__} in {at}"] += 1


def cases(count: int, seed: int, corpus: Corpus) -> Iterator[tuple[str, bytes]]:
    """``count`` (kind, body) pairs: a corpus object mutated, in its review."""
    rng = random.Random(seed)
    shapes = Shapes(rng)
    for number in range(count):
        kind, obj, paths = rng.choice(corpus.objects)
        mutated = shapes.mutate(obj, paths)
        uid = f"00000000-0000-4000-8000-{number:012d}"
        review = review_of(kind, mutated, uid, rng)
        try:
            body = orjson.dumps(review)
        except TypeError:  # an int past 64 bits: orjson will not write it; the stdlib will
            import json

            body = json.dumps(review).encode()
        yield kind, body


def in_process(count: int, seed: int) -> Tally:
    """``count`` reviews through :meth:`Admitter.review`, alternating two configurations."""
    from cudasched.cluster.snapshot import bundled_snapshot
    from cudasched.knowledge import KnowledgeBase
    from cudasched.settings.config import WebhookConfig
    from cudasched.webhook.admission.admitter import Admitter
    from cudasched.webhook.admission.review import BadReviewError
    from cudasched.webhook.state.clusterstate import ClusterState

    kb = KnowledgeBase.load()
    snapshot = bundled_snapshot()
    state = ClusterState.from_objects(
        snapshot.nodes,
        snapshot.inference_services,
        snapshot.serving_runtimes,
        snapshot.cluster_serving_runtimes,
        llm_inference_services=[LLMISVC],
        kb=kb,
    )
    strict = {"mode": "preferred", "isvcAffinity": True, "failClosed": True}
    admitters = [
        Admitter.from_config(WebhookConfig(), kb=kb),
        Admitter.from_config(WebhookConfig.from_mapping(strict), kb=kb),
    ]
    tally = Tally()
    handler = _Raised(tally)
    logger = logging.getLogger("cudasched")
    logger.addHandler(handler)
    logger.propagate = False  # counted here, not printed
    try:
        for number, (kind, body) in enumerate(cases(count, seed, Corpus.build(snapshot))):
            tally.reviews += 1
            try:
                answer = admitters[number % 2].review(kind, body, state)  # type: ignore[arg-type]
            except BadReviewError:
                tally.bad_request += 1
                continue
            except Exception as exc:  # the server would answer 500
                tally.raised += 1
                tally.where[f"{type(exc).__name__} raised out of review"] += 1
                tally.note(f"raised {exc!r}", body)
                continue
            tally.judge(body, answer)
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    return tally


# --------------------------------------------------------------------------- over HTTPS


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def served(workdir: Path) -> Iterator[tuple[str, ssl.SSLContext]]:
    """``cudasched webhook`` in its own process on the sample cluster (with the
    LLMInferenceService the corpus mutates), self-signed, until the block ends."""
    from cudasched.cluster.snapshot import bundled_snapshot

    snapshot = bundled_snapshot()
    objects = [
        *snapshot.nodes,
        *snapshot.serving_runtimes,
        *snapshot.cluster_serving_runtimes,
        *snapshot.inference_services,
        LLMISVC,
    ]
    cluster = workdir / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}))
    (workdir / "webhook.yaml").write_text("{}\n")
    (workdir / "tls").mkdir(exist_ok=True)
    port = _free_port()
    command = [
        str(Path(sys.executable).with_name("cudasched")),
        "webhook", "--cluster", str(cluster), "--config", str(workdir / "webhook.yaml"),
        "--self-signed", "--tls-dir", str(workdir / "tls"),
        "--host", "127.0.0.1", "--port", str(port), "--log-level", "error",
    ]  # fmt: skip
    log = (workdir / "webhook.log").open("wb")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"https://127.0.0.1:{port}"
    try:
        tls = _ready(process, url, workdir / "tls" / "ca.crt")
        yield url, tls
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        log.close()


def _ready(process: subprocess.Popen[bytes], url: str, ca: Path) -> ssl.SSLContext:
    limit = time.monotonic() + 120
    while time.monotonic() < limit:
        if process.poll() is not None:
            raise RuntimeError(f"cudasched webhook exited {process.returncode}")
        if ca.exists():
            tls = ssl.create_default_context(cafile=str(ca))
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/readyz", verify=tls, timeout=2).status_code == 200:
                    return tls
        time.sleep(0.2)
    raise RuntimeError("cudasched webhook not ready after 120 s")


def over_https(count: int, seed: int) -> Tally:
    """``count`` reviews POSTed to the real server process."""
    from cudasched.cluster.snapshot import bundled_snapshot

    tally = Tally()
    corpus = Corpus.build(bundled_snapshot())
    headers = {"content-type": "application/json"}
    with (
        tempfile.TemporaryDirectory() as tmp,
        served(Path(tmp)) as (url, tls),
        httpx.Client(base_url=url, verify=tls, timeout=30) as client,
    ):
        for kind, body in cases(count, seed, corpus):
            tally.reviews += 1
            reply = client.post(PATHS[kind], content=body, headers=headers)
            if reply.status_code == 200:
                tally.judge(body, reply.content)
            elif reply.status_code == 400:
                tally.bad_request += 1
            elif reply.status_code >= 500:
                tally.server_errors += 1
                tally.note(f"HTTP {reply.status_code}", body)
            else:
                tally.outcomes[f"HTTP {reply.status_code}"] += 1
    return tally


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reviews", type=int, default=10_000, help="in process")
    parser.add_argument("--https", type=int, default=0, help="over HTTPS to the server process")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    broken = 0
    if args.reviews:
        started = time.monotonic()
        tally = in_process(args.reviews, args.seed)
        print(tally.summary(f"in process ({time.monotonic() - started:.0f} s)"), flush=True)
        broken += tally.broken
    if args.https:
        started = time.monotonic()
        tally = over_https(args.https, args.seed + 1)
        print(tally.summary(f"over HTTPS ({time.monotonic() - started:.0f} s)"), flush=True)
        broken += tally.broken
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
