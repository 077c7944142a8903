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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from cudasched.vocab.errors import InputError, one_line

__all__ = [
    "CLUSTER",
    "MAX_INTEGER_DIGITS",
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
        raise ValueError(f"number {_clip(text)} is out of range")
    return value


def _checked_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INTEGER_DIGITS:
        raise ValueError(f"an integer of {digits} digits (at most {MAX_INTEGER_DIGITS})")
    return int(text)


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
            f"{label}: invalid JSON: duplicate key {_clip(exc.key)!r} in one object"
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
                    _check_text(key, label)
        elif isinstance(value, list):
            children = value
        else:
            if surrogates and isinstance(value, str):
                _check_text(value, label)
            continue
        if depth + 1 > limits.max_depth:
            raise InputError(f"{label}: nested deeper than {limits.max_depth} levels")
        stack.extend((child, depth + 1) for child in children)


def _check_text(text: str, label: str) -> None:
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise InputError(
                f"{label}: a string holds an unpaired UTF-16 surrogate ({_clip(repr(text))})"
            ) from None


# The base is libyaml's loader where PyYAML was built with it, else the pure-Python one: chosen
# at run time, so mypy cannot check it (misc).
class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """libyaml's safe loader, keeping unquoted timestamps as the strings they are written as
    and refusing integers no Kubernetes field can hold."""


def _construct_int(loader: yaml.constructor.SafeConstructor, node: yaml.ScalarNode) -> Any:
    value = str(node.value)
    digits = sum(1 for c in value if c.isalnum())
    if digits > MAX_INTEGER_DIGITS:
        raise yaml.constructor.ConstructorError(
            None,
            None,
            f"an integer of {digits} digits (at most {MAX_INTEGER_DIGITS})",
            node.start_mark,
        )
    return yaml.constructor.SafeConstructor.construct_yaml_int(loader, node)


_Loader.add_constructor(
    "tag:yaml.org,2002:timestamp", yaml.constructor.SafeConstructor.construct_yaml_str
)
_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)

_MERGE_TAG = "tag:yaml.org,2002:merge"


def _where(mark: Any) -> str:
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def parse_yaml(text: str, label: str, limits: InputLimits) -> list[Any]:
    """The YAML documents of ``text`` (``None`` for an empty one)."""
    items = text.count("\n") + text.count(",")
    if items > limits.max_yaml_items:
        raise InputError(
            f"{label}: YAML of more than {limits.max_yaml_items:,} lines or items, too slow to "
            "parse; save it as JSON (kubectl get ... -o json)"
        )
    loader = _Loader(text)
    documents: list[Any] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is not None:
                _check_yaml_graph(node, label, limits)
            documents.append(loader.construct_document(node) if node is not None else None)
    except InputError:
        raise
    except yaml.MarkedYAMLError as exc:
        problem = one_line(exc.problem or exc.context or "syntax error")
        raise InputError(f"{label}: invalid YAML{_where(exc.problem_mark)}: {problem}") from None
    except yaml.YAMLError as exc:
        raise InputError(f"{label}: invalid YAML: {one_line(str(exc))}") from None
    except RecursionError:
        raise InputError(f"{label}: invalid YAML: nested too deeply") from None
    except Exception as exc:  # libyaml's composer fails this way on a recursive alias
        raise InputError(f"{label}: invalid YAML ({type(exc).__name__}): {exc}") from None
    finally:
        loader.dispose()
    return documents


def _check_yaml_graph(root: yaml.Node, label: str, limits: InputLimits) -> None:
    """Depth, alias expansion, duplicate keys and surrogates of one composed document.

    Aliases make the node graph a DAG (a cycle is refused): each distinct node is visited
    once, and the size and depth it contributes wherever it is referenced are memoised."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            children = _children(node)
            size[key] = 1 + sum(size[id(c)] for c in children)
            inner = max((depth[id(c)] for c in children), default=0)
            depth[key] = inner + (1 if isinstance(node, yaml.CollectionNode) else 0)
            if depth[key] > limits.max_depth:
                raise InputError(
                    f"{label}: nested deeper than {limits.max_depth} levels"
                    f"{_where(node.start_mark)}"
                )
            continue
        if key in size:
            continue
        if key in on_path:
            raise InputError(f"{label}: invalid YAML: recursive alias{_where(node.start_mark)}")
        if isinstance(node, yaml.ScalarNode):
            _check_text(node.value, label)
            size[key], depth[key] = 1, 0
            continue
        on_path.add(key)
        stack.append((node, True))
        if isinstance(node, yaml.MappingNode):
            _check_keys(node, label)
        stack.extend((child, False) for child in _children(node))
    extra = size[id(root)] - len(size)
    if extra > limits.max_alias_nodes:
        raise InputError(
            f"{label}: anchors and aliases expand the document by {extra:,} nodes (at most "
            f"{limits.max_alias_nodes:,})"
        )


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _check_keys(node: yaml.MappingNode, label: str) -> None:
    seen: set[tuple[str, str]] = set()
    for key, _value in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag == _MERGE_TAG:
            continue
        identity = (key.tag, key.value)
        if identity in seen:
            raise InputError(
                f"{label}: duplicate key {_clip(str(key.value))!r}{_where(key.start_mark)}"
            )
        seen.add(identity)
