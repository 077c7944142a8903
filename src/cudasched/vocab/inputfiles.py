"""Reading input files safely: cluster dumps, label files, settings, admission reviews.

Every file a command or the webhook reads from disk comes through here, so one set of rules
holds for all of them and every failure is one :class:`~cudasched.vocab.errors.InputError` line
naming the file:

* only regular files are read, and the file is opened without blocking, so ``/dev/zero``, a
  FIFO nobody writes to or a terminal are refused at once instead of hanging;
* at most ``max_bytes`` are read (the limit depends on what the file is for, see
  :data:`SETTINGS` and :data:`CLUSTER`);
* the text must be UTF-8 (a byte-order mark is ignored);
* YAML is parsed by libyaml with the safe constructors; unquoted timestamps stay the strings
  they are written as (the API returns RFC 3339 strings, and kubectl keeps them strings);
* duplicate mapping keys are refused (YAML and JSON parsers silently keep the last one, so a
  setting written twice would be half ignored); so are nesting deeper than ``max_depth``,
  anchors and aliases that expand a document by more than ``max_alias_nodes`` nodes (the
  "billion laughs" document), integers longer than :data:`MAX_INTEGER_DIGITS` digits,
  ``NaN``/``Infinity`` and unpaired UTF-16 surrogates;
* YAML with more than ``max_yaml_items`` lines or flow items is refused before parsing: libyaml
  parses a few hundred thousand items a second, so such a file would take minutes (JSON, read
  by a C parser, has no such limit).

Callers pick the limits; the parsed documents are plain ``dict``/``list``/scalar data.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

from cudasched.vocab.errors import InputError, one_line
from cudasched.vocab.inputlimits import (
    CLUSTER,
    MAX_INTEGER_DIGITS,
    MIB,
    SETTINGS,
    InputLimits,
    check_text,
    clip,
)

__all__ = [
    "CLUSTER",
    "MAX_INTEGER_DIGITS",
    "MIB",
    "SETTINGS",
    "InputLimits",
    "decode",
    "parse_documents",
    "parse_json",
    "parse_yaml",
    "read_bytes",
    "read_stdin",
    "read_text",
]

_FILE_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _size(n: int) -> str:
    return f"{n / MIB:g} MiB" if n >= MIB else f"{n:,} bytes"


# --------------------------------------------------------------------------- reading


def read_bytes(
    path: str | os.PathLike[str],
    label: str,
    limits: InputLimits,
    *,
    expected: str = "a YAML or JSON file",
) -> bytes:
    """The content of the regular file at ``path``, at most ``limits.max_bytes`` long.

    ``label`` starts every error message (usually the path); ``expected`` says what the file
    should have been, for the messages about directories and devices."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise InputError(f"{label}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{label}: is a directory, expected {expected}") from None
    except PermissionError:
        raise InputError(f"{label}: permission denied") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InputError(f"{label}: cannot read file ({reason})") from None
    try:
        info = os.fstat(fd)
        for test, kind in _FILE_KINDS:
            if test(info.st_mode):
                if kind == "a directory":
                    raise InputError(f"{label}: is a directory, expected {expected}")
                raise InputError(f"{label}: is {kind}, not a regular file; expected {expected}")
        if info.st_size > limits.max_bytes:
            raise InputError(
                f"{label}: file of {_size(info.st_size)} is larger than the limit of "
                f"{_size(limits.max_bytes)}"
            )
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, min(MIB, limits.max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limits.max_bytes:  # the file grew while it was read
                raise InputError(
                    f"{label}: file is larger than the limit of {_size(limits.max_bytes)}"
                )
    except OSError as exc:
        raise InputError(f"{label}: cannot read file ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_stdin(label: str, limits: InputLimits) -> bytes:
    """Standard input, at most ``limits.max_bytes`` long."""
    data = sys.stdin.buffer.read(limits.max_bytes + 1)
    if len(data) > limits.max_bytes:
        raise InputError(f"{label}: input is larger than the limit of {_size(limits.max_bytes)}")
    return data


def decode(raw: bytes, label: str, *, expected: str = "YAML or JSON") -> str:
    """``raw`` as UTF-8 text (a leading byte-order mark is dropped)."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{label}: not UTF-8 text (byte {exc.start}); expected {expected}"
        ) from None


def read_text(
    path: str | os.PathLike[str] | Path,
    label: str,
    limits: InputLimits,
    *,
    expected: str = "a YAML or JSON file",
) -> str:
    """:func:`read_bytes` decoded by :func:`decode`."""
    what = expected.removeprefix("a ").removeprefix("an ")
    return decode(read_bytes(path, label, limits, expected=expected), label, expected=what)


# --------------------------------------------------------------------------- parsing


def parse_documents(text: str, label: str, limits: InputLimits) -> list[Any]:
    """Every document of ``text``: one JSON value when it starts with ``{`` or ``[``, else the
    YAML documents (``None`` for an empty one)."""
    stripped = text.lstrip()
    if stripped[:1] in ("{", "["):
        return [parse_json(stripped, label, limits)]
    return parse_yaml(text, label, limits)


class _DuplicateKeyError(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKeyError(key)
            seen.add(key)
    return out


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number {clip(text)} is out of range")
    return value


def _checked_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INTEGER_DIGITS:
        raise ValueError(f"an integer of {digits} digits (at most {MAX_INTEGER_DIGITS})")
    return int(text)


def parse_json(text: str, label: str, limits: InputLimits) -> Any:
    """One JSON value; duplicate keys, ``NaN``/``Infinity``, over-long integers, unpaired
    surrogates and nesting deeper than ``limits.max_depth`` are refused."""
    try:
        doc = json.loads(
            text,
            object_pairs_hook=_unique_pairs,
            parse_constant=_refuse_constant,
            parse_float=_finite_float,
            parse_int=_checked_int,
        )
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{label}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except _DuplicateKeyError as exc:
        raise InputError(
            f"{label}: invalid JSON: duplicate key {clip(exc.key)!r} in one object"
        ) from None
    except RecursionError:
        raise InputError(
            f"{label}: invalid JSON: nested deeper than {limits.max_depth} levels"
        ) from None
    except ValueError as exc:
        raise InputError(f"{label}: invalid JSON: {one_line(str(exc))}") from None
    _check_json_tree(doc, label, limits, surrogates="\\u" in text or "\\U" in text)
    return doc


def _check_json_tree(doc: Any, label: str, limits: InputLimits, *, surrogates: bool) -> None:
    """Nesting depth (and, when escapes could have produced them, unpaired surrogates)."""
    stack: list[tuple[Any, int]] = [(doc, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
            if surrogates:
                for key in value:
                    check_text(key, label)
        elif isinstance(value, list):
            children = value
        else:
            if surrogates and isinstance(value, str):
                check_text(value, label)
            continue
        if depth + 1 > limits.max_depth:
            raise InputError(f"{label}: nested deeper than {limits.max_depth} levels")
        stack.extend((child, depth + 1) for child in children)


def parse_yaml(text: str, label: str, limits: InputLimits) -> list[Any]:
    """The YAML documents of ``text`` (``None`` for an empty one), parsed by
    :mod:`cudasched.vocab.yamlparse`, imported here on first use: PyYAML and libyaml cost a
    command that reads no YAML (``check`` on the cached knowledge) a third of its start-up."""
    from cudasched.vocab import yamlparse

    return yamlparse.parse_yaml(text, label, limits)
