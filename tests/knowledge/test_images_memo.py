"""The image table remembers its answers per image reference (issue 22: a tenth of a
first-seen admission decision was matching the image against every rule). A remembered answer
is the one a fresh table gives, and a table derived with other overrides or mirrors never
answers from its parent's memory."""

from __future__ import annotations

from cudasched.knowledge.images import ImageTable
from cudasched.vocab.versions import CudaVersion

IMAGE = "docker.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04"


def test_a_remembered_answer_is_the_fresh_one() -> None:
    table = ImageTable.builtin()
    first = table.lookup(IMAGE)
    assert table.lookup(IMAGE) is first  # remembered
    assert first == ImageTable.builtin().lookup(IMAGE)
    assert first.match is not None and first.match.cuda == CudaVersion(12, 4)


def test_derived_tables_do_not_share_the_memory() -> None:
    table = ImageTable.builtin()
    table.lookup(IMAGE)
    overridden = table.with_overrides([{"pattern": "nvidia/cuda:12.4.1-*", "cuda": "12.6"}])
    found = overridden.lookup(IMAGE).match
    assert found is not None and found.cuda == CudaVersion(12, 6)
    mirrored = ImageTable.builtin().with_mirrors({"mirror/cuda": "nvidia/cuda"})
    mirrored.lookup(IMAGE)
    assert table.lookup("mirror/cuda:12.4.1-runtime-ubuntu22.04").match is None
    found = mirrored.lookup("mirror/cuda:12.4.1-runtime-ubuntu22.04").match
    assert found is not None and found.cuda == CudaVersion(12, 4)


def test_another_knowledge_base_is_not_answered_from_memory() -> None:
    table = ImageTable.builtin()  # no knowledge base: NGC images cannot be answered
    image = "nvcr.io/nvidia/pytorch:24.05-py3"
    assert table.lookup(image).match is None

    class Facts:
        def ngc_release(self, product: str, release: str) -> object:
            return None

        def framework(self, spec: str) -> object:
            return None

    assert table.lookup(image, kb=Facts()) is not table.lookup(image)  # type: ignore[arg-type]


def test_recognised_rules_are_remembered_and_shared_by_per_request_copies() -> None:
    """:meth:`ImageTable.rule_for` is remembered too ("no rule" included), and the copy a
    decision makes of a table with a config source shares both memories (neither reads the
    configs)."""

    class Configs:
        def config_for(self, image: str) -> None:
            return None

    table = ImageTable.builtin().with_configs(Configs())  # type: ignore[arg-type]
    first = table.rule_for(IMAGE)
    assert first is not None and table.rule_for(IMAGE) is first
    assert table.rule_for("example.com/team/thing:v1") is None  # a remembered "no rule"
    assert table.rule_for("example.com/team/thing:v1") is None
    looked = table.lookup(IMAGE)
    copy = table.per_request()
    assert copy is not table
    assert copy.rule_for(IMAGE) is first
    assert copy.lookup(IMAGE) is looked
