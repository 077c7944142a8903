"""The limits every input reader applies (:mod:`cudasched.vocab.inputfiles` for files and JSON,
:mod:`cudasched.vocab.yamlparse` for YAML), and the text checks both share."""

from __future__ import annotations

from dataclasses import dataclass

from cudasched.vocab.errors import InputError

__all__ = ["CLUSTER", "MAX_INTEGER_DIGITS", "MIB", "SETTINGS", "InputLimits", "check_text", "clip"]

#: Integers longer than this are refused: no Kubernetes field holds one (int64 has 19 digits),
#: and Python refuses to convert strings of more than 4,300 digits anyway.
MAX_INTEGER_DIGITS = 64


@dataclass(frozen=True, slots=True)
class InputLimits:
    """How much one input file may hold."""

    max_bytes: int
    max_depth: int = 100
    max_alias_nodes: int = 100_000
    max_yaml_items: int = 2_000_000


MIB = 1024 * 1024

#: Settings, label files, one admission review, one saved ``nvidia-smi`` output: small files.
SETTINGS = InputLimits(max_bytes=4 * MIB)

#: Cluster dumps (``kubectl get ... -o yaml``) and workload files, which can be large.
CLUSTER = InputLimits(max_bytes=512 * MIB)


def clip(text: str, limit: int = 40) -> str:
    """``text`` cut to ``limit`` characters for an error line."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def check_text(text: str, label: str) -> None:
    """Refuse a string holding an unpaired UTF-16 surrogate (JSON escapes and YAML can write
    one; it cannot be encoded, so it would fail later, far from the file that held it)."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise InputError(
                f"{label}: a string holds an unpaired UTF-16 surrogate ({clip(repr(text))})"
            ) from None
