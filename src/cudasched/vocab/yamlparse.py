"""The YAML half of :mod:`cudasched.vocab.inputfiles`: libyaml's safe loader with the house's
limits (depth, alias expansion, duplicate keys, integer length, surrogates).

It is a module of its own so that PyYAML loads only when YAML is read:
:func:`cudasched.vocab.inputfiles.parse_yaml` imports it on first use.
"""

from __future__ import annotations

from typing import Any

import yaml

from cudasched.vocab.errors import InputError, one_line
from cudasched.vocab.inputlimits import MAX_INTEGER_DIGITS, InputLimits, check_text, clip

__all__ = ["parse_yaml"]


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
            check_text(node.value, label)
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
                f"{label}: duplicate key {clip(str(key.value))!r}{_where(key.start_mark)}"
            )
        seen.add(identity)
