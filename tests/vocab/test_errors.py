"""The words error messages are made of: a parser's or a server's text on one line, and a
user's value quoted short and on one line whatever it is."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cudasched.vocab.errors import SHOWN_CHARS, InputError, VersionError, one_line, shown


@pytest.mark.parametrize(
    ("what", "expected"),
    [
        (
            "expected ':'\n  in \"<unicode string>\", line 2",
            "expected ':' in \"<unicode string>\", line 2",
        ),
        ("  tabs\tand\r\nreturns  ", "tabs and returns"),
        ("", ""),
        (ValueError("bad\nvalue"), "bad value"),
        (TimeoutError(), "TimeoutError"),  # an exception without words is named by its type
        (OSError(" \n "), "OSError"),
    ],
)
def test_one_line(what: object, expected: str) -> None:
    assert one_line(what) == expected


@given(st.text())
def test_one_line_is_one_line_without_edges(text: str) -> None:
    line = one_line(text)
    assert line == line.strip() and "  " not in line
    assert not any(ch.isspace() and ch != " " for ch in line)


def test_shown_quotes_a_value_short_and_on_one_line() -> None:
    assert shown("12.4") == "'12.4'"
    long = shown("x" * 1000)
    assert len(long) == SHOWN_CHARS and long.endswith("…")
    assert shown(list(range(20))) == "<a list of 20 items>"
    assert shown(10**400).startswith("<an integer of about ")
    assert shown("a\x00\nb") == "'a\\x00\\nb'"  # repr already escapes: printable as it is


def test_a_version_error_names_kind_value_and_forms() -> None:
    err = VersionError("CUDA version", "twelve", "MAJOR.MINOR")
    assert isinstance(err, InputError)
    assert str(err) == "invalid CUDA version 'twelve': expected MAJOR.MINOR"
