"""Everything a command reads before it can answer: the knowledge base, the image table and the
cluster (a file, the bundled sample cluster, and next a live cluster), loaded one way for every
command so the same objects always give the same answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from cudasched import inputfiles
from cudasched.errors import InputError
from cudasched.snapshot import ClusterSnapshot, bundled_snapshot, load_nodes, load_snapshot

if TYPE_CHECKING:
    from cudasched.images import ImageTable
    from cudasched.knowledge import KnowledgeBase

__all__ = [
    "load_cluster",
    "load_images",
    "load_knowledge",
    "load_node_labels",
]


def load_knowledge() -> KnowledgeBase:
    """The bundled knowledge base (NVIDIA's tables, GPUs, frameworks, containers)."""
    from cudasched.knowledge import KnowledgeBase

    return KnowledgeBase.load()


def load_images(kb: KnowledgeBase) -> ImageTable:
    """The built-in image table (well-known inference images and the CUDA they were built for)."""
    from cudasched.images import ImageTable

    return ImageTable.builtin(kb)


def load_cluster(cluster: Path | None, nodes: Path | None = None) -> ClusterSnapshot:
    """The cluster a command works on: ``cluster`` (a dump), else the bundled sample cluster
    unless only ``nodes`` is given; ``nodes`` (``kubectl get nodes -o yaml``) replaces the
    cluster's nodes."""
    if cluster is not None:
        snapshot = load_snapshot(cluster)
    elif nodes is None:
        snapshot = bundled_snapshot()
    else:
        snapshot = ClusterSnapshot(source="")
    if nodes is not None:
        snapshot = snapshot.with_nodes(load_nodes(nodes))
    return snapshot


def _stringify(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def load_node_labels(path: Path) -> tuple[str, dict[str, str]]:
    """Read a label map, or one Node object, from a YAML or JSON file.

    Returns the node name (``metadata.name``, else the file's stem) and its labels as strings.
    """
    label = f"node labels file {str(path)!r}"
    limits = inputfiles.SETTINGS
    docs = inputfiles.parse_documents(inputfiles.read_text(path, label, limits), label, limits)
    if len(docs) > 1:
        raise InputError(f"{label}: expected one YAML document, found {len(docs)}")
    doc = docs[0] if docs else None
    if not isinstance(doc, Mapping):
        raise InputError(
            f"node labels file {str(path)!r}: expected a map of labels or a Node object, "
            f"got {type(doc).__name__}"
        )
    name = path.stem
    labels: object = doc
    if "metadata" in doc or doc.get("kind") == "Node":
        if doc.get("kind") not in (None, "Node"):
            raise InputError(
                f"node labels file {str(path)!r}: expected a Node object, got kind "
                f"{doc.get('kind')!r}"
            )
        meta = doc.get("metadata") or {}
        if not isinstance(meta, Mapping):
            raise InputError(f"node labels file {str(path)!r}: metadata is not a map")
        name = str(meta.get("name") or name)
        labels = meta.get("labels") or {}
    if not isinstance(labels, Mapping):
        raise InputError(f"node labels file {str(path)!r}: labels are not a map")
    out: dict[str, str] = {}
    for key, value in labels.items():
        if isinstance(value, Mapping | list) or value is None:
            raise InputError(
                f"node labels file {str(path)!r}: label {key!r} has value {value!r}; "
                "expected a string"
            )
        out[str(key)] = _stringify(value)
    return name, out
