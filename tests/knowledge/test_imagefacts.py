"""An image's facts as the cluster keeps them (ImageFacts): what the resolver writes is valid
against the CRD's structural schema and reads back as it was, only the CUDA env is kept, a
person's override wins, and the commands find facts by digest or by a reference."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator

from cudasched.install.imagefacts import image_facts_crd
from cudasched.knowledge.imageconfig import ImageConfig
from cudasched.knowledge.imagecontents import CompatNote, ContentFact
from cudasched.knowledge.imagefacts import (
    MAX_REFERENCES,
    FactIndex,
    StoredSource,
    facts_name,
    facts_object,
    facts_status,
    read_facts,
    with_facts,
)
from cudasched.knowledge.images import ImageTable
from cudasched.knowledge.layerscan import contents_of
from cudasched.vocab.errors import InputError
from cudasched.workloads.containercuda import from_container
from tests.support.versions import cv

DIGEST = "sha256:" + "ab" * 32
IMAGE = "registry.corp/ollama/ollama:0.12.3"
ENV = {
    "PATH": "/usr/bin",
    "HF_TOKEN": "hf_s3cret",
    "NVIDIA_REQUIRE_CUDA": "cuda>=12.8",
    "NV_CUDA_COMPAT_PACKAGE": "cuda-compat-12-8",
}


def read_config(**kw: Any) -> ImageConfig:
    facts = (
        ContentFact(
            "library",
            "libcudart.so.12.8.90",
            cv("12.8"),
            "sha256:l",
            "usr/lib/ollama/cuda_v12/libcudart.so.12.8.90",
            "why",
        ),
    )
    note = CompatNote(
        cv("12.9"),
        (535, 575),
        (1,),
        1,
        "575.57.08",
        "sha256:b",
        "usr/local/cuda/compat/libcuda.so.575.57.08",
    )
    contents = contents_of(IMAGE, DIGEST, facts, compat=note, layers_read=1, layers_total=3)
    return ImageConfig(
        IMAGE,
        digest=DIGEST,
        platform="linux/amd64",
        env=ENV,
        labels={"com.nvidia.cuda.version": "12.8.1", "maintainer": "x"},
        contents=contents,
        **kw,
    )


def stored_object(config: ImageConfig, override: dict[str, str] | None = None) -> dict[str, Any]:
    obj = facts_object(config.digest)
    obj["status"] = facts_status(
        config, [IMAGE, "registry.corp/ollama/ollama:latest"], "2026-09-01T10:00:00Z"
    )
    if override is not None:
        obj["spec"]["override"] = override
    return obj


def test_what_is_written_is_valid_against_the_crd_and_reads_back() -> None:
    schema = image_facts_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    obj = stored_object(read_config(), {"cuda": "12.4", "reason": "tested on R550"})
    Draft202012Validator(schema).validate(obj)
    stored = read_facts(obj)
    assert stored is not None and stored.name == facts_name(DIGEST) == "sha256-" + "ab" * 32
    assert stored.references == (IMAGE, "registry.corp/ollama/ollama:latest")
    assert stored.contents is not None and stored.contents.cuda == cv("12.8")
    assert stored.contents.compat is not None and stored.contents.compat.driver_branches == (
        535,
        575,
    )
    assert stored.contents.facts == read_config().contents.facts  # type: ignore[union-attr]
    # Only what names CUDA is kept of the env: a token in the image's env never leaves it.
    assert stored.config is not None and "HF_TOKEN" not in stored.config.env
    assert set(stored.config.env) == {"NVIDIA_REQUIRE_CUDA", "NV_CUDA_COMPAT_PACKAGE"}
    assert stored.config.labels == {"com.nvidia.cuda.version": "12.8.1"}


def test_references_are_bounded_and_the_newest_first() -> None:
    refs = [f"registry.corp/x:{i}" for i in range(40)]
    status = facts_status(read_config(), refs, "2026-09-01T10:00:00Z")
    assert status["references"] == refs[:MAX_REFERENCES] and status["image"] == refs[0]


def test_a_persons_override_wins_over_what_was_read(kb: Any) -> None:
    obj = stored_object(read_config(), {"cuda": "13.0", "reason": "the cuda_v12 runner crashes"})
    stored = read_facts(obj)
    assert stored is not None
    fresh = ImageConfig(IMAGE, digest=DIGEST, env={"PATH": "/usr/bin"})
    completed = with_facts(fresh, stored)
    assert completed.contents is not None and completed.correction is not None

    class One:
        def config_for(self, image: str) -> ImageConfig | None:
            return completed

    table = ImageTable.builtin(kb=kb).with_configs(One())
    facts = from_container({"name": "main", "image": IMAGE}, table, kb)
    assert facts.cuda == cv("13.0")
    assert facts.source == (
        f"override in ImageFacts {facts_name(DIGEST)} (CUDA 13.0: the cuda_v12 runner crashes)"
    )


def test_an_override_alone_answers_for_its_digest() -> None:
    made = facts_object(DIGEST)
    made["spec"]["override"] = {"cuda": "12.6"}
    index = FactIndex.from_objects([made])
    found = StoredSource(index).config_for(f"registry.corp/x@{DIGEST}")
    assert (
        found is not None and found.correction is not None and found.correction.cuda == cv("12.6")
    )


def test_the_commands_find_facts_by_digest_or_reference() -> None:
    older = stored_object(read_config())
    newer = stored_object(read_config())
    newer["metadata"]["name"] = facts_name("sha256:" + "cd" * 32)
    newer["status"]["digest"] = "sha256:" + "cd" * 32
    newer["status"]["observedTime"] = "2026-09-02T10:00:00Z"
    index = FactIndex.from_objects([newer, older, {"metadata": {"name": "junk"}}])
    assert len(index) == 2
    # The tag moved: the most recently observed digest answers for it.
    found = index.lookup("registry.corp/ollama/ollama:latest")
    assert found is not None and found.digest == "sha256:" + "cd" * 32
    pinned = index.lookup(f"registry.corp/ollama/ollama@{DIGEST}")
    assert pinned is not None and pinned.digest == DIGEST
    config = StoredSource(index).config_for(IMAGE)
    assert config is not None and config.image == IMAGE and config.contents is not None
    assert StoredSource(index).config_for("registry.corp/other:1") is None


def test_a_registry_answer_is_completed_by_the_stored_facts_of_its_digest() -> None:
    index = FactIndex.from_objects([stored_object(read_config(), {"cuda": "12.4"})])

    class Registry:
        def config_for(self, image: str) -> ImageConfig | None:
            return ImageConfig(image, digest=DIGEST, env={"PATH": "/usr/bin"})

    found = StoredSource(index, Registry()).config_for("registry.corp/moved:9")
    assert found is not None and found.image == "registry.corp/moved:9"
    assert found.contents is not None and found.correction is not None


@pytest.mark.parametrize("bad", ["sha256:abc", "sha512:" + "a" * 128, "latest"])
def test_only_sha256_digests_name_an_object(bad: str) -> None:
    with pytest.raises(InputError, match="invalid image digest"):
        facts_name(bad)
