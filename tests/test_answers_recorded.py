"""Admission answers and ``explain -o json`` stay byte-identical to the recorded digests.

``tests/answers/recorder.py`` decides the admission benchmark's 2,000 reviews, the sample
cluster's pods and InferenceServices and the recorded reviews under several configurations; a
change that alters any answer fails here. A change that *means* to alter decisions re-records
with ``python -m tests.answers --write`` and says why in its commit.
"""

from __future__ import annotations

import orjson

from tests.answers import recorder


def test_answers_match_the_recording() -> None:
    recorded = orjson.loads(recorder.RECORD.read_bytes())
    changed = recorder.compare(recorded, recorder.answers())
    assert not changed, f"{len(changed)} answers differ: {changed[:20]}"


def test_compare_names_every_difference() -> None:
    compare = recorder.compare
    assert compare({"a": "1", "b": "2"}, {"a": "1", "b": "3", "c": "4"}) == ["b", "c"]
    assert compare({"a": "1"}, {"a": "1"}) == []
