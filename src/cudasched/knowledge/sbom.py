"""The CUDA facts of a BuildKit SBOM attestation, read before any layer because it is small.

BuildKit attaches attestations to an image index as manifests of their own
(moby/buildkit ``docs/attestations/attestation-storage.md``): a descriptor with platform
``unknown/unknown`` and the annotations ``vnd.docker.reference.type: attestation-manifest``
and ``vnd.docker.reference.digest: <the image manifest it describes>``; its layers are in-toto
statements (``application/vnd.in-toto+json``, annotation ``in-toto.io/predicate-type``). An
SBOM is the statement whose ``predicateType`` is ``https://spdx.dev/Document``, its
``predicate`` an SPDX document. Each SPDX package with a package URL
(``externalRefs[].referenceType: purl``: pypi, conda, deb, rpm) is asked what CUDA it names
(:func:`~cudasched.knowledge.layerfiles.package_cuda`); each listed file, what its name
says. Where the SBOM says it found a package (``sourceInfo``, "... file: /usr/lib/...") is
the fact's path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

import orjson

from cudasched.knowledge.imagecontents import ContentFact
from cudasched.knowledge.layerfiles import name_facts, package_cuda

__all__ = [
    "ATTESTATION_MANIFEST",
    "IN_TOTO",
    "PREDICATE_TYPE",
    "REFERENCE_DIGEST",
    "REFERENCE_TYPE",
    "SPDX_PREDICATE",
    "sbom_facts",
]

REFERENCE_TYPE = "vnd.docker.reference.type"
REFERENCE_DIGEST = "vnd.docker.reference.digest"
ATTESTATION_MANIFEST = "attestation-manifest"
IN_TOTO = "application/vnd.in-toto+json"
PREDICATE_TYPE = "in-toto.io/predicate-type"
SPDX_PREDICATE = "https://spdx.dev/Document"
_ECOSYSTEMS = {"pypi": "pip", "conda": "conda", "deb": "deb", "rpm": "rpm"}
_KINDS = {"pip": "pip", "conda": "conda", "deb": "deb", "rpm": "rpm"}


def _purl(package: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """``(ecosystem, name, version)`` from the package's purl, for the ecosystems read."""
    refs = package.get("externalRefs")
    for ref in refs if isinstance(refs, list) else ():
        if not isinstance(ref, Mapping) or ref.get("referenceType") != "purl":
            continue
        locator = ref.get("referenceLocator")
        if not isinstance(locator, str) or not locator.startswith("pkg:"):
            continue
        body = locator[4:].split("?", 1)[0].split("#", 1)[0]
        kind, _, rest = body.partition("/")
        ecosystem = _ECOSYSTEMS.get(kind.lower())
        if ecosystem is None or "@" not in rest:
            continue
        name, _, version = rest.rpartition("@")
        return ecosystem, unquote(name.rsplit("/", 1)[-1]), unquote(version)
    return None


def _source_path(package: Mapping[str, Any]) -> str:
    info = package.get("sourceInfo")
    if isinstance(info, str) and ": /" in info:
        return info.rsplit(": /", 1)[1].split(",")[0].strip()
    spdx_id = package.get("SPDXID")
    return f"SPDX package {spdx_id}" if isinstance(spdx_id, str) else "SPDX package"


def sbom_facts(body: bytes, blob: str) -> tuple[list[ContentFact], str]:
    """The facts of an in-toto statement's SPDX predicate (``blob``: its digest) and ``""``,
    or none and why the statement was not read."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return [], f"SBOM {blob} is not JSON"
    if not isinstance(doc, Mapping) or doc.get("predicateType") != SPDX_PREDICATE:
        return [], f"attestation {blob} is not an SPDX SBOM"
    predicate = doc.get("predicate")
    if not isinstance(predicate, Mapping):
        return [], f"SBOM {blob} has no SPDX document"
    where = f"sbom {blob}"
    facts: list[ContentFact] = []
    packages = predicate.get("packages")
    for package in packages if isinstance(packages, list) else ():
        if not isinstance(package, Mapping):
            continue
        found = _purl(package)
        if found is None:
            continue
        ecosystem, name, version = found
        cuda = package_cuda(ecosystem, name, version)
        if cuda is None:
            continue
        kind = "torch" if ecosystem == "pip" and name.lower() == "torch" else _KINDS[ecosystem]
        path = _source_path(package)
        facts.append(ContentFact(kind, f"{name} {version}", cuda[0], where, path, cuda[2], cuda[1]))
    files = predicate.get("files")
    for entry in files if isinstance(files, list) else ():
        file_name = entry.get("fileName") if isinstance(entry, Mapping) else None
        if isinstance(file_name, str):
            path = file_name[2:] if file_name.startswith("./") else file_name
            facts.extend(name_facts(path.lstrip("/"), where))
    return facts, ""
