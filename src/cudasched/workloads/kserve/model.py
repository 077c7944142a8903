"""An InferenceService's model as KServe's defaulter leaves it: what runtime selection reads.

``setPredictorModelDefaults`` (``inference_service_defaults.go``) turns a legacy
``spec.predictor.<framework>`` field into ``spec.predictor.model`` and defaults the protocol;
``ModelSpec.GetProtocol`` supplies ``v1`` when none is set.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cudasched.vocab.errors import InputError
from cudasched.vocab.objects import as_mapping, optional_str

__all__ = ["LEGACY_FRAMEWORKS", "ModelRequest", "effective_model"]

_DEFAULT_PROTOCOL = "v1"  # ModelSpec.GetProtocol() when protocolVersion is unset

# setPredictorModelDefaults: the switch order decides which legacy field wins when several
# are (invalidly) set. The boolean says whether the legacy assigner defaults protocol to v2.
_LEGACY_ASSIGNERS: tuple[tuple[str, str, bool], ...] = (
    ("sklearn", "sklearn", False),
    ("tensorflow", "tensorflow", False),
    ("xgboost", "xgboost", False),
    ("pytorch", "pytorch", False),
    ("triton", "triton", True),
    ("onnx", "onnx", True),
    ("huggingface", "huggingface", True),
    ("pmml", "pmml", False),
    ("lightgbm", "lightgbm", False),
    ("paddle", "paddle", False),
)
#: The pre-``model:`` predictor fields (each carries a container inline).
LEGACY_FRAMEWORKS: tuple[str, ...] = tuple(key for key, _, _ in _LEGACY_ASSIGNERS)
# After conversion the defaulter sets protocol v2 for these model formats (KServe >= 0.16 adds
# vLLM to the long-standing triton rule).
_V2_DEFAULT_FORMATS = frozenset({"triton", "vLLM"})


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """``spec.predictor.model`` after KServe's defaulter: what runtime selection looks at.

    ``protocol`` is the value as stored (``None`` when unset); :attr:`effective_protocol`
    applies ``GetProtocol``'s ``v1`` default.
    """

    format_name: str
    format_version: str | None
    runtime: str | None
    protocol: str | None
    multi_node: bool
    origin: str  # "spec.predictor.model" or "spec.predictor.<framework>"
    container: Mapping[str, Any] = field(hash=False)

    @property
    def effective_protocol(self) -> str:
        return self.protocol if self.protocol is not None else _DEFAULT_PROTOCOL

    @property
    def format_label(self) -> str:
        """KServe's ``getModelFormatLabel``: ``mt:name`` or ``mt:name:version``."""
        if self.format_version is not None:
            return f"mt:{self.format_name}:{self.format_version}"
        return f"mt:{self.format_name}"


# --------------------------------------------------------------------------- defaulting


def effective_model(isvc: Mapping[str, Any]) -> ModelRequest | None:
    """``spec.predictor.model`` as KServe's defaulter leaves it, or ``None`` for a predictor
    made of custom containers (which uses no ServingRuntime).

    ``setPredictorModelDefaults`` turns a legacy ``spec.predictor.sklearn`` (etc.) into a model
    of that format, defaulting protocol ``v2`` for triton, onnx and huggingface; then any model
    of format ``triton`` or ``vLLM`` without a protocol gets ``v2``. Applying this to an object
    the defaulter already saw changes nothing, so stored and fresh objects both work.
    """
    spec = as_mapping(isvc.get("spec"), "InferenceService" + " spec")
    predictor = as_mapping(spec.get("predictor"), "spec.predictor")
    multi_node = predictor.get("workerSpec") is not None
    # The defaulter's switch looks at the legacy fields first and overwrites `model` with the
    # first one set, so a legacy field wins over a `model` written next to it.
    for key, fmt_name, v2_default in _LEGACY_ASSIGNERS:
        legacy = predictor.get(key)
        if legacy is None:
            continue
        legacy = as_mapping(legacy, f"spec.predictor.{key}")
        protocol = optional_str(legacy.get("protocolVersion"), "protocolVersion")
        if protocol is None and (v2_default or fmt_name in _V2_DEFAULT_FORMATS):
            protocol = "v2"
        return ModelRequest(
            format_name=fmt_name,
            format_version=None,
            runtime=None,
            protocol=protocol,
            multi_node=multi_node,
            origin=f"spec.predictor.{key}",
            container=legacy,
        )
    model = predictor.get("model")
    if model is None:
        return None
    model = as_mapping(model, "spec.predictor.model")
    fmt = as_mapping(model.get("modelFormat"), "spec.predictor.model.modelFormat")
    name = optional_str(fmt.get("name"), "spec.predictor.model.modelFormat.name")
    if not name:
        raise InputError(
            "invalid spec.predictor.model: expected modelFormat.name (KServe requires it)"
        )
    protocol = optional_str(model.get("protocolVersion"), "protocolVersion")
    if protocol is None and name in _V2_DEFAULT_FORMATS:
        protocol = "v2"
    return ModelRequest(
        format_name=name,
        format_version=optional_str(fmt.get("version"), "modelFormat.version"),
        runtime=optional_str(model.get("runtime"), "spec.predictor.model.runtime") or None,
        protocol=protocol,
        multi_node=multi_node,
        origin="spec.predictor.model",
        container=model,
    )
