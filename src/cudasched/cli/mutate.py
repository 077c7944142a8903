"""``cudasched mutate``: answer one AdmissionReview offline exactly as the webhook would.

It runs the admission code the in-cluster webhook runs, so what a user sees here is what the API
server would get: the way to debug one recorded request.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import orjson
import typer

from cudasched.cli.app import EXIT_INCOMPATIBLE, EXIT_OK, app, fail, note_first
from cudasched.cli.inputs import (
    ClusterSource,
    cluster_source,
    cluster_state,
    load_cluster,
    load_images,
    load_knowledge,
)
from cudasched.cli.options import (
    ConfigOption,
    PlainHttpOption,
    RegistryConfigOption,
    ResolveImagesOption,
    registry_source,
)
from cudasched.vocab import inputfiles
from cudasched.vocab.errors import InputError

if TYPE_CHECKING:
    from cudasched.settings.config import WebhookConfig
    from cudasched.webhook.admission.admitter import Admitter

__all__ = ["as_review", "mutate"]

_KINDS = {"Pod": "pod", "InferenceService": "isvc", "LLMInferenceService": "llmisvc"}
_PATHS = {
    "pod": "/mutate/pods",
    "isvc": "/mutate/inferenceservices",
    "llmisvc": "/mutate/llminferenceservices",
}


def _kind_of(body: bytes, given: str | None) -> str:
    """``--kind`` when given, else read from ``request.kind.kind`` of the review itself."""
    if given is not None:
        value = given.strip().lower()
        if value not in _PATHS:
            raise InputError(f"invalid --kind {given!r}: expected pod, isvc or llmisvc")
        return value
    try:
        doc = orjson.loads(body)
        found = doc["request"]["kind"]["kind"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        found = None
    if found not in _KINDS:
        raise InputError(
            f"cannot tell the kind of the reviewed object (request.kind.kind is {found!r}): "
            "expected Pod, InferenceService or LLMInferenceService, or pass --kind "
            "pod|isvc|llmisvc"
        )
    return _KINDS[found]


def as_review(body: bytes, label: str, namespace: str | None = None) -> tuple[bytes, str | None]:
    """``body`` as an AdmissionReview: returned as it is when it already is one; a Pod, a
    workload (its pod template becomes the Pod), an InferenceService or an
    LLMInferenceService, in YAML or JSON, is wrapped in the CREATE review the API server would
    send (the note says so). ``namespace`` (``-n``) is given to an object without one, as
    ``kubectl apply -n`` does; an object of another namespace is an error."""
    from cudasched.cluster.snapshot import parse_objects
    from cudasched.webhook.admission.review import creation_review
    from cudasched.workloads.kserve.llm import is_llmisvc
    from cudasched.workloads.pods import is_inference_service, pod_of, workload_id

    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{label}: not UTF-8 text (byte {exc.start})") from None
    if '"AdmissionReview"' in text[:4096] or "kind: AdmissionReview" in text[:4096]:
        return body, None
    objects = parse_objects(text, label)
    if len(objects) != 1:
        raise InputError(
            f"{label}: holds {len(objects)} objects; expected one AdmissionReview, Pod, "
            "workload, InferenceService or LLMInferenceService"
        )
    [obj] = objects
    if obj.get("kind") == "AdmissionReview":
        return body, None
    if namespace is not None:
        meta = obj.setdefault("metadata", {})
        given = meta.get("namespace") if isinstance(meta, dict) else None
        if given and given != namespace:
            raise InputError(
                f"{label}: the object is in namespace {given!r}, not -n {namespace!r} "
                "(as kubectl apply, -n only fills in a missing namespace)"
            )
        if isinstance(meta, dict):
            meta["namespace"] = namespace
    service = is_inference_service(obj) or is_llmisvc(obj)
    target = obj if service or obj.get("kind") == "Pod" else pod_of(obj)
    review = creation_review(target, uid="00000000-0000-4000-8000-000000000000")
    what = workload_id(obj)
    if not service and obj.get("kind") != "Pod":
        what = f"the pod template of {what}, as a Pod,"
    return orjson.dumps(review), f"{label}: {what} wrapped in a CREATE AdmissionReview"


def _admitter(
    cfg: WebhookConfig,
    resolve_images: bool,
    registry_config: Path | None,
    plain_http: list[str] | None,
) -> Admitter:
    """The Admitter the webhook would build from ``cfg``, its image table asking the images'
    registries first with ``--resolve-images`` (through the table's mirrors that name a host)."""
    from cudasched.webhook.admission.admitter import Admitter

    kb = load_knowledge()
    images = load_images(kb, cfg)
    configs = registry_source(resolve_images, registry_config, plain_http, mirrors=images.mirrors)
    return Admitter(cfg, kb, images.with_configs(configs))


@app.command("mutate")
@cluster_source(scoped=False)
def mutate(
    review: Annotated[
        Path | None,
        typer.Argument(
            help="AdmissionReview v1 request (JSON), or a Pod, workload (Deployment, Job ...), "
            "InferenceService or LLMInferenceService in YAML or JSON, which is wrapped in a "
            "CREATE review; omitted or '-': stdin."
        ),
    ] = None,
    source: ClusterSource = ClusterSource(),
    namespace: Annotated[
        str | None,
        typer.Option(
            "-n",
            "--namespace",
            help="Namespace of an object given without one (as kubectl apply -n); it is the "
            "namespace the webhook would see.",
        ),
    ] = None,
    config: ConfigOption = None,
    resolve_images: ResolveImagesOption = False,
    registry_config: RegistryConfigOption = None,
    plain_http: PlainHttpOption = None,
    kind: Annotated[
        str | None,
        typer.Option(
            "--kind", help="pod, isvc or llmisvc; default: from request.kind of the review."
        ),
    ] = None,
    explain: Annotated[
        bool,
        typer.Option("--explain", help="Also print the decoded patch and the decision to stderr."),
    ] = False,
) -> None:
    """Answer one AdmissionReview offline exactly as the webhook would, and print the
    AdmissionReview response. Exit 0 when allowed, 1 when denied, 2 on bad input."""
    from cudasched.settings.config import load_config

    try:
        if review is None or str(review) == "-":
            body = inputfiles.read_stdin("standard input", inputfiles.SETTINGS)
        else:
            body = inputfiles.read_bytes(
                review,
                f"review file {str(review)!r}",
                inputfiles.SETTINGS,
                expected="an AdmissionReview JSON file",
            )
        cfg = load_config(config)
        if kind is not None:
            _kind_of(b"", kind)  # a bad --kind is said before the input is read
        body, wrapped = as_review(body, str(review or "<stdin>"), namespace)
        if wrapped:
            note_first(wrapped)
        which = _kind_of(body, kind)
        admitter = _admitter(cfg, resolve_images, registry_config, plain_http)
        state = cluster_state(load_cluster(source), admitter.kb)
        # _kind_of answers one of the three kinds decide takes, as a str (arg-type).
        decision = admitter.decide(which, body, state)  # type: ignore[arg-type]
    except InputError as exc:
        fail(str(exc))
    answer = decision.response()
    sys.stdout.write(orjson.dumps(answer, option=orjson.OPT_INDENT_2).decode() + "\n")
    if explain:
        err = sys.stderr
        err.write(f"outcome: {decision.outcome} ({decision.reason or 'n/a'})\n")
        if decision.requirement:
            err.write(f"requirement: {decision.requirement}\n")
        for warning in decision.warnings:
            err.write(f"warning: {warning}\n")
        if not decision.allowed:
            err.write(f"denied: {decision.message}\n")
        err.write("patch:\n")
        # Read back first: values the placer remembered are JSON already (orjson.Fragment),
        # which orjson writes as they are, not indented.
        ops = orjson.loads(orjson.dumps(list(decision.patch)))
        err.write(orjson.dumps(ops, option=orjson.OPT_INDENT_2).decode() + "\n")
    raise typer.Exit(EXIT_OK if decision.allowed else EXIT_INCOMPATIBLE)
