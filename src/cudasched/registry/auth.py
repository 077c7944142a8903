"""Registry credentials: Docker's ``config.json``, Kubernetes pull secrets, and the
``WWW-Authenticate`` challenges of the distribution protocol.

A registry answers an unauthenticated request with 401 and a challenge: ``Basic realm=...``
(send the user and password) or ``Bearer realm=...,service=...,scope=...`` (ask the realm for
a token, anonymously or with the user and password, then send the token). Docker Hub, GHCR,
NGC and Quay all give anonymous pull tokens for public repositories.

Credentials are looked up by registry host the way Docker does: ``auths`` keys may be a bare
host (``ghcr.io``), a host with a port, or a URL (``https://index.docker.io/v1/``); the three
names of Docker Hub are one. Credential helpers (``credsStore``, ``credHelpers``) run programs
and are not supported: their hosts get no credentials (say so in a warning, never run them).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from cudasched.vocab import inputfiles
from cudasched.vocab.errors import InputError

__all__ = [
    "DOCKER_HUB",
    "Challenge",
    "Credentials",
    "Keychain",
    "canonical_host",
    "keychain_from_docker_config",
    "load_docker_config",
    "parse_challenge",
]

#: The host Docker Hub's registry API is served from.
DOCKER_HUB = "registry-1.docker.io"
_HUB_NAMES = frozenset(
    {"docker.io", "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com"}
)
_PARAM = re.compile(r'\s*([A-Za-z][\w-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))\s*,?')


@dataclass(frozen=True, slots=True)
class Credentials:
    """A user and password (or an identity token, sent as the password of ``<token>``)."""

    username: str
    password: str

    def __repr__(self) -> str:  # never print a secret
        return f"Credentials(username={self.username!r}, password=<{len(self.password)} chars>)"

    def basic(self) -> str:
        raw = f"{self.username}:{self.password}".encode()
        return "Basic " + base64.b64encode(raw).decode("ascii")


@dataclass(frozen=True, slots=True)
class Challenge:
    """One ``WWW-Authenticate`` challenge: ``scheme`` (lower case) and its parameters."""

    scheme: str
    params: Mapping[str, str]

    @property
    def realm(self) -> str:
        return self.params.get("realm", "")


def parse_challenge(header: str) -> Challenge | None:
    """The first challenge of a ``WWW-Authenticate`` header, or ``None`` when it names none
    we can answer (``Basic`` or ``Bearer``)."""
    text = header.strip()
    scheme, _, rest = text.partition(" ")
    scheme = scheme.lower()
    if scheme not in ("basic", "bearer"):
        return None
    params: dict[str, str] = {}
    for m in _PARAM.finditer(rest):
        value = m.group(2) if m.group(2) is not None else m.group(3)
        params[m.group(1).lower()] = value.replace('\\"', '"')
    return Challenge(scheme, params)


def canonical_host(host: str) -> str:
    """A registry name as ``auths`` keys and image references spell it, reduced to the host
    (and port) the API is served from: Docker Hub's names are ``registry-1.docker.io``."""
    text = host.strip().lower()
    text = re.sub(r"^[a-z]+://", "", text).split("/", 1)[0]
    return DOCKER_HUB if text in _HUB_NAMES else text


class Keychain:
    """Credentials by registry host (first given wins for a host)."""

    def __init__(self, entries: Iterable[tuple[str, Credentials]] = ()) -> None:
        self._by_host: dict[str, Credentials] = {}
        self.helpers: tuple[str, ...] = ()  # hosts a credential helper serves (not used)
        for host, creds in entries:
            self._by_host.setdefault(canonical_host(host), creds)

    def __len__(self) -> int:
        return len(self._by_host)

    def __repr__(self) -> str:
        return f"Keychain({sorted(self._by_host)})"

    def get(self, host: str) -> Credentials | None:
        return self._by_host.get(canonical_host(host))

    def merged(self, other: Keychain) -> Keychain:
        """``self``'s credentials, then ``other``'s for hosts ``self`` has none for."""
        out = Keychain([*self._by_host.items(), *other._by_host.items()])
        out.helpers = tuple(dict.fromkeys((*self.helpers, *other.helpers)))
        return out


def _entry(host: str, value: object, where: str) -> Credentials | None:
    if not isinstance(value, Mapping):
        raise InputError(f"invalid {where}: the entry for {host!r} is not a mapping")
    auth = value.get("auth")
    if isinstance(auth, str) and auth:
        try:
            decoded = base64.b64decode(auth, validate=True).decode("utf-8")
        except ValueError:  # bad base64 (binascii.Error), not ASCII, not UTF-8
            raise InputError(
                f"invalid {where}: the auth of {host!r} is not base64 of user:password"
            ) from None
        user, sep, password = decoded.partition(":")
        if not sep:
            raise InputError(f"invalid {where}: the auth of {host!r} is not user:password")
        return Credentials(user, password)
    token = value.get("identitytoken")
    if isinstance(token, str) and token:
        return Credentials("<token>", token)
    username, secret = value.get("username"), value.get("password")
    if isinstance(username, str) and isinstance(secret, str) and username:
        return Credentials(username, secret)
    return None


def keychain_from_docker_config(doc: object, where: str) -> Keychain:
    """The credentials of a Docker ``config.json`` (``{"auths": {...}}``) or of a
    ``kubernetes.io/dockercfg`` secret's older format (the ``auths`` map alone)."""
    if not isinstance(doc, Mapping):
        raise InputError(f'invalid {where}: expected a JSON object such as {{"auths": {{}}}}')
    auths = doc.get("auths") if "auths" in doc else doc
    if not isinstance(auths, Mapping):
        raise InputError(f"invalid {where}: auths must be a mapping of registry to credentials")
    entries = []
    for host, value in auths.items():
        if host in ("credsStore", "credHelpers"):
            continue
        creds = _entry(str(host), value, where)
        if creds is not None:
            entries.append((str(host), creds))
    chain = Keychain(entries)
    helpers = doc.get("credHelpers") if "auths" in doc else None
    if isinstance(helpers, Mapping):
        chain.helpers = tuple(canonical_host(str(h)) for h in helpers)
    return chain


def load_docker_config(path: str | Path) -> Keychain:
    """Read a Docker ``config.json`` (``--registry-config``)."""
    label = f"registry config {str(path)!r}"
    data = inputfiles.read_bytes(
        path, label, inputfiles.SETTINGS, expected="a Docker config.json file"
    )
    try:
        doc: Any = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InputError(f"{label}: not JSON ({exc})") from None
    return keychain_from_docker_config(doc, label)
