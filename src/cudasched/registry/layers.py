"""What an image carries, read from its registry: its BuildKit SBOM first, then its layers top
layer first, streamed, within a byte and a time budget (:class:`LayerBudget`).

The reading is :mod:`cudasched.knowledge.layerscan` and :mod:`cudasched.knowledge.sbom`
(pure); this module only fetches. Each layer blob is a :class:`BlobStream` over one streaming
GET (auth, redirects and retries as every request of
:class:`~cudasched.registry.client.RegistryClient`): it counts the compressed bytes against
the image's budget, checks the deadline before every chunk (the HTTP read timeout bounds the
wait for one), verifies the blob's digest when it has been read to its end, and turns every
failure into :class:`~cudasched.knowledge.layerscan.ReadStopped`, so a slow, huge, truncated
or lying registry ends the read with the reason, never an exception and never past the
budget. Off the request path: the CLI calls it, the webhook's background resolver will.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import httpx

from cudasched.knowledge.imagecontents import ContentFact, ImageContents
from cudasched.knowledge.layerscan import (
    LayerSource,
    Readable,
    ReadStopped,
    ScanLimits,
    contents_of,
    scan_layers,
)
from cudasched.knowledge.sbom import (
    ATTESTATION_MANIFEST,
    IN_TOTO,
    PREDICATE_TYPE,
    REFERENCE_DIGEST,
    REFERENCE_TYPE,
    SPDX_PREDICATE,
    sbom_facts,
)
from cudasched.registry.auth import Keychain
from cudasched.registry.client import Deadline, ImageManifest, Platform, RegistryClient
from cudasched.registry.distribution import RegistryError, checked_digest, json_object
from cudasched.vocab.errors import InputError

__all__ = [
    "BlobStream",
    "LayerBudget",
    "read_contents",
]

_CHUNK = 256 * 1024
_DRAIN = 1024 * 1024


@dataclass(frozen=True, slots=True)
class LayerBudget:
    """Bounds of one image's read (defaults in ``docs/design.md``, "What an image carries"):
    ``max_bytes`` of layer blobs (compressed, as fetched) for the whole image,
    ``deadline_seconds`` for everything (manifest, SBOM, layers), ``max_sbom_bytes`` for one
    attestation blob, and what the scan may unpack (``scan``)."""

    max_bytes: int = 2 * 1024**3
    deadline_seconds: float = 180.0
    max_sbom_bytes: int = 16 * 1024 * 1024
    scan: ScanLimits = field(default_factory=ScanLimits)

    def __post_init__(self) -> None:
        if self.max_bytes < 1 or self.deadline_seconds <= 0 or self.max_sbom_bytes < 1024:
            raise InputError(
                "invalid layer budget: bytes >= 1, deadline > 0 seconds, SBOM bytes >= 1024"
            )


@dataclass
class _Spent:
    """The compressed bytes the image's read has fetched so far."""

    bytes: int = 0


class BlobStream:
    """A layer blob as a readable stream, bounded (see the module's docstring)."""

    def __init__(
        self,
        response: httpx.Response,
        digest: str,
        budget: LayerBudget,
        spent: _Spent,
        deadline: Deadline,
    ) -> None:
        self._chunks: Iterator[bytes] = response.iter_raw(_CHUNK)
        self._digest = digest
        self._hash = hashlib.new(digest.partition(":")[0])
        self._budget = budget
        self._spent = spent
        self._deadline = deadline
        self._buffer = b""
        self._ended = False

    def _pull(self) -> bytes:
        if self._deadline.left() <= 0:
            raise ReadStopped(f"no answer within the {self._deadline.seconds:g}s budget")
        try:
            chunk = next(self._chunks, b"")
        except httpx.TimeoutException:
            raise ReadStopped("the registry stopped sending within the read timeout") from None
        except httpx.HTTPError as exc:
            raise ReadStopped(f"the blob's transfer broke ({type(exc).__name__})") from None
        if not chunk:
            self._ended = True
            self._verify()
            return b""
        self._spent.bytes += len(chunk)
        if self._spent.bytes > self._budget.max_bytes:
            raise ReadStopped(f"more than the {self._budget.max_bytes} bytes budget fetched")
        self._hash.update(chunk)
        return chunk

    def _verify(self) -> None:
        actual = f"{self._digest.partition(':')[0]}:{self._hash.hexdigest()}"
        if actual != self._digest:
            raise ReadStopped("the blob does not match its digest (truncated or altered)")

    def read(self, size: int = -1) -> bytes:
        want = size if size is not None and size >= 0 else _CHUNK
        while len(self._buffer) < want and not self._ended:
            self._buffer += self._pull()
        data, self._buffer = self._buffer[:want], self._buffer[want:]
        return data

    def finish(self) -> None:
        """Read what is left (a tar archive ends before its blob's padding and compression
        trailer) so the digest is checked; at most 1 MiB more, else the blob is not
        verified and the layer does not count."""
        drained = 0
        while not self._ended:
            drained += len(self._pull())
            if drained > _DRAIN:
                raise ReadStopped("more than 1 MiB follows the end of the layer's archive")


def _layer_source(
    client: RegistryClient,
    found: ImageManifest,
    chain: Keychain,
    descriptor: Mapping[str, Any],
    budget: LayerBudget,
    spent: _Spent,
    deadline: Deadline,
) -> LayerSource:
    digest = str(descriptor.get("digest"))
    media = str(descriptor.get("mediaType") or "")

    @contextmanager
    def opened() -> Iterator[Readable]:
        what = f"layer {digest} of {found.image}"
        try:
            checked_digest(digest, what)
            response = client.open_blob(found.repo, digest, chain, deadline, what)
        except RegistryError as exc:
            raise ReadStopped(str(exc)) from None
        try:
            stream = BlobStream(response, digest, budget, spent, deadline)
            yield stream
            stream.finish()
        finally:
            response.close()

    return LayerSource(digest, media, opened)


def _attestation(found: ImageManifest) -> Mapping[str, Any] | None:
    """The index's attestation manifest for the platform's manifest, if BuildKit left one."""
    manifests = found.index.get("manifests") if found.index is not None else None
    for entry in manifests if isinstance(manifests, list) else ():
        notes = entry.get("annotations") if isinstance(entry, Mapping) else None
        if (
            isinstance(notes, Mapping)
            and notes.get(REFERENCE_TYPE) == ATTESTATION_MANIFEST
            and notes.get(REFERENCE_DIGEST) == found.digest
        ):
            return cast(Mapping[str, Any], entry)
    return None


def _sbom(
    client: RegistryClient,
    found: ImageManifest,
    chain: Keychain,
    budget: LayerBudget,
    deadline: Deadline,
) -> tuple[list[ContentFact], list[str], bool]:
    """The SBOM attestation's facts, notes, and whether an SBOM was read."""
    entry = _attestation(found)
    if entry is None:
        return [], [], False
    what = f"attestation manifest of {found.image}"
    try:
        digest = checked_digest(entry.get("digest"), what)
        body, _, _ = client.read_manifest(found.repo, digest, chain, deadline)
        doc = json_object(body, what)
        facts: list[ContentFact] = []
        notes: list[str] = []
        read = False
        for layer in doc.get("layers") or ():
            if not isinstance(layer, Mapping) or layer.get("mediaType") != IN_TOTO:
                continue
            kinds = layer.get("annotations")
            kinds = kinds if isinstance(kinds, Mapping) else {}
            if kinds.get(PREDICATE_TYPE, SPDX_PREDICATE) != SPDX_PREDICATE:
                continue  # provenance and the like: not read
            blob = checked_digest(layer.get("digest"), what)
            data = client.read_blob(found.repo, blob, chain, deadline, budget.max_sbom_bytes)
            found_facts, why = sbom_facts(data, blob)
            facts.extend(found_facts)
            read = read or not why
            if why:
                notes.append(why)
        return facts, notes, read
    except RegistryError as exc:
        return [], [f"SBOM not read: {exc}"], False


def read_contents(
    client: RegistryClient,
    image: str,
    platform: Platform | None = None,
    *,
    budget: LayerBudget | None = None,
    keychain: Keychain | None = None,
) -> ImageContents:
    """What ``image`` carries for ``platform``: the SBOM's facts when it names a CUDA runtime
    (and ``read_all`` is off), else the layers', top layer first. A failure to find the
    manifest is an answer too (``unknown`` says why); raises only :class:`InputError` for a
    string that is not an image reference."""
    limits = budget if budget is not None else LayerBudget()
    deadline = Deadline(limits.deadline_seconds, client._clock)
    try:
        found, chain = client.manifest(image, platform, keychain=keychain, deadline=deadline)
    except RegistryError as exc:
        return contents_of(image.strip(), "", (), stopped=f"manifest not read: {exc}")
    facts, notes, sbom = _sbom(client, found, chain, limits, deadline)
    layers = list(reversed(found.layers))
    if facts and not limits.scan.read_all:
        return contents_of(
            found.image, found.digest, facts, notes=notes, sbom=sbom, layers_total=len(layers)
        )
    spent = _Spent()
    sources = [_layer_source(client, found, chain, d, limits, spent, deadline) for d in layers]
    scanned, compat, scan_notes, stopped, read = scan_layers(sources, limits.scan)
    return contents_of(
        found.image,
        found.digest,
        [*facts, *scanned],
        compat=compat,
        notes=[*notes, *scan_notes],
        stopped=stopped,
        sbom=sbom,
        layers_read=read,
        layers_total=len(layers),
        bytes_read=spent.bytes,
    )
