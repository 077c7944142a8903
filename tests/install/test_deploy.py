"""The install paths under ``deploy/``: the kustomize base renders exactly what ``cudasched
manifests`` prints; the krew manifest is valid and names the archive it would install; the k9s
plugins validate and run ``kubectl cudasched`` on the selected object."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import kmock as kmock_lib
import pytest
import yaml
from typer.testing import CliRunner

from cudasched.cli import app
from cudasched.cluster.snapshot import bundled_snapshot
from tests.support.kube_api import ClusterApi, write_kubeconfig

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DATA = ROOT / "tests" / "data"
BIN = Path(sys.executable).parent
KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(
    KUBECTL is None,
    reason="kubectl is not installed (Debian kubernetes-client; .ci/run installs it)",
)
REGENERATE = "cudasched manifests > deploy/base/cudasched.yaml"
ARCHIVE = Path(os.environ.get("TMPDIR", "/tmp")) / f"cudasched-krew-{os.getpid()}.tar.gz"


def manifests() -> str:
    result = CliRunner().invoke(app, ["manifests"])
    assert result.exit_code == 0, result.output
    return result.stdout


def objects(text: str) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(text) if d]

    def key(o: dict[str, Any]) -> tuple[str, ...]:
        meta = o.get("metadata") or {}
        return (o["apiVersion"], o["kind"], meta.get("namespace", ""), meta["name"])

    return sorted(docs, key=key)


# --------------------------------------------------------------------------- kustomize


def test_the_base_is_what_manifests_prints() -> None:
    assert (DEPLOY / "base" / "cudasched.yaml").read_text(encoding="utf-8") == manifests(), (
        f"deploy/base differs from `cudasched manifests`; regenerate: {REGENERATE}"
    )


@needs_kubectl
def test_kustomize_renders_the_same_objects() -> None:
    rendered = subprocess.run(
        [KUBECTL or "kubectl", "kustomize", str(DEPLOY / "base")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    want, got = objects(manifests()), objects(rendered)
    assert len(want) == len(got) == 24
    assert got == want


@needs_kubectl
def test_the_example_overlay_changes_only_the_image() -> None:
    def render(path: Path) -> list[dict[str, Any]]:
        out = subprocess.run(
            [KUBECTL or "kubectl", "kustomize", str(path)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return objects(out)

    base, overlay = render(DEPLOY / "base"), render(DEPLOY / "overlays" / "example")
    images = re.findall(r"image: (\S+)", yaml.safe_dump_all(overlay))
    assert images == ["registry.example.com/cudasched:0.1.0"] * 2
    assert yaml.safe_dump_all(overlay).replace(
        "registry.example.com/cudasched:0.1.0", "cudasched/cudasched:0.1.0"
    ) == yaml.safe_dump_all(base)


# --------------------------------------------------------------------------- krew


def krew_manifest() -> dict[str, Any]:
    doc = yaml.safe_load((DEPLOY / "krew" / "cudasched.yaml").read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def archive() -> bytes:
    """The archive as the release builds it (scripts/krew_archive.py, run as a program)."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "krew_archive.py"), str(ARCHIVE)],
        capture_output=True,
        text=True,
        check=True,
    )
    data = ARCHIVE.read_bytes()
    assert out.stdout.strip() == hashlib.sha256(data).hexdigest()
    return data


def test_the_krew_manifest_is_valid() -> None:
    doc = krew_manifest()
    schema = yaml.safe_load((DATA / "krew" / "plugin-schema.yaml").read_text(encoding="utf-8"))
    jsonschema.validate(doc, schema)
    assert doc["metadata"]["name"] == "cudasched"  # krew: the file's name, and `kubectl NAME`
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert doc["spec"]["version"] == "v" + project["project"]["version"]
    platforms = doc["spec"]["platforms"]
    assert len(platforms) == 1
    assert doc["spec"]["version"] in platforms[0]["uri"]


def test_the_krew_manifest_names_the_archive_it_installs(tmp_path: Path) -> None:
    """The sha256 is the archive's (rebuilt byte for byte), and what krew would extract and
    link is the launcher, which runs the installed plugin."""
    data = archive()
    (platform,) = krew_manifest()["spec"]["platforms"]
    assert platform["sha256"] == hashlib.sha256(data).hexdigest(), (
        "the launcher changed: put `python3 scripts/krew_archive.py`'s hash in "
        "deploy/krew/cudasched.yaml"
    )
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        assert tar.getnames() == ["kubectl-cudasched"]
        tar.extractall(tmp_path, filter="data")
    launcher = tmp_path / platform["bin"]
    assert os.access(launcher, os.X_OK)
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(tmp_path)}
    ran = subprocess.run([launcher, "--help"], capture_output=True, text=True, env=env)
    assert ran.returncode == 0, ran.stderr
    assert "reads the LIVE" in " ".join(ran.stdout.split())
    missing = subprocess.run(
        [launcher], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "HOME": "/"}
    )
    assert missing.returncode == 2 and "pipx install cudasched" in missing.stderr


# --------------------------------------------------------------------------- k9s


def k9s_plugins() -> dict[str, Any]:
    doc = yaml.safe_load((DEPLOY / "k9s" / "plugins.yaml").read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def test_the_k9s_plugins_validate_and_are_in_the_docs() -> None:
    doc = k9s_plugins()
    schema = yaml.safe_load((DATA / "k9s" / "plugins-schema.yaml").read_text(encoding="utf-8"))
    jsonschema.validate(doc, schema)
    assert set(doc["plugins"]) == {"cudasched-explain", "cudasched-audit"}
    guide = (ROOT / "docs" / "guide" / "live-cluster.md").read_text(encoding="utf-8")
    snippet = (DEPLOY / "k9s" / "plugins.yaml").read_text(encoding="utf-8")
    body = snippet[snippet.index("plugins:") :]
    assert body in guide, "docs/guide/live-cluster.md shows deploy/k9s/plugins.yaml as it is"


@needs_kubectl
async def test_the_k9s_explain_plugin_runs_on_the_selected_object(
    kmock: kmock_lib.KubernetesEmulator, tmp_path: Path
) -> None:
    """What k9s runs for Shift-X on the InferenceService llama3-8b (k9s sets $RESOURCE_NAME,
    $NAME, $NAMESPACE and $CONTEXT), against an API server serving the sample cluster."""
    ClusterApi.start(kmock, bundled_snapshot().objects())
    config = write_kubeconfig(tmp_path, kmock.url)
    plugin = k9s_plugins()["plugins"]["cudasched-explain"]
    env = {
        "PATH": f"{BIN}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "KUBECONFIG": str(config),
        "RESOURCE_NAME": "inferenceservices",
        "NAME": "llama3-8b",
        "NAMESPACE": "team-nlp",
        "CONTEXT": "mock",
    }
    process = await asyncio.create_subprocess_exec(
        plugin["command"],
        *plugin["args"],
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 120)
    text = out.decode()
    assert process.returncode == 0, text
    assert text.startswith("team-nlp/InferenceService/llama3-8b needs cuda>=12.4")
    assert "(11 nodes) can run it" in text


# --------------------------------------------------------------------------- the policy overlay


def _policy_overlay() -> tuple[str, str]:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "policy_overlay", ROOT / "scripts" / "policy_overlay.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result: tuple[str, str] = module.overlay()
    return result


def test_the_policy_overlay_is_what_its_script_writes() -> None:
    kustomization, policy = _policy_overlay()
    overlay = DEPLOY / "overlays" / "policy"
    assert (overlay / "kustomization.yaml").read_text(encoding="utf-8") == kustomization, (
        "deploy/overlays/policy is stale; regenerate: python scripts/policy_overlay.py"
    )
    assert (overlay / "policy.yaml").read_text(encoding="utf-8") == policy


@needs_kubectl
def test_the_policy_overlay_renders_the_both_mode() -> None:
    rendered = subprocess.run(
        [KUBECTL or "kubectl", "kustomize", str(DEPLOY / "overlays" / "policy")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    both = CliRunner().invoke(app, ["manifests", "--mode", "both"])
    assert both.exit_code == 0, both.output
    got, want = objects(rendered), objects(both.stdout)
    assert len(got) == len(want) > 21
    assert got == want
