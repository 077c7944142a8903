"""The OCI distribution API's words, as the registry client uses them: media types (and the
``Accept`` header that asks for any of them), digests checked against the OCI grammar before
they go into a URL and verified against a body, where an image lives (:class:`Repository`: API
host, path, tag or digest), :class:`RegistryError` with its closed ``kind``, and how a JSON
body or an HTTP status reads as an answer or an error.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from cudasched.knowledge.imageref import parse_image_ref
from cudasched.registry.auth import DOCKER_HUB, canonical_host
from cudasched.vocab.errors import InputError

__all__ = [
    "ACCEPT",
    "CONFIG_TYPES",
    "DOCKER_LIST",
    "DOCKER_MANIFEST",
    "INDEX_TYPES",
    "MANIFEST_TYPES",
    "OCI_INDEX",
    "OCI_MANIFEST",
    "DigestMismatch",
    "RegistryError",
    "Repository",
    "checked_digest",
    "digest_of",
    "json_object",
    "repository_of",
    "status_error",
]

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_TYPES = frozenset({OCI_INDEX, DOCKER_LIST})
MANIFEST_TYPES = frozenset({OCI_MANIFEST, DOCKER_MANIFEST})
CONFIG_TYPES = frozenset(
    {"application/vnd.oci.image.config.v1+json", "application/vnd.docker.container.image.v1+json"}
)
ACCEPT = ", ".join([OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST])
#: A registry host as distribution/reference's grammar has it (a domain or a bracketed IPv6
#: address, an optional port), lower case: it becomes a URL's authority, where ``#``, ``?`` or
#: ``%`` would move the request off the distribution API.
_HOST_RE = re.compile(
    r"(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*|\[[0-9a-f:.]+\])"
    r"(?::[0-9]{1,5})?"
)


#: The OCI digest grammar (opencontainers/image-spec descriptor.md, "Digests"):
#: ``algorithm ":" encoded``, algorithm components ``[a-z0-9]+`` joined by ``[+._-]``, encoded
#: ``[a-zA-Z0-9=_-]+``; and the registered algorithms we can verify, whose encoded part is
#: lowercase hex of the hash's length.
_DIGEST_RE = re.compile(r"[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]+")
_ALGORITHMS = {"sha256": 64, "sha512": 128}
_HEX_RE = re.compile(r"[a-f0-9]+")


def checked_digest(value: object, what: str) -> str:
    """``value`` when it is an OCI digest of a registered algorithm, else a
    :class:`RegistryError` (``bad-response``) naming it: a digest becomes a URL path segment."""
    text = value if isinstance(value, str) else ""
    algorithm, _, encoded = text.partition(":")
    if not _DIGEST_RE.fullmatch(text):
        raise RegistryError(
            "bad-response",
            f"{what}: {value!r} is not an OCI digest (algorithm:encoded such as sha256:<64 "
            "lowercase hex digits>)",
        )
    if _ALGORITHMS.get(algorithm) != len(encoded) or not _HEX_RE.fullmatch(encoded):
        raise RegistryError(
            "bad-response",
            f"{what}: {value!r} is not a sha256 or sha512 digest (lowercase hex of 64 or 128 "
            "digits)",
        )
    return text


def digest_of(body: bytes, digest: str) -> str:
    """``body``'s digest with the algorithm of ``digest`` (a :func:`checked_digest`)."""
    algorithm = digest.partition(":")[0]
    return f"{algorithm}:{hashlib.new(algorithm, body).hexdigest()}"


class RegistryError(InputError):
    """Reading an image's config failed; ``kind`` is a closed word for metrics
    (``not-found``, ``unauthorized``, ``timeout``, ``too-large``, ``unreachable``,
    ``bad-response``, ``no-platform``)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class DigestMismatch(RegistryError):
    """Content that does not match the digest it was asked by (``bad-response``): altered or
    truncated on the way or in the registry's storage."""

    def __init__(self, message: str) -> None:
        super().__init__("bad-response", message)


@dataclass(frozen=True, slots=True)
class Repository:
    """Where an image lives: the API host (Docker Hub's for short names), the repository
    path (``library/`` added for Docker Hub's official images) and the tag or digest."""

    host: str
    path: str
    reference: str  # a tag or a digest
    is_digest: bool

    @property
    def name(self) -> str:
        return f"{self.host}/{self.path}"


def repository_of(image: str) -> Repository:
    """Split ``image`` as a container runtime pulls it (``latest`` when no tag is named)."""
    ref = parse_image_ref(image)
    host = canonical_host(ref.host) if ref.host else DOCKER_HUB
    if not _HOST_RE.fullmatch(host):
        raise InputError(
            f"invalid image {image!r}: {ref.host!r} is not a registry host "
            "(host[:port] such as nvcr.io or registry.corp:5000)"
        )
    path = ref.path
    if host == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    if ref.digest:
        return Repository(host, path, ref.digest, True)
    return Repository(host, path, ref.tag or "latest", False)


def json_object(body: bytes, what: str) -> Mapping[str, Any]:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise RegistryError("bad-response", f"{what}: not JSON") from None
    if not isinstance(doc, Mapping):
        raise RegistryError("bad-response", f"{what}: not a JSON object")
    return doc


def status_error(status: int, what: str, body: bytes) -> RegistryError:
    code = ""
    try:
        doc = orjson.loads(body[:65536])
        errors = doc.get("errors") if isinstance(doc, dict) else None
        if isinstance(errors, list) and errors and isinstance(errors[0], dict):
            code = f" ({errors[0].get('code')})"
    except orjson.JSONDecodeError:
        pass
    if status == 404:
        return RegistryError("not-found", f"{what}: not found (HTTP 404{code})")
    if status in (401, 403):
        return RegistryError("unauthorized", f"{what}: access denied (HTTP {status}{code})")
    return RegistryError("bad-response", f"{what}: HTTP {status}{code}")
