"""Knowledge bundles pushed to and pulled from a registry as OCI artifacts.

A bundle is published as its own manifest (:meth:`~cudasched.knowledge.bundle.Bundle.
manifest_bytes`: ``artifactType`` ``application/vnd.cudasched.knowledge.v1``, the metadata as
the config blob, one layer per table) under a tag, and can be pinned by that manifest's digest.
Its signatures are a second artifact (``artifactType`` :data:`SIGNATURE_TYPE`, the empty config,
one layer per signature, a ``subject`` naming the bundle's manifest) tagged
``sha256-<hex>.sig`` after the bundle's digest, the tag scheme cosign uses, because registries
without the OCI 1.1 referrers API (Debian's distribution 2.8 among them) can still serve it by
name; a registry with the API lists it as a referrer of the bundle through its ``subject``.

Pulling checks, before anything reads the tables: the manifest against its digest (by digest:
the one asked for; by tag: what the registry says it is), that it is a bundle's manifest, each
blob against its descriptor's digest (altered or truncated content is a
:class:`~cudasched.knowledge.bundle.BundleError` with reason ``digest``), and, where trusted
keys are given, one valid signature over the digest from one of them (``signature``). The
tables' content is checked by :mod:`cudasched.knowledge.bundlecheck`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from cudasched.knowledge.bundle import (
    OCI_MANIFEST,
    TABLE_LIMITS,
    Bundle,
    BundleError,
    assemble,
    read_layout,
)
from cudasched.knowledge.bundlefiles import signatures_of
from cudasched.knowledge.signing import Signature, TrustedKey, verify_signatures
from cudasched.registry.auth import Keychain
from cudasched.registry.client import Deadline, RegistryClient
from cudasched.registry.distribution import (
    DigestMismatch,
    RegistryError,
    Repository,
    json_object,
    repository_of,
)
from cudasched.registry.upload import Uploader

__all__ = [
    "EMPTY_TYPE",
    "SIGNATURE_LAYER",
    "SIGNATURE_TYPE",
    "Pulled",
    "pull_bundle",
    "push_bundle",
    "signature_tag",
]

SIGNATURE_TYPE = "application/vnd.cudasched.knowledge.signature.v1"
SIGNATURE_LAYER = "application/vnd.cudasched.knowledge.signature.v1+json"
#: The OCI empty descriptor's media type and content (image-spec 1.1, "Guidance for an Empty
#: Descriptor").
EMPTY_TYPE = "application/vnd.oci.empty.v1+json"
_EMPTY = b"{}"
_SMALL_BLOB = 1024 * 1024
_MAX_SIGNATURES = 16


def signature_tag(digest: str) -> str:
    """The tag of the signatures of the bundle ``digest``: ``sha256-<hex>.sig``."""
    return digest.replace(":", "-") + ".sig"


@dataclass(frozen=True, slots=True)
class Pulled:
    """A bundle pulled: the bundle, the digest it was pulled by, where (``repo@digest``), the
    signatures found beside it, and the trusted key that verified one (``None``: no keys were
    asked for)."""

    bundle: Bundle
    digest: str
    pinned: str
    signatures: tuple[Signature, ...] = ()
    signed_by: TrustedKey | None = None


def _session(
    client: RegistryClient, reference: str, keychain: Keychain | None
) -> tuple[Repository, Keychain, Deadline]:
    repo = repository_of(reference)
    chain = keychain.merged(client.keychain) if keychain is not None else client.keychain
    return repo, chain, client.deadline()


def push_bundle(
    client: RegistryClient,
    reference: str,
    bundle: Bundle,
    signatures: Sequence[Signature] = (),
    *,
    keychain: Keychain | None = None,
) -> str:
    """Push ``bundle`` (its config and tables, then its manifest under ``reference``'s tag,
    or by digest when ``reference`` names one, which must be the bundle's) and its
    ``signatures`` (kept with those already published for it); the bundle's digest."""
    repo, chain, deadline = _session(client, reference, keychain)
    digest = bundle.digest
    if repo.is_digest and repo.reference != digest:
        raise BundleError("digest", f"{reference}: the bundle's digest is {digest}")
    up = Uploader(client, repo, chain, deadline)
    up.push_blob(bundle.config_bytes())
    for name in bundle.meta.tables:
        up.push_blob(bundle.tables[name])
    manifest = bundle.manifest_bytes()
    up.push_manifest(repo.reference, manifest, OCI_MANIFEST)
    if signatures:
        known = _signatures(client, repo, digest, chain, deadline)
        mine = {(s.key_id, s.value) for s in signatures}
        kept = [s for s in known if (s.key_id, s.value) not in mine]
        _push_signatures(up, digest, len(manifest), [*kept, *signatures])
    return digest


def _push_signatures(up: Uploader, digest: str, size: int, signatures: Sequence[Signature]) -> None:
    layers = []
    for signature in signatures:
        body = orjson.dumps(signature.to_document(), option=orjson.OPT_SORT_KEYS)
        layers.append(
            {"mediaType": SIGNATURE_LAYER, "digest": up.push_blob(body), "size": len(body)}
        )
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": SIGNATURE_TYPE,
        "config": {"mediaType": EMPTY_TYPE, "digest": up.push_blob(_EMPTY), "size": len(_EMPTY)},
        "layers": layers,
        "subject": {"mediaType": OCI_MANIFEST, "digest": digest, "size": size},
    }
    up.push_manifest(
        signature_tag(digest), orjson.dumps(manifest, option=orjson.OPT_SORT_KEYS), OCI_MANIFEST
    )


def pull_bundle(
    client: RegistryClient,
    reference: str,
    *,
    trusted: Sequence[TrustedKey] = (),
    held: str = "",
    keychain: Keychain | None = None,
) -> Pulled | None:
    """The bundle ``reference`` names, every digest checked and, with ``trusted`` keys, its
    signature; ``None`` when its digest is ``held`` (the bundle in use: nothing is fetched
    but the manifest). A :class:`BundleError` when what was fetched is not a good bundle, a
    :class:`RegistryError` when the registry could not be read."""
    repo, chain, deadline = _session(client, reference, keychain)
    what = (
        f"{repo.name}:{repo.reference}" if not repo.is_digest else f"{repo.name}@{repo.reference}"
    )
    try:
        body, _, digest = client.read_manifest(repo, repo.reference, chain, deadline)
        if digest == held:
            return None
        layout = read_layout(body, what)
        config = client.read_blob(repo, layout.config.digest, chain, deadline, _SMALL_BLOB)
        blobs = {
            layer.digest: client.read_blob(
                repo, layer.digest, chain, deadline, TABLE_LIMITS.max_bytes
            )
            for layer in layout.layers
        }
        signatures = _signatures(client, repo, digest, chain, deadline)
    except DigestMismatch as exc:
        raise BundleError("digest", str(exc)) from None
    bundle = assemble(layout, config, blobs)
    signed_by = verify_signatures(digest, signatures, trusted, what) if trusted else None
    return Pulled(bundle, digest, f"{repo.name}@{digest}", signatures, signed_by)


def _signatures(
    client: RegistryClient, repo: Repository, digest: str, chain: Keychain, deadline: Deadline
) -> tuple[Signature, ...]:
    """The signatures published for ``digest`` (none when its signature tag does not exist)."""
    tag = signature_tag(digest)
    try:
        body, _, _ = client.read_manifest(repo, tag, chain, deadline)
    except RegistryError as exc:
        if exc.kind == "not-found":
            return ()
        raise
    doc = json_object(body, f"signatures {repo.name}:{tag}")
    subject = doc.get("subject")
    if doc.get("artifactType") != SIGNATURE_TYPE or not isinstance(subject, dict):
        raise BundleError("signature", f"{repo.name}:{tag} is not a bundle's signatures")
    if subject.get("digest") != digest:
        raise BundleError("signature", f"{repo.name}:{tag} signs another manifest")
    found: list[Signature] = []
    layers = doc.get("layers") or ()
    if not isinstance(layers, list) or len(layers) > _MAX_SIGNATURES:
        raise BundleError("signature", f"{repo.name}:{tag}: at most {_MAX_SIGNATURES} signatures")
    for layer in layers:
        if not isinstance(layer, dict) or layer.get("mediaType") != SIGNATURE_LAYER:
            continue
        raw = client.read_blob(repo, str(layer.get("digest")), chain, deadline, _SMALL_BLOB)
        found.extend(signatures_of(raw, f"{repo.name}:{tag}"))
    return tuple(found)
