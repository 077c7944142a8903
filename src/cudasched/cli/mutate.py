"""``cudasched mutate``: answer one AdmissionReview offline exactly as the webhook would.

It runs the admission code the in-cluster webhook runs, so what a user sees here is what the API
server would get: the way to debug one recorded request.
"""

from __future__ import annotations

import base64
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer

from cudasched.cli.app import EXIT_INCOMPATIBLE, EXIT_OK, app, fail
from cudasched.cli.inputs import cluster_state, load_cluster
from cudasched.errors import InputError

__all__ = ["decode_patch", "mutate"]

_KINDS = {"Pod": "pod", "InferenceService": "isvc"}
_PATHS = {"pod": "/mutate/pods", "isvc": "/mutate/inferenceservices"}


def _kind_of(body: bytes, given: str | None) -> str:
    """``--kind`` when given, else read from ``request.kind.kind`` of the review itself."""
    if given is not None:
        value = given.strip().lower()
        if value not in _PATHS:
            raise InputError(f"invalid --kind {given!r}: expected pod or isvc")
        return value
    try:
        doc = orjson.loads(body)
        found = doc["request"]["kind"]["kind"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        found = None
    if found not in _KINDS:
        raise InputError(
            f"cannot tell the kind of the reviewed object (request.kind.kind is {found!r}): "
            "expected Pod or InferenceService, or pass --kind pod|isvc"
        )
    return _KINDS[found]


def decode_patch(response: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The JSON patch of an AdmissionReview response (``[]`` when there is none)."""
    raw = (response.get("response") or {}).get("patch")
    if not raw:
        return []
    ops = orjson.loads(base64.b64decode(raw))
    if not isinstance(ops, list):
        raise InputError("the response patch is not a JSON array")
    return ops


@app.command("mutate")
def mutate(
    review: Annotated[
        Path | None,
        typer.Argument(help="AdmissionReview v1 request (JSON file); omitted or '-': stdin."),
    ] = None,
    cluster: Annotated[
        Path | None,
        typer.Option(
            "--cluster", help="Cluster snapshot (kubectl get -o yaml); default: the bundled sample."
        ),
    ] = None,
    config: Annotated[
        Path | None, typer.Option("--config", help="Webhook configuration YAML.")
    ] = None,
    kind: Annotated[
        str | None,
        typer.Option("--kind", help="pod or isvc; default: from request.kind of the review."),
    ] = None,
    explain: Annotated[
        bool,
        typer.Option("--explain", help="Also print the decoded patch and the decision to stderr."),
    ] = False,
) -> None:
    """Answer one AdmissionReview offline exactly as the webhook would, and print the
    AdmissionReview response. Exit 0 when allowed, 1 when denied, 2 on bad input."""
    from cudasched.webhook.admission import Admitter
    from cudasched.webhook.config import load_config

    try:
        if review is None or str(review) == "-":
            body = sys.stdin.buffer.read()
        else:
            try:
                body = review.read_bytes()
            except OSError as exc:
                raise InputError(
                    f"cannot read review file {str(review)!r}: {exc.strerror}"
                ) from None
        cfg = load_config(config)
        which = _kind_of(body, kind)
        admitter = Admitter.from_config(cfg)
        state = cluster_state(load_cluster(cluster), admitter.kb)
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
        err.write(orjson.dumps(list(decision.patch), option=orjson.OPT_INDENT_2).decode() + "\n")
    raise typer.Exit(EXIT_OK if decision.allowed else EXIT_INCOMPATIBLE)
