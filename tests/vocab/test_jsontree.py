from __future__ import annotations

import copy
from types import MappingProxyType
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from cudasched.vocab.jsontree import copy_json

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=30,
)


@given(json_values)
def test_copy_equals_deepcopy_and_shares_no_container(value: Any) -> None:
    copied = copy_json(value)
    assert copied == copy.deepcopy(value)

    def containers(v: Any) -> list[int]:
        if isinstance(v, dict):
            return [id(v), *(i for x in v.values() for i in containers(x))]
        if isinstance(v, list):
            return [id(v), *(i for x in v for i in containers(x))]
        return []

    assert not set(containers(copied)) & set(containers(value))


def test_mappings_become_dicts() -> None:
    source = MappingProxyType({"a": [MappingProxyType({"b": 1})]})
    copied = copy_json(source)
    assert copied == {"a": [{"b": 1}]}
    assert type(copied) is dict and type(copied["a"][0]) is dict


def test_subclasses_of_dict_and_list_are_copied_as_plain_containers() -> None:
    class Labels(dict):  # type: ignore[type-arg]
        pass

    class Items(list):  # type: ignore[type-arg]
        pass

    source = Labels(a=Items([Labels(b=1)]))
    copied = copy_json(source)
    assert copied == {"a": [{"b": 1}]}
    assert copied["a"] is not source["a"] and copied["a"][0] is not source["a"][0]
