"""The knowledge as a bundle: its metadata, its canonical manifest and digest, a pulled manifest
read back, and the provenance a knowledge base carries."""

from __future__ import annotations

import datetime
import hashlib
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.bundle import (
    ARTIFACT_TYPE,
    CONFIG_TYPE,
    TABLE_TYPE,
    TABLES,
    TITLE,
    Bundle,
    BundleError,
    BundleKind,
    BundleMeta,
    assemble,
    builtin_bundle,
    read_layout,
)
from cudasched.knowledge.provenance import BUILT_IN, Provenance
from tests.support.bundles import builtin_tables

META = {
    "kind": "KnowledgeBundle",
    "schemaVersion": 1,
    "version": "2026.09.01",
    "date": "2026-09-01",
    "tables": list(TABLES),
}


def test_the_builtin_bundle_holds_every_table_the_knowledge_loads() -> None:
    bundle = builtin_bundle()
    assert bundle.meta.kind is BundleKind.BASE and bundle.meta.tables == TABLES
    assert bundle.meta.schema == 1
    assert set(bundle.documents()) == set(TABLES)


def test_the_builtin_date_is_not_older_than_its_newest_dated_fact() -> None:
    """A table changed without bumping bundle.yaml would make the audit call new facts old:
    the date is at least every release date the driver tables hold."""
    tables = builtin_tables()
    drivers = tables["drivers.yaml"]
    dates = [r.get("released") for r in drivers["latest_releases"] + drivers["earlier_releases"]]
    newest = max(datetime.date.fromisoformat(str(d)) for d in dates if d)
    assert builtin_bundle().meta.date >= newest, (
        "a newer fact than data/bundle.yaml's date: bump its version and date"
    )


def test_the_manifest_is_an_oci_artifact_with_one_titled_layer_per_table() -> None:
    bundle = builtin_bundle()
    manifest = orjson.loads(bundle.manifest_bytes())
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert manifest["artifactType"] == ARTIFACT_TYPE
    assert manifest["config"]["mediaType"] == CONFIG_TYPE
    config = bundle.config_bytes()
    assert manifest["config"]["digest"] == "sha256:" + hashlib.sha256(config).hexdigest()
    assert orjson.loads(config) == bundle.meta.to_document()
    titles = [layer["annotations"][TITLE] for layer in manifest["layers"]]
    assert titles == list(TABLES)
    assert {layer["mediaType"] for layer in manifest["layers"]} == {TABLE_TYPE}
    assert manifest["annotations"]["org.opencontainers.image.version"] == bundle.meta.version


def test_the_digest_is_the_manifests_and_the_same_every_time() -> None:
    first, second = builtin_bundle(), builtin_bundle()
    assert first.digest == second.digest
    assert first.digest == "sha256:" + hashlib.sha256(first.manifest_bytes()).hexdigest()
    changed = Bundle(first.meta, {**first.tables, "gpus.yaml": first.tables["gpus.yaml"] + b"\n"})
    assert changed.digest != first.digest


def test_a_pulled_manifest_reads_back_as_the_same_bundle() -> None:
    bundle = builtin_bundle()
    layout = read_layout(bundle.manifest_bytes(), "test")
    blobs = {d.digest: bundle.tables[d.title] for d in layout.layers}
    again = assemble(layout, bundle.config_bytes(), blobs)
    assert again == bundle and again.digest == bundle.digest


@pytest.mark.parametrize(
    ("change", "reason", "words"),
    [
        ({"schemaVersion": 2}, "schema", "schemaVersion 2"),
        ({"tables": [*TABLES, "secrets.yaml"]}, "schema", "'secrets.yaml' is not one"),
        ({"tables": list(TABLES[1:])}, "schema", "toolkits.yaml is missing"),
        ({"kind": "Image"}, "format", "kind 'Image'"),
        ({"version": "1 2"}, "format", "is not a version"),
        ({"version": 3}, "format", "is not a version"),
        ({"date": "yesterday"}, "format", "is not a day"),
        ({"owner": "me"}, "format", "unknown key 'owner'"),
        ({"tables": [TABLES[0], TABLES[0]]}, "format", "listed twice"),
    ],
)
def test_metadata_that_does_not_read_is_refused_with_its_reason(
    change: dict[str, Any], reason: str, words: str
) -> None:
    with pytest.raises(BundleError) as caught:
        BundleMeta.from_document({**META, **change}, "bundle.yaml")
    assert caught.value.reason == reason and words in str(caught.value)


def test_an_overlay_may_hold_some_tables_only() -> None:
    meta = BundleMeta.from_document(
        {**META, "kind": "KnowledgeOverlay", "tables": ["drivers.yaml"]}, "overlay"
    )
    assert meta.kind is BundleKind.OVERLAY and meta.tables == ("drivers.yaml",)


def _manifest(**change: Any) -> bytes:
    doc = orjson.loads(builtin_bundle().manifest_bytes())
    doc.update(change)
    return orjson.dumps(doc)


@pytest.mark.parametrize(
    ("manifest", "words"),
    [
        (b"not json", "not JSON"),
        (_manifest(artifactType="application/vnd.example"), "not a cudasched knowledge bundle"),
        (_manifest(mediaType="application/vnd.oci.image.index.v1+json"), "not an OCI image"),
        (_manifest(layers=[]), "layers must list"),
        (
            _manifest(
                layers=[{"mediaType": TABLE_TYPE, "digest": "sha256:" + "a" * 64, "size": 1}]
            ),
            "is not a table (untitled)",
        ),
        (
            _manifest(layers=[{"mediaType": TABLE_TYPE, "digest": "sha256:../../x", "size": 1}]),
            "a sha256 digest",
        ),
    ],
)
def test_a_manifest_that_is_not_a_bundles_is_refused_before_any_blob(
    manifest: bytes, words: str
) -> None:
    with pytest.raises(BundleError) as caught:
        read_layout(manifest, "registry.example.com/k:v1")
    assert caught.value.reason == "format" and words in str(caught.value)


def test_layers_that_are_not_the_tables_the_config_lists_are_refused() -> None:
    bundle = builtin_bundle()
    layout = read_layout(bundle.manifest_bytes(), "test")
    blobs = {d.digest: bundle.tables[d.title] for d in layout.layers}
    short = BundleMeta(BundleKind.OVERLAY, "x", bundle.meta.date, TABLES[:-1])
    config = orjson.dumps(short.to_document())
    with pytest.raises(BundleError, match="not the tables its config lists"):
        assemble(layout, config, blobs)


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b"a: 1\na: 2\n", "duplicate"),
        (b"- 1\n- 2\n", "expected one YAML mapping"),
        (b"\xff\xfe", "not UTF-8"),
        (b"a: [1,\n", "invalid YAML"),
    ],
)
def test_a_table_that_does_not_parse_is_refused_naming_it(raw: bytes, words: str) -> None:
    bundle = builtin_bundle()
    broken = Bundle(bundle.meta, {**bundle.tables, "gpus.yaml": raw})
    with pytest.raises(BundleError) as caught:
        broken.documents()
    assert caught.value.reason == "format"
    assert "gpus.yaml" in str(caught.value) and words in str(caught.value)


def test_a_bundle_holds_exactly_the_tables_it_lists() -> None:
    bundle = builtin_bundle()
    with pytest.raises(BundleError, match="lists"):
        Bundle(bundle.meta, {k: v for k, v in bundle.tables.items() if k != "gpus.yaml"})


@given(st.text(alphabet="0123456789abcdefghij.-_+", min_size=1, max_size=64))
def test_any_version_that_reads_round_trips_through_the_config(version: str) -> None:
    doc = {**META, "version": version}
    try:
        meta = BundleMeta.from_document(doc, "bundle.yaml")
    except BundleError as exc:
        assert exc.reason == "format"
        return
    assert BundleMeta.from_document(orjson.loads(orjson.dumps(meta.to_document())), "x") == meta


def test_the_loaded_knowledge_says_which_bundle_it_is() -> None:
    kb = KnowledgeBase.load()
    bundle = builtin_bundle()
    assert kb.provenance == Provenance(
        bundle.meta.version, bundle.meta.date, bundle.digest, BUILT_IN
    )
    today = bundle.meta.date + datetime.timedelta(days=112)
    assert kb.provenance.age_days(today) == 112
    said = kb.provenance.describe(today)
    assert said == f"knowledge {bundle.meta.version} of {bundle.meta.date} (112 days old), built-in"
    assert kb.provenance.to_dict(today)["ageDays"] == 112
