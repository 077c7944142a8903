"""Pushing to a registry: blobs uploaded and manifests put, as the OCI distribution spec says
("Pushing blobs", "Pushing manifests"), through the client's auth, deadlines and retries.

A blob the repository already has (``HEAD /v2/<name>/blobs/<digest>`` answers 200) is not sent
again. Otherwise an upload session is opened (``POST /v2/<name>/blobs/uploads/``, 202 with a
``Location``) and the blob sent either whole (``PUT <location>?digest=``: the monolithic upload)
or, when it is larger than ``chunk_bytes``, in chunks (``PATCH <location>`` with
``Content-Range``, each answer giving the next location, then ``PUT <location>?digest=`` with
no body); a chunk is never sent twice, since a registry would append it again. The registry
checks the digest and answers 201. A manifest is ``PUT /v2/<name>/manifests/<reference>`` with
its media type; the digest the registry reports must be the one of the bytes sent.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from urllib.parse import urljoin

import httpx

from cudasched.registry.auth import Keychain
from cudasched.registry.client import Deadline, RegistryClient, WriteRequest
from cudasched.registry.distribution import DigestMismatch, RegistryError, Repository

__all__ = ["Uploader"]

_CHUNK_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Uploader:
    """Pushes to one repository with one client, keychain and deadline."""

    client: RegistryClient
    repo: Repository
    chain: Keychain
    deadline: Deadline
    chunk_bytes: int = _CHUNK_BYTES

    def _send(self, request: WriteRequest) -> httpx.Response:
        return self.client.send(request, self.repo, self.chain, self.deadline)

    def has_blob(self, digest: str) -> bool:
        """Whether the repository holds the blob already."""
        request = WriteRequest(
            "HEAD",
            self.client.url(self.repo, f"blobs/{digest}"),
            f"blob {digest} of {self.repo.name}",
            ok=frozenset({200, 404}),
        )
        response = self._send(request)
        return response.status_code == 200

    def push_blob(self, data: bytes) -> str:
        """Upload ``data`` (unless the repository has it); its digest."""
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if self.has_blob(digest):
            return digest
        what = f"upload of blob {digest} to {self.repo.name}"
        start = self._send(
            WriteRequest(
                "POST", self.client.url(self.repo, "blobs/uploads/"), what, ok=frozenset({202})
            )
        )
        location = self._location(start.headers.get("location"), what)
        body = data
        if len(data) > self.chunk_bytes:
            location = self._chunks(location, data, what)
            body = b""
        sep = "&" if "?" in location else "?"
        self._send(
            WriteRequest(
                "PUT",
                f"{location}{sep}digest={digest}",
                what,
                content=body,
                headers={"content-type": "application/octet-stream"},
                ok=frozenset({201}),
            )
        )
        return digest

    def _chunks(self, location: str, data: bytes, what: str) -> str:
        for start in range(0, len(data), self.chunk_bytes):
            chunk = data[start : start + self.chunk_bytes]
            response = self._send(
                WriteRequest(
                    "PATCH",
                    location,
                    what,
                    content=chunk,
                    headers={
                        "content-type": "application/octet-stream",
                        "content-range": f"{start}-{start + len(chunk) - 1}",
                    },
                    ok=frozenset({202}),
                    retry=False,
                )
            )
            location = self._location(response.headers.get("location"), what)
        return location

    def _location(self, value: str | None, what: str) -> str:
        if not value:
            raise RegistryError("bad-response", f"{what}: the registry gave no upload location")
        return urljoin(self.client.url(self.repo, ""), value)

    def push_manifest(self, reference: str, body: bytes, media_type: str) -> str:
        """Put the manifest ``body`` under ``reference`` (a tag or its digest); its digest,
        checked against what the registry says it stored."""
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        what = f"manifest {self.repo.name}:{reference}"
        response = self._send(
            WriteRequest(
                "PUT",
                self.client.url(self.repo, f"manifests/{reference}"),
                what,
                content=body,
                headers={"content-type": media_type},
                ok=frozenset({201}),
            )
        )
        stored = response.headers.get("docker-content-digest", digest)
        if stored != digest:
            raise DigestMismatch(f"{what}: the registry stored {stored}, not {digest}")
        return digest
