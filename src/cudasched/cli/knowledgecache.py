"""The knowledge base's data files, parsed once per version of the data and read back fast by
every later command.

Parsing the bundled YAML costs more than everything else a short command does, so the parsed
documents are kept in a per-user cache file named after a SHA-256 of the data files' bytes: a
changed data file is a new name, so a stale cache can never be read, and the YAML stays the only
source. The cache is an optimisation only: a cache that cannot be written (a read-only root file
system in a container) or read (corrupt, foreign) is ignored and the YAML is parsed as before.

It lives at the command line's edge because it reads the environment and files of its own;
the knowledge base takes it as a :class:`~cudasched.knowledge.loading.ParsedCache` and would
parse without one (the webhook and the tests do).

Location: ``$CUDASCHED_CACHE_DIR``, else ``$XDG_CACHE_HOME/cudasched``, else
``~/.cache/cudasched``; ``CUDASCHED_CACHE_DIR=off`` turns it off. Cache files are pickles, so one
is read only from a directory and file owned by the current user that nobody else can write.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path

__all__ = ["CACHE_ENV", "PickledDocuments", "cache_dir", "data_digest", "user_cache"]

CACHE_ENV = "CUDASCHED_CACHE_DIR"
_FORMAT = 1  # bump when the cached structure changes


def data_digest(raw: Mapping[str, bytes]) -> str:
    """A SHA-256 over every file name and its bytes (and the cache format)."""
    digest = hashlib.sha256(f"cudasched-knowledge-{_FORMAT}".encode())
    for name in sorted(raw):
        digest.update(name.encode() + b"\0" + len(raw[name]).to_bytes(8, "big") + raw[name])
    return digest.hexdigest()


def cache_dir(environ: Mapping[str, str] | None = None) -> Path | None:
    """Where cache files live, or ``None`` when caching is off."""
    env = os.environ if environ is None else environ
    explicit = env.get(CACHE_ENV)
    if explicit is not None:
        return None if explicit.strip().lower() in ("", "off", "0", "false") else Path(explicit)
    xdg = env.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg) / "cudasched"
    home = env.get("HOME")
    return Path(home) / ".cache" / "cudasched" if home else None


def _private(path: Path) -> bool:
    """Owned by us and writable by nobody else (a pickle is code: never read someone else's)."""
    try:
        info = path.lstat()
    except OSError:
        return False
    if stat.S_ISLNK(info.st_mode):
        return False
    own = not hasattr(os, "getuid") or info.st_uid == os.getuid()
    return own and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


class PickledDocuments:
    """Parsed data files as pickles in ``directory``, one file per version of the data."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, raw: Mapping[str, bytes]) -> Path:
        return self.directory / f"knowledge-{data_digest(raw)[:32]}.pickle"

    def load(self, raw: Mapping[str, bytes]) -> dict[str, object] | None:
        """The documents kept for exactly ``raw``; ``None`` when there are none, or when the
        file is not private to this user or cannot be read back (corrupt, truncated)."""
        path = self._path(raw)
        if not (_private(path.parent) and _private(path)):
            return None
        try:
            docs = pickle.loads(path.read_bytes())  # noqa: S301 - our own file, checked above
        except Exception:  # a corrupt or truncated cache is just a miss
            return None
        return docs if isinstance(docs, dict) else None

    def store(self, raw: Mapping[str, bytes], docs: Mapping[str, object]) -> None:
        """Write atomically (a temporary file renamed into place); failures are ignored."""
        path = self._path(raw)
        with contextlib.suppress(OSError, pickle.PicklingError):
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            if not _private(path.parent):
                return
            fd, tmp = tempfile.mkstemp(prefix=".knowledge-", dir=path.parent)
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(pickle.dumps(dict(docs), protocol=pickle.HIGHEST_PROTOCOL))
                os.replace(tmp, path)
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)


def user_cache(environ: Mapping[str, str] | None = None) -> PickledDocuments | None:
    """This user's cache (:func:`cache_dir`), or ``None`` when caching is off."""
    where = cache_dir(environ)
    return PickledDocuments(where) if where is not None else None
