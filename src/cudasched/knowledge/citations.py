"""Every fact cites its source: the rows of a table that do not.

The loaders resolve the sources they read, but a table can hold rows a loader never looks at
(a section a newer cudasched reads, a field this one ignores), and a published bundle must not
carry an unsourced fact into a cluster whichever cudasched reads it. So a bundle is checked
here, table by table, before anything else reads it (:mod:`cudasched.knowledge.bundlecheck`):

* a **row** is a mapping in a list, or a mapping that is a section of the table (top-level
  keys other than ``sources``); a row cites its source with a non-empty ``source``;
* a row inside a row that cites one is covered by it (a PyTorch release's wheel variants);
* a section that cites nothing itself is sourced when every row it holds is (the image
  table's ``cuda_base_gates``, whose releases each cite theirs); a section of plain values
  with no source is a fact without one;
* lists of plain values (a row's ``names``, a matrix's ``branches``) are values of the row that
  holds them, not rows.

Not facts, so not checked: a table's ``sources`` map itself, and the image table's
``mirrors`` (where a deployment's registry copies an image, a name and no claim about it).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["NOT_FACTS", "unsourced_rows"]

#: Sections that hold no facts: ``(table, top-level key)``.
NOT_FACTS = frozenset({("images.yaml", "mirrors")})


def _cites(row: Mapping[str, Any]) -> bool:
    source = row.get("source")
    return isinstance(source, str) and bool(source.strip())


def unsourced_rows(table: str, doc: Mapping[str, Any]) -> list[str]:
    """Where ``doc`` (the parsed table ``table``) has a row without a source, each as a path
    a person can find (``latest_releases[3] (branch 620)``); empty when every row cites one."""
    found: list[str] = []
    for key, value in doc.items():
        if key == "sources" or (table, key) in NOT_FACTS:
            continue
        if isinstance(value, Mapping | list):
            found.extend(_section(str(key), value))
        else:
            found.append(f"{key} (a value with no source)")
    return found


def _section(path: str, value: Mapping[str, Any] | list[Any]) -> Iterator[str]:
    if isinstance(value, list):
        for i, row in enumerate(value):
            if isinstance(row, Mapping) and not _cites(row):
                yield f"{path}[{i}]{_named(row)}"
        return
    if _cites(value):
        return
    inner = [(k, v) for k, v in value.items() if isinstance(v, Mapping | list)]
    rows = [(k, v) for k, v in inner if isinstance(v, Mapping) or _holds_rows(v)]
    if not rows:
        yield path
        return
    for key, sub in rows:
        yield from _section(f"{path}.{key}", sub)


def _holds_rows(value: list[Any]) -> bool:
    return any(isinstance(item, Mapping) for item in value)


def _named(row: Mapping[str, Any]) -> str:
    """A row's identity for a person: the first of its naming fields it has."""
    for key in ("id", "product", "branch", "version", "release", "os", "name", "driver", "cuda"):
        if key in row:
            return f" ({key} {row[key]})"
    return ""
