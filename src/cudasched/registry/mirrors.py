"""Registry look-ups routed through mirrors: which repository to ask first.

The entries of ``imageMirrors`` that name a registry host (:mod:`cudasched.knowledge.mirrors`)
say that a mirror holds copies of a canonical registry's repositories. A look-up for an image
under a canonical prefix asks each covering mirror in the order given, then the canonical
registry: containerd's order for the hosts of a ``hosts.toml`` ("the hosts will be tried first
in the order listed; if all hosts are tried then server will be used as a fallback",
containerd/containerd docs/hosts.md) and CRI-O's for a ``[[registry.mirror]]`` list
(containers/image docs/containers-registries.conf.5.md: mirrors in order, then ``location``).
A mirror that fails in any way (404, unreachable, too slow, a refused credential, a bad
answer) passes the look-up on; the last failure is the canonical registry's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cudasched.knowledge.mirrors import Mirror
from cudasched.registry.auth import DOCKER_HUB, canonical_host

__all__ = ["Route", "routes_of"]


@dataclass(frozen=True, slots=True)
class Route:
    """Ask ``host`` for ``path`` (the mirrored repository) before the canonical registry."""

    host: str
    path: str


def routes_of(host: str, path: str, mirrors: Iterable[Mirror]) -> list[Route]:
    """The mirrored repositories to try for the canonical ``host``/``path`` (``host`` as the
    API is served, Docker Hub's as ``registry-1.docker.io``), in order; empty when no
    mirror covers it."""
    out = []
    for mirror in mirrors:
        if not mirror.routes_lookups or mirror.mirror_host is None:
            continue
        origin = canonical_host(mirror.canonical_host) if mirror.canonical_host else DOCKER_HUB
        if origin != host:
            continue
        prefix = mirror.canonical_path
        if prefix and path != prefix and not path.startswith(prefix + "/"):
            continue
        rest = path[len(prefix) :].lstrip("/") if prefix else path
        target = "/".join(p for p in (mirror.mirror_path, rest) if p)
        if target:
            out.append(Route(canonical_host(mirror.mirror_host), target))
    return out
