"""Framework specs: parsing ``torch 2.5.1+cu124`` and friends, and the CUDA build each names."""

from __future__ import annotations

from typing import Any

import pytest

from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.frameworks import parse_framework_spec, release_series
from cudasched.vocab.errors import InputError
from cudasched.vocab.versions import (
    parse_cuda,
)
from tests.support.versions import cc, cv


@pytest.mark.parametrize(
    ("spec", "name", "cuda"),
    [
        ("torch 2.5.1+cu124", "torch", "12.4"),
        ("torch==2.5.1+cu124", "torch", "12.4"),
        ("pytorch 2.5.1 cu124", "torch", "12.4"),
        ("PyTorch==2.5.1+cu118", "torch", "11.8"),
        ("torch 2.8.0", "torch", "12.8"),  # the PyPI default variant
        ("torch 2.11.0", "torch", "13.0"),
        ("torch 2.14.1", "torch", "13.2"),
        ("torch 2.12.0+cu132", "torch", "13.2"),
        ("tensorflow 2.15.0", "tensorflow", "12.2"),
        ("tensorflow==2.16.1", "tensorflow", "12.3"),
        ("tensorflow-gpu 2.11.0", "tensorflow", "11.2"),
        ("tensorflow 2.21.0", "tensorflow", "12.5"),
        ("vllm 0.9.0", "vllm", "12.8"),
        ("vllm==0.21.0", "vllm", "12.9"),
        ("vllm 0.7.2+cu118", "vllm", "11.8"),
        ("vllm 0.23.0", "vllm", "13.0"),
    ],
)
def test_framework_cuda(kb: KnowledgeBase, spec: str, name: str, cuda: str) -> None:
    build = kb.framework(spec)
    assert build is not None
    assert build.name == name and build.cuda == cv(cuda)
    assert build.source.strip()


def test_framework_spot_value_from_the_brief(kb: KnowledgeBase) -> None:
    build = kb.framework("torch 2.5.1+cu124")
    assert build is not None and build.cuda == cv("12.4") and build.version == "2.5.1+cu124"


def test_framework_arch_lists(kb: KnowledgeBase) -> None:
    cu126 = kb.framework("torch 2.9.0+cu126")
    assert cu126 is not None and cu126.arch_list is not None
    assert cc("5.0") in cu126.arch_list and not cu126.ptx
    cu128 = kb.framework("torch 2.11.0+cu128")
    assert cu128 is not None and cu128.arch_list is not None
    assert cc("7.0") not in cu128.arch_list and cc("7.5") in cu128.arch_list
    cu129 = kb.framework("torch 2.8.0+cu129")
    assert cu129 is not None and cu129.ptx and cu129.arch_list[-1] == cc("12.0")  # type: ignore[index]
    old = kb.framework("torch 2.5.1+cu124")
    assert old is not None and old.arch_list is None  # not known, which is not "all"
    vllm = kb.framework("vllm 0.23.0")
    assert vllm is not None and vllm.ptx and cc("8.9") in vllm.arch_list  # type: ignore[operator]


def test_framework_unknown_cuda_and_unknown_release(kb: KnowledgeBase) -> None:
    no_default = kb.framework("torch 2.5.1")
    assert no_default is not None and no_default.cuda is None
    assert "unknown" in no_default.source
    assert kb.framework("torch 3.7.0") is None
    assert kb.framework("vllm 0.9.1") is None
    assert kb.framework("tensorflow 1.15.0") is None
    tagged = kb.framework("torch 1.11.0+cu113")
    assert tagged is not None and tagged.cuda == cv("11.3")
    cpu = kb.framework("torch 2.5.1+cpu")
    assert cpu is not None and cpu.cuda is None


def test_framework_variant_the_release_never_shipped(kb: KnowledgeBase) -> None:
    with pytest.raises(InputError, match=r"cu118, cu121, cu124"):
        kb.framework("torch 2.5.1+cu130")
    with pytest.raises(InputError, match=r"cu118"):
        kb.framework("vllm 0.7.2+cu128")


@pytest.mark.parametrize(
    "spec",
    ["", "torch", "2.5.1", "jax 0.4.30", "torch 2.5.1+cu124 cu124", "tensorflow 2.15.0+cu122",
     "torch latest", "vllm 0.9.0+rocm"],
)  # fmt: skip
def test_framework_rejects_text_that_is_not_a_spec(kb: KnowledgeBase, spec: str) -> None:
    with pytest.raises(InputError, match="framework spec"):
        kb.framework(spec)


def test_every_published_torch_variant_resolves(
    raw_documents: dict[str, Any], kb: KnowledgeBase
) -> None:
    toolkits = {(r.cuda.major, r.cuda.minor) for r in kb.toolkits()}
    resolved = 0
    for release in raw_documents["frameworks.yaml"]["pytorch"]:
        for tag in release["variants"]:
            build = kb.framework(f"torch {release['release']}.0+{tag}")
            assert build is not None and build.cuda == parse_cuda(tag)
            assert (build.cuda.major, build.cuda.minor) in toolkits
            resolved += 1
    assert resolved >= 45  # every CUDA variant of 17 torch releases


def test_framework_cudas_are_known_toolkits(
    raw_documents: dict[str, Any], kb: KnowledgeBase
) -> None:
    rows = [row for key in ("tensorflow", "vllm") for row in raw_documents["frameworks.yaml"][key]]
    assert len(rows) >= 32
    for row in rows:
        assert kb.toolkit(cv(row["cuda"])) is not None, row


@pytest.mark.parametrize(
    ("spec", "name", "version", "local"),
    [
        ("torch 2.5.1+cu124", "torch", "2.5.1", "cu124"),
        ("PyTorch==2.5.1+CU118", "torch", "2.5.1", "cu118"),
        ("pytorch 2.5.1 cu124", "torch", "2.5.1", "cu124"),
        ("tf 2.15.0", "tensorflow", "2.15.0", None),
        ("vllm@v0.9.0", "vllm", "0.9.0", None),
        ("torch 2.10.0a0+cpu", "torch", "2.10.0a0", "cpu"),
    ],
)
def test_parse_framework_spec(spec: str, name: str, version: str, local: str | None) -> None:
    parsed = parse_framework_spec(spec)
    assert (parsed.text, parsed.name, parsed.version, parsed.local) == (spec, name, version, local)


def test_parse_framework_spec_rejects_non_text() -> None:
    with pytest.raises(InputError, match="expected text"):
        parse_framework_spec(None)


@pytest.mark.parametrize(
    ("version", "series"), [("2.5.1", "2.5"), ("2.10.0a0", "2.10"), ("3", "3.0"), ("0.9.0", "0.9")]
)
def test_release_series(version: str, series: str) -> None:
    assert release_series(version) == series
