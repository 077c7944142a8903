"""Base and bundled CUDA (docs/guide/images.md): the image's config names its runtime base's
CUDA, which the gate keeps; the libraries it bundles (read from its layers, or a table row of
``cuda_of: bundled``) may need a newer one, and the requirement is the newer of the two."""

from __future__ import annotations

from typing import Any

from cudasched.knowledge.imageconfig import ImageConfig
from cudasched.knowledge.imagecontents import CompatNote, ContentFact
from cudasched.knowledge.images import ImageTable
from cudasched.knowledge.layerscan import contents_of
from cudasched.vocab.requirements import ToolkitMode
from cudasched.workloads.containercuda import from_container
from cudasched.workloads.sources import resolve_container
from tests.support.versions import cv

TGI = "ghcr.io/huggingface/text-generation-inference:2.4.1"
IN_HOUSE = "registry.corp/ml/server:3"
BASE_121 = {
    "CUDA_VERSION": "12.1.0",
    "NVIDIA_REQUIRE_CUDA": "cuda>=12.1 brand=tesla,driver>=470,driver<471",
}


class Configs:
    def __init__(self, configs: dict[str, ImageConfig]) -> None:
        self.configs = configs

    def config_for(self, image: str) -> ImageConfig | None:
        return self.configs.get(image)


def container(image: str) -> dict[str, Any]:
    return {"name": "main", "image": image}


def with_contents(image: str, env: dict[str, str], *facts: ContentFact) -> ImageConfig:
    return ImageConfig(
        image, digest="sha256:d", env=env, contents=contents_of(image, "sha256:d", facts)
    )


def torch_fact(cuda: str) -> ContentFact:
    return ContentFact(
        "torch",
        f"torch 2.5.1+cu{cuda.replace('.', '')}",
        cv(cuda),
        "sha256:l",
        "opt/conda/lib/python3.11/site-packages/torch/version.py",
        "why",
    )


def test_the_table_knows_tgi_bundles_a_newer_cuda_than_its_base(kb: Any) -> None:
    # TGI 2.3-3.1: torch for CUDA 12.4 on nvidia/cuda:12.1.0. Read from its registry, the
    # config says 12.1; before the convention that was the answer, below what torch needs.
    table = ImageTable.builtin(kb=kb).with_configs(Configs({TGI: ImageConfig(TGI, env=BASE_121)}))
    facts = from_container(container(TGI), table, kb)
    assert facts.cuda == cv("12.4")
    assert "newer than its base's CUDA 12.1" in facts.source
    assert facts.gate is not None and facts.gate.cuda_floor() == cv("12.1")


def test_layers_raise_the_requirement_above_the_base_and_never_lower_it(kb: Any) -> None:
    newer = with_contents(IN_HOUSE, BASE_121, torch_fact("12.6"))
    table = ImageTable.builtin(kb=kb).with_configs(Configs({IN_HOUSE: newer}))
    facts = from_container(container(IN_HOUSE), table, kb)
    assert facts.cuda == cv("12.6") and facts.source.startswith(f"contents of image {IN_HOUSE}")
    assert facts.gate is not None and facts.gate.cuda_floor() == cv("12.1")
    older = with_contents(IN_HOUSE, {"CUDA_VERSION": "12.8.1"}, torch_fact("12.4"))
    table = ImageTable.builtin(kb=kb).with_configs(Configs({IN_HOUSE: older}))
    facts = from_container(container(IN_HOUSE), table, kb)
    assert facts.cuda == cv("12.8") and facts.source.startswith("image config of")


def test_layers_answer_an_image_whose_config_names_no_cuda(kb: Any) -> None:
    read = with_contents(IN_HOUSE, {"PATH": "/usr/bin"}, torch_fact("12.8"))
    table = ImageTable.builtin(kb=kb).with_configs(Configs({IN_HOUSE: read}))
    facts = from_container(container(IN_HOUSE), table, kb)
    assert (facts.cuda, facts.gate, facts.why_unknown) == (cv("12.8"), None, "")
    nothing = with_contents(IN_HOUSE, {"PATH": "/usr/bin"})
    table = ImageTable.builtin(kb=kb).with_configs(Configs({IN_HOUSE: nothing}))
    facts = from_container(container(IN_HOUSE), table, kb)
    assert (
        facts.cuda is None and "nor do its contents (the image has no layers)" in facts.why_unknown
    )


def test_the_compat_library_comes_from_the_layers_else_the_base_images_package(kb: Any) -> None:
    # nvidia/cuda's base images name their compat package in NV_CUDA_COMPAT_PACKAGE.
    env = {**BASE_121, "NV_CUDA_COMPAT_PACKAGE": "cuda-compat-12-4"}
    table = ImageTable.builtin(kb=kb).with_configs(
        Configs({IN_HOUSE: ImageConfig(IN_HOUSE, env=env)})
    )
    found = from_container(container(IN_HOUSE), table, kb).compat
    assert found is not None and (found.driver.major, found.cuda, found.branches) == (
        550,
        cv("12.4"),
        None,
    )
    assert found.describe() == "cuda-compat-12-4 (R550) (CUDA 12.4)"
    # A library read from the layers is the better fact: its own driver and its note.
    note = CompatNote(
        cv("12.9"),
        (535, 570, 575),
        (),
        1,
        "575.57.08",
        "sha256:l",
        "usr/local/cuda-12.9/compat/libcuda.so.575.57.08",
    )
    read = ImageConfig(
        IN_HOUSE,
        digest="sha256:d",
        env=env,
        contents=contents_of(IN_HOUSE, "sha256:d", (), compat=note),
    )
    table = ImageTable.builtin(kb=kb).with_configs(Configs({IN_HOUSE: read}))
    facts = from_container(container(IN_HOUSE), table, kb)
    assert facts.compat is not None and str(facts.compat.driver) == "575.57.08"
    assert facts.compat.branches == (535, 570, 575) and facts.ships_cuda_compat is True


def test_requirements_carry_the_compat_library_and_the_toolkit_mode(kb: Any) -> None:
    env = {**BASE_121, "NV_CUDA_COMPAT_PACKAGE": "cuda-compat-12-1"}
    configs = Configs({IN_HOUSE: ImageConfig(IN_HOUSE, env=env)})
    table = ImageTable.builtin(kb=kb).with_configs(configs).with_toolkit(ToolkitMode.CDI)
    req = resolve_container({}, "pod p", container(IN_HOUSE), table, kb)
    assert req.toolkit is ToolkitMode.CDI and req.compat is not None
    assert req.compat.driver.major == 530 and req.cuda == cv("12.1")
