"""Typed errors shared by every layer.

Every error raised for bad *input* derives from :class:`InputError` so the CLI and the webhook
can turn it into a one-line message (CLI exit code 2, admission 400) without catching bugs.
"""

from __future__ import annotations


class CudaschedError(Exception):
    """Base class of every error cudasched raises on purpose."""


class InputError(CudaschedError, ValueError):
    """The caller gave a value we cannot use; the message names it and what was expected."""


class VersionError(InputError):
    """A driver, CUDA or compute-capability string did not parse."""

    def __init__(self, kind: str, value: object, expected: str) -> None:
        self.kind = kind
        self.value = value
        self.expected = expected
        super().__init__(f"invalid {kind} {value!r}: expected {expected}")


class KnowledgeError(CudaschedError):
    """The bundled knowledge base is inconsistent (a packaging bug, never user input)."""
