"""The image table (built-in rules, registry prefixes, digests, overrides) and
NVIDIA_REQUIRE_CUDA parsing on values real images carry."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.imageref import parse_image_ref
from cudasched.knowledge.images import ImageTable, parse_require_cuda
from cudasched.knowledge.mirrors import Mirror
from cudasched.vocab.errors import InputError, KnowledgeError
from cudasched.vocab.versions import CudaVersion

DIGEST = "sha256:" + "ab" * 32


@dataclass(frozen=True)
class Fact:
    cuda: CudaVersion | None
    source: str = "test fact"


class FakeKB:
    """Stands in for the knowledge base: a few NGC releases and vLLM releases."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def ngc_release(self, product: str, release: str) -> Fact | None:
        self.calls.append(("ngc", product, release))
        table = {
            ("tritonserver", "24.05"): Fact(CudaVersion(12, 4, 1), "Triton 24.05 notes"),
            ("tritonserver", "25.08"): Fact(CudaVersion(13, 0, 0), "Triton 25.08 notes"),
            ("pytorch", "25.12"): Fact(CudaVersion(13, 1, 0), "PyTorch 25.12 notes"),
            ("tensorflow", "24.05"): Fact(CudaVersion(12, 4, 1), "TF 24.05 notes"),
            ("tritonserver", "19.01"): Fact(None, "unknown"),
        }
        return table.get((product, release))

    def framework(self, spec: str) -> Fact | None:
        self.calls.append(("framework", spec))
        table = {
            "vllm 0.23.0": Fact(CudaVersion(13, 0, 2)),
        }
        return table.get(spec)


@pytest.fixture(scope="module")
def table() -> ImageTable:
    return ImageTable.builtin()


# --------------------------------------------------------------------------- references


@pytest.mark.parametrize(
    ("image", "host", "path", "tag", "digest"),
    [
        (
            "nvidia/cuda:12.4.1-base-ubuntu22.04",
            None,
            "nvidia/cuda",
            "12.4.1-base-ubuntu22.04",
            None,
        ),
        ("ubuntu", None, "ubuntu", None, None),
        ("docker.io/library/ubuntu:22.04", "docker.io", "library/ubuntu", "22.04", None),
        ("localhost:5000/nvidia/cuda:12.8.1", "localhost:5000", "nvidia/cuda", "12.8.1", None),
        ("localhost/app", "localhost", "app", None, None),
        (
            f"nvcr.io/nvidia/tritonserver:24.05-py3@{DIGEST}",
            "nvcr.io",
            "nvidia/tritonserver",
            "24.05-py3",
            DIGEST,
        ),
        (f"nvcr.io/nvidia/tritonserver@{DIGEST}", "nvcr.io", "nvidia/tritonserver", None, DIGEST),
        (
            "Harbor.Example.com:8443/proxy/vllm/vllm-openai:v0.9.0",
            "harbor.example.com:8443",
            "proxy/vllm/vllm-openai",
            "v0.9.0",
            None,
        ),
    ],
)
def test_parse_image_ref(image, host, path, tag, digest) -> None:
    ref = parse_image_ref(image)
    assert (ref.host, ref.path, ref.tag, ref.digest) == (host, path, tag, digest)


@pytest.mark.parametrize(
    "bad",
    ["", "   ", "nvidia/cuda:bad tag", "UPPER/case:1", "nvidia/cuda@sha256:xyz", "a//b:1", 12],
)
def test_parse_image_ref_rejects_garbage(bad) -> None:
    with pytest.raises(InputError, match="invalid image"):
        parse_image_ref(bad)


# --------------------------------------------------------------------------- built-in rules


@pytest.mark.parametrize(
    ("image", "cuda"),
    [
        ("nvidia/cuda:12.4.1-runtime-ubuntu22.04", CudaVersion(12, 4)),
        ("nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04", CudaVersion(12, 8)),
        ("nvidia/cuda:11.8.0-base-ubuntu22.04", CudaVersion(11, 8)),
        ("nvidia/cuda:13.0.0", CudaVersion(13, 0)),
        ("docker.io/nvidia/cuda:12.2.2-devel-ubuntu22.04", CudaVersion(12, 2)),
        ("nvcr.io/nvidia/cuda:12.6.3-base-ubi9", CudaVersion(12, 6)),
        ("pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", CudaVersion(12, 4)),
        ("pytorch/pytorch:2.1.0-cuda11.8-cudnn8-devel", CudaVersion(11, 8)),
        ("docker.io/pytorch/pytorch:2.7.0-cuda12.8-cudnn9-runtime", CudaVersion(12, 8)),
    ],
)
def test_tag_rules(table: ImageTable, image: str, cuda: CudaVersion) -> None:
    match = table.cuda_for_image(image)
    assert match is not None and match.cuda == cuda
    assert "image table" in match.source


@pytest.mark.parametrize(
    "prefix",
    [
        "",
        "docker.io/",
        "registry.internal.example.com/",
        "harbor.example.com:8443/dockerhub-proxy/",
        "localhost:5000/mirror/",
    ],
)
@pytest.mark.parametrize("suffix", ["", "@" + DIGEST])
def test_registry_prefixes_and_digests(table: ImageTable, prefix: str, suffix: str) -> None:
    match = table.cuda_for_image(f"{prefix}nvidia/cuda:12.4.1-runtime-ubuntu22.04{suffix}")
    assert match is not None and match.cuda == CudaVersion(12, 4)


@pytest.mark.parametrize(
    ("image", "expected", "call"),
    [
        (
            "nvcr.io/nvidia/tritonserver:24.05-py3",
            CudaVersion(12, 4),
            ("ngc", "tritonserver", "24.05"),
        ),
        (
            "harbor.example.com/nvcr.io/nvidia/tritonserver:25.08-py3",
            CudaVersion(13, 0),
            ("ngc", "tritonserver", "25.08"),
        ),
        ("nvcr.io/nvidia/pytorch:25.12-py3", CudaVersion(13, 1), ("ngc", "pytorch", "25.12")),
        (
            "nvcr.io/nvidia/tensorflow:24.05-tf2-py3",
            CudaVersion(12, 4),
            ("ngc", "tensorflow", "24.05"),
        ),
        (
            "docker.io/vllm/vllm-openai:v0.23.0",
            CudaVersion(13, 0, 2),
            ("framework", "vllm 0.23.0"),
        ),
    ],
)
def test_knowledge_base_rules(
    table: ImageTable, image: str, expected: CudaVersion, call: tuple
) -> None:
    kb = FakeKB()
    match = table.cuda_for_image(image, kb=kb)
    assert match is not None and match.cuda == expected
    assert kb.calls == [call]
    # the knowledge base can also be bound to the table
    bound = ImageTable.builtin(kb=FakeKB()).cuda_for_image(image)
    assert bound is not None and bound.cuda == expected
    # without a knowledge base the image is recognised but not answered (vLLM: only the
    # floor the release range gives)
    bare = table.cuda_for_image(image)
    assert bare is None or (bare.lower_bound and bare.cuda <= expected)
    assert table.rule_for(image) is not None


@pytest.mark.parametrize(
    "image",
    [
        "nvcr.io/nvidia/tritonserver:23.01-py3",  # release the knowledge base does not know
        "nvcr.io/nvidia/tritonserver:19.01-py3",  # known release, CUDA unknown
        "nvcr.io/nvidia/tritonserver:latest",
        "nvcr.io/nvidia/tritonserver:24.05-py3-igpu",
        "nvcr.io/nvidia/tensorflow:24.05-py3",
        "nvcr.io/nvidia/tritonserver@" + DIGEST,  # digest only: no tag to read
        "vllm/vllm-openai:latest",
        "vllm/vllm-openai:nightly",
        "vllm/vllm-openai:v0.1.0",  # unknown release
        "nvidia/cuda:latest",
        "pytorch/pytorch:latest",
        "pytorch/pytorch:2.5.1-cpu",
        "kserve/huggingfaceserver:latest-gpu",  # recognised family, moving tag
        "kserve/huggingfaceserver:v0.21.0-gpu",  # a release the table does not cover
        "kserve/huggingfaceserver:v0.15.0",
        "tensorflow/serving:latest-gpu",  # moving tag
        "pytorch/torchserve-kfs:0.7.0-gpu",  # a release before the ones checked
        "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.8.5",  # NIM tags name no CUDA
        "nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6",  # release candidate
        "ubuntu:22.04",
        "nvidia/cuda-extra:12.4.1",  # not nvidia/cuda: whole path segments only
        "mynvidia/cuda:12.4.1",
        "python:3.12",
    ],
)
def test_unknown_tags_answer_none(table: ImageTable, image: str) -> None:
    assert table.cuda_for_image(image, kb=FakeKB()) is None


def test_unknown_families_are_recognised_with_a_note(table: ImageTable) -> None:
    found = table.rule_for("kserve/huggingfaceserver:latest-gpu")
    assert found is not None
    rule, _ = found
    assert rule.cuda_from == "unknown" and "cudasched.io/cuda-version" in rule.note
    assert table.rule_for("kserve/huggingfaceserver:v0.15.0") is None
    why = table.lookup("kserve/huggingfaceserver:latest-gpu").why
    assert "latest-gpu" in why and "cudasched.io/cuda-version" in why
    missing = table.lookup("registry.example.com/team/llm:1")
    assert missing.match is None and "not in the image table" in missing.why


def test_builtin_rules_all_carry_sources(table: ImageTable) -> None:
    assert len(table.rules) >= 6
    assert all(rule.source for rule in table.rules)
    assert len({rule.id for rule in table.rules}) == len(table.rules)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "images"),
        (
            {
                "images": [
                    {
                        "id": "x",
                        "repositories": ["a/b"],
                        "tag": "(",
                        "cuda_from": "tag",
                        "source": "s",
                    }
                ]
            },
            "pattern",
        ),
        (
            {
                "images": [
                    {
                        "id": "x",
                        "repositories": ["a/b"],
                        "tag": "^x",
                        "cuda_from": "tag",
                        "source": "s",
                    }
                ]
            },
            "group",
        ),
        (
            {
                "images": [
                    {
                        "id": "x",
                        "repositories": ["a/b"],
                        "tag": "^x",
                        "cuda_from": "magic",
                        "source": "s",
                    }
                ]
            },
            "cuda_from",
        ),
        (
            {
                "images": [
                    {
                        "id": "x",
                        "repositories": ["a/b"],
                        "tag": "(?P<release>x)",
                        "cuda_from": "ngc",
                        "source": "s",
                    }
                ]
            },
            "product",
        ),
        (
            {
                "images": [
                    {"id": "x", "repositories": ["a/b"], "tag": "(?P<cuda>x)", "cuda_from": "tag"}
                ]
            },
            "source",
        ),
        (
            {
                "images": [
                    {
                        "id": "x",
                        "repositories": [],
                        "tag": "(?P<cuda>x)",
                        "cuda_from": "tag",
                        "source": "s",
                    }
                ]
            },
            "repositories",
        ),
    ],
)
def test_bad_table_data_is_a_knowledge_error(data: dict, message: str) -> None:
    with pytest.raises(KnowledgeError, match=message):
        ImageTable.from_data(data)


# --------------------------------------------------------------------------- overrides


def test_overrides_win_and_match_globs(table: ImageTable) -> None:
    t = table.with_overrides(
        [
            {"pattern": "registry.example.com/team/llm:*", "cuda": "12.4"},
            {"pattern": "nvidia/cuda:12.4.1-*", "cuda": "12.6", "source": "site policy"},
        ]
    )
    m = t.cuda_for_image("registry.example.com/team/llm:2024-06")
    assert m is not None and m.cuda == CudaVersion(12, 4)
    assert m.source == "image override registry.example.com/team/llm:*"
    assert t.cuda_for_image(f"registry.example.com/team/llm:v3@{DIGEST}") is not None
    assert t.cuda_for_image("registry.example.com/team/other:v1") is None
    # an override beats the built-in rule, also through docker.io prefixes
    m = t.cuda_for_image("docker.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04")
    assert m is not None and (m.cuda, m.source) == (CudaVersion(12, 6), "site policy")
    # the original table is unchanged
    assert table.overrides == ()


def test_later_with_overrides_take_precedence(table: ImageTable) -> None:
    t = table.with_overrides([{"pattern": "me/app:*", "cuda": "11.8"}])
    t = t.with_overrides([{"pattern": "me/app:2*", "cuda": "12.8"}])
    assert t.cuda_for_image("me/app:2.0").cuda == CudaVersion(12, 8)  # type: ignore[union-attr]
    assert t.cuda_for_image("me/app:1.0").cuda == CudaVersion(11, 8)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([{"pattern": "", "cuda": "12.4"}], "pattern"),
        ([{"pattern": "x:*"}], "x:\\*"),
        ([{"pattern": "x:*", "cuda": "twelve"}], "twelve"),
        (["x:*=12.4"], "override #0"),
        ({"pattern": "x:*", "cuda": "12.4"}, "list"),
    ],
)
def test_bad_overrides_raise_input_error(table: ImageTable, entries, message: str) -> None:
    with pytest.raises(InputError, match=message):
        table.with_overrides(entries)


def test_bad_image_raises_input_error(table: ImageTable) -> None:
    with pytest.raises(InputError):
        table.cuda_for_image("Not An Image")


@settings(max_examples=80)
@given(
    major=st.integers(9, 13),
    minor=st.integers(0, 9),
    patch=st.integers(0, 9),
    variant=st.sampled_from(
        ["", "-base-ubuntu22.04", "-cudnn-runtime-ubuntu24.04", "-devel-rockylinux9"]
    ),
    prefix=st.sampled_from(["", "docker.io/", "nvcr.io/", "mirror.example.org:5000/a/b/"]),
    digest=st.booleans(),
)
def test_nvidia_cuda_tag_property(table, major, minor, patch, variant, prefix, digest) -> None:
    image = f"{prefix}nvidia/cuda:{major}.{minor}.{patch}{variant}" + (
        f"@{DIGEST}" if digest else ""
    )
    match = table.cuda_for_image(image)
    assert match is not None and match.cuda == CudaVersion(major, minor)


# --------------------------------------------------------------------------- NVIDIA_REQUIRE_CUDA

# Values as the images set them (cuda-compat-facts.yaml container_require_examples).
CUDA_12_8_1 = (
    "cuda>=12.8 brand=unknown,driver>=470,driver<471 brand=grid,driver>=470,driver<471 "
    "brand=tesla,driver>=470,driver<471 brand=nvidia,driver>=470,driver<471 "
    "brand=quadro,driver>=470,driver<471 brand=quadrortx,driver>=470,driver<471 "
    "brand=nvidiartx,driver>=470,driver<471 brand=vapps,driver>=470,driver<471 "
    "brand=vpc,driver>=470,driver<471 brand=vcs,driver>=470,driver<471 "
    "brand=vws,driver>=470,driver<471 brand=cloudgaming,driver>=470,driver<471 "
    "brand=unknown,driver>=535,driver<536 brand=tesla,driver>=535,driver<536 "
    "brand=unknown,driver>=550,driver<551 brand=tesla,driver>=550,driver<551 "
    "brand=unknown,driver>=560,driver<561 brand=tesla,driver>=560,driver<561 "
    "brand=unknown,driver>=565,driver<566 brand=tesla,driver>=565,driver<566"
)
VLLM_0_23 = (
    "cuda>=13.0 brand=unknown,driver>=535,driver<536 brand=tesla,driver>=535,driver<536 "
    "brand=unknown,driver>=550,driver<551 brand=unknown,driver>=565,driver<566 "
    "brand=unknown,driver>=570,driver<571 brand=unknown,driver>=575,driver<576"
)
VLLM_0_8_5 = (
    "cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471 "
    "brand=geforce,driver>=470,driver<471 brand=titan,driver>=470,driver<471 "
    "brand=tesla,driver>=525,driver<526 brand=geforce,driver>=535,driver<536"
)


@pytest.mark.parametrize(
    ("value", "floor"),
    [
        (CUDA_12_8_1, CudaVersion(12, 8)),
        (VLLM_0_23, CudaVersion(13, 0)),
        (VLLM_0_8_5, CudaVersion(12, 4)),
        ("cuda>=11.8", CudaVersion(11, 8)),
        ("cuda>=12", CudaVersion(12, 0)),
        # As the container toolkit reads them: a host CUDA is X.Y.0, so 12.4.1 needs 12.5 and
        # > 12.1 is 12.2; property names are case-sensitive (CUDA>= is not a condition).
        ("  cuda>=12.4.1  ", CudaVersion(12, 5)),
        ("cuda>=12.4.131", CudaVersion(12, 5)),
        ("cuda=12.1", CudaVersion(12, 1)),
        ("cuda>12.1", CudaVersion(12, 2)),
        ("cuda>=12.4,driver>=550 cuda>=12.2", CudaVersion(12, 2)),  # any alternative suffices
        ("cuda>=12.2,cuda>=12.6", CudaVersion(12, 6)),  # all conditions of one must hold
        ("cuda>=12.4,cuda<13.0", CudaVersion(12, 4)),
    ],
)
def test_parse_require_cuda(value: str, floor: CudaVersion) -> None:
    assert parse_require_cuda(value) == floor


@pytest.mark.parametrize(
    "value",
    [None, "", "   ", "brand=tesla,driver>=470,driver<471", "cuda<13.0", "driver>=535", "CUDA>=12"],
)
def test_parse_require_cuda_without_floor(value) -> None:
    assert parse_require_cuda(value) is None


@pytest.mark.parametrize(
    "value", ["cuda>=abc", "cuda>=", "cuda>=12.x brand=tesla", "cuda~12.4", 12.4]
)
def test_parse_require_cuda_malformed(value) -> None:
    with pytest.raises(InputError, match="NVIDIA_REQUIRE_CUDA"):
        parse_require_cuda(value)


def test_real_knowledge_base_answers_ngc_and_vllm_images(table: ImageTable) -> None:
    """The image table against the bundled knowledge base (its own tests pin the facts)."""
    from cudasched.knowledge import KnowledgeBase

    kb = KnowledgeBase.load()
    for image, product, release in [
        ("nvcr.io/nvidia/tritonserver:24.10-py3", "tritonserver", "24.10"),
        ("nvcr.io/nvidia/pytorch:25.12-py3", "pytorch", "25.12"),
        ("nvcr.io/nvidia/tritonserver:20.03.1-py3", "tritonserver", "20.03.1"),
    ]:
        fact = kb.ngc_release(product, release)
        match = table.cuda_for_image(image, kb=kb)
        if fact is None:
            assert match is None
        else:
            assert match is not None and match.cuda == fact.cuda
            assert match.source.startswith(f"NGC {product} {release}")
    build = kb.framework("vllm 0.23.0")
    match = table.cuda_for_image("vllm/vllm-openai:v0.23.0", kb=kb)
    assert build is not None and build.cuda is not None
    assert match is not None and match.cuda == build.cuda
    # Another build of a month is not the month's main image: it has its own rows (Triton's
    # compatibility matrix), not the release notes' (24.05-py3 is CUDA 12.4).
    trtllm = table.cuda_for_image("nvcr.io/nvidia/tritonserver:24.05-trtllm-python-py3", kb=kb)
    assert trtllm is not None and str(trtllm.cuda) == "12.3.2"
    assert "compatibility.md" in trtllm.source


def test_from_config_accepts_config_objects() -> None:
    @dataclass(frozen=True)
    class Override:
        pattern: str
        cuda: str

    @dataclass(frozen=True)
    class Config:
        image_overrides: tuple[Override, ...]

    t = ImageTable.from_config(
        Config((Override("registry.local/llm/*:cu124", "12.4"),)), kb=FakeKB()
    )
    m = t.cuda_for_image("registry.local/llm/qwen:cu124")
    assert m is not None and m.cuda == CudaVersion(12, 4)
    assert t.cuda_for_image("nvcr.io/nvidia/tritonserver:24.05-py3") is not None  # kb bound
    assert ImageTable.from_config(object()).overrides == ()


def test_knowledge_base_extras_travel_with_the_match(table: ImageTable) -> None:
    """An NGC release's lowest supported GPU and a framework build's kernel list come along,
    so the engine can rule out GPUs the image cannot run on."""
    from cudasched.knowledge import KnowledgeBase
    from cudasched.vocab.requirements import FrameworkBuild

    kb = KnowledgeBase.load()
    release = kb.ngc_release("tritonserver", "25.08")
    match = table.cuda_for_image("nvcr.io/nvidia/tritonserver:25.08-py3", kb=kb)
    assert release is not None and match is not None
    assert match.min_compute == release.min_compute and match.framework is None
    build = kb.framework("vllm 0.23.0")
    match = table.cuda_for_image("vllm/vllm-openai:v0.23.0", kb=kb)
    assert isinstance(build, FrameworkBuild) and match is not None
    assert match.framework == build and match.min_compute is None
    # facts without these extras leave them empty
    fake = table.cuda_for_image("nvcr.io/nvidia/tritonserver:24.05-py3", kb=FakeKB())
    assert fake is not None and fake.min_compute is None and fake.framework is None


# --------------------------------------------------------------------------- issue 12 item 7


@pytest.fixture(scope="module")
def real() -> ImageTable:
    from cudasched.knowledge import KnowledgeBase

    return ImageTable.builtin(kb=KnowledgeBase.load())


@pytest.mark.parametrize(
    ("image", "cuda", "lower_bound"),
    [
        ("kserve/huggingfaceserver:v0.15.2-gpu", "12.4", False),
        ("kserve/huggingfaceserver:v0.17.0-gpu", "12.9", False),
        ("kserve/huggingfaceserver:v0.20.0-gpu", "13.3", False),
        ("vllm/vllm-openai:v0.9.0", "12.8", False),
        ("vllm/vllm-openai:v0.12.0", "12.9", False),
        ("vllm/vllm-openai:v0.20.0", "13.0", True),
        ("vllm/vllm-openai:v0.23.0", "13.0", False),
        ("vllm/vllm-openai:v0.21.0-cu129", "12.9", False),
        ("ghcr.io/huggingface/text-generation-inference:1.3.4", "12.1", False),
        # 3.3.1 on bundle torch 2.7.0+cu128 on a 12.4.0 base: 12.8 is what they need
        ("ghcr.io/huggingface/text-generation-inference:3.3.4", "12.8", False),
        ("ghcr.io/huggingface/text-generation-inference:3.4.0", "12.8", True),
        # A release line's moving tag (the workflow's {{major}}.{{minor}}) may point at any of
        # its releases: 3.3 is 3.3.0's 12.4 base or 3.3.1+'s bundled 12.8, so 12.8, and "at
        # least" because releases after the newest checked would move it on.
        ("ghcr.io/huggingface/text-generation-inference:3.3", "12.8", True),
        ("ghcr.io/huggingface/text-generation-inference:1.4", "12.1", False),
        ("lmsysorg/sglang:v0.5.18-cu130", "13.0", False),
        ("nvcr.io/nvidia/sglang:25.10-py3", "13.0", False),
        ("ghcr.io/llm-d/llm-d-cuda:v0.7.0", "13.0", False),
        ("ghcr.io/llm-d/llm-d-cuda:v0.9.0", "13.0", True),
        ("nvcr.io/nvidia/tritonserver:20.10-py3", "11.1", False),
        ("nvcr.io/nvidia/tritonserver:26.10-py3", "13.4", False),
        ("nvcr.io/nvidia/tritonserver:21.09-py3", "11.4", False),
        ("nvcr.io/nvidia/tritonserver:23.09-py3", "12.2", False),
        # Issue 29: variants and suffixes that name their CUDA, each row cited.
        ("nvcr.io/nvidia/tritonserver:24.10-trtllm-python-py3", "12.5", False),  # -py3: 12.6
        ("nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3", "13.1", False),
        ("nvcr.io/nvidia/tritonserver:25.09-vllm-python-py3", "13.0", False),
        ("nvcr.io/nvidia/vllm:26.01-py3", "13.1", False),
        ("nvcr.io/nvidia/vllm:25.10-py3", "13.0", False),
        ("vllm/vllm-openai:v0.20.0-x86_64-cu130", "13.0", False),
        ("vllm/vllm-openai:latest-cu129", "12.9", False),
        ("vllm/vllm-openai:v0.21.0-cu129-ubuntu2404", "12.9", False),
        ("vllm/vllm-openai:v0.12.0-x86_64", "12.9", False),
        ("vllm/vllm-openai:v0.15.1-ubuntu2404", "12.9", False),
        ("vllm/vllm-openai:v0.21.0-aarch64-ubuntu2404", "13.0", True),
        ("lmsysorg/sglang:latest-cu130", "13.0", False),
        ("lmsysorg/sglang:latest-cu130-runtime", "13.0", False),
    ],
)
def test_inference_server_images(
    real: ImageTable, image: str, cuda: str, lower_bound: bool
) -> None:
    match = real.cuda_for_image(image)
    assert match is not None and str(match.cuda.release) == cuda, image
    assert match.lower_bound is lower_bound
    assert match.source


def test_a_release_line_tag_never_needs_less_than_a_release_of_its_line(real: ImageTable) -> None:
    """Over every row whose project publishes moving line tags: the tag ``major.minor`` answers
    at least the CUDA of each release the table lists in that line (each range's first and
    last), so a moving tag is never answered below a release it may point at (the second
    held-out set's unsafe ``text-generation-inference:3.3``, answered as 3.3.0's 12.4)."""
    moving = [rule for rule in real.rules if rule.moving_lines]
    releases = {
        (rule.repositories[0], release)
        for rule in moving
        for entry in rule.versions
        for release in (entry.first, entry.last)
        if release is not None
    }
    below = []
    for repo, release in sorted(releases):
        at_line = real.cuda_for_image(f"{repo}:{release[0]}.{release[1]}")
        at_release = real.cuda_for_image(f"{repo}:{'.'.join(map(str, release))}")
        if at_release and (at_line is None or at_line.cuda < at_release.cuda):
            below.append((repo, release))
    assert moving and len(releases) > 5
    assert below == []


def test_moving_lines_is_a_versions_rule_flag() -> None:
    from cudasched.knowledge.imagerules import compile_rule

    entry = {
        "id": "x",
        "repositories": ["a/b"],
        "tag": "^(?P<cuda>.*)$",
        "cuda_from": "tag",
        "moving_lines": True,
        "source": "s",
    }
    with pytest.raises(KnowledgeError, match="moving_lines"):
        compile_rule(entry, 0)


@pytest.mark.parametrize(
    ("release", "cuda_text", "cuda"),
    [
        ("26.04", "13.2.1", CudaVersion(13, 2, 1)),
        ("26.06", "13.3.0", CudaVersion(13, 3, 0)),
        ("26.07", "13.3.1", CudaVersion(13, 3, 1)),
        ("26.09", "13.4.1", CudaVersion(13, 4, 1)),
    ],
)
def test_triton_months_come_from_their_own_notes(
    kb: KnowledgeBase, real: ImageTable, release: str, cuda_text: str, cuda: CudaVersion
) -> None:
    """Each month's row is that month's NVIDIA page, and the image of that month resolves."""
    fact = kb.ngc_release("tritonserver", release)
    assert fact is not None and fact.cuda == cuda and fact.cuda_text == cuda_text
    page = f"/triton-inference-server/release-notes/rel-{release.replace('.', '-')}.html"
    assert fact.source.startswith("https://docs.nvidia.com/") and fact.source.endswith(page)
    match = real.cuda_for_image(f"nvcr.io/nvidia/tritonserver:{release}-py3")
    assert match is not None and match.cuda == cuda and not match.lower_bound
    assert match.min_compute == fact.min_compute and match.source.endswith(fact.source)


@pytest.mark.parametrize(
    "image",
    ["nvcr.io/nvidia/tritonserver:25.05-py3", "nvcr.io/nvidia/pytorch:25.05-py3"],
)
def test_ngc_months_without_notes_are_not_taken_from_a_neighbour(
    real: ImageTable, image: str
) -> None:
    """25.05's notes are not recorded: the month stays unknown rather than borrowing 25.04 or
    25.06."""
    lookup = real.lookup(image)
    assert lookup.match is None and "does not record" in (lookup.why or "")


@pytest.mark.parametrize(
    "image",
    [
        "lmsysorg/sglang:v0.5.3",  # the release pushed no unsuffixed tag
        "lmsysorg/sglang:v0.5.19",  # a release after the newest checked
        "lmsysorg/sglang:v0.5.19-rocm700-mi35x",
        "ghcr.io/llm-d/llm-d-dev:v0.2.2",
        "ghcr.io/huggingface/text-generation-inference:latest",
        "vllm/vllm-openai:latest",  # moves: the registry's config tells (issue 19)
        "vllm/vllm-openai:latest-x86_64",
        "lmsysorg/sglang:v0.5.11-runtime",  # which CUDA variant is not recorded
        "lmsysorg/sglang:latest-runtime",
        "ghcr.io/huggingface/text-generation-inference:3.2.0-trtllm",
        "nvcr.io/nvidia/vllm:26.02-py3",  # a month whose notes were not read
        "nvcr.io/nvidia/tritonserver:24.03-trtllm-python-py3",  # before the matrix
    ],
)
def test_inference_server_images_not_guessed(real: ImageTable, image: str) -> None:
    lookup = real.lookup(image)
    assert lookup.match is None and lookup.why


def test_which_images_carry_the_gate(real: ImageTable) -> None:
    from cudasched.vocab.requirecuda import DATACENTER_BRANDS, gate_from_env

    def gate(image: str):  # type: ignore[no-untyped-def]
        match = real.cuda_for_image(image)
        assert match is not None
        if match.require_cuda is None:
            return None
        return gate_from_env({"NVIDIA_REQUIRE_CUDA": match.require_cuda}, image)

    # nvidia/cuda 12.8.1 and images built on it: the recorded alternatives.
    base = gate("nvidia/cuda:12.8.1-runtime-ubuntu22.04")
    assert base.branches(DATACENTER_BRANDS) == {470, 535, 550, 560, 565}
    assert gate("kserve/huggingfaceserver:v0.16.0-gpu").branches(DATACENTER_BRANDS) == (
        base.branches(DATACENTER_BRANDS)
    )
    assert gate("vllm/vllm-openai:v0.23.0").branches(DATACENTER_BRANDS) == {535, 550, 565, 570, 575}
    # A base release whose alternatives are not recorded: cuda>= alone (the stricter reading).
    assert gate("nvidia/cuda:12.4.1-base-ubuntu22.04").text == "cuda>=12.4"
    # NGC: the older data-center branches its release notes name.
    ngc = gate("nvcr.io/nvidia/tritonserver:25.02-py3")
    assert ngc.branches(DATACENTER_BRANDS) == {470, 525, 535, 545}
    assert real.cuda_for_image("nvcr.io/nvidia/tritonserver:25.02-py3").ships_cuda_compat  # type: ignore[union-attr]
    # Not known to carry one.
    assert gate("pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime") is None


def test_mirror_map(real: ImageTable) -> None:
    """alaudadockerhub/tritonserver is Triton (built-in); a deployment adds its own."""
    mirrored = real.cuda_for_image(
        "registry.alauda.cn:60080/alaudadockerhub/tritonserver:25.02-py3"
    )
    assert mirrored is not None and str(mirrored.cuda.release) == "12.8"
    assert mirrored.min_compute is not None and str(mirrored.min_compute) == "7.5"
    assert real.cuda_for_image("registry.example.com/mlops/vllm-openai:v0.23.0") is None
    own = real.with_mirrors({"mlops/vllm-openai": "vllm/vllm-openai"})
    match = own.cuda_for_image("registry.example.com/mlops/vllm-openai:v0.23.0")
    assert match is not None and str(match.cuda.release) == "13.0"
    # Whole path segments only.
    assert own.cuda_for_image("registry.example.com/xmlops/vllm-openai:v0.23.0") is None
    with pytest.raises(InputError, match="image mirrors"):
        real.with_mirrors({"Not A Path": "vllm/vllm-openai"})


def test_from_config_reads_mirrors() -> None:
    from types import SimpleNamespace

    config = SimpleNamespace(
        image_overrides=[], image_mirrors={"mlops/vllm-openai": "vllm/vllm-openai"}
    )
    table = ImageTable.from_config(config)
    assert table.mirrors[0] == Mirror(None, "mlops/vllm-openai", None, "vllm/vllm-openai")


def test_a_mirror_naming_a_host_is_a_prefix_of_whole_references(real: ImageTable) -> None:
    """``harbor.corp/ngc-proxy: nvcr.io/nvidia`` says harbor's ngc-proxy/X is nvcr.io's
    nvidia/X (it also routes registry look-ups, tests/registry/test_mirrors.py)."""
    own = real.with_mirrors({"harbor.corp/ngc-proxy": "nvcr.io/nvidia", "harbor.corp": "docker.io"})
    triton = "nvcr.io/nvidia/tritonserver:25.02-py3"
    mirrored = own.cuda_for_image("harbor.corp/ngc-proxy/tritonserver:25.02-py3")
    assert mirrored is not None and mirrored == real.cuda_for_image(triton)
    # The whole registry: harbor.corp/vllm/vllm-openai is Docker Hub's vllm/vllm-openai.
    vllm = own.cuda_for_image("harbor.corp/vllm/vllm-openai:v0.8.0")
    assert vllm is not None and vllm == real.cuda_for_image("vllm/vllm-openai:v0.8.0")
    # Another host, or a path not under the prefix on whole segments, is not covered.
    missed = [
        own.cuda_for_image("harbor.other/ngc-proxy/tritonserver:25.02-py3"),
        own.with_mirrors({"harbor.corp/ngc": "nvcr.io/nvidia"}).rule_for(
            "harbor.corp/ngc-proxyx/tritonserver:25.02-py3"
        ),
    ]
    assert missed == [None, None]
    with pytest.raises(InputError, match="not a registry host"):
        real.with_mirrors({"harbor_corp.io:http/x": "nvcr.io/nvidia"})
