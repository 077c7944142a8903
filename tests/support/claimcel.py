"""The policy's claim variables (:func:`cudasched.placement.claimcel.claim_variables`)
evaluated in process with a CEL interpreter (celpy), for tests comparing them with the
webhook's ``claim_rewrite``. celpy has neither Kubernetes' ``lists.range`` nor ``flatten``: they
are supplied here as Kubernetes' list library defines them (``lists.range(n)`` is
``[0, .., n-1]``, spelled ``range(n)`` for celpy). The ``JSONPatch`` conversion
(:func:`~cudasched.placement.claimcel.claim_patch`) is the API server's to check."""

from __future__ import annotations

from typing import Any

import celpy
from celpy import celtypes

from cudasched.placement.claimcel import claim_variables

__all__ = ["claim_cel"]

_FUNCTIONS = {
    "range": lambda n: celtypes.ListType([celtypes.IntType(i) for i in range(int(n))]),
    "flatten": lambda items: celtypes.ListType([x for inner in items for x in inner]),
}
_ENV = celpy.Environment()
_PROGRAMS = [
    (name, _ENV.program(_ENV.compile(expr.replace("lists.range(", "range(")), _FUNCTIONS))
    for name, expr in claim_variables()
]


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, celtypes.IntType):
        return int(value)
    return str(value)


def claim_cel(pod: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    """Every claim variable of the policy (name -> plain JSON value) for ``pod`` (as the API
    server hands it to admission) and the placement ``entry`` (its table JSON)."""
    variables: dict[str, Any] = {"entry": celpy.json_to_cel(entry)}
    out: dict[str, Any] = {}
    for name, program in _PROGRAMS:
        activation = {
            "object": celpy.json_to_cel(pod),
            "variables": celtypes.MapType(
                {celtypes.StringType(k): v for k, v in variables.items()}
            ),
        }
        variables[name] = program.evaluate(activation)
        out[name] = _plain(variables[name])
    return out
