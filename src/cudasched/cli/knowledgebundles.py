"""``cudasched knowledge export|diff|verify|push|pull``: the knowledge as a bundle
(docs/guide/knowledge.md), written, compared, checked, published and fetched.

A bundle is named the same way everywhere (SOURCE): ``built-in`` (the tables inside this
cudasched), a bundle directory or archive that exists, or a registry reference (a tag, or
``@sha256:...``). Registered on ``cudasched knowledge`` by :func:`register`.
"""

from __future__ import annotations

import json
import shutil
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from cudasched.cli.app import EXIT_INCOMPATIBLE, EXIT_OK, fail, versioned
from cudasched.cli.knowledgesource import BUILT_IN_WORD, Source, read_source, read_trusted
from cudasched.cli.options import PlainHttpOption, RegistryConfigOption
from cudasched.vocab.errors import InputError

if TYPE_CHECKING:
    from cudasched.knowledge.bundle import Bundle, BundleError
    from cudasched.knowledge.signing import Signature

__all__ = ["register"]


class Format(StrEnum):
    TEXT = "text"
    JSON = "json"


OutputOption = Annotated[Format, typer.Option("-o", "--output", help="Output format.")]
FromOption = Annotated[
    str,
    typer.Option(
        "--from",
        metavar="SOURCE",
        help="The bundle: built-in, a bundle directory or archive, or a registry reference.",
    ),
]
KeyOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--key",
        metavar="PEM",
        help="A trusted public key (Ed25519 or ECDSA P-256): the bundle must carry a valid "
        "signature by one of them (repeat for several).",
    ),
]
SignKeyOption = Annotated[
    Path | None,
    typer.Option(
        "--sign-key",
        metavar="PEM",
        help="Sign the bundle with this private key (openssl genpkey -algorithm ed25519).",
    ),
]
BaseOption = Annotated[
    str,
    typer.Option(
        "--base",
        metavar="SOURCE",
        help="The bundle an overlay is merged over to check it (default: built-in).",
    ),
]
ForceOption = Annotated[
    bool, typer.Option("--force", help="Replace what is at the target already.")
]


def _read(
    text: str,
    keys: list[Path] | None = None,
    config: Path | None = None,
    plain: list[str] | None = None,
) -> Source:
    return read_source(
        text.strip(), read_trusted(keys or ()), registry_config=config, plain_http=plain or ()
    )


# ---------------------------------------------------------------------- verify


def verify_cmd(
    source: Annotated[str, typer.Argument(metavar="SOURCE", help="The bundle to check.")],
    key: KeyOption = None,
    base: BaseOption = BUILT_IN_WORD,
    registry_config: RegistryConfigOption = None,
    plain_http: PlainHttpOption = None,
    output: OutputOption = Format.TEXT,
) -> None:
    """Check a knowledge bundle as a cluster would before using it: its digest, a signature
    by a trusted key (--key), its schema, that every row cites its source, and that the
    knowledge base loads it (an overlay: merged over --base).

    Exit 0 when it passes, 1 when it is refused (the reason is said), 2 on bad input.
    """
    from cudasched.knowledge.bundle import BundleError
    from cudasched.knowledge.bundlecheck import knowledge_of

    try:
        found = _read(source, key, registry_config, plain_http)
        bundle = found.sourced.bundle
        if bundle.is_overlay:
            knowledge = knowledge_of(_read(base).sourced, [found.sourced])
        else:
            knowledge = knowledge_of(found.sourced)
    except BundleError as exc:
        _refused(exc, output)
    except InputError as exc:
        fail(str(exc))
    doc = _summary(found, knowledge.provenance.to_dict())
    if output is Format.JSON:
        sys.stdout.write(json.dumps(versioned({"verified": True, **doc}), indent=2) + "\n")
        raise typer.Exit(EXIT_OK)
    signed = (
        f"signed by {doc['signedBy']}" if doc["signedBy"] else "signature not checked (no --key)"
    )
    sys.stdout.write(
        f"verified: {bundle.meta.kind.value} {bundle.meta.version} of {bundle.meta.date} "
        f"(schema {bundle.meta.schema}), {found.sourced.origin}\n"
        f"  digest {doc['digest']}\n  {signed}\n"
        f"  {len(bundle.meta.tables)} tables, every row citing its source: "
        f"{', '.join(bundle.meta.tables)}\n"
    )
    raise typer.Exit(EXIT_OK)


def _refused(exc: BundleError, output: Format) -> NoReturn:
    if output is Format.JSON:
        doc = {"verified": False, "reason": exc.reason, "message": str(exc)}
        sys.stdout.write(json.dumps(versioned(doc), indent=2) + "\n")
    else:
        sys.stdout.write(f"refused ({exc.reason}): {exc}\n")
    raise typer.Exit(EXIT_INCOMPATIBLE)


def _summary(found: Source, knowledge: dict[str, Any]) -> dict[str, Any]:
    bundle = found.sourced.bundle
    return {
        "kind": bundle.meta.kind.value,
        "schemaVersion": bundle.meta.schema,
        "version": bundle.meta.version,
        "date": bundle.meta.date.isoformat(),
        "origin": found.sourced.origin,
        "digest": found.sourced.digest or bundle.digest,
        "tables": list(bundle.meta.tables),
        "signatures": [s.key_id for s in found.signatures],
        "signedBy": found.signed_by.key_id if found.signed_by is not None else None,
        "knowledge": knowledge,
    }


# ---------------------------------------------------------------------- diff


def diff_cmd(
    old: Annotated[str, typer.Argument(metavar="OLD", help="The bundle to compare from.")],
    new: Annotated[str, typer.Argument(metavar="NEW", help="The bundle to compare to.")],
    registry_config: RegistryConfigOption = None,
    plain_http: PlainHttpOption = None,
    output: OutputOption = Format.TEXT,
) -> None:
    """Say what changed from bundle OLD to bundle NEW, in words: new driver releases and
    branches, changed toolkit minimums, GPUs and image rows added, architectures moved to
    another last driver branch (with their GPUs), and every other row added, changed or
    removed.

    OLD and NEW: built-in, a bundle directory or archive, or a registry reference; an
    overlay is compared as merged over the built-in knowledge. Exit 0 when they hold the same
    facts, 1 when they differ (as diff does), 2 on bad input.
    """
    from cudasched.knowledge.bundlediff import TOPICS, diff_tables

    try:
        before = _read(old, config=registry_config, plain=plain_http)
        after = _read(new, config=registry_config, plain=plain_http)
        changes = diff_tables(_tables(before), _tables(after))
    except InputError as exc:
        fail(str(exc))
    code = EXIT_INCOMPATIBLE if changes else EXIT_OK
    names = [_named(before), _named(after)]
    if output is Format.JSON:
        doc = {"from": names[0], "to": names[1], "changes": [c.to_dict() for c in changes]}
        sys.stdout.write(json.dumps(versioned(doc), indent=2) + "\n")
        raise typer.Exit(code)
    lines = [f"from {names[0]} to {names[1]}"]
    marks = {"added": "+", "removed": "-", "changed": "~"}
    for topic in TOPICS:
        mine = [c for c in changes if c.topic == topic]
        if mine:
            lines.append(topic)
            lines += [f"  {marks[c.kind]} {c.text}" for c in mine]
    lines.append(f"{len(changes)} change{'s' if len(changes) != 1 else ''}")
    sys.stdout.write("\n".join(lines) + "\n")
    raise typer.Exit(code)


def _named(found: Source) -> str:
    bundle = found.sourced.bundle
    return f"{bundle.meta.kind.value} {bundle.meta.version} ({found.sourced.origin})"


def _tables(found: Source) -> dict[str, object]:
    """The bundle's parsed tables; an overlay's merged over the built-in ones."""
    from cudasched.knowledge.bundlecheck import builtin_source
    from cudasched.knowledge.overlay import merge_overlay

    bundle = found.sourced.bundle
    if not bundle.is_overlay:
        return bundle.documents()
    return merge_overlay(
        builtin_source().bundle.documents(), bundle.documents(), found.sourced.label
    )


# ---------------------------------------------------------------------- export


def export_cmd(
    target: Annotated[
        Path,
        typer.Argument(
            metavar="DIR|FILE",
            help="A directory to create (or an empty one), or an archive: .tar, .tar.gz, .tgz.",
        ),
    ],
    source: FromOption = BUILT_IN_WORD,
    sign_key: SignKeyOption = None,
    force: ForceOption = False,
    registry_config: RegistryConfigOption = None,
    plain_http: PlainHttpOption = None,
) -> None:
    """Write a knowledge bundle (default: the built-in one) as a directory or an archive:
    bundle.yaml (kind, schema version, version, date, tables), every table as written, and
    signatures.json when it is signed (--sign-key adds a signature).

    The bundle keeps its digest in every form. To publish a bundle of your own, export the
    built-in one, edit its tables and bundle.yaml (a new version and date), then cudasched
    knowledge verify and push it. Exit 0, 2 on bad input.
    """
    from cudasched.knowledge.bundlefiles import archive_bytes, directory_files, is_archive_name

    try:
        found = _read(source, config=registry_config, plain=plain_http)
        bundle = found.sourced.bundle
        signatures = [s for s in found.signatures if s.digest == bundle.digest]
        signatures += _signed(bundle, sign_key)
        files = directory_files(bundle, signatures)
        if is_archive_name(target):
            packed = archive_bytes(files, compress=not target.name.endswith(".tar"))
            _write_archive(target, packed, force)
        else:
            _write_directory(target, files, force)
    except InputError as exc:
        fail(str(exc))
    sys.stdout.write(
        f"wrote {bundle.meta.kind.value} {bundle.meta.version} to {target} ({bundle.digest})\n"
    )
    raise typer.Exit(EXIT_OK)


def _signed(bundle: Bundle, sign_key: Path | None) -> list[Signature]:
    if sign_key is None:
        return []
    from cudasched.knowledge.signing import load_private_key
    from cudasched.vocab import inputfiles

    pem = inputfiles.read_bytes(sign_key, str(sign_key), inputfiles.SETTINGS)
    return [load_private_key(pem, str(sign_key)).sign(bundle.digest)]


def _write_archive(target: Path, data: bytes, force: bool) -> None:
    if target.exists() and not force:
        raise InputError(f"{target}: exists already (--force replaces it)")
    try:
        target.write_bytes(data)
    except OSError as exc:
        raise InputError(f"{target}: cannot write ({exc.strerror or exc})") from None


def _write_directory(target: Path, files: dict[str, bytes], force: bool) -> None:
    if target.exists() and not target.is_dir():
        raise InputError(f"{target}: exists and is not a directory")
    if target.is_dir() and any(target.iterdir()):
        if not force:
            raise InputError(f"{target}: not empty (--force replaces its contents)")
        shutil.rmtree(target)
    try:
        target.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (target / name).write_bytes(data)
    except OSError as exc:
        raise InputError(f"{target}: cannot write ({exc.strerror or exc})") from None


# ---------------------------------------------------------------------- push and pull


def push_cmd(
    reference: Annotated[
        str, typer.Argument(metavar="REF", help="Where to publish: registry/repository:tag.")
    ],
    source: FromOption = BUILT_IN_WORD,
    sign_key: SignKeyOption = None,
    registry_config: RegistryConfigOption = None,
    plain_http: PlainHttpOption = None,
) -> None:
    """Publish a knowledge bundle (default: the built-in one) to a registry as an OCI
    artifact: one layer per table, the metadata as its config, and its signature beside it
    when --sign-key is given (tag sha256-<digest>.sig).

    The bundle is checked first (a bundle a cluster would refuse is not published). Prints
    the reference pinned by digest, which a cluster can follow to never move. Credentials:
    --registry-config, else the Docker config of this user. Exit 0, 2 on bad input or when
    the registry refuses.
    """
    from cudasched.cli.knowledgesource import registry_client
    from cudasched.knowledge.bundlecheck import knowledge_of
    from cudasched.registry.bundles import push_bundle
    from cudasched.registry.distribution import repository_of

    try:
        found = _read(source, config=registry_config, plain=plain_http)
        bundle = found.sourced.bundle
        if not bundle.is_overlay:
            knowledge_of(found.sourced)
        signatures = [s for s in found.signatures if s.digest == bundle.digest]
        signatures += _signed(bundle, sign_key)
        with registry_client(reference, registry_config, plain_http or ()) as client:
            digest = push_bundle(client, reference, bundle, signatures)
    except InputError as exc:
        fail(str(exc))
    repo = repository_of(reference)
    sys.stdout.write(
        f"pushed {bundle.meta.kind.value} {bundle.meta.version} to {reference}\n"
        f"  pinned: {repo.name}@{digest}\n"
    )
    raise typer.Exit(EXIT_OK)


def pull_cmd(
    reference: Annotated[str, typer.Argument(metavar="REF", help="The bundle's reference.")],
    target: Annotated[
        Path | None,
        typer.Argument(metavar="[DIR|FILE]", help="Where to write the bundle (else only checked)."),
    ] = None,
    key: KeyOption = None,
    force: ForceOption = False,
    registry_config: RegistryConfigOption = None,
    plain_http: PlainHttpOption = None,
) -> None:
    """Fetch a knowledge bundle from a registry, check it (digests, a signature by --key,
    schema, sources, content) and write it to DIR or an archive when given.

    Prints the reference pinned by digest. Exit 0, 1 when the bundle is refused, 2 on bad
    input or an unreachable registry.
    """
    from cudasched.knowledge.bundle import BundleError
    from cudasched.knowledge.bundlecheck import knowledge_of
    from cudasched.knowledge.bundlefiles import archive_bytes, directory_files, is_archive_name

    try:
        found = _read(reference, key, registry_config, plain_http)
        bundle = found.sourced.bundle
        if not bundle.is_overlay:
            knowledge_of(found.sourced)
        if target is not None:
            files = directory_files(bundle, found.signatures)
            if is_archive_name(target):
                packed = archive_bytes(files, compress=not target.name.endswith(".tar"))
                _write_archive(target, packed, force)
            else:
                _write_directory(target, files, force)
    except BundleError as exc:
        _refused(exc, Format.TEXT)
    except InputError as exc:
        fail(str(exc))
    signed = f", signed by {found.signed_by.key_id}" if found.signed_by is not None else ""
    wrote = f"; wrote {target}" if target is not None else ""
    meta = bundle.meta
    sys.stdout.write(
        f"pulled {meta.kind.value} {meta.version} of {meta.date}{signed}{wrote}\n"
        f"  pinned: {found.sourced.origin}\n"
    )
    raise typer.Exit(EXIT_OK)


def register(group: typer.Typer) -> None:
    """Add the bundle subcommands to ``cudasched knowledge``."""
    group.command("export")(export_cmd)
    group.command("diff")(diff_cmd)
    group.command("verify")(verify_cmd)
    group.command("push")(push_cmd)
    group.command("pull")(pull_cmd)
