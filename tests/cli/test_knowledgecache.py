"""The command line's cache of parsed knowledge-base documents: a pure speed-up that can never
serve stale, foreign or broken data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cudasched.cli.knowledgecache import PickledDocuments, cache_dir, data_digest, user_cache
from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.loading import DATA_FILES, parse_data_files, read_data_bytes


@pytest.fixture(scope="module")
def raw() -> dict[str, bytes]:
    return read_data_bytes(DATA_FILES)


@pytest.fixture(scope="module")
def docs(raw: dict[str, bytes]) -> dict[str, object]:
    return parse_data_files(raw)


def test_kept_documents_are_read_back_from_a_private_file(
    tmp_path: Path, raw: dict[str, bytes], docs: dict[str, object]
) -> None:
    cache = PickledDocuments(tmp_path / "cache")
    assert cache.load(raw) is None
    cache.store(raw, docs)
    assert cache.load(raw) == docs
    [only] = list(cache.directory.iterdir())
    assert only.name.startswith("knowledge-") and oct(only.stat().st_mode & 0o777) == "0o600"
    assert oct(cache.directory.stat().st_mode & 0o777) == "0o700"


def test_knowledge_base_from_cache_answers_like_from_yaml(tmp_path: Path) -> None:
    cache = PickledDocuments(tmp_path / "cache")
    KnowledgeBase.load(cache)
    assert list(cache.directory.iterdir())  # kept by the first load
    cached = KnowledgeBase.load(cache)  # now from the cache
    fresh = KnowledgeBase.load()
    assert repr(cached) == repr(fresh)
    assert [t.cuda for t in cached.toolkits()] == [t.cuda for t in fresh.toolkits()]
    assert list(cached.gpus()) == list(fresh.gpus())


def test_changed_data_is_a_new_cache_entry(
    tmp_path: Path, raw: dict[str, bytes], docs: dict[str, object]
) -> None:
    changed = {**raw, "gpus.yaml": raw["gpus.yaml"] + b"\n# edited\n"}
    assert data_digest(raw) != data_digest(changed)
    assert data_digest(raw) == data_digest(dict(reversed(list(raw.items()))))
    cache = PickledDocuments(tmp_path)
    cache.store(raw, docs)
    assert cache.load(changed) is None


def test_a_corrupt_file_is_a_miss_and_is_replaced(
    tmp_path: Path, raw: dict[str, bytes], docs: dict[str, object]
) -> None:
    cache = PickledDocuments(tmp_path / "cache")
    cache.store(raw, docs)
    [entry] = list(cache.directory.iterdir())
    entry.write_bytes(b"not a pickle")
    assert cache.load(raw) is None
    cache.store(raw, docs)
    assert cache.load(raw) == docs


def test_a_file_others_can_write_is_never_read(
    tmp_path: Path, raw: dict[str, bytes], docs: dict[str, object]
) -> None:
    cache = PickledDocuments(tmp_path / "cache")
    cache.store(raw, docs)
    [entry] = list(cache.directory.iterdir())
    os.chmod(entry, 0o666)
    assert cache.load(raw) is None


def test_an_unwritable_cache_directory_keeps_nothing_and_raises_nothing(
    tmp_path: Path, raw: dict[str, bytes], docs: dict[str, object]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    cache = PickledDocuments(blocker / "cache")
    cache.store(raw, docs)
    assert cache.load(raw) is None
    assert KnowledgeBase.load(cache).toolkit is not None


def test_cache_location() -> None:
    assert cache_dir({"CUDASCHED_CACHE_DIR": "off"}) is None
    assert cache_dir({"CUDASCHED_CACHE_DIR": "/x"}) == Path("/x")
    assert cache_dir({"XDG_CACHE_HOME": "/c"}) == Path("/c/cudasched")
    assert cache_dir({"HOME": "/h"}) == Path("/h/.cache/cudasched")
    assert cache_dir({}) is None
    assert user_cache({"CUDASCHED_CACHE_DIR": "off"}) is None
    found = user_cache({"CUDASCHED_CACHE_DIR": "/x"})
    assert found is not None and found.directory == Path("/x")
