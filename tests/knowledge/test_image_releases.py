"""The image table's release rows (issue 19 item 5): the images people run resolve from the
table to the CUDA their project's Dockerfile or release build gives, each with its source;
floors only where the table says why."""

from __future__ import annotations

import pytest

from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.images import ImageTable


@pytest.fixture(scope="module")
def real(kb: KnowledgeBase) -> ImageTable:
    return ImageTable.builtin(kb=kb)


# (image, CUDA as the table gives it, known only as a floor)
PINNED = [
    # vLLM: the image's nvidia/cuda base as the release build sets it
    ("vllm/vllm-openai:v0.2.7", "12.1.0", False),
    ("vllm/vllm-openai:v0.4.0.post1", "12.1.0", False),
    ("vllm/vllm-openai:v0.4.1", "12.1.0", False),
    ("vllm/vllm-openai:v0.4.2", "12.4.1", False),
    ("vllm/vllm-openai:v0.5.3.post1", "12.4.1", False),
    ("vllm/vllm-openai:v0.6.4.post1", "12.4.1", False),
    ("vllm/vllm-openai:v0.6.5", "12.1.0", False),
    ("vllm/vllm-openai:v0.7.2", "12.1.0", False),
    ("vllm/vllm-openai:v0.7.3", "12.1.0", False),
    ("vllm/vllm-openai:v0.8.4", "12.4.0", False),
    ("vllm/vllm-openai:v0.8.5.post1", "12.4", True),
    ("vllm/vllm-openai:v0.9.0.1", "12.8.1", False),
    ("vllm/vllm-openai:v0.10.1.1", "12.8.1", False),
    ("vllm/vllm-openai:v0.10.2", "12.8", True),
    ("vllm/vllm-openai:v0.11.1", "12.9.1", False),
    ("vllm/vllm-openai:v0.18.1", "12.9.1", False),
    ("vllm/vllm-openai:v0.19.1", "12.9", True),
    ("vllm/vllm-openai:v0.21.0", "13.0", True),
    ("vllm/vllm-openai:v0.23.0", "13.0.2", False),
    ("vllm/vllm-openai:v0.21.0-cu129", "12.9", False),
    # TGI: the final stage of its Dockerfile at each tag
    ("ghcr.io/huggingface/text-generation-inference:0.9.4", "11.8.0", False),
    ("ghcr.io/huggingface/text-generation-inference:1.4", "12.1.0", False),
    ("ghcr.io/huggingface/text-generation-inference:2.2.0", "12.1.0", False),
    ("ghcr.io/huggingface/text-generation-inference:2.4.1", "12.4", False),
    ("ghcr.io/huggingface/text-generation-inference:2.4", "12.4", False),  # X.Y follows X.Y.z
    ("ghcr.io/huggingface/text-generation-inference:3.1.1", "12.4.0", False),
    ("ghcr.io/huggingface/text-generation-inference:3.2.0", "12.4.0", False),
    # 3.3.1 on: torch 2.7.0+cu128 on a 12.4.0 base (the bundled CUDA is what it needs)
    ("ghcr.io/huggingface/text-generation-inference:3.3.7", "12.8", False),
    # TGI -trtllm: Dockerfile_trtllm's nvidia/cuda base at each tag the workflow built it
    ("ghcr.io/huggingface/text-generation-inference:3.0.2-trtllm", "12.6.3", False),
    ("ghcr.io/huggingface/text-generation-inference:3.1.0-trtllm", "12.6.3", False),
    ("ghcr.io/huggingface/text-generation-inference:3.1.1-trtllm", "12.8.0", False),
    ("ghcr.io/huggingface/text-generation-inference:3.2.2-trtllm", "12.8.0", False),
    ("ghcr.io/huggingface/text-generation-inference:3.3.5-trtllm", "12.8.0", False),
    ("ghcr.io/huggingface/text-generation-inference:3.4.1-trtllm", "12.8.0", True),
    # ... and its moving line tags: the line's newest CUDA (3.1.0 was 12.6.3, 3.1.1 12.8.0)
    ("ghcr.io/huggingface/text-generation-inference:3.0-trtllm", "12.6.3", False),
    ("ghcr.io/huggingface/text-generation-inference:3.1-trtllm", "12.8.0", False),
    ("ghcr.io/huggingface/text-generation-inference:3.2-trtllm", "12.8.0", False),
    # SGLang: the unsuffixed tag's build in the release workflow
    ("lmsysorg/sglang:v0.5.2", "12.9.1", False),
    ("lmsysorg/sglang:v0.5.10.post1", "12.9.1", False),
    ("lmsysorg/sglang:v0.5.11", "13.0.1", False),
    ("lmsysorg/sglang:v0.5.18", "13.0.3", False),
    ("lmsysorg/sglang:v0.4.6.post2-cu124", "12.4", False),
    # NGC monthly releases (release notes)
    ("nvcr.io/nvidia/tritonserver:24.02-py3", "12.3.2", False),
    ("nvcr.io/nvidia/tritonserver:24.03-py3", "12.4.0", False),
    ("nvcr.io/nvidia/tritonserver:24.12-py3", "12.6.3", False),
    ("nvcr.io/nvidia/tritonserver:26.02-py3", "13.1.1", False),
    ("nvcr.io/nvidia/pytorch:24.11-py3", "12.6.3", False),
    ("nvcr.io/nvidia/pytorch:25.03-py3", "12.8.1", False),
    # TensorRT-LLM's NGC container: its release notes' base image
    ("nvcr.io/nvidia/tensorrt-llm/release:0.20.0", "12.9.0", False),
    ("nvcr.io/nvidia/tensorrt-llm/release:0.21.0", "12.9", True),
    ("nvcr.io/nvidia/tensorrt-llm/release:1.0.0", "12.9.1", False),
    ("nvcr.io/nvidia/tensorrt-llm/release:1.2.0", "13.1.0", False),
    # KServe's runtimes at their release tags
    ("kserve/huggingfaceserver:v0.15.0-gpu", "12.4.1", False),
    ("kserve/huggingfaceserver:v0.16.0-gpu", "12.8.1", False),
    ("kserve/huggingfaceserver:v0.18.1-gpu", "12.9.1", False),
    ("kserve/huggingfaceserver:v0.19.0-gpu", "13.2.1", False),
    ("pytorch/torchserve-kfs:0.8.0-gpu", "11.7.0", False),
    ("pytorch/torchserve-kfs:0.9.0-gpu", "12.1.0", False),
    ("pytorch/torchserve:0.12.0-gpu", "12.1.0", False),
    ("tensorflow/serving:2.6.2-gpu", "11.2.1", False),
    ("tensorflow/serving:2.14.1-gpu", "11.8.0", False),
    ("tensorflow/serving:2.19.1-gpu", "12.2.0", False),
    ("nvcr.io/nvidia/tritonserver:23.05-py3", "12.1.1", False),
    # Ollama: the oldest CUDA runner the image copies (it runs where that one does)
    ("ollama/ollama:0.6.2", "11.3", False),
    ("ollama/ollama:0.9.3", "12.8", False),
    ("ollama/ollama:0.12.0", "12.8", False),
    ("ollama/ollama:0.40.0", "12.8", True),
    # Ray: the -cuXYZ platform of the tag
    ("rayproject/ray:2.44.0-py312-cu126", "12.6", False),
    ("rayproject/ray-ml:2.9.3-py310-cu118", "11.8", False),
    # LocalAI: the workflow's CUDA minor per release (it moved both ways)
    ("localai/localai:v3.5.0-gpu-nvidia-cuda-12", "12.0", False),
    ("localai/localai:v3.5.1-gpu-nvidia-cuda-12", "12.8", False),
    ("localai/localai:v3.10.1-gpu-nvidia-cuda-12", "12.9", False),
    ("localai/localai:v3.9.0-gpu-nvidia-cuda-13", "13.0", False),
]


@pytest.mark.parametrize(("image", "cuda", "lower_bound"), PINNED)
def test_release_rows_pin_each_family(
    real: ImageTable, image: str, cuda: str, lower_bound: bool
) -> None:
    match = real.cuda_for_image(image)
    assert match is not None, real.lookup(image).why
    assert (str(match.cuda), match.lower_bound) == (cuda, lower_bound)
    assert match.source


def test_every_versions_entry_cites_where_it_was_read(real: ImageTable) -> None:
    """A row names the file at a tag (owner/repo@tag:path), a URL, an issue or a release-notes
    document; a floor says in its source why only a floor is known."""
    entries = [(rule.id, entry) for rule in real.rules for entry in rule.versions]
    assert len(entries) >= 35
    marks = ("@", "http", "#", "release-notes", "release_notes")
    unsourced = [rule for rule, e in entries if not any(m in e.source for m in marks)]
    assert unsourced == []
    floors = [e.source for _, e in entries if e.lower_bound]
    reasons = ("floor", "not checked", "not recorded", "half")
    unexplained = [s for s in floors if not any(r in s for r in reasons)]
    assert unexplained == []


def test_tgi_trtllm_rows_read_dockerfile_trtllm_and_carry_its_base_gate(
    real: ImageTable,
) -> None:
    """Issue 29: TGI's -trtllm tags are the cuda-trtllm build of each release from v3.0.2 on,
    from Dockerfile_trtllm on nvidia/cuda (12.6.3 until v3.1.0, 12.8.0 from v3.1.1), so the
    image carries that base's NVIDIA_REQUIRE_CUDA; releases the workflow did not build and the
    moving latest-trtllm stay unanswered, with the reason."""
    image = "ghcr.io/huggingface/text-generation-inference:{}-trtllm"
    old, new = (
        real.cuda_for_image(image.format("3.0.2")),
        real.cuda_for_image(image.format("3.2.1")),
    )
    assert old is not None and new is not None
    assert (old.require_cuda, new.require_cuda) == ("cuda>=12.6", "cuda>=12.8")
    cited = [m.source for m in (old, new)]
    assert all("Dockerfile_trtllm" in s and "workflows/" in s for s in cited), cited
    assert "text-generation-inference@v3.1.1..v3.3.7" in new.source
    before = real.lookup(image.format("2.4.1"))
    assert before.match is None and "3.0.2" in (before.why or "")
    moving = real.lookup(image.format("latest"))
    assert moving.match is None and "main branch" in (moving.why or "")


def test_wildcard_repository_segments_match_one_segment_each(real: ImageTable) -> None:
    """nim/*/* is every NIM model image, under any registry or proxy prefix, and nothing
    with fewer segments."""
    recognised = [
        real.rule_for(image)
        for image in (
            "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.8.5",
            "harbor.example.com/proxy/nim/nvidia/llm-nim:1.14.0",
        )
    ]
    assert [found[0].id if found else None for found in recognised] == ["nim", "nim"]
    assert real.rule_for("nvcr.io/nim/llm-nim:1.14.0") is None
    assert real.rule_for("nvcr.io/nimble/meta/llama:1.0") is None


def test_vllm_images_of_every_minor_release_from_0_4_resolve_with_a_source(
    kb: KnowledgeBase,
) -> None:
    """Issue 19: every vllm/vllm-openai minor release from 0.4 on is answered by the table,
    with its source; v0.7.2's image is CUDA 12.1.0 (its release build overrides the
    Dockerfile's 12.4.1 default), like its pip wheels but unlike v0.6.4 and v0.8.0."""
    table = ImageTable.builtin(kb)
    minors = [f"0.{m}.0" for m in range(4, 24)] + ["0.7.2", "0.8.5", "0.6.6.post1"]
    matches = {v: table.lookup(f"vllm/vllm-openai:v{v}", kb).match for v in minors}
    assert [v for v, m in matches.items() if m is None] == []
    cites = ("vllm-project/vllm", "vllm/vllm-openai image")
    unsourced = [v for v, m in matches.items() if m and not any(c in m.source for c in cites)]
    assert unsourced == []
    answered = {v: str(m.cuda) for v, m in matches.items() if m is not None}
    assert answered["0.4.0"] == "12.1.0" and answered["0.7.2"] == "12.1.0"
    assert [answered[v] for v in ("0.5.0", "0.6.0")] == ["12.4.1", "12.4.1"]
    assert [answered[v] for v in ("0.7.0", "0.6.6.post1")] == ["12.1.0", "12.1.0"]
    assert [answered[v] for v in ("0.8.0", "0.8.5")] == ["12.4.0", "12.4"]
    assert [answered[v] for v in ("0.9.0", "0.10.0", "0.11.0")] == ["12.8.1", "12.8.1", "12.8"]
    assert [answered[v] for v in ("0.12.0", "0.18.0", "0.20.0")] == ["12.9.1", "12.9.1", "13.0"]


def test_the_catalog_lists_each_release_row_with_its_source(kb: KnowledgeBase) -> None:
    """`cudasched knowledge images vllm` shows v0.7.2's row and where it was read."""
    from cudasched.knowledge.catalog import Topic, rows

    table = ImageTable.builtin(kb)
    found = [
        r for r in rows(Topic.IMAGES, kb, table, "vllm-openai-image") if "to" in r.fields["tags"]
    ]
    by_tag = {r.fields["tags"]: r for r in found}
    row = by_tag["v0.6.5 to v0.7.3"]
    assert row.fields["cuda"] == "12.1.0"
    assert "vllm-project/vllm@v0.7.2:" in row.source
    assert by_tag["v0.10.2 to v0.11.0"].fields["cuda"] == "at least 12.8"


def test_the_catalog_shows_tags_and_their_cuda_never_a_regular_expression(
    kb: KnowledgeBase,
) -> None:
    """Issue 27 item 12: `knowledge images` printed each rule's regular expression; it shows
    the tags as a person writes them and the CUDA each gives (an NGC product release by
    release, equal neighbours together)."""
    from cudasched.knowledge.catalog import Topic, rows

    found = rows(Topic.IMAGES, kb, ImageTable.builtin(kb))
    regex = [r.fields["tags"] for r in found if any(c in r.fields["tags"] for c in "^$\\?[]")]
    assert regex == []
    triton = {
        r.fields["tags"]: r.fields["cuda"] for r in found if r.fields["id"] == "ngc-tritonserver"
    }
    assert triton["<YY.MM>-py3"] == "the NGC release's, per release below"
    assert triton["24.04-py3 to 24.05-py3"] == "12.4"
    assert triton["22.09-py3 to 22.12-py3"] == "11.8.0"
    # A versions rule of NGC releases spells them as NGC does (24.04, not 24.4.0), and a range
    # of one release is that release.
    trtllm = {
        r.fields["tags"]: r.fields["cuda"]
        for r in found
        if r.fields["id"] == "ngc-tritonserver-trtllm"
    }
    assert trtllm["24.04-trtllm-python-py3 to 24.05-trtllm-python-py3"] == "12.3.2"
    assert trtllm["24.06-trtllm-python-py3"] == "12.4.0"
