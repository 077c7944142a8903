"""The end-to-end harness's own pieces that need no control plane (no Go, no build): the pins,
the boundary between the product and the harness, the CRDs, the fleet and the workloads.
The control plane itself is exercised by ``tests/e2e``."""

from __future__ import annotations

import ast
import ipaddress
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from tests.harness import binaries as harness_binaries
from tests.harness.binaries import BINARIES, module_dir, pinned_versions
from tests.harness.controlplane.processes import harness_module
from tests.harness.crds import all_crds, crds_yaml
from tests.harness.fleet import FLEET_LABEL, TEMPLATE_LABEL, fleet, template_nodes
from tests.harness.pki import write_pki
from tests.harness.webhook import webhook_process
from tests.harness.workloads import generate

ROOT = Path(__file__).resolve().parents[1]


def test_the_product_never_imports_the_harness() -> None:
    """The harness, the test support and the benchmarks live beside the product, outside the
    wheel (tests/test_packaging.py): an import of them from ``cudasched`` would fail installed."""
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "src" / "cudasched").rglob("*.py")
        if re.search(r"^\s*(from|import)\s+(tests|benchmarks)\b", path.read_text(), re.M)
    ]
    assert offenders == []
    assert sorted(p.name for p in (ROOT / "src").iterdir() if p.suffix != ".egg-info") == [
        "cudasched"
    ]


def test_every_staging_module_is_pinned_to_the_kubernetes_release() -> None:
    versions = pinned_versions()
    assert re.fullmatch(r"v1\.(3[4-9])\.\d+", versions["kubernetes"])  # DRA v1, VAP, node tokens
    staging = "v0." + versions["kubernetes"][len("v1.") :]
    text = (module_dir() / "go.mod").read_text()
    replaced = re.findall(r"^\s*(k8s\.io/\S+) => (k8s\.io/\S+) (v\S+)$", text, re.MULTILINE)
    assert len(replaced) >= 30
    assert all(old == new and version == staging for old, new, version in replaced), replaced
    tools = set(re.findall(r"^\s+(\S+)$", text.split("tool (", 1)[1].split(")", 1)[0], re.M))
    assert tools == set(BINARIES.values())
    assert (module_dir() / "go.sum").stat().st_size > 10_000


def test_crds_are_structural_and_name_what_cudasched_reads() -> None:
    crds = {c["metadata"]["name"]: c for c in all_crds()}
    assert set(crds) == {
        "inferenceservices.serving.kserve.io",
        "servingruntimes.serving.kserve.io",
        "clusterservingruntimes.serving.kserve.io",
        "llminferenceservices.serving.kserve.io",
        "nvidiadrivers.nvidia.com",
        "clusterpolicies.nvidia.com",
        "policyreports.wgpolicyk8s.io",
        "clusterpolicyreports.wgpolicyk8s.io",
    }
    assert crds["nvidiadrivers.nvidia.com"]["spec"]["scope"] == "Cluster"
    llm = crds["llminferenceservices.serving.kserve.io"]["spec"]["versions"]
    assert [(v["name"], v["storage"]) for v in llm] == [("v1alpha1", False), ("v1alpha2", True)]

    def structural(schema: dict[str, object], where: str) -> None:
        # every node has a type, or is int-or-string, or keeps unknown fields
        assert "type" in schema or schema.get("x-kubernetes-int-or-string"), where
        for name, child in (schema.get("properties") or {}).items():  # type: ignore[union-attr]
            structural(child, f"{where}.{name}")
        if isinstance(schema.get("items"), dict):
            structural(schema["items"], f"{where}[]")  # type: ignore[arg-type]

    for name, crd in crds.items():
        for version in crd["spec"]["versions"]:
            structural(version["schema"]["openAPIV3Schema"], name)
    assert "&id" not in crds_yaml()  # no YAML anchors in what a person reads


def test_fleet_varies_identity_and_keeps_the_real_label_sets() -> None:
    templates = template_nodes()
    assert len(templates) == 21
    nodes = fleet(63, templates=templates)
    names = [n["metadata"]["name"] for n in nodes]
    assert len(set(names)) == 63
    for node, template in zip(nodes, templates * 3, strict=True):
        labels = dict(node["metadata"]["labels"])
        assert labels.pop("kubernetes.io/hostname") == node["metadata"]["name"]
        assert labels.pop(FLEET_LABEL) == "e2e"
        assert labels.pop(TEMPLATE_LABEL)
        wanted = dict(template["metadata"]["labels"])
        wanted.pop("kubernetes.io/hostname")
        assert labels == wanted
        assert node["status"]["capacity"] == template["status"]["capacity"]
        assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"] == "True"


def test_workloads_are_seeded_and_mixed() -> None:
    one, two = generate(120, "ns"), generate(120, "ns")
    assert one.pods == two.pods
    kinds = {p["metadata"]["name"].rsplit("-", 1)[-1] for p in one.pods}
    assert {"image", "annotated", "selector", "affinity", "skip", "cpu"} <= kinds
    assert any(p["metadata"].get("labels", {}).get("component") == "predictor" for p in one.pods)
    assert len(one.gpu_pods()) < len(one.pods)


def test_pki_issues_what_the_components_need(tmp_path: Path) -> None:
    pki = write_pki(tmp_path / "pki")
    for stem in ("etcd-server", "apiserver", "admin", "scheduler", "controller-manager"):
        assert pki.cert(stem).read_text().startswith("-----BEGIN CERTIFICATE-----")
        assert pki.key(stem).stat().st_mode & 0o077 == 0
    assert pki.sa_pub.read_text().startswith("-----BEGIN PUBLIC KEY-----")
    ca = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    admin = x509.load_pem_x509_certificate(pki.cert("admin").read_bytes())
    admin.verify_directly_issued_by(ca)
    groups = admin.subject.get_attributes_for_oid(x509.NameOID.ORGANIZATION_NAME)
    assert [g.value for g in groups] == ["system:masters"]
    server = x509.load_pem_x509_certificate(pki.cert("apiserver").read_bytes())
    server.verify_directly_issued_by(ca)
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("10.96.0.1") in sans.get_values_for_type(x509.IPAddress)
    assert "kubernetes.default.svc" in sans.get_values_for_type(x509.DNSName)


@pytest.mark.parametrize(
    ("sources", "word"), [({}, "neither"), ({"cluster": Path("c.yaml")}, "both")]
)
def test_the_webhook_process_serves_one_source(
    tmp_path: Path, sources: dict[str, Path], word: str
) -> None:
    kubeconfig = tmp_path / "kubeconfig" if sources else None
    refused = pytest.raises(ValueError, match=f"a kubeconfig .* or a cluster file, not {word}")
    with refused, webhook_process(tmp_path, kubeconfig, **sources):
        pass
    assert list(tmp_path.iterdir()) == []  # refused before anything was written or started


@pytest.mark.parametrize(
    ("config", "ca_file"),
    [
        ({"server": {"certFile": "tls.crt", "keyFile": "tls.key"}}, None),
        ({}, Path("ca.crt")),
    ],
    ids=["certificates-without-a-ca", "a-ca-without-certificates"],
)
def test_the_webhook_process_trusts_a_ca_file_only_with_configured_certificates(
    tmp_path: Path, config: dict[str, Any], ca_file: Path | None
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    refused = pytest.raises(ValueError, match=r"a ca_file goes with server\.certFile")
    with refused, webhook_process(tmp_path, kubeconfig, config=config, ca_file=ca_file):
        pass
    assert list(tmp_path.iterdir()) == []  # refused before anything was written or started


def test_the_suite_has_one_free_port() -> None:
    """Every test and the harness take a free port from the harness's ``free_port``; no
    module keeps a copy of its own."""
    scanned = [
        path
        for folder in ("src", "tests", "benchmarks")
        for path in (ROOT / folder).rglob("*.py")
        if "__pycache__" not in path.parts
    ]
    defined = sorted(
        str(path.relative_to(ROOT))
        for path in scanned
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.lstrip("_") == "free_port"
    )
    assert defined == ["tests/harness/controlplane/processes.py"]
    assert len(scanned) > 300


def test_binaries_built_from_the_module_elsewhere_are_found_not_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache is keyed by the pinned version and stamped with the module files' contents and
    the Go version, never their place: binaries built while the module lived elsewhere (it was
    ``test/controlplane``) are found from ``tests/e2e`` without a build."""
    old_place = tmp_path / "test" / "controlplane"
    old_place.mkdir(parents=True)
    for name in ("go.mod", "go.sum"):
        shutil.copy(module_dir() / name, old_place / name)
    go = tmp_path / "go"
    go.write_text("#!/bin/sh\necho go1.25.0\n")
    go.chmod(0o755)
    builds: list[Path] = []

    def build(args: list[str], *, cwd: Path, env: object, progress: object) -> None:
        builds.append(cwd)
        output = args[args.index("-o") + 1]
        names = [n for n in BINARIES if n != "etcd"] if output.endswith(os.sep) else [""]
        for name in names:
            Path(output, name).touch()

    monkeypatch.setattr(harness_binaries, "find_go", lambda: str(go))
    monkeypatch.setattr(harness_binaries, "_run_go", build)
    monkeypatch.setenv("CUDASCHED_CONTROLPLANE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CUDASCHED_CONTROLPLANE_MODULE", str(old_place))
    before = harness_binaries.ensure_built(progress=lambda line: None)
    monkeypatch.delenv("CUDASCHED_CONTROLPLANE_MODULE")
    after = harness_binaries.ensure_built(progress=lambda line: None)
    assert builds == [old_place, old_place]  # the Kubernetes binaries, then etcd: once
    assert after == before
    assert after.directory == tmp_path / "cache" / pinned_versions()["kubernetes"] / "bin"


def test_a_harness_module_runs_as_a_child_from_any_directory(tmp_path: Path) -> None:
    """The harness is no installed package: the node keeper, started in the control plane's
    directory, finds it only through the environment ``harness_module`` gives it."""
    command, env = harness_module("tests.harness.nodekeeper")  # no directory: its usage
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert (done.returncode, done.stderr) == (
        2,
        "usage: python -m tests.harness.nodekeeper CONTROL_PLANE_DIR\n",
    )


@pytest.mark.parametrize("bad", ["v1.2.3", "nothing"])
def test_pins_come_from_go_mod(tmp_path: Path, bad: str) -> None:
    (tmp_path / "go.mod").write_text(f"module x\n\nrequire (\n\tk8s.io/kubernetes {bad}\n)\n")
    if bad == "nothing":
        (tmp_path / "go.mod").write_text("module x\n")
        with pytest.raises(RuntimeError, match="does not require"):
            pinned_versions(tmp_path)
    else:
        with pytest.raises(RuntimeError, match="etcd"):
            pinned_versions(tmp_path)


def test_the_webhook_command_needs_a_running_control_plane(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``controlplane webhook`` (the guide's way to try the webhook) is a command; without a
    running control plane it says so and exits 2. (tests/e2e runs it against one.)"""
    from tests.harness.controlplane.__main__ import main

    assert main(["--dir", str(tmp_path), "webhook", "--fail-closed"]) == 2
    error = capsys.readouterr().err
    assert f"no running control plane in {tmp_path}: run `up` first" in error
    assert list(tmp_path.iterdir()) == []


def test_the_guide_names_every_e2e_module_and_crd() -> None:
    guide = (ROOT / "docs" / "guide" / "controlplane.md").read_text()
    e2e = ROOT / "tests" / "e2e"
    modules = sorted(p.relative_to(e2e).as_posix() for p in e2e.glob("**/test_*.py"))
    kinds = sorted(c["spec"]["names"]["kind"] for c in all_crds())
    missing = [m for m in modules if f"`{m}`" not in guide]
    missing += [k for k in kinds if k not in guide]
    assert not missing, f"docs/guide/controlplane.md does not name: {missing}"
    assert len(modules) >= 9 and len(kinds) == 8
