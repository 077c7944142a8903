"""``cudasched knowledge`` and its bundle subcommands, and every command judging with the
bundle ``--knowledge`` (or the settings' ``knowledge:``) names, falling back when it cannot."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner, Result

from cudasched.cli import app
from cudasched.knowledge.bundle import builtin_bundle
from cudasched.knowledge.bundlefiles import read_bundle_path
from tests.support.bundles import (
    NEW_610,
    PLANTS,
    builtin_610,
    builtin_tables,
    bundle_of,
    ed25519_pair,
    planted,
    release_overlay,
    write,
)
from tests.support.registry import Registry, run_registry

runner = CliRunner()
VERSION = builtin_bundle().meta.version
DATE = builtin_bundle().meta.date
#: A day after the built-in knowledge's date (106 days, as the docs' first day was), so a
#: bumped bundle.yaml leaves these tests true; how old the knowledge is then, and how it is said.
ON = DATE + datetime.timedelta(days=106)
AS_OF = ON.isoformat()
AGE = f"knowledge {VERSION} of {DATE} ({(ON - DATE).days} days old)"


@pytest.fixture(scope="module")
def registry() -> Iterator[Registry]:
    with run_registry() as found:
        yield found


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test keeps its last good bundles in a cache of its own."""
    monkeypatch.setenv("CUDASCHED_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CUDASCHED_KNOWLEDGE", raising=False)


def run(*args: str) -> Result:
    return runner.invoke(app, list(args))


def _newest_610(*root: str) -> tuple[str, Result]:
    result = run(*root, "knowledge", "drivers", "R610", "-o", "json")
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["rows"]
    return row["newestKnown"], result


def test_knowledge_says_which_bundle_it_judges_with_and_its_age() -> None:
    text = run("knowledge", "--as-of", AS_OF)
    doc = json.loads(run("knowledge", "--as-of", AS_OF, "-o", "json").stdout)
    assert text.exit_code == 0
    assert text.stdout.startswith(f"{AGE}, built-in\n")
    assert f"digest {builtin_bundle().digest}" in text.stdout
    assert doc["knowledge"]["ageDays"] == (ON - DATE).days
    assert doc["knowledge"]["origin"] == "built-in"
    assert doc["facts"]["GPUs"] > 50


def test_export_writes_a_bundle_that_verifies_as_a_directory_and_an_archive(
    tmp_path: Path,
) -> None:
    private, public = ed25519_pair()
    (tmp_path / "key.pem").write_bytes(private)
    (tmp_path / "pub.pem").write_bytes(public)
    exported = run(
        "knowledge", "export", str(tmp_path / "b"), "--sign-key", str(tmp_path / "key.pem")
    )
    archive = run("knowledge", "export", str(tmp_path / "b.tar.gz"))
    again = run("knowledge", "export", str(tmp_path / "b"))
    verified = run("knowledge", "verify", str(tmp_path / "b"), "--key", str(tmp_path / "pub.pem"))
    unsigned = run(
        "knowledge", "verify", str(tmp_path / "b.tar.gz"), "--key", str(tmp_path / "pub.pem")
    )
    assert exported.exit_code == 0 and builtin_bundle().digest in exported.stdout
    assert archive.exit_code == 0
    assert again.exit_code == 2 and "not empty (--force replaces its contents)" in again.stderr
    assert verified.exit_code == 0 and verified.stdout.startswith("verified: KnowledgeBundle")
    assert "signed by sha256:" in verified.stdout
    assert unsigned.exit_code == 1 and unsigned.stdout.startswith("refused (signature)")
    assert read_bundle_path(tmp_path / "b.tar.gz").bundle.digest == builtin_bundle().digest


def test_verify_refuses_a_row_without_a_source(tmp_path: Path) -> None:
    tables = builtin_tables()
    del tables["drivers.yaml"]["latest_releases"][0]["source"]
    write(tmp_path / "b", bundle_of(tables))
    result = run("knowledge", "verify", str(tmp_path / "b"))
    doc = json.loads(run("knowledge", "verify", str(tmp_path / "b"), "-o", "json").stdout)
    assert result.exit_code == 1
    assert result.stdout.startswith("refused (sources): ")
    assert "no source: drivers.yaml latest_releases[0] (branch 470)" in result.stdout
    assert doc["verified"] is False and doc["reason"] == "sources"


def test_an_overlay_verifies_merged_over_the_builtin_bundle(tmp_path: Path) -> None:
    write(tmp_path / "ours", release_overlay())
    write(tmp_path / "old", release_overlay("610.20.01"))
    good = run("knowledge", "verify", str(tmp_path / "ours"))
    older = run("knowledge", "verify", str(tmp_path / "old"))
    assert good.exit_code == 0 and good.stdout.startswith("verified: KnowledgeOverlay local.1")
    assert older.exit_code == 1 and "refused (overlay)" in older.stdout


def test_diff_lists_exactly_the_planted_changes(tmp_path: Path) -> None:
    write(tmp_path / "new", planted(sorted(PLANTS)))
    result = run("knowledge", "diff", "built-in", str(tmp_path / "new"))
    doc = json.loads(
        run("knowledge", "diff", "built-in", str(tmp_path / "new"), "-o", "json").stdout
    )
    same = run("knowledge", "diff", "built-in", "built-in")
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    new = f"KnowledgeBundle 2026.09.15 ({tmp_path / 'new'})"
    assert lines[0] == f"from KnowledgeBundle {VERSION} (built-in) to {new}"
    assert lines[-1] == "6 changes" and len(doc["changes"]) == 6
    assert (
        f"  ~ R610 newest release: release {builtin_610()} -> {NEW_610}; released" in result.stdout
    )
    assert "  + GPU NVIDIA Z100: new (compute capability 9.0; arch Hopper)" in lines
    assert "Driver releases" in lines and "Images" in lines
    assert same.exit_code == 0 and same.stdout.splitlines()[-1] == "0 changes"


def test_push_then_pull_through_a_registry(registry: Registry, tmp_path: Path) -> None:
    private, public = ed25519_pair()
    (tmp_path / "key.pem").write_bytes(private)
    (tmp_path / "pub.pem").write_bytes(public)
    write(tmp_path / "src", planted(["new-release"]))
    ref = f"{registry.host}/cudasched/cli:stable"
    pushed = run(
        "knowledge",
        "push",
        ref,
        "--from",
        str(tmp_path / "src"),
        "--sign-key",
        str(tmp_path / "key.pem"),
    )
    pulled = run(
        "knowledge", "pull", ref, str(tmp_path / "out"), "--key", str(tmp_path / "pub.pem")
    )
    checked = run("knowledge", "pull", ref)
    digest = planted(["new-release"]).digest
    assert pushed.exit_code == 0, pushed.output
    assert f"pinned: {registry.host}/cudasched/cli@{digest}" in pushed.stdout
    assert pulled.exit_code == 0, pulled.output
    assert pulled.stdout.startswith("pulled KnowledgeBundle 2026.09.15 of 2026-09-15, signed by")
    assert read_bundle_path(tmp_path / "out").bundle.digest == digest
    assert (tmp_path / "out" / "signatures.json").is_file()
    assert checked.exit_code == 0 and "wrote" not in checked.stdout


def test_every_command_follows_the_reference_and_keeps_the_last_good_bundle(
    registry: Registry,
) -> None:
    from cudasched.registry.bundles import push_bundle
    from cudasched.registry.client import RegistryClient

    ref = f"{registry.host}/cudasched/follow-cli:stable"
    assert run("knowledge", "push", ref).exit_code == 0  # the built-in bundle
    builtin_newest, _ = _newest_610("--knowledge", ref)
    with RegistryClient(plain_http=[registry.host]) as client:
        push_bundle(client, ref, planted(["new-release"]))
        newest, _ = _newest_610("--knowledge", ref)
        tables = builtin_tables()
        tables["toolkits.yaml"]["releases"][0]["min_driver"] = "not a driver"
        push_bundle(client, ref, bundle_of(tables, version="broken.1"))
    kept, result = _newest_610("--knowledge", ref)
    summary = run("--knowledge", ref, "knowledge").stdout
    assert builtin_newest == builtin_610() and newest == kept == NEW_610
    assert f"knowledge {ref} not used (content)" in result.stderr
    assert "judging with its last good bundle 2026.09.15" in result.stderr
    assert f"{registry.host}/cudasched/follow-cli@sha256:" in summary


def test_a_bundle_that_cannot_be_used_falls_back_to_the_builtin_one(tmp_path: Path) -> None:
    tables = builtin_tables()
    del tables["gpus.yaml"]["gpus"][0]["source"]
    write(tmp_path / "bad", bundle_of(tables))
    newest, result = _newest_610("--knowledge", str(tmp_path / "bad"))
    unreachable, said = _newest_610("--knowledge", "127.0.0.1:9/cudasched/none:stable")
    assert newest == unreachable == builtin_610()
    assert "(sources)" in result.stderr and "judging with the built-in knowledge" in result.stderr
    assert "judging with the built-in knowledge" in said.stderr


def test_an_overlay_adds_a_release_and_a_settings_file_names_the_bundle(tmp_path: Path) -> None:
    write(tmp_path / "ours", release_overlay())
    write(tmp_path / "new", planted(["new-release"]))
    overlaid, _ = _newest_610("--knowledge-overlay", str(tmp_path / "ours"))
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"knowledge": {"reference": str(tmp_path / "new")}}))
    result = run("knowledge", "drivers", "R610", "--config", str(config), "-o", "json")
    bare, _ = _newest_610()
    assert overlaid == "610.80.02"
    assert json.loads(result.stdout)["rows"][0]["newestKnown"] == NEW_610
    assert bare == builtin_610(), "a setting of one run is not the next run's"


def test_report_and_audit_name_the_knowledge_and_its_age(tmp_path: Path) -> None:
    report = json.loads(run("report", "-o", "json", "--as-of", AS_OF).stdout)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"knowledge": {"maxAgeDays": 30}}))
    args = ("audit", "-o", "json", "--as-of", AS_OF)
    stale = json.loads(run(*args, "--config", str(config)).stdout)
    assert [f["code"] for f in json.loads(run(*args).stdout)["findings"]].count(
        "knowledge-stale"
    ) == 0
    codes = [f["code"] for f in stale["findings"]]
    assert report["knowledge"]["version"] == VERSION
    assert report["knowledge"]["ageDays"] == (ON - DATE).days
    assert codes.count("knowledge-stale") == 1
    html = run("report", "--as-of", AS_OF).stdout
    assert f'<span id="knowledge">{AGE}, built-in' in html
