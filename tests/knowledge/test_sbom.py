"""A BuildKit SBOM attestation (in-toto SPDX) read for the CUDA its packages name."""

from __future__ import annotations

import orjson

from cudasched.knowledge.sbom import sbom_facts
from tests.support.layers import spdx_statement
from tests.support.versions import cv

BLOB = "sha256:" + "b" * 64


def test_packages_with_package_urls() -> None:
    body = spdx_statement(
        "sha256:" + "c" * 64,
        [
            ("pypi", "torch", "2.7.0+cu128"),
            ("pypi", "nvidia-cuda-runtime-cu12", "12.8.90"),
            ("deb", "libc6", "2.39"),
            ("rpm", "cuda-cudart-12-8", "12.8.90-1"),
        ],
    )
    facts, why = sbom_facts(body, BLOB)
    assert why == ""
    assert [(f.kind, f.what, f.cuda) for f in facts] == [
        ("torch", "torch 2.7.0+cu128", cv("12.8")),
        ("pip", "nvidia-cuda-runtime-cu12 12.8.90", cv("12.8")),
        ("rpm", "cuda-cudart-12-8 12.8.90-1", cv("12.8")),
    ]
    assert {f.layer for f in facts} == {f"sbom {BLOB}"}
    assert facts[0].path == "usr/pypi/torch"


def test_listed_files_and_statements_that_are_not_sboms() -> None:
    statement = {
        "predicateType": "https://spdx.dev/Document",
        "predicate": {"files": [{"fileName": "./usr/lib/ollama/cuda_v12/libcudart.so.12.8.90"}]},
    }
    facts, _ = sbom_facts(orjson.dumps(statement), BLOB)
    assert [(f.path, f.cuda) for f in facts] == [
        ("usr/lib/ollama/cuda_v12/libcudart.so.12.8.90", cv("12.8"))
    ]
    provenance = {"predicateType": "https://slsa.dev/provenance/v0.2", "predicate": {}}
    assert sbom_facts(orjson.dumps(provenance), BLOB) == (
        [],
        f"attestation {BLOB} is not an SPDX SBOM",
    )
    assert sbom_facts(b"{", BLOB) == ([], f"SBOM {BLOB} is not JSON")
