"""Comparing command outputs that say where their cluster came from.

JSON and YAML answers carry ``cluster: {source, sample, scope}`` (what was judged); two reads
of the same objects (a dump and the live cluster) differ only in ``cluster.source``.
:func:`without_source` removes it, so a test can require everything else to be identical.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

__all__ = ["without_source"]


def without_source(text: str) -> Any:
    """``text`` parsed (JSON, else YAML; else the text itself) with ``cluster.source``
    removed."""
    try:
        doc: Any = json.loads(text)
    except ValueError:
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError:
            return text
    if isinstance(doc, dict) and isinstance(doc.get("cluster"), dict):
        doc["cluster"].pop("source", None)
    return doc
