"""Label selectors as ``kubectl -l`` writes them: parsed and matched as the API server does."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cudasched.vocab.errors import InputError
from cudasched.vocab.selectors import Operator, parse_selector

LABELS = {"app": "web", "tier": "front", "env": "prod"}


@pytest.mark.parametrize(
    ("text", "selected"),
    [
        ("", True),
        ("app=web", True),
        ("app==web", True),
        ("app!=web", False),
        ("app!=db", True),
        ("missing!=x", True),  # != also selects objects without the key
        ("env in (prod,dev)", True),
        ("env in (dev)", False),
        ("env notin (dev)", True),
        ("missing notin (dev)", True),
        ("app", True),
        ("!app", False),
        ("!missing", True),
        ("app=web,tier=front", True),
        ("app=web,tier=back", False),
        ("app=web, env in (prod, qa) ,!legacy", True),
        ("example.com/team=x", False),
    ],
)
def test_matches_as_the_api_server(text: str, selected: bool) -> None:
    assert parse_selector(text).matches(LABELS) is selected


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("a=,", "an empty requirement"),
        ("=x", "'' is not a label key"),
        ("a b=c", "'a b' is not a label key"),
        ("app in (a", "unbalanced parentheses"),
        ("x=" + "v" * 64, "is not a label value"),
        ("Bad_Prefix/x=1", "is not a label key: the prefix must be a lowercase DNS-1123"),
        ("a" * 254 + "/x=1", "the prefix must be a lowercase DNS-1123 subdomain of at most 253"),
        ("a/b/c=1", "a label key has at most one '/'"),
        ("x" * 64 + "=1", "the name part must be at most 63 characters"),
    ],
)
def test_bad_selectors_name_the_part(text: str, said: str) -> None:
    with pytest.raises(InputError) as err:
        parse_selector(text)
    assert said in str(err.value)


_names = st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True)


@given(st.dictionaries(_names, _names, min_size=1, max_size=6))
def test_an_objects_own_labels_select_it_and_their_negation_does_not(
    labels: dict[str, str],
) -> None:
    equal = ",".join(f"{k}={v}" for k, v in labels.items())
    assert parse_selector(equal).matches(labels)
    assert parse_selector(",".join(labels)).matches(labels)
    for key, value in labels.items():
        assert not parse_selector(f"{key}!={value}").matches(labels)
        assert not parse_selector(f"!{key}").matches(labels)
        assert not parse_selector(f"{key} notin ({value},zz)").matches(labels)


@given(st.dictionaries(_names, _names, max_size=4), _names, _names)
def test_the_text_form_reads_back_to_the_same_selector(
    labels: dict[str, str], key: str, value: str
) -> None:
    for text in (f"{key}={value}", f"{key} in ({value},x)", f"!{key}", key, f"{key}!={value}"):
        parsed = parse_selector(text)
        again = parse_selector(str(parsed))
        assert again == parsed
        assert again.matches(labels) == parsed.matches(labels)


def test_operators_are_the_ones_kubernetes_has() -> None:
    assert {o.value for o in Operator} == {"=", "!=", "in", "notin", "exists", "!"}
