"""A bundle checked step by step into knowledge, or refused with the reason."""

from __future__ import annotations

import pytest

from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.bundle import BundleError
from cudasched.knowledge.bundlecheck import Sourced, builtin_knowledge, builtin_source, knowledge_of
from cudasched.knowledge.catalog import Topic, rows
from cudasched.knowledge.images import ImageTable
from tests.support.bundles import NEW_610, builtin_tables, bundle_of, planted, release_overlay


def test_the_builtin_bundle_gives_the_knowledge_every_command_uses() -> None:
    checked = knowledge_of(builtin_source())
    kb = KnowledgeBase.load()
    images = ImageTable.builtin(kb)
    for topic in Topic:
        assert rows(topic, checked.kb, checked.images, None) == rows(topic, kb, images, None)
    assert checked.provenance == kb.provenance == builtin_knowledge().provenance


def test_a_planted_release_is_known_to_the_knowledge_it_gives() -> None:
    bundle = planted(["new-release"])
    kb = knowledge_of(Sourced(bundle, "test", "sha256:" + "1" * 64)).kb
    assert str(kb.drivers.latest_release(610)) == NEW_610
    assert kb.provenance.version == "2026.09.15" and kb.provenance.digest.endswith("1" * 64)


def _refusal(bundle: object) -> BundleError:
    with pytest.raises(BundleError) as caught:
        knowledge_of(Sourced(bundle, "test"))  # type: ignore[arg-type]
    return caught.value


def test_a_row_without_a_source_refuses_the_bundle_naming_the_row() -> None:
    tables = builtin_tables()
    del tables["gpus.yaml"]["gpus"][3]["source"]
    refused = _refusal(bundle_of(tables))
    product = builtin_tables()["gpus.yaml"]["gpus"][3]["product"]
    assert refused.reason == "sources"
    assert f"no source: gpus.yaml gpus[3] (product {product})" in str(refused)


def test_a_table_the_knowledge_base_refuses_refuses_the_bundle() -> None:
    tables = builtin_tables()
    tables["toolkits.yaml"]["releases"][0]["min_driver"] = "five hundred"
    refused = _refusal(bundle_of(tables))
    assert refused.reason == "content" and "toolkits.yaml" in str(refused)
    tables = builtin_tables()
    tables["images.yaml"]["images"][0]["cuda_from"] = "astrology"
    assert _refusal(bundle_of(tables)).reason == "content"


def test_an_overlay_is_not_a_base_and_a_base_is_not_an_overlay() -> None:
    assert _refusal(release_overlay()).reason == "format"
    with pytest.raises(BundleError, match="expected a KnowledgeOverlay"):
        knowledge_of(builtin_source(), [builtin_source()])
