"""Admission answers and ``explain -o json`` stay byte-identical to the recorded digests.

``benchmarks/answers.py`` decides the admission benchmark's 2,000 reviews, the sample cluster's
pods and InferenceServices and the recorded reviews under several configurations; a change that
alters any answer fails here. A change that *means* to alter decisions re-records with
``python -m benchmarks.answers --write`` and says why in its commit.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent


def _recorder():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module("benchmarks.answers")


def test_answers_match_the_recording() -> None:
    recorder = _recorder()
    recorded = orjson.loads(recorder.RECORD.read_bytes())
    changed = recorder.compare(recorded, recorder.answers())
    assert not changed, f"{len(changed)} answers differ: {changed[:20]}"


def test_compare_names_every_difference() -> None:
    compare = _recorder().compare
    assert compare({"a": "1", "b": "2"}, {"a": "1", "b": "3", "c": "4"}) == ["b", "c"]
    assert compare({"a": "1"}, {"a": "1"}) == []
