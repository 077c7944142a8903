"""Local facts on top: an overlay bundle's rows merged over a base bundle's tables.

A cluster owner knows things no published bundle does yet: the driver release their nodes got
last week, the CUDA of an image their team builds, a GPU SKU of their cloud. An overlay is a
small bundle (kind ``KnowledgeOverlay``) of only the rows to add, checked like any bundle
(every row cites its source, the merged tables must load) and merged here with one rule of
precedence: **an overlay row replaces the base row it names, and adds itself when it names
none.** Rows are named by their identity field (:data:`MERGEABLE`); the image table's rows go
in front of the base's, because its first matching row answers. Only the sections below may
be extended: the toolkit, compatibility and architecture tables are NVIDIA's own, and an
overlay that could lower a toolkit's minimum driver would lower every requirement built on it.

A newer release of a branch than the base's newest moves the base's newest into
``earlier_releases`` (a plan judged on an earlier day still finds it); an older one is refused
(it belongs in ``earlier_releases``). Named sources merge into the table's ``sources``; one that
would change the text of a base source is refused, as it would change what base rows cite.
The deployment's ``imageOverrides`` and ``imageMirrors`` still come last, in front of
everything (docs/guide/knowledge.md, "Precedence").
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from cudasched.knowledge.bundle import BundleError
from cudasched.knowledge.loading import NGC_PRODUCTS
from cudasched.vocab.errors import VersionError
from cudasched.vocab.versions import DriverVersion, parse_driver

__all__ = ["MERGEABLE", "merge_overlay"]

#: ``(table, section)``: the field that names a row. Rows of other sections cannot be
#: overlaid.
MERGEABLE: dict[tuple[str, str], str] = {
    ("drivers.yaml", "latest_releases"): "branch",
    ("drivers.yaml", "earlier_releases"): "version",
    ("images.yaml", "images"): "id",
    ("gpus.yaml", "gpus"): "product",
    **{("containers.yaml", product): "release" for product in NGC_PRODUCTS},
    **{("frameworks.yaml", name): "release" for name in ("pytorch", "tensorflow", "vllm")},
}
#: Sections merged as maps (the overlay's entries first).
_MAPS = frozenset({("images.yaml", "mirrors")})
#: Sections whose overlay rows go in front of the base's (the first match answers).
_IN_FRONT = frozenset({("images.yaml", "images")})


def merge_overlay(
    base: Mapping[str, object], overlay: Mapping[str, object], label: str
) -> dict[str, object]:
    """``base``'s parsed tables with ``overlay``'s (parsed, checked for sources) merged on top;
    ``base`` is not changed. A :class:`BundleError` (``overlay``) names what cannot merge."""
    merged = dict(base)
    for table, doc in overlay.items():
        if not isinstance(doc, Mapping):
            raise BundleError("overlay", f"{label}: {table} is not a mapping")
        target = copy.deepcopy(base[table])
        if not isinstance(target, dict):
            raise BundleError("overlay", f"{label}: the base's {table} is not a mapping")
        for section, value in doc.items():
            _merge_section(target, table, str(section), value, label)
        merged[table] = target
    return merged


def _merge_section(
    target: dict[str, Any], table: str, section: str, value: Any, label: str
) -> None:
    where = f"{label}: {table} {section}"
    if section == "sources":
        _merge_sources(target, value, where)
    elif (table, section) in _MAPS:
        if not isinstance(value, Mapping):
            raise BundleError("overlay", f"{where} must be a mapping")
        base = target.get(section) or {}
        target[section] = {**value, **{k: v for k, v in base.items() if k not in value}}
    elif (table, section) in MERGEABLE:
        if not isinstance(value, list) or not all(isinstance(r, Mapping) for r in value):
            raise BundleError("overlay", f"{where} must be a list of rows")
        key = MERGEABLE[(table, section)]
        if (table, section) == ("drivers.yaml", "latest_releases"):
            for row in value:
                _newer_release(target, row, where)
        _merge_rows(target, section, key, value, (table, section) in _IN_FRONT, where)
    else:
        allowed = ", ".join(f"{t} {s}" for t, s in sorted(MERGEABLE)) + ", images.yaml mirrors"
        raise BundleError(
            "overlay", f"{where}: an overlay may add rows to {allowed} (and named sources) only"
        )


def _merge_sources(target: dict[str, Any], value: Any, where: str) -> None:
    if not isinstance(value, Mapping):
        raise BundleError("overlay", f"{where} must map names to sources")
    sources = dict(target.get("sources") or {})
    for name, text in value.items():
        said = " ".join(str(text).split())
        if name in sources and " ".join(str(sources[name]).split()) != said:
            raise BundleError(
                "overlay",
                f"{where}: {name!r} already names another source in the base; choose another name",
            )
        sources[name] = text
    target["sources"] = sources


def _merge_rows(
    target: dict[str, Any],
    section: str,
    key: str,
    rows: list[Mapping[str, Any]],
    in_front: bool,
    where: str,
) -> None:
    names = [row.get(key) for row in rows]
    if any(n is None for n in names) or len(set(map(str, names))) != len(names):
        raise BundleError("overlay", f"{where}: every row needs its own {key!r}")
    existing = target.get(section) or []
    if not isinstance(existing, list):
        raise BundleError("overlay", f"{where}: the base's section is not a list")
    new = {str(n): dict(r) for n, r in zip(names, rows, strict=True)}
    if in_front:
        kept = [r for r in existing if str(r.get(key)) not in new]
        target[section] = [*new.values(), *kept]
        return
    replaced = [new.pop(str(r.get(key)), r) for r in existing]
    target[section] = [*replaced, *new.values()]


def _newer_release(target: dict[str, Any], row: Mapping[str, Any], where: str) -> None:
    """An overlay's newest release of a branch must be newer than the base's, which moves to
    ``earlier_releases``."""
    branch = row.get("branch")
    base = next((r for r in target.get("latest_releases") or () if r.get("branch") == branch), None)
    if base is None or base.get("version") is None:
        return
    old, new = _driver(base.get("version"), where), _driver(row.get("version"), where)
    if new is None or old is None or new <= old:
        raise BundleError(
            "overlay",
            f"{where}: R{branch} {row.get('version')} is not newer than the base's newest "
            f"{base.get('version')}; list an older release in earlier_releases",
        )
    earlier = list(target.get("earlier_releases") or [])
    if all(str(e.get("version")) != str(base["version"]) for e in earlier):
        moved = {k: base[k] for k in ("version", "released", "source") if k in base}
        earlier.append(moved)
    target["earlier_releases"] = earlier


def _driver(value: object, where: str) -> DriverVersion | None:
    if value is None:
        return None
    try:
        return parse_driver(str(value))
    except VersionError as exc:
        raise BundleError("overlay", f"{where}: {exc}") from None
