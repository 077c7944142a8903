"""The rule that turns an image's CUDA facts into one answer: runtimes loaded together by the
newest, runners an application picks among by the oldest, a major-only fact as a floor."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cudasched.knowledge.imagecontents import ContentFact, decide, runner_of
from tests.support.versions import cv


def fact(path: str, cuda: str, *, floor: bool = False) -> ContentFact:
    return ContentFact("library", path.rsplit("/", 1)[-1], cv(cuda), "sha256:l", path, "why", floor)


def test_runner_directories() -> None:
    assert runner_of("usr/lib/ollama/cuda_v12/libcudart.so.12.8.90") == (
        "usr/lib/ollama",
        "cuda_v12",
    )
    assert runner_of("backends/cuda12/lib/libcudart.so.12.4.127") == ("backends", "cuda12")
    assert runner_of("usr/local/cuda-12.4/lib64/libcudart.so.12.4.127") is None


def test_no_facts_no_answer() -> None:
    assert decide([]) == (None, False, "")


def test_runners_together_and_floors() -> None:
    runners = [
        fact("o/cuda_v12/libcudart.so.12.8.90", "12.8"),
        fact("o/cuda_v13/libcudart.so.13.0.1", "13.0"),
    ]
    assert decide(runners)[0] == cv("12.8")
    # A runtime loaded beside the runners (the app's own) raises the answer.
    cuda, floor, rule = decide([*runners, fact("app/libnvrtc.so.13.0.48", "13.0")])
    assert (cuda, floor) == (cv("13.0"), False) and "also runners" in rule
    # Only a major known: a floor, and an exact fact of the same release wins over it.
    assert decide([fact("x/libcublas.so.12.8.4.1", "12.0", floor=True)])[:2] == (cv("12.0"), True)
    mixed = [
        fact("x/libcublas.so.12.0.1", "12.0", floor=True),
        fact("x/libcudart.so.12.0.146", "12.0"),
    ]
    assert decide(mixed)[:2] == (cv("12.0"), False)


@given(st.lists(st.tuples(st.integers(11, 13), st.integers(0, 9), st.booleans()), min_size=1))
def test_together_the_answer_is_the_newest_and_never_below_any(items) -> None:
    facts = [fact(f"lib/libcudart.so.{a}.{b}.1", f"{a}.{b}") for a, b, _ in items]
    cuda = decide(facts)[0]
    assert cuda is not None and all(cuda >= f.cuda for f in facts)
    assert cuda in {f.cuda for f in facts}
