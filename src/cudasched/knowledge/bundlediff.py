"""What changed between two bundles, in the words of the person who runs the cluster.

``cudasched knowledge diff OLD NEW`` answers "what does following the new bundle change?":
new driver releases and branches, changed toolkit minimums, new GPUs and image rows,
architectures that moved to another last driver branch (and which GPUs move with them). The
tables are compared row by row: a row is named by its identity field (:data:`SECTIONS`, the
branch of a release row, the id of an image row), so a row that moved within its list is not a
change and a changed row says which fields changed, old and new. A section without an identity
field (a GPU Operator matrix) is compared field by field. Every change is one
:class:`Change`, in a topic a person scans for (:data:`TOPICS`), and nothing else is said: a
diff of two equal bundles is empty.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from cudasched.knowledge.bundle import TABLES
from cudasched.knowledge.loading import NGC_PRODUCTS

__all__ = ["SECTIONS", "TOPICS", "Change", "diff_tables"]

Row = Mapping[str, Any]

TOPICS = (
    "Driver releases",
    "Driver branches",
    "CUDA toolkits",
    "GPUs and architectures",
    "Images",
    "NGC containers",
    "Frameworks",
    "GPU Operator",
    "Kernels",
    "Sources",
)


@dataclass(frozen=True, slots=True)
class Section:
    """How one list of rows is read: its topic, the field that names a row, how a person calls
    a row, and which fields say what a new row is."""

    topic: str
    key: str
    name: Callable[[Row], str]
    headline: tuple[str, ...] = ()


def _joined(value: Any) -> str:
    return ", ".join(str(v) for v in value) if isinstance(value, list) else str(value)


def _called(words: str, field: str) -> Callable[[Row], str]:
    """A row named ``words`` and its ``field`` (``NGC tritonserver 24.05``)."""

    def name(row: Row) -> str:
        return f"{words} {row[field]}"

    return name


#: ``(table, section path)``: how its rows are compared and named.
SECTIONS: dict[tuple[str, str], Section] = {
    ("drivers.yaml", "latest_releases"): Section(
        "Driver releases",
        "branch",
        lambda r: f"R{r['branch']} newest release",
        ("version", "released"),
    ),
    ("drivers.yaml", "earlier_releases"): Section(
        "Driver releases", "version", lambda r: f"driver {r['version']}", ("released",)
    ),
    ("compat.yaml", "driver_branches"): Section(
        "Driver branches", "branch", lambda r: f"branch R{r['branch']}", ("type", "eol")
    ),
    ("toolkits.yaml", "releases"): Section(
        "CUDA toolkits", "version", lambda r: f"CUDA {r['version']}", ("min_driver", "status")
    ),
    ("compat.yaml", "minor_version_compat"): Section(
        "CUDA toolkits",
        "cuda_major",
        lambda r: f"CUDA {r['cuda_major']}.x minor-version compatibility",
        ("floor",),
    ),
    ("compat.yaml", "forward_compat.packages"): Section(
        "CUDA toolkits", "cuda", lambda r: f"cuda-compat {r['cuda']}", ("cells",)
    ),
    ("architectures.yaml", "architectures"): Section(
        "GPUs and architectures",
        "compute",
        lambda r: f"{r['name']} (cc {_joined(r.get('compute', []))})",
        ("last_driver_branch",),
    ),
    ("gpus.yaml", "gpus"): Section(
        "GPUs and architectures", "product", lambda r: f"GPU {r['product']}", ("compute", "arch")
    ),
    ("images.yaml", "images"): Section(
        "Images",
        "id",
        lambda r: f"image row {r['id']} ({_joined(r.get('repositories', []))})",
        ("cuda_from",),
    ),
    ("images.yaml", "cuda_base_gates.releases"): Section(
        "Images", "cuda", lambda r: f"nvidia/cuda {r['cuda']} gate", ("branches",)
    ),
    **{
        ("containers.yaml", product): Section(
            "NGC containers", "release", _called(f"NGC {product}", "release"), ("cuda",)
        )
        for product in NGC_PRODUCTS
    },
    **{
        ("frameworks.yaml", key): Section(
            "Frameworks", "release", _called(words, "release"), ("cuda",)
        )
        for key, words in (("pytorch", "PyTorch"), ("tensorflow", "TensorFlow"), ("vllm", "vLLM"))
    },
    ("drivers.yaml", "minimum_kernel"): Section(
        "Kernels",
        "from_driver",
        lambda r: f"minimum kernel from driver {r['from_driver'] or 'the first'}",
        ("kernel",),
    ),
    ("drivers.yaml", "build_breakages"): Section(
        "Kernels",
        "driver",
        lambda r: f"build report for driver {r['driver']}",
        ("kernel", "result"),
    ),
    ("gpu-operator.yaml", "driver_containers"): Section(
        "GPU Operator", "os", lambda r: f"driver containers for {r['os']}", ("branches",)
    ),
    ("gpu-operator.yaml", "operator_versions"): Section(
        "GPU Operator", "version", lambda r: f"GPU Operator {r['version']}", ("default_driver",)
    ),
    ("gpu-operator.yaml", "operator_boards"): Section(
        "GPU Operator", "board", lambda r: f"GPU Operator board {r['board']}", ("min_driver",)
    ),
}

#: The topic of a section that is not a list of rows, by table.
_TABLE_TOPIC = {
    "drivers.yaml": "Kernels",
    "gpu-operator.yaml": "GPU Operator",
    "compat.yaml": "CUDA toolkits",
    "images.yaml": "Images",
}

#: How a field is said, where its name is not the words.
_FIELD_WORDS = {
    "min_driver": "minimum driver",
    "last_driver_branch": "last driver branch",
    "last_cuda": "last CUDA",
    "first_cuda": "first CUDA",
    "first_driver": "first driver",
    "default_driver": "default driver",
    "fc_branches": "forward-compatible branches",
    "printed_min_driver": "printed minimum driver",
    "min_compute": "minimum compute capability",
    "compute": "compute capability",
    "eol": "end of life",
    "version": "release",
    "cuda_from": "CUDA read from",
}


@dataclass(frozen=True, slots=True)
class Change:
    """One change: ``kind`` is ``added``, ``removed`` or ``changed``; ``fields`` the changed
    fields as (field, old, new); ``text`` the line a person reads."""

    topic: str
    table: str
    section: str
    name: str
    kind: str
    text: str
    fields: tuple[tuple[str, Any, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "table": self.table,
            "section": self.section,
            "name": self.name,
            "change": self.kind,
            "text": self.text,
            "fields": {f: {"from": old, "to": new} for f, old, new in self.fields},
        }


def _said(field: str, value: Any) -> str:
    if value is None:
        return "ongoing" if field.startswith("last_") else "none"
    if field in ("branch", "last_driver_branch") and isinstance(value, int):
        return f"R{value}"
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}"
    return str(value)


def _field_change(field: str, old: Any, new: Any) -> str:
    words = _FIELD_WORDS.get(field, field.replace("_", " "))
    if field in ("note", "source") or (isinstance(old, str) and len(old) > 80):
        return f"{words} changed"
    return f"{words} {_said(field, old)} -> {_said(field, new)}"


def _row_changes(
    table: str, path: str, section: Section, old: list[Any], new: list[Any]
) -> Iterator[Change]:
    before = {str(r.get(section.key)): r for r in old if isinstance(r, Mapping)}
    after = {str(r.get(section.key)): r for r in new if isinstance(r, Mapping)}
    for key, row in after.items():
        name = section.name(row)
        if key not in before:
            facts = "; ".join(
                f"{_FIELD_WORDS.get(f, f)} {_said(f, row.get(f))}"
                for f in section.headline
                if f in row
            )
            text = f"{name}: new" + (f" ({facts})" if facts else "")
            yield Change(section.topic, table, path, name, "added", text)
            continue
        changed = tuple(
            (f, before[key].get(f), row.get(f))
            for f in dict.fromkeys([*before[key], *row])
            if before[key].get(f) != row.get(f)
        )
        if changed:
            text = f"{name}: " + "; ".join(_field_change(*c) for c in changed)
            yield Change(section.topic, table, path, name, "changed", text, changed)
    for key, row in before.items():
        if key not in after:
            name = section.name(row)
            yield Change(section.topic, table, path, name, "removed", f"{name}: removed")


def _value_changes(table: str, path: str, old: Any, new: Any) -> Iterator[Change]:
    """A section that is not a list of named rows, compared field by field (one level)."""
    topic = _TABLE_TOPIC.get(table, table)
    name = f"{table.removesuffix('.yaml')} {path.replace('_', ' ')}"
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        if old != new:
            text = f"{name}: {_said(path, old)} -> {_said(path, new)}"
            yield Change(topic, table, path, name, "changed", text, ((path, old, new),))
        return
    changed = tuple(
        (str(f), old.get(f), new.get(f))
        for f in dict.fromkeys([*old, *new])
        if old.get(f) != new.get(f)
    )
    if changed:
        text = f"{name}: " + "; ".join(_field_change(*c) for c in changed)
        yield Change(topic, table, path, name, "changed", text, changed)


def _section_changes(table: str, path: str, old: Any, new: Any) -> Iterator[Change]:
    section = SECTIONS.get((table, path))
    if old == new:
        return
    if section is not None and isinstance(old or [], list) and isinstance(new or [], list):
        yield from _row_changes(table, path, section, old or [], new or [])
        return
    nested = [p for (t, p) in SECTIONS if t == table and p.startswith(f"{path}.")]
    if nested and isinstance(old, Mapping) and isinstance(new, Mapping):
        for sub in nested:
            field = sub.split(".", 1)[1]
            yield from _section_changes(table, sub, old.get(field), new.get(field))
        rest_old = {k: v for k, v in old.items() if f"{path}.{k}" not in nested}
        rest_new = {k: v for k, v in new.items() if f"{path}.{k}" not in nested}
        yield from _value_changes(table, path, rest_old, rest_new)
        return
    yield from _value_changes(table, path, old, new)


def _source_changes(table: str, old: Any, new: Any) -> Iterator[Change]:
    before = old if isinstance(old, Mapping) else {}
    after = new if isinstance(new, Mapping) else {}
    for key in dict.fromkeys([*after, *before]):
        name = f"{table} source {key}"
        if key not in before:
            yield Change("Sources", table, "sources", name, "added", f"{name}: new")
        elif key not in after:
            yield Change("Sources", table, "sources", name, "removed", f"{name}: removed")
        elif " ".join(str(before[key]).split()) != " ".join(str(after[key]).split()):
            yield Change("Sources", table, "sources", name, "changed", f"{name}: changed")


def diff_tables(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Change]:
    """Every change from the parsed tables ``old`` to ``new`` (keyed by file name), topics in
    :data:`TOPICS` order, each topic's changes in table order."""
    found: list[Change] = []
    for table in TABLES:
        before, after = old.get(table) or {}, new.get(table) or {}
        for key in dict.fromkeys([*after, *before]):
            if key == "sources":
                found.extend(_source_changes(table, before.get(key), after.get(key)))
            else:
                found.extend(_section_changes(table, str(key), before.get(key), after.get(key)))
    _name_moved_gpus(found, new.get("gpus.yaml") or {})
    return sorted(found, key=lambda c: TOPICS.index(c.topic) if c.topic in TOPICS else len(TOPICS))


def _name_moved_gpus(changes: list[Change], gpus: Mapping[str, Any]) -> None:
    """An architecture whose last driver branch changed moves its GPUs with it: say which."""
    for i, change in enumerate(changes):
        moved = any(f == "last_driver_branch" for f, _, _ in change.fields)
        if change.section != "architectures" or not moved:
            continue
        arch = change.name.split(" (", 1)[0]
        products = [g.get("product") for g in gpus.get("gpus") or () if g.get("arch") == arch]
        if products:
            shown = ", ".join(str(p) for p in products[:6])
            more = f" and {len(products) - 6} more" if len(products) > 6 else ""
            text = f"{change.text} (moves {len(products)} GPUs: {shown}{more})"
            changes[i] = Change(
                change.topic,
                change.table,
                change.section,
                change.name,
                change.kind,
                text,
                change.fields,
            )
