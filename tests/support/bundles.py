"""Knowledge bundles for the tests: the built-in one with planted changes, overlays, key
pairs, and bundles written to disk as a cluster owner keeps them.

Every planted change is a named :data:`PLANTS` entry that edits parsed tables in place and says
which row of ``cudasched knowledge diff`` it must give (topic, kind, name), so a test can plant
any subset and expect exactly those.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from cudasched.knowledge.bundle import Bundle, BundleKind, BundleMeta, builtin_bundle
from cudasched.knowledge.bundlefiles import directory_files
from cudasched.knowledge.signing import Signature
from tests.support.registry import Registry

Tables = dict[str, Any]

#: A new R610 release, newer and dated later than any the built-in tables hold.
NEW_610 = "610.990.01"


def builtin_610() -> str:
    """The built-in tables' newest R610 release."""
    row = next(r for r in builtin_tables()["drivers.yaml"]["latest_releases"] if r["branch"] == 610)
    return str(row["version"])


def builtin_tables() -> Tables:
    """The built-in bundle's tables, parsed (a fresh copy each call)."""
    return copy.deepcopy(builtin_bundle().documents())


def _rows(tables: Tables, table: str, section: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = tables[table][section]
    return found


def _row(tables: Tables, table: str, section: str, key: str, value: object) -> dict[str, Any]:
    return next(r for r in _rows(tables, table, section) if r.get(key) == value)


def _new_release(tables: Tables) -> None:
    row = _row(tables, "drivers.yaml", "latest_releases", "branch", 610)
    old = {"version": row["version"], "released": row["released"], "source": row["source"]}
    row.update(version=NEW_610, released="2036-09-15", source="https://example.com/r610")
    _rows(tables, "drivers.yaml", "earlier_releases").append(old)


def _toolkit_minimum(tables: Tables) -> None:
    row = _row(tables, "toolkits.yaml", "releases", "version", "13.4.1")
    row.update(min_driver="615.20.01", status="known")
    row.pop("alternatives", None)


def _image_row(tables: Tables) -> None:
    _rows(tables, "images.yaml", "images").insert(
        0,
        {
            "id": "team-llm",
            "repositories": ["team/llm"],
            "tag": r"^cu(?P<cuda>\d+\.\d+)",
            "cuda_from": "tag",
            "source": "https://example.com/team-llm",
        },
    )


def _turing_capped(tables: Tables) -> None:
    row = next(
        r for r in _rows(tables, "architectures.yaml", "architectures") if r["name"] == "Turing"
    )
    row["last_driver_branch"] = 610


def _new_gpu(tables: Tables) -> None:
    _rows(tables, "gpus.yaml", "gpus").append(
        {
            "product": "NVIDIA Z100",
            "names": ["NVIDIA Z100"],
            "compute": "9.0",
            "arch": "Hopper",
            "datacenter": True,
            "source": "https://example.com/z100",
        }
    )


@dataclass(frozen=True)
class Plant:
    """One planted change and the diff row it must give."""

    edit: Callable[[Tables], None]
    topic: str
    kind: str
    name: str


def _volta_name() -> str:
    row = next(
        r for r in builtin_tables()["architectures.yaml"]["architectures"] if r["name"] == "Volta"
    )
    return f"Volta (cc {', '.join(str(c) for c in row['compute'])})"


PLANTS: dict[str, Plant] = {
    "new-release": Plant(_new_release, "Driver releases", "changed", "R610 newest release"),
    "toolkit-minimum": Plant(_toolkit_minimum, "CUDA toolkits", "changed", "CUDA 13.4.1"),
    "image-row": Plant(_image_row, "Images", "added", "image row team-llm (team/llm)"),
    "turing-capped": Plant(_turing_capped, "GPUs and architectures", "changed", "Turing (cc 7.5)"),
    "new-gpu": Plant(_new_gpu, "GPUs and architectures", "added", "GPU NVIDIA Z100"),
}


def expected_rows(names: Iterable[str]) -> set[tuple[str, str, str]]:
    """The diff rows the plants ``names`` give; a new release also adds its predecessor to
    the earlier releases."""
    rows = {(PLANTS[n].topic, PLANTS[n].kind, PLANTS[n].name) for n in names}
    if "new-release" in names:
        rows.add(("Driver releases", "added", f"driver {builtin_610()}"))
    return rows


def planted(names: Iterable[str], *, version: str = "2026.09.15") -> Bundle:
    """The built-in bundle with the plants ``names`` applied (changed tables re-dumped as
    YAML, the others byte for byte), as ``version`` of 2026-09-15."""
    tables = builtin_tables()
    for name in names:
        PLANTS[name].edit(tables)
    return bundle_of(tables, version=version)


def bundle_of(
    tables: Mapping[str, Any],
    *,
    version: str = "2026.09.15",
    day: str = "2026-09-15",
    kind: BundleKind = BundleKind.BASE,
) -> Bundle:
    """A bundle of parsed ``tables`` (a table equal to the built-in one keeps its bytes)."""
    base = builtin_bundle()
    original = base.documents()
    raw = {
        name: base.tables[name]
        if name in original and original[name] == doc
        else yaml.safe_dump(doc, sort_keys=False).encode()
        for name, doc in tables.items()
    }
    meta = BundleMeta(kind, version, datetime.date.fromisoformat(day), tuple(raw))
    return Bundle(meta, raw)


def raised_12_4(minimum: str) -> Bundle:
    """The built-in tables with CUDA 12.4's minimum driver raised to ``minimum`` (a change
    that moves where the CUDA 12.4 pods of the sample cluster may run)."""
    tables = builtin_tables()
    row = next(r for r in tables["toolkits.yaml"]["releases"] if r["version"] == "12.4.0")
    row["min_driver"] = minimum
    return bundle_of(tables)


def overlay_of(tables: Mapping[str, Any], *, version: str = "local.1") -> Bundle:
    """An overlay bundle of ``tables`` (parsed)."""
    return bundle_of(tables, version=version, day="2026-09-20", kind=BundleKind.OVERLAY)


def release_overlay(version: str = "610.80.02", released: str = "2026-09-20") -> Bundle:
    """An overlay that adds a newer R610 release, citing a named source of its own."""
    return overlay_of(
        {
            "drivers.yaml": {
                "sources": {"our_rollout": "https://example.com/rollout"},
                "latest_releases": [
                    {
                        "branch": 610,
                        "version": version,
                        "released": released,
                        "source": "our_rollout",
                    }
                ],
            }
        }
    )


def push_to(registry: Registry, reference: str, bundle: Bundle) -> str:
    """``bundle`` pushed to ``reference`` in the test ``registry`` (plain HTTP); its digest."""
    from cudasched.registry.bundles import push_bundle
    from cudasched.registry.client import RegistryClient

    with RegistryClient(plain_http=[registry.host]) as client:
        return push_bundle(client, reference, bundle)


def write(directory: Path, bundle: Bundle, signatures: Iterable[Signature] = ()) -> Path:
    """``bundle`` as a directory, as ``cudasched knowledge export`` writes it."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in directory_files(bundle, list(signatures)).items():
        (directory / name).write_bytes(data)
    return directory


def ed25519_pair() -> tuple[bytes, bytes]:
    """A fresh Ed25519 key pair as PEM: (private, public)."""
    key = ed25519.Ed25519PrivateKey.generate()
    return _pem(key)


def ecdsa_pair() -> tuple[bytes, bytes]:
    """A fresh ECDSA P-256 key pair as PEM: (private, public)."""
    return _pem(ec.generate_private_key(ec.SECP256R1()))


def _pem(key: Any) -> tuple[bytes, bytes]:
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, public
