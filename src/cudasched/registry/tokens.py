"""Registry tokens: a registry's 401 challenge answered (Basic with the host's credentials,
Bearer by asking the realm for a token, anonymously or with the host's credentials), and tokens
kept per repository, per the actions they allow (``pull``; ``pull,push`` for a knowledge bundle
pushed) and per whose credentials obtained them until they expire, so a token got with one
namespace's pull secret is never sent for a look-up made without it. The requests themselves
are :class:`~cudasched.registry.client.RegistryClient`'s (``fetch``).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import httpx

from cudasched.registry.auth import Credentials, Keychain, parse_challenge
from cudasched.registry.distribution import RegistryError, Repository, json_object, status_error

__all__ = ["RegistryTokens"]

_MAX_TOKENS = 4096

#: ``fetch(url, headers, deadline, limit, what)``: one GET read whole within ``limit`` bytes.
Fetch = Callable[[str, Mapping[str, str], Any, int, str], tuple[httpx.Response, bytes]]


class RegistryTokens:
    """The tokens of one client (thread-safe). ``plain_http`` names the hosts whose token realm
    may be plain HTTP too when credentials are sent."""

    def __init__(self, clock: Callable[[], float], plain_http: Iterable[str]) -> None:
        self._clock = clock
        self._plain_http = frozenset(plain_http)
        self._tokens: dict[tuple[str, str, str, str], tuple[str, float]] = {}
        self._lock = threading.Lock()

    def cached(
        self, repo: Repository, creds: Credentials | None, actions: str = "pull"
    ) -> str | None:
        """The ``Authorization`` value kept for ``repo``, ``actions`` and these credentials,
        if fresh."""
        with self._lock:
            found = self._tokens.get((repo.host, repo.path, actions, _holder(creds)))
        if found is None or found[1] <= self._clock():
            return None
        return found[0]

    def answer(
        self,
        response: httpx.Response,
        repo: Repository,
        chain: Keychain,
        deadline: Any,
        what: str,
        fetch: Fetch,
        actions: str = "pull",
    ) -> str:
        """The ``Authorization`` value that answers ``response``'s challenge, for
        ``actions`` on ``repo``."""
        challenge = parse_challenge(response.headers.get("www-authenticate", ""))
        creds = chain.get(repo.host)
        if challenge is None:
            raise RegistryError("unauthorized", f"{what}: 401 without a challenge we can answer")
        if challenge.scheme == "basic":
            if creds is None:
                raise RegistryError("unauthorized", f"{what}: needs credentials for {repo.host}")
            return creds.basic()
        return self._token(challenge.params, (repo, actions), creds, deadline, what, fetch)

    def _token(
        self,
        params: Mapping[str, str],
        scope: tuple[Repository, str],
        creds: Credentials | None,
        deadline: Any,
        what: str,
        fetch: Fetch,
    ) -> str:
        repo, actions = scope
        url = self._token_url(params, scope, creds, what)
        headers = {"authorization": creds.basic()} if creds is not None else {}
        response, body = fetch(url, headers, deadline, 1024 * 1024, f"token for {what}")
        if response.status_code in (401, 403):
            who = "the given credentials" if creds is not None else "anonymous access"
            raise RegistryError(
                "unauthorized",
                f"{what}: the token service refused {who} (HTTP {response.status_code})",
            )
        if response.status_code != 200:
            raise status_error(response.status_code, f"token for {what}", body)
        doc = json_object(body, f"token for {what}")
        token = doc.get("token") or doc.get("access_token")
        if not isinstance(token, str) or not token:
            raise RegistryError("unauthorized", f"{what}: the token service gave no token")
        expires = doc.get("expires_in")
        life = float(expires) if isinstance(expires, int | float) and expires > 0 else 60.0
        value = f"Bearer {token}"
        self._remember((repo.host, repo.path, actions, _holder(creds)), value, life)
        return value

    def _token_url(
        self,
        params: Mapping[str, str],
        scope: tuple[Repository, str],
        creds: Credentials | None,
        what: str,
    ) -> str:
        """The token service's URL for ``actions`` on ``repo`` (``scope``), from the challenge's
        ``params``; credentials go to a plain-HTTP realm only where the registry is plain HTTP
        already."""
        repo, actions = scope
        realm = params.get("realm", "")
        if not realm.startswith(("https://", "http://")):
            raise RegistryError("unauthorized", f"{what}: token realm {realm!r} is not a URL")
        if creds is not None and realm.startswith("http://") and repo.host not in self._plain_http:
            # A password in clear text only where the operator chose clear text already.
            raise RegistryError(
                "unauthorized",
                f"{what}: token realm {realm!r} is plain HTTP; credentials for {repo.host} are "
                "sent to a realm over HTTPS only (or list the registry in plainHttp)",
            )
        query = {"scope": f"repository:{repo.path}:{actions}"}
        if params.get("service"):
            query["service"] = params["service"]
        try:
            return str(httpx.URL(realm, params=query))
        except httpx.InvalidURL:
            raise RegistryError(
                "unauthorized", f"{what}: token realm {realm!r} is not a URL"
            ) from None

    def _remember(self, key: tuple[str, str, str, str], value: str, life: float) -> None:
        """Keep a token until shortly before it expires; past the bound, expired ones go
        first, else the oldest."""
        with self._lock:
            self._tokens[key] = (value, self._clock() + max(1.0, life - 5))
            if len(self._tokens) > _MAX_TOKENS:
                now = self._clock()
                stale = [k for k, (_, until) in self._tokens.items() if until <= now]
                for old in stale or list(self._tokens)[: len(self._tokens) - _MAX_TOKENS]:
                    del self._tokens[old]


def _holder(creds: Credentials | None) -> str:
    """Whose token it is, as a cache key that holds no secret: ``""`` for anonymous, else a
    digest of the user and password."""
    if creds is None:
        return ""
    raw = f"{creds.username}\0{creds.password}".encode()
    return hashlib.sha256(raw).hexdigest()[:32]
