"""What cudasched knows, listed: every topic has rows, every row a source, and the filter finds
the facts a user looks for."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cudasched.cli import app
from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.catalog import COLUMNS, Topic, rows
from cudasched.knowledge.images import ImageTable
from cudasched.vocab.errors import InputError


@pytest.fixture(scope="module")
def images(kb: KnowledgeBase) -> ImageTable:
    return ImageTable.builtin(kb)


@pytest.mark.parametrize("topic", list(Topic))
def test_every_topic_lists_sourced_rows_in_its_columns(
    topic: Topic, kb: KnowledgeBase, images: ImageTable
) -> None:
    found = rows(topic, kb, images)
    assert found
    for row in found:
        assert tuple(row.fields) == COLUMNS[topic]
        assert row.source.strip(), row.fields


def test_the_filter_finds_what_a_user_checks_first(kb: KnowledgeBase, images: ImageTable) -> None:
    assert any(r.fields["product"] == "H100" for r in rows("gpus", kb, images, "h100"))
    vllm = rows(Topic.IMAGES, kb, images, "vllm/vllm-openai")
    assert vllm and all("vllm" in (r.fields["repositories"] + r.fields["id"]).lower() for r in vllm)
    cuda = rows("cuda", kb, images, "12.8")
    assert [r.fields["minDriver"] for r in cuda if r.fields["release"] == "GA"] == ["570.26"]
    assert not rows("gpus", kb, images, "no-such-gpu-at-all")


def test_overrides_of_a_configuration_are_listed_first(kb: KnowledgeBase) -> None:
    table = ImageTable.builtin(kb).with_overrides(
        [{"pattern": "registry.example.com/team/llm:*", "cuda": "12.4"}]
    )
    first = rows(Topic.IMAGES, kb, table)[0]
    assert first.fields["id"] == "override"
    assert first.fields["repositories"] == "registry.example.com/team/llm:*"


def test_an_unknown_topic_is_bad_input(kb: KnowledgeBase, images: ImageTable) -> None:
    with pytest.raises(InputError, match="expected one of gpus, images"):
        rows("nvidia", kb, images)


def test_the_command_prints_json_and_tables() -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["knowledge", "drivers", "580", "-o", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["topic"] == "drivers" and doc["rows"][0]["branch"] == "R580"
    table = runner.invoke(app, ["knowledge", "frameworks", "torch"])
    assert table.exit_code == 0 and "torch" in table.stdout
    assert "\n[1] https://" in table.stdout  # sources are footnotes, not a column
    bad = runner.invoke(app, ["knowledge", "nope"])
    assert bad.exit_code == 2


def test_matching_reads_the_facts_not_the_links() -> None:
    """``knowledge cuda 13`` is CUDA 13: not 8.0 (whose source link holds "13"), not 10.0.130."""
    doc = json.loads(CliRunner().invoke(app, ["knowledge", "cuda", "13", "-o", "json"]).stdout)
    cudas = [row["cuda"] for row in doc["rows"]]
    assert len(cudas) >= 3 and all(c.startswith("13.") for c in cudas), cudas
    images = CliRunner().invoke(app, ["knowledge", "images", "tritonserver", "-o", "json"])
    assert json.loads(images.stdout)["rows"]


@pytest.mark.parametrize("columns", ["80", "200"])
def test_no_cell_is_cut_at_any_width(columns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    doc = json.loads(CliRunner().invoke(app, ["knowledge", "gpus", "A100", "-o", "json"]).stdout)
    out = CliRunner().invoke(app, ["knowledge", "gpus", "A100"]).stdout
    words = set(out.replace(",", " ").replace("│", " ").split())
    names = {w for row in doc["rows"] for w in row["names"].replace(",", " ").split()}
    assert len(names) >= 4 and names <= words, names - words
