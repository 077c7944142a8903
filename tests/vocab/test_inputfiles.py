"""The one reader of input files: what it refuses, in one line naming the file, and what it
still reads exactly as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cudasched.vocab import inputfiles, yamlparse
from cudasched.vocab.errors import InputError
from cudasched.vocab.inputfiles import CLUSTER, SETTINGS, InputLimits

SMALL = InputLimits(max_bytes=1024, max_depth=10, max_alias_nodes=50, max_yaml_items=100)


def error(call: object, *args: object) -> str:
    with pytest.raises(InputError) as info:
        call(*args)  # type: ignore[operator]
    message = str(info.value)
    assert "\n" not in message and len(message) < 400, message
    return message


def test_only_regular_files_are_read(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert "FIFO" in error(inputfiles.read_bytes, fifo, "in", SETTINGS)  # never blocks
    assert "character device" in error(inputfiles.read_bytes, "/dev/zero", "in", SETTINGS)
    assert "directory" in error(inputfiles.read_bytes, tmp_path, "in", SETTINGS)
    assert error(inputfiles.read_bytes, tmp_path / "nope", "in", SETTINGS) == "in: no such file"
    assert "cannot read" in error(inputfiles.read_bytes, "a\0b", "in", SETTINGS)


def test_size_cap_and_utf8(tmp_path: Path) -> None:
    path = tmp_path / "big"
    path.write_bytes(b"a" * 1025)
    assert "larger than the limit of 1,024 bytes" in error(inputfiles.read_bytes, path, "f", SMALL)
    path.write_bytes(b"a" * 1024)
    assert inputfiles.read_bytes(path, "f", SMALL) == b"a" * 1024
    path.write_bytes(b"\xef\xbb\xbfkey: value")
    assert inputfiles.read_text(path, "f", SMALL) == "key: value"  # BOM dropped
    path.write_bytes(b"key: \xff")
    assert "not UTF-8 text (byte 5)" in error(inputfiles.read_text, path, "f", SMALL)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("a: 1\nb: 2\na: 3\n", "duplicate key 'a' at line 3"),
        ('{"a": 1, "a": 2}', "duplicate key 'a'"),
        ("a: " + "[" * 11 + "]" * 11, "nested deeper than 10 levels"),
        ("[" * 11 + "]" * 11, "nested deeper than 10 levels"),
        ("a: &x [1, *x]\n", "invalid YAML"),
        ("a: " + "9" * 70, "an integer of 70 digits"),
        ('{"a": ' + "9" * 5000 + "}", "an integer of 5000 digits"),
        ('{"a": NaN}', "NaN is not a JSON number"),
        ('{"a": 1e999}', "out of range"),
        ('{"a": "\\ud800"}', "unpaired UTF-16 surrogate"),
        ("a: [\n", "invalid YAML at line 2, column 1"),
        ('{"a": }', "invalid JSON at line 1, column 7"),
        ("- x\n" * 101, "more than 100 lines or items"),
    ],
)
def test_refused_documents(text: str, fragment: str) -> None:
    assert fragment in error(inputfiles.parse_documents, text, "f", SMALL)


def test_billion_laughs_is_refused_without_expanding_it() -> None:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 10):
        prev, name = chr(96 + i), chr(97 + i)
        lines.append(f"{name}: &{name} [{', '.join(['*' + prev] * 9)}]")
    message = error(inputfiles.parse_documents, "\n".join(lines), "f", SETTINGS)
    assert "anchors and aliases expand the document by" in message


def test_what_still_reads_as_before() -> None:
    docs = inputfiles.parse_documents(
        "base: &b {x: 1}\nuse:\n  <<: *b\n  y: 2\nwhen: 2026-11-30T03:35:10Z\n---\n",
        "f",
        SETTINGS,
    )
    assert docs == [
        {"base": {"x": 1}, "use": {"x": 1, "y": 2}, "when": "2026-11-30T03:35:10Z"},
        None,
    ]
    assert inputfiles.parse_documents('[{"a": 1.5}]', "f", CLUSTER) == [[{"a": 1.5}]]


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
        max_leaves=20,
    )
)
def test_json_values_round_trip(value: object) -> None:
    assert inputfiles.parse_documents(json.dumps({"v": value}), "f", SETTINGS) == [{"v": value}]


def test_the_yaml_parser_loads_only_when_yaml_is_read() -> None:
    """Reading files and JSON does not import PyYAML (a third of a command's start-up); the
    first YAML read does, and gives what the YAML module gives."""
    code = (
        "import sys\n"
        "from cudasched.vocab import inputfiles\n"
        "inputfiles.parse_documents('{\"a\": 1}', 'x.json', inputfiles.SETTINGS)\n"
        "print('yaml' in sys.modules)\n"
        "print(inputfiles.parse_yaml('a: 1', 'x.yaml', inputfiles.SETTINGS))\n"
        "print('yaml' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:3] == ["False", "[{'a': 1}]", "True"]
    assert yamlparse.parse_yaml("a: 1", "x.yaml", SETTINGS) == [{"a": 1}]
