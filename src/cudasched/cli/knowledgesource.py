"""Which knowledge a command judges with: the built-in tables, or the bundle ``cudasched
--knowledge REF|PATH`` names (``$CUDASCHED_KNOWLEDGE``), with the overlays
``--knowledge-overlay`` names on top, each verified against ``--knowledge-key`` when given.

A path that exists is a bundle on disk (a directory or an archive); anything else is a
registry reference, followed as the webhook follows it: the reference is asked each time a
command runs (one manifest request while it names the bundle kept from last time), a new
bundle is pulled, checked and kept as the last good one in this user's cache
(``$CUDASCHED_CACHE_DIR``, else ``~/.cache/cudasched``: ``knowledge-bundles/``). **A bundle that
cannot be read or is refused never stops a command**: it says why on stderr and judges with
the last good bundle of that reference, else the built-in knowledge. Keys, overlays and paths
that cannot be read are bad input (exit 2).

The same readers serve ``cudasched knowledge verify|diff|export|push|pull`` (:func:`read_source`).
Registries: credentials from ``--registry-config`` or the Docker ``config.json`` of this user;
loopback registries (``localhost``, ``127.0.0.1``, ``[::1]``) over plain HTTP, as Docker treats
them, others over HTTPS unless ``--plain-http`` names them.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cudasched.cli.app import KnowledgeChoice, knowledge_choice, note

if TYPE_CHECKING:
    from collections.abc import Callable

    from cudasched.knowledge.bundle import Bundle
    from cudasched.knowledge.bundlecheck import BundleKnowledge, Sourced
    from cudasched.knowledge.following import FollowOutcome
    from cudasched.knowledge.images import ImageTable
    from cudasched.knowledge.loading import ParsedCache
    from cudasched.knowledge.signing import Signature, TrustedKey
    from cudasched.registry.client import RegistryClient
    from cudasched.registry.following import BundleFollower
    from cudasched.settings.config import KnowledgeSettings

__all__ = [
    "BUILT_IN_WORD",
    "FollowPlan",
    "Following",
    "Source",
    "chosen_images",
    "chosen_knowledge",
    "configure",
    "followed_knowledge",
    "read_source",
    "read_trusted",
    "registry_client",
]

#: The word that names the built-in knowledge where a bundle is expected.
BUILT_IN_WORD = "built-in"
_LOOPBACK = ("localhost", "127.0.0.1", "[::1]")


@dataclass(frozen=True, slots=True)
class Following:
    """What to judge with and how to reach it: the reference (or path), trusted key files,
    overlay paths, and the registry's credentials, plain-HTTP hosts and CA bundle."""

    reference: str | None = None
    keys: tuple[Path, ...] = ()
    overlays: tuple[Path, ...] = ()
    registry_config: Path | None = None
    plain_http: tuple[str, ...] = ()
    ca_file: Path | None = None

    @property
    def is_builtin(self) -> bool:
        return not self.reference and not self.overlays


# Both are kept for one run of a command: each run's root options are a new KnowledgeChoice,
# so what an earlier run (a test's, in the same process) chose or configured is never used.
_configured: tuple[KnowledgeChoice, Following] | None = None
_chosen: tuple[KnowledgeChoice, Following, BundleKnowledge] | None = None


def configure(settings: KnowledgeSettings) -> None:
    """The ``knowledge:`` section of the ``--config`` file: used when the command line names
    no knowledge (``--knowledge`` and ``--knowledge-overlay`` win over it)."""
    global _configured
    following = Following(
        settings.reference,
        tuple(Path(k) for k in settings.public_keys),
        tuple(Path(o) for o in settings.overlays),
        Path(settings.registry_config) if settings.registry_config else None,
        tuple(settings.plain_http),
        Path(settings.ca_file) if settings.ca_file else None,
    )
    _configured = (knowledge_choice(), following)


def _following(choice: KnowledgeChoice) -> Following:
    """The command line's choice when it names a bundle or an overlay, else the settings';
    the trusted keys of both."""
    configured = _configured[1] if _configured and _configured[0] is choice else Following()
    keys = tuple(dict.fromkeys([*choice.keys, *configured.keys]))
    if choice.reference or choice.overlays:
        return Following(choice.reference, keys, choice.overlays)
    return replace(configured, keys=keys)


def chosen_knowledge() -> BundleKnowledge | None:
    """The knowledge of the bundle ``--knowledge`` (else the ``--config`` file's
    ``knowledge:``) names, with its overlays, read once per command; ``None`` for the
    built-in knowledge."""
    global _chosen
    choice = knowledge_choice()
    following = _following(choice)
    if following.is_builtin:
        return None
    if _chosen is None or _chosen[0] is not choice or _chosen[1] != following:
        _chosen = (choice, following, _resolve(following))
    return _chosen[2]


def chosen_images(kb: object) -> ImageTable | None:
    """The chosen bundle's image table when ``kb`` is its knowledge base, else ``None``."""
    if _chosen is None or _chosen[2].kb is not kb:
        return None
    return _chosen[2].images


@dataclass(frozen=True, slots=True)
class Source:
    """A bundle read for a command: the bundle with where it was read, the signatures found
    beside it, and the trusted key that verified one (``None``: no key was asked for)."""

    sourced: Sourced
    signatures: tuple[Signature, ...] = ()
    signed_by: TrustedKey | None = None


def read_trusted(paths: Sequence[Path]) -> tuple[TrustedKey, ...]:
    """The public keys in ``paths`` (PEM)."""
    from cudasched.knowledge.signing import load_public_key
    from cudasched.vocab import inputfiles

    return tuple(
        load_public_key(inputfiles.read_bytes(p, str(p), inputfiles.SETTINGS), str(p))
        for p in paths
    )


def registry_client(
    reference: str,
    registry_config: Path | None = None,
    plain_http: Sequence[str] = (),
    ca_file: Path | None = None,
) -> RegistryClient:
    """A client for ``reference``'s registry (see the module's docstring for credentials and
    plain HTTP; ``ca_file``: a CA bundle for a private registry), with time for a bundle's
    blobs."""
    import ssl

    from cudasched.registry.auth import Keychain, load_docker_config
    from cudasched.registry.client import Limits, RegistryClient
    from cudasched.registry.distribution import repository_of

    if registry_config is not None:
        keychain = load_docker_config(registry_config)
    else:
        home = os.environ.get("DOCKER_CONFIG") or os.path.join(os.path.expanduser("~"), ".docker")
        found = Path(home) / "config.json"
        keychain = load_docker_config(found) if found.is_file() else Keychain()
    host = repository_of(reference).host
    loopback = [host] if host.rsplit(":", 1)[0] in _LOOPBACK or host in _LOOPBACK else []
    limits = Limits(deadline_seconds=120.0, request_seconds=30.0)
    verify: Any = ssl.create_default_context(cafile=str(ca_file)) if ca_file else True
    plain = [*plain_http, *loopback]
    return RegistryClient(keychain=keychain, plain_http=plain, limits=limits, verify=verify)


def read_source(
    text: str,
    trusted: Sequence[TrustedKey] = (),
    *,
    registry_config: Path | None = None,
    plain_http: Sequence[str] = (),
    ca_file: Path | None = None,
) -> Source:
    """The bundle ``text`` names: ``built-in``, a directory or archive that exists, or a
    registry reference; its digest and, with ``trusted`` keys, a signature checked (a
    :class:`~cudasched.knowledge.bundle.BundleError` when not)."""
    from cudasched.knowledge.bundlecheck import Sourced, builtin_source
    from cudasched.knowledge.signing import verify_signatures

    if text == BUILT_IN_WORD:
        source = builtin_source()
        if trusted:
            verify_signatures(source.bundle.digest, (), trusted, BUILT_IN_WORD)
        return Source(source)
    path = Path(text)
    if path.exists():
        from cudasched.knowledge.bundlefiles import read_bundle_path

        found = read_bundle_path(path)
        signed_by = None
        if trusted:
            signed_by = verify_signatures(found.bundle.digest, found.signatures, trusted, text)
        return Source(Sourced(found.bundle, str(path)), found.signatures, signed_by)
    from cudasched.registry.bundles import pull_bundle

    with registry_client(text, registry_config, plain_http, ca_file) as client:
        pulled = pull_bundle(client, text, trusted=trusted)
    if pulled is None:
        raise RuntimeError("a bundle was reported unchanged though none was held")
    return Source(
        Sourced(pulled.bundle, pulled.pinned, pulled.digest), pulled.signatures, pulled.signed_by
    )


# ---------------------------------------------------------------------- following a reference


def _resolve(choice: Following) -> BundleKnowledge:
    """The chosen knowledge: the bundle (or the fallback said on stderr) with its overlays."""
    from cudasched.knowledge.bundle import BundleError
    from cudasched.knowledge.bundlecheck import builtin_source, knowledge_of

    trusted = read_trusted(choice.keys)
    overlays = _overlays(choice, trusted)
    base, checked = _base(choice, trusted) if choice.reference else (builtin_source(), None)
    if checked is not None and not overlays:
        return checked
    try:
        return knowledge_of(base, overlays, _cache())
    except BundleError as exc:
        if not overlays:
            raise
        note(f"knowledge overlays refused ({exc.reason}): {exc}; judging without them")
        return checked if checked is not None else knowledge_of(base, (), _cache())


def _overlays(choice: Following, trusted: Sequence[TrustedKey]) -> list[Sourced]:
    """The overlays ``choice`` names that can be used (a refused one is noted and left out)."""
    from cudasched.knowledge.bundle import BundleError

    overlays = []
    for path in choice.overlays:
        try:
            overlays.append(read_source(str(path), trusted).sourced)
        except BundleError as exc:
            note(f"knowledge overlay {path} refused ({exc.reason}): {exc}; judging without it")
    return overlays


def _base(
    choice: Following, trusted: Sequence[TrustedKey]
) -> tuple[Sourced, BundleKnowledge | None]:
    """The bundle ``reference`` names, checked (with its knowledge when it was read now), or
    what is left when it cannot be used: its last good bundle, else the built-in one."""
    from cudasched.knowledge.bundle import BundleError
    from cudasched.knowledge.bundlecheck import builtin_source, knowledge_of
    from cudasched.registry.distribution import RegistryError

    reference = str(choice.reference)
    kept = None if Path(reference).exists() else _LastGood(reference)
    try:
        if kept is None:
            source = read_source(reference, trusted).sourced
            return source, knowledge_of(source, (), _cache())
        return _pulled(choice, trusted, kept)
    except (BundleError, RegistryError) as exc:
        fallback = kept.read(trusted) if kept is not None else None
        said = (
            f"its last good bundle {fallback.bundle.meta.version}"
            if fallback is not None
            else "the built-in knowledge"
        )
        why = f" ({exc.reason})" if isinstance(exc, BundleError) else ""
        note(f"knowledge {reference} not used{why}: {exc}; judging with {said}")
        return (fallback or builtin_source()), None


def _pulled(
    choice: Following, trusted: Sequence[TrustedKey], kept: _LastGood
) -> tuple[Sourced, BundleKnowledge | None]:
    """The bundle ``reference`` names now: the kept one while the reference still names it
    (one manifest request), else the new one, checked and kept."""
    from cudasched.knowledge.bundlecheck import Sourced, knowledge_of
    from cudasched.registry.bundles import pull_bundle

    held = kept.read(trusted)
    reference = str(choice.reference)
    client = registry_client(reference, choice.registry_config, choice.plain_http, choice.ca_file)
    with client:
        pulled = pull_bundle(client, reference, trusted=trusted, held=held.digest if held else "")
    if pulled is None and held is not None:
        return held, None
    if pulled is None:
        raise RuntimeError("a bundle was reported unchanged though none was held")
    source = Sourced(pulled.bundle, pulled.pinned, pulled.digest)
    checked = knowledge_of(source, (), _cache())
    kept.write(pulled.bundle, pulled.digest, pulled.pinned, pulled.signatures)
    return source, checked


@dataclass(frozen=True, slots=True)
class FollowPlan:
    """How a process that runs until stopped (the webhook, the agent) follows a registry
    reference: what it was chosen with, the keys a bundle must be signed by and the overlays,
    both read once at start. :meth:`follower` makes the follower in the process that runs it
    (each webhook worker makes its own: a registry connection must not cross a fork)."""

    following: Following
    trusted: tuple[TrustedKey, ...] = ()
    overlays: tuple[Sourced, ...] = ()

    @property
    def reference(self) -> str:
        return str(self.following.reference)

    def follower(
        self,
        initial: BundleKnowledge,
        *,
        interval_seconds: float,
        on_outcome: Callable[[FollowOutcome], None] | None = None,
        prepare: Callable[[BundleKnowledge], None] | None = None,
    ) -> BundleFollower:
        """A follower of the reference that starts from ``initial`` (the knowledge the process
        started with: when it is a bundle of the reference, the first check is one manifest
        request) with a registry client of its own."""
        from cudasched.knowledge.provenance import BUILT_IN
        from cudasched.registry.following import BundleFollower

        choice = self.following
        client = registry_client(
            self.reference, choice.registry_config, choice.plain_http, choice.ca_file
        )
        provenance = initial.provenance
        return BundleFollower(
            self.reference,
            client,
            initial,
            initial_digest=provenance.digest if provenance.origin != BUILT_IN else "",
            trusted=self.trusted,
            overlays=self.overlays,
            interval_seconds=interval_seconds,
            cache=_cache(),
            on_outcome=on_outcome,
            prepare=prepare,
            owns_client=True,
        )


def followed_knowledge() -> tuple[BundleKnowledge, FollowPlan | None]:
    """For a process that runs until stopped: the knowledge to start with, read now as every
    command reads it (a registry reference asked once, a failure noted, the last good bundle or
    the built-in knowledge used instead), and how to follow the reference from now on
    (``None``: the built-in knowledge, or a bundle on disk, read once)."""
    from cudasched.knowledge.bundlecheck import builtin_knowledge

    chosen = chosen_knowledge()
    knowledge = chosen if chosen is not None else builtin_knowledge(_cache())
    following = _following(knowledge_choice())
    reference = following.reference
    if not reference or Path(reference).exists():
        return knowledge, None
    trusted = read_trusted(following.keys)
    return knowledge, FollowPlan(following, trusted, tuple(_overlays(following, trusted)))


def _cache() -> ParsedCache | None:
    from cudasched.cli.knowledgecache import user_cache

    return user_cache()


class _LastGood:
    """The last good bundle of one reference, kept in this user's cache directory: the
    bundle's files, its signatures, the digest it was pulled by and where."""

    def __init__(self, reference: str) -> None:
        from cudasched.cli.knowledgecache import cache_dir

        root = cache_dir()
        key = hashlib.sha256(reference.encode()).hexdigest()[:32]
        self.path = root / "knowledge-bundles" / key if root is not None else None

    def read(self, trusted: Sequence[TrustedKey]) -> Sourced | None:
        """The kept bundle, its signature checked again; ``None`` when none is kept or it no
        longer reads or verifies."""
        from cudasched.knowledge.bundle import BundleError
        from cudasched.knowledge.bundlecheck import Sourced
        from cudasched.knowledge.bundlefiles import read_bundle_path
        from cudasched.knowledge.signing import verify_signatures
        from cudasched.vocab.errors import InputError

        if self.path is None or not (self.path / "pulled").is_file():
            return None
        try:
            digest, pinned = (self.path / "pulled").read_text("utf-8").split()[:2]
            found = read_bundle_path(self.path / "bundle")
            if trusted:
                verify_signatures(digest, found.signatures, trusted, pinned)
        except (OSError, ValueError, InputError, BundleError):
            return None
        return Sourced(found.bundle, pinned, digest)

    def write(
        self, bundle: Bundle, digest: str, pinned: str, signatures: Sequence[Signature]
    ) -> None:
        """Keep a bundle that passed every check (atomically; a cache that cannot be written
        is skipped)."""
        from cudasched.knowledge.bundlefiles import directory_files

        if self.path is None:
            return
        with contextlib.suppress(OSError):
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fresh = Path(tempfile.mkdtemp(prefix=".pull-", dir=self.path.parent))
            (fresh / "bundle").mkdir()
            for name, data in directory_files(bundle, signatures).items():
                (fresh / "bundle" / name).write_bytes(data)
            (fresh / "pulled").write_text(f"{digest} {pinned}\n", "utf-8")
            old = self.path.with_name(self.path.name + ".old")
            shutil.rmtree(old, ignore_errors=True)
            if self.path.exists():
                os.replace(self.path, old)
            os.replace(fresh, self.path)
            shutil.rmtree(old, ignore_errors=True)
