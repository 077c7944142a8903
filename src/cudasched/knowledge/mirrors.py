"""Mirrors: repositories that are copies of others, as a deployment declares them
(``imageMirrors``, and the table's own ``mirrors``).

An entry is ``{mirror: canonical}``, read two ways depending on whether the mirror names a
registry host (its first segment holds ``.`` or ``:`` or is ``localhost``, as in an image
reference):

* **without a host** (``alaudadockerhub/tritonserver: nvidia/tritonserver``): the end of a
  repository path, on whole segments, in any registry. It only renames: the image table
  recognises the mirrored image as the canonical one. There is no registry to ask.
* **with a host** (``harbor.corp/ngc-proxy: nvcr.io/nvidia``, ``harbor.corp/hub: docker.io``):
  a prefix of full references. The image table recognises ``harbor.corp/ngc-proxy/X`` as
  ``nvcr.io/nvidia/X``, and a registry look-up for ``nvcr.io/nvidia/X`` asks
  ``harbor.corp/ngc-proxy/X`` first and the canonical registry after it
  (:mod:`cudasched.registry.client`), as a node's containerd does with the hosts of its
  ``hosts.toml``.

Pure: parsing and matching only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from cudasched.vocab.errors import InputError

__all__ = ["Mirror", "parse_mirrors", "split_host"]

_SEGMENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_PATH_RE = re.compile(rf"^{_SEGMENT}(?:/{_SEGMENT})*$")
_HOST_RE = re.compile(
    r"^(?:localhost|[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9-]+)*)(?::\d{1,5})?$"
)
_EXAMPLE = (
    "such as {alaudadockerhub/tritonserver: nvidia/tritonserver} or "
    "{harbor.corp/ngc-proxy: nvcr.io/nvidia}"
)


def split_host(text: str) -> tuple[str | None, str]:
    """``[host[:port]/]path`` split as container runtimes split an image reference: the
    first segment is a host when it holds ``.`` or ``:`` or is ``localhost``."""
    first, _, rest = text.partition("/")
    if "." in first or ":" in first or first == "localhost":
        return first, rest
    return None, text


@dataclass(frozen=True, slots=True)
class Mirror:
    """One entry: ``mirror_path`` (under ``mirror_host`` when it names one) holds copies of
    ``canonical_path`` (under ``canonical_host``; ``None``: Docker Hub, or any registry for
    an entry without a host)."""

    mirror_host: str | None
    mirror_path: str
    canonical_host: str | None
    canonical_path: str

    @property
    def routes_lookups(self) -> bool:
        """Whether registry look-ups go through it (only an entry that names a host)."""
        return self.mirror_host is not None

    def rename(self, host: str | None, path: str) -> str | None:
        """The canonical repository path of ``host/path`` when this entry covers it, else
        ``None`` (the table matches rules on paths; hosts are dropped)."""
        if self.mirror_host is None:
            if path == self.mirror_path or path.endswith("/" + self.mirror_path):
                return self.canonical_path
            return None
        if host != self.mirror_host:
            return None
        rest = _under(path, self.mirror_path)
        return None if rest is None else _join(self.canonical_path, rest)


def _under(path: str, prefix: str) -> str | None:
    """What follows ``prefix`` in ``path`` on whole segments (``""`` for ``path`` itself),
    or ``None`` when ``path`` is not under it."""
    if not prefix:
        return path
    if path == prefix:
        return ""
    if path.startswith(prefix + "/"):
        return path[len(prefix) + 1 :]
    return None


def _join(prefix: str, rest: str) -> str:
    return "/".join(p for p in (prefix, rest) if p)


def _side(text: str, entry: str, what: str) -> tuple[str | None, str]:
    host, path = split_host(text.strip().strip("/").lower())
    if host is not None and not _HOST_RE.match(host):
        raise InputError(
            f"invalid {what} entry {entry}: {host!r} is not a registry host[:port] ({_EXAMPLE})"
        )
    if (path or host is None) and not _PATH_RE.match(path):
        raise InputError(f"invalid {what} entry {entry}: expected repository paths {_EXAMPLE}")
    return host, path


def parse_mirrors(entries: object, what: str) -> tuple[Mirror, ...]:
    """``{mirror: canonical}`` as :class:`Mirror` entries, in order (see the module)."""
    if entries is None:
        return ()
    if not isinstance(entries, Mapping):
        raise InputError(f"invalid {what} {entries!r}: expected a mapping {_EXAMPLE}")
    out = []
    for mirror, canonical in entries.items():
        if not (isinstance(mirror, str) and isinstance(canonical, str)):
            raise InputError(f"invalid {what} entry {mirror!r}: {canonical!r}: expected two paths")
        entry = f"{mirror!r}: {canonical!r}"
        mirror_host, mirror_path = _side(mirror, entry, what)
        if mirror_host is None:
            # Only a rename: the canonical side is a path too (a host in it is just its first
            # segment, which rules never look at).
            canonical_path = canonical.strip().strip("/").lower()
            if not _PATH_RE.match(canonical_path):
                raise InputError(
                    f"invalid {what} entry {entry}: expected repository paths {_EXAMPLE}"
                )
            out.append(Mirror(None, mirror_path, None, canonical_path))
            continue
        canonical_host, canonical_path = _side(canonical, entry, what)
        if canonical_host in ("docker.io", "index.docker.io", "registry-1.docker.io"):
            canonical_host = None
        out.append(Mirror(mirror_host, mirror_path, canonical_host, canonical_path))
    return tuple(out)
