"""Local facts on top: an overlay's rows merged over a base bundle, with one precedence."""

from __future__ import annotations

import datetime

import pytest

from cudasched.knowledge.bundle import BundleError
from cudasched.knowledge.bundlecheck import Sourced, builtin_source, knowledge_of
from cudasched.knowledge.overlay import merge_overlay
from cudasched.vocab.versions import parse_driver
from tests.support.bundles import builtin_tables, overlay_of, release_overlay


def _merged(overlay_tables: dict[str, object]) -> dict[str, object]:
    return merge_overlay(builtin_tables(), overlay_tables, "overlay")


def test_a_newer_release_replaces_the_newest_and_keeps_it_as_an_earlier_one() -> None:
    base = builtin_source()
    before = knowledge_of(base).kb
    old = before.drivers.latest_release(610)
    assert old is not None
    kb = knowledge_of(base, [Sourced(release_overlay(), "overlay")]).kb
    assert kb.drivers.latest_release(610) == parse_driver("610.80.02")
    earlier = kb.drivers.release_on(610, as_of=datetime.date(2026, 9, 1))
    assert earlier is not None and earlier.version == old, "a plan judged before it finds the old"
    assert kb.provenance.overlays == ("local.1 (overlay)",)
    assert kb.provenance.version == base.bundle.meta.version


def test_an_older_release_than_the_base_newest_is_refused() -> None:
    with pytest.raises(BundleError) as caught:
        knowledge_of(builtin_source(), [Sourced(release_overlay("610.20.01"), "overlay")])
    assert caught.value.reason == "overlay"
    assert "R610 610.20.01 is not newer than the base's newest" in str(caught.value)


def test_image_rows_go_in_front_and_replace_their_namesakes() -> None:
    base_rows = builtin_tables()["images.yaml"]["images"]
    first = base_rows[0]
    mine = {**first, "source": "https://example.com/ours", "note": "ours"}
    new = {"id": "team-llm", "repositories": ["team/llm"], "tag": r"^cu(?P<cuda>\d+\.\d+)"}
    new |= {"cuda_from": "tag", "source": "https://example.com/team"}
    merged = _merged({"images.yaml": {"images": [new, mine]}})
    rows = merged["images.yaml"]["images"]  # type: ignore[index]
    assert [r["id"] for r in rows[:2]] == ["team-llm", first["id"]]
    assert rows[1]["note"] == "ours" and len(rows) == len(base_rows) + 1
    overlay = overlay_of({"images.yaml": {"images": [new]}})
    images = knowledge_of(builtin_source(), [Sourced(overlay, "overlay")]).images
    match = images.cuda_for_image("team/llm:cu12.6-py3")
    assert match is not None and str(match.cuda) == "12.6"


def test_a_gpu_and_a_mirror_of_ones_own() -> None:
    gpu = {"product": "NVIDIA Z100", "names": ["NVIDIA Z100"], "compute": "9.0", "arch": "Hopper"}
    gpu |= {"datacenter": True, "source": "https://example.com/z100"}
    overlay = overlay_of(
        {
            "gpus.yaml": {"gpus": [gpu]},
            "images.yaml": {"mirrors": {"corp/triton": "nvidia/tritonserver"}},
        }
    )
    known = knowledge_of(builtin_source(), [Sourced(overlay, "overlay")])
    found = known.kb.gpu("NVIDIA-Z100")
    assert found is not None and str(found.compute) == "9.0"
    match = known.images.cuda_for_image("corp/triton:24.05-py3")
    assert match is not None and str(match.cuda).startswith("12.4")


@pytest.mark.parametrize(
    ("tables", "words"),
    [
        ({"toolkits.yaml": {"releases": []}}, "an overlay may add rows to"),
        ({"drivers.yaml": {"build_breakages": []}}, "an overlay may add rows to"),
        ({"drivers.yaml": {"sources": {"dc_ci": "somewhere else"}}}, "'dc_ci' already names"),
        ({"drivers.yaml": {"earlier_releases": [{"released": "2026-01-01"}]}}, "its own 'version'"),
        ({"drivers.yaml": {"latest_releases": {"branch": 610}}}, "must be a list of rows"),
    ],
)
def test_what_an_overlay_may_not_do_is_refused(tables: dict[str, object], words: str) -> None:
    with pytest.raises(BundleError) as caught:
        _merged(tables)
    assert caught.value.reason == "overlay" and words in str(caught.value)


def test_merging_leaves_the_base_tables_as_they_were() -> None:
    base = builtin_tables()
    kept = builtin_tables()
    merge_overlay(base, release_overlay().documents(), "overlay")
    assert base == kept
