"""The API server's side of an admission webhook call: an AdmissionReview POSTed over HTTPS,
the server verified against the CA bundle a registration carries (``caBundle``), the answer
read back as JSON.

``cudasched demo`` plays the API server with it against the real webhook it starts on
loopback, so the demo's requests cross the same HTTP and TLS code a cluster's would.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import orjson

from cudasched.vocab.errors import InputError

__all__ = ["AdmissionClient"]


class AdmissionClient:
    """POSTs reviews to the webhook at ``url`` whose certificate ``ca_pem`` (PEM) signs; one
    connection kept for every review. Use as a context manager."""

    def __init__(self, url: str, ca_pem: bytes, *, timeout: float = 10.0) -> None:
        import httpx

        tls = ssl.create_default_context(cadata=ca_pem.decode("ascii"))
        self._client = httpx.Client(base_url=url, verify=tls, timeout=timeout)

    def __enter__(self) -> AdmissionClient:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._client.close()

    def review(self, path: str, review: Mapping[str, Any]) -> dict[str, Any]:
        """The webhook's answer to ``review`` sent to ``path`` (``/mutate/pods``). Anything
        but HTTP 200 is an :class:`InputError` quoting the server's words."""
        reply = self._client.post(
            path, content=orjson.dumps(review), headers={"content-type": "application/json"}
        )
        if reply.status_code != 200:
            raise InputError(f"webhook answered HTTP {reply.status_code}: {reply.text.strip()}")
        answer = reply.json()
        if not isinstance(answer, dict):
            raise InputError(f"webhook answered with a JSON {type(answer).__name__}, not a review")
        return answer
