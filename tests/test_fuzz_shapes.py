"""The shapes fuzzer (``fuzz/shapes_fuzz.py``) runs in the suite on a few hundred reviews, so
it cannot rot, and its judge counts what it claims to: a run on this tree breaks no contract
and falls back to no internal error."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

PATH = Path(__file__).parents[1] / "fuzz" / "shapes_fuzz.py"


@pytest.fixture(scope="module")
def shapes_fuzz() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cudasched_shapes_fuzz", PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (dataclasses look their module up by name)
    spec.loader.exec_module(module)
    return module


def test_a_short_run_breaks_no_contract(shapes_fuzz: ModuleType) -> None:
    tally = shapes_fuzz.in_process(300, seed=11)
    assert tally.reviews == tally.answered == 300, tally.summary("run")
    assert tally.broken == 0 and not tally.where, tally.summary("run")
    assert tally.outcomes["patched"] > 0 and tally.outcomes["allowed"] > 0


def test_the_judge_counts_an_internal_error_and_a_patch_that_does_not_apply(
    shapes_fuzz: ModuleType,
) -> None:
    import base64

    import orjson

    tally = shapes_fuzz.Tally()
    body = orjson.dumps({"request": {"uid": "u", "object": {"metadata": {}}}})
    bad = base64.b64encode(orjson.dumps([{"op": "replace", "path": "/spec/x", "value": 1}]))
    answer = {
        "response": {
            "uid": "u",
            "allowed": True,
            "warnings": ["cudasched: internal error (TypeError); admitted unchanged"],
            "patch": bad.decode(),
        }
    }
    tally.judge(body, orjson.dumps(answer))
    assert (tally.internal, tally.bad_patch, tally.broken) == (1, 1, 2)


def test_mutations_never_reach_the_corpus(shapes_fuzz: ModuleType) -> None:
    """Every review starts from the same well-formed objects: a mutation that wrote through a
    shared part would drift the corpus, and later reviews would test less and less."""
    import orjson

    from cudasched.cluster.snapshot import bundled_snapshot

    corpus = shapes_fuzz.Corpus.build(bundled_snapshot())
    before = orjson.dumps([obj for _, obj, _ in corpus.objects])
    kinds = {kind for kind, _ in shapes_fuzz.cases(3000, 5, corpus)}
    assert kinds == {"pod", "isvc", "llmisvc"}
    assert orjson.dumps([obj for _, obj, _ in corpus.objects]) == before
