"""The cache of parsed knowledge-base documents: a pure speed-up that can never serve stale,
foreign or broken data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.cache import cache_dir, data_digest, load_documents, read_data_bytes
from cudasched.knowledge.loading import DATA_FILES, parse_data_files


class Counting:
    """``parse_data_files`` that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, raw):  # type: ignore[no-untyped-def]
        self.calls += 1
        return parse_data_files(raw)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "cache"
    monkeypatch.setenv("CUDASCHED_CACHE_DIR", str(where))
    return where


def test_second_load_reads_the_cache_and_gives_the_same_documents(cache: Path) -> None:
    parse = Counting()
    first = load_documents(DATA_FILES, parse)
    second = load_documents(DATA_FILES, parse)
    assert parse.calls == 1 and first == second
    [only] = list(cache.iterdir())
    assert only.name.startswith("knowledge-") and oct(only.stat().st_mode & 0o777) == "0o600"
    assert oct(cache.stat().st_mode & 0o777) == "0o700"


def test_knowledge_base_from_cache_answers_like_from_yaml(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cached = KnowledgeBase.load()
    cached = KnowledgeBase.load()  # now from the cache
    monkeypatch.setenv("CUDASCHED_CACHE_DIR", "off")
    fresh = KnowledgeBase.load()
    assert repr(cached) == repr(fresh)
    assert [t.cuda for t in cached.toolkits()] == [t.cuda for t in fresh.toolkits()]
    assert list(cached.gpus()) == list(fresh.gpus())


def test_changed_data_is_a_new_cache_entry() -> None:
    raw = read_data_bytes(DATA_FILES)
    changed = {**raw, "gpus.yaml": raw["gpus.yaml"] + b"\n# edited\n"}
    assert data_digest(raw) != data_digest(changed)
    assert data_digest(raw) == data_digest(dict(reversed(list(raw.items()))))


def test_corrupt_cache_is_a_miss_and_is_replaced(cache: Path) -> None:
    parse = Counting()
    load_documents(DATA_FILES, parse)
    [entry] = list(cache.iterdir())
    entry.write_bytes(b"not a pickle")
    assert load_documents(DATA_FILES, parse)["gpus.yaml"]
    assert parse.calls == 2
    assert load_documents(DATA_FILES, parse) and parse.calls == 2  # rewritten


def test_a_file_others_can_write_is_never_read(cache: Path) -> None:
    parse = Counting()
    load_documents(DATA_FILES, parse)
    [entry] = list(cache.iterdir())
    os.chmod(entry, 0o666)
    load_documents(DATA_FILES, parse)
    assert parse.calls == 2


def test_unwritable_cache_directory_still_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    monkeypatch.setenv("CUDASCHED_CACHE_DIR", str(blocker / "cache"))
    parse = Counting()
    assert load_documents(DATA_FILES, parse) and parse.calls == 1


def test_cache_location() -> None:
    assert cache_dir({"CUDASCHED_CACHE_DIR": "off"}) is None
    assert cache_dir({"CUDASCHED_CACHE_DIR": "/x"}) == Path("/x")
    assert cache_dir({"XDG_CACHE_HOME": "/c"}) == Path("/c/cudasched")
    assert cache_dir({"HOME": "/h"}) == Path("/h/.cache/cudasched")
    assert cache_dir({}) is None
