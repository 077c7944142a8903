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
        super().__init__(f"invalid {kind} {shown(value)}: expected {expected}")


def one_line(what: object) -> str:
    """``what`` as text on one line, every run of white space (newlines included) one space:
    what an error message quotes of a parser's or a server's words. An exception whose text is
    empty is named by its type instead, so the message never ends in nothing."""
    text = " ".join(str(what).split())
    if not text and isinstance(what, BaseException):
        return type(what).__name__
    return text


#: How much of a user's value an error message quotes.
SHOWN_CHARS = 60


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` for an error message, on one line and at most ``limit`` characters: a
    message must stay one line even when the value is a 300 KB string, a deeply nested object
    or an integer too long for ``repr``."""
    if isinstance(value, dict | list | tuple | set) and len(value) > 8:
        text = f"<a {type(value).__name__} of {len(value)} items>"
    elif isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        text = f"<an integer of about {int(value.bit_length() * 0.30103)} digits>"
    else:
        try:
            text = repr(value)
        except Exception:  # a broken __repr__ must not turn bad input into a crash
            text = f"<a {type(value).__name__}>"
    text = one_line(text) if not text.isprintable() else text
    return text if len(text) <= limit else text[: limit - 1] + "…"


class KnowledgeError(CudaschedError):
    """The bundled knowledge base is inconsistent (a packaging bug, never user input)."""
