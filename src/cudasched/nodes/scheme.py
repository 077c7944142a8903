"""Which label scheme a cluster's nodes can be selected by: cudasched's integer codes when every
GPU node carries them, else GPU Feature Discovery's keys, of the generation every GPU node has
(older GFD sets only the deprecated keys). Both halves of the label contract meet here: the agent
writes the codes (``nodes.labelers``), this module decides whether selectors may rely on them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from cudasched.nodes.facts import has_gpu_labels
from cudasched.vocab import labels as L
from cudasched.vocab.errors import InputError
from cudasched.vocab.labels import LabelScheme

__all__ = ["GFD_KEYS", "GfdKeySet", "GfdKeys", "choose_gfd_keys", "choose_scheme"]


class GfdKeys(StrEnum):
    """Which GFD label generation to target. Real clusters mix GFD versions: older GFD sets
    only the deprecated keys, newer sets both, so the deprecated ones are the common ground."""

    NEW = "new"
    DEPRECATED = "deprecated"

    @classmethod
    def parse(cls, value: str | GfdKeys) -> GfdKeys:
        if isinstance(value, GfdKeys):
            return value
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            allowed = ", ".join(k.value for k in cls)
            raise InputError(f"invalid GFD key generation {value!r}: expected {allowed}") from None


class _HasLabels(Protocol):
    @property
    def labels(self) -> Mapping[str, str]: ...


@dataclass(frozen=True, slots=True)
class GfdKeySet:
    cuda_major: str
    cuda_minor: str
    driver_major: str
    driver_minor: str
    driver_rev: str


GFD_KEYS = {
    GfdKeys.NEW: GfdKeySet(
        L.GFD_CUDA_MAJOR,
        L.GFD_CUDA_MINOR,
        L.GFD_DRIVER_MAJOR,
        L.GFD_DRIVER_MINOR,
        L.GFD_DRIVER_REVISION,
    ),
    GfdKeys.DEPRECATED: GfdKeySet(
        L.GFD_OLD_CUDA_MAJOR,
        L.GFD_OLD_CUDA_MINOR,
        L.GFD_OLD_DRIVER_MAJOR,
        L.GFD_OLD_DRIVER_MINOR,
        L.GFD_OLD_DRIVER_REV,
    ),
}

_OUR_CODES = (L.CUDA_CODE, L.DRIVER_CODE, L.COMPUTE_CODE)
_GFD_NEW = (L.GFD_CUDA_MAJOR, L.GFD_CUDA_MINOR, L.GFD_DRIVER_MAJOR)


def _labels_of(node: _HasLabels | Mapping[str, Any]) -> Mapping[str, str]:
    if isinstance(node, Mapping):
        # A Kubernetes Node object as the API returns it.
        meta = node.get("metadata") or {}
        return meta.get("labels") or {}
    return node.labels


def choose_scheme(nodes: Iterable[_HasLabels | Mapping[str, Any]]) -> LabelScheme:
    """Resolve ``auto``: ``cudasched`` when every GPU node carries our codes, else ``gfd``.

    A node counts as a GPU node when it carries any GPU fact label (see
    :func:`cudasched.nodes.facts.has_gpu_labels`). With no GPU node at all the answer is
    ``cudasched`` (every GPU node, vacuously, has our codes), which selects nothing either way.
    """
    gpu_labels = [lab for lab in map(_labels_of, nodes) if has_gpu_labels(lab)]
    if all(all(k in lab for k in _OUR_CODES) for lab in gpu_labels):
        return LabelScheme.CUDASCHED
    return LabelScheme.GFD


def choose_gfd_keys(nodes: Iterable[_HasLabels | Mapping[str, Any]]) -> GfdKeys:
    """The GFD key generation every GPU node carries: ``new`` only when all have the new keys."""
    gpu_labels = [lab for lab in map(_labels_of, nodes) if has_gpu_labels(lab)]
    if all(all(k in lab for k in _GFD_NEW) for lab in gpu_labels):
        return GfdKeys.NEW
    return GfdKeys.DEPRECATED
