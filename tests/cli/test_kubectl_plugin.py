"""``kubectl cudasched``: the plugin run through the real ``kubectl`` (which finds
``kubectl-cudasched`` on PATH, as it finds krew plugins) against an API server on kmock that
serves the sample cluster paged and without list-item kinds; and the argument rewriting it
does (live cluster by default, kubectl's global flags before the command)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from pathlib import Path

import kmock as kmock_lib
import pytest
from typer.testing import CliRunner

from cudasched.cli import app
from cudasched.cli.plugin import plugin_args
from cudasched.cluster.snapshot import bundled_snapshot, load_snapshot
from cudasched.vocab.kinds import INFERENCE_SERVICE, NODE
from tests.support.kube_api import ClusterApi, forbidden, write_kubeconfig
from tests.support.outputs import without_source

SAMPLE = bundled_snapshot()
SAMPLE_FILE = Path(__file__).parents[2] / "src" / "cudasched" / "data" / "sample-cluster.yaml"
BIN = Path(sys.executable).parent
KUBECTL = shutil.which("kubectl")

needs_kubectl = pytest.mark.skipif(
    KUBECTL is None,
    reason="kubectl is not installed (Debian package kubernetes-client; .ci/run installs it)",
)


def test_live_is_the_default() -> None:
    assert plugin_args(["explain", "isvc/x", "-n", "ns"]) == [
        "explain",
        "isvc/x",
        "-n",
        "ns",
        "--live",
    ]
    assert plugin_args(["snapshot"]) == ["snapshot", "--live"]


@pytest.mark.parametrize(
    "args",
    [
        ["explain", "--cluster", "c.yaml"],
        ["explain", "--cluster=c.yaml"],
        ["snapshot", "--live", "--context", "prod"],
        ["audit", "--sample"],
    ],
)
def test_a_given_source_is_kept(args: list[str]) -> None:
    assert plugin_args(args) == args


def test_commands_without_a_cluster_are_left_alone() -> None:
    assert plugin_args(["check", "--gpu", "T4", "--driver", "550.90.07", "--cuda", "12.4"]) == [
        "check",
        "--gpu",
        "T4",
        "--driver",
        "550.90.07",
        "--cuda",
        "12.4",
    ]
    assert plugin_args([]) == []
    assert plugin_args(["--help"]) == ["--help"]


def test_the_knowledge_options_stay_before_the_command() -> None:
    """``kubectl cudasched --knowledge REF audit``: cudasched's own options are the root's."""
    args = ["--knowledge", "reg.example.com/k:stable", "-n", "team", "--knowledge-key=k.pem"]
    assert plugin_args([*args, "audit"]) == [
        "--knowledge",
        "reg.example.com/k:stable",
        "--knowledge-key=k.pem",
        "audit",
        "-n",
        "team",
        "--live",
    ]


def test_kubectl_global_flags_may_come_first() -> None:
    assert plugin_args(["--context", "prod", "-n", "team", "explain", "isvc/x", "-o", "wide"]) == [
        "explain",
        "--context",
        "prod",
        "-n",
        "team",
        "isvc/x",
        "-o",
        "wide",
        "--live",
    ]


def test_every_command_that_reads_a_file_cluster_reads_the_live_one_too() -> None:
    import typer

    group = typer.main.get_command(app)
    ctx = typer.Context(group)
    # The command table is lazy: load every command, not only those other tests imported.
    commands = {name: group.get_command(ctx, name) for name in group.list_commands(ctx)}  # type: ignore[attr-defined]
    readers = {
        name
        for name, command in commands.items()
        if any(p.name == "cluster" for p in command.params)
    }
    assert {"explain", "mutate", "demo", "snapshot", "webhook"} <= readers
    # The webhook server watches the live cluster unless --cluster is given: no --live, and
    # the plugin leaves it alone.
    webhook = {p.name for p in commands["webhook"].params}
    assert "kubeconfig" in webhook and "live" not in webhook
    assert plugin_args(["webhook", "--self-signed"]) == ["webhook", "--self-signed"]
    for name in readers - {"webhook"}:
        params = {p.name for p in commands[name].params}
        assert {"live", "kubeconfig", "context"} <= params, name


# --------------------------------------------------------------------------- through kubectl


async def kubectl(*args: str, kubeconfig: str = "/nonexistent/kubeconfig") -> tuple[int, str, str]:
    """Run ``kubectl ARGS`` with the venv's bin dir first on PATH and ``$KUBECONFIG`` set to
    ``kubeconfig`` (by default a file that does not exist: ``--kubeconfig`` must be what
    works); wait for it while the event loop keeps serving the API."""
    assert (BIN / "kubectl-cudasched").exists(), "pip install -e . installs kubectl-cudasched"
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "KUBECONFIG": kubeconfig,
    }
    env.pop("KUBERNETES_SERVICE_HOST", None)
    process = await asyncio.create_subprocess_exec(
        str(KUBECTL),
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def from_file(*args: str) -> str:
    result = CliRunner().invoke(app, [*args, "--cluster", str(SAMPLE_FILE)])
    assert result.exit_code == 0, result.output
    return result.stdout


@needs_kubectl
async def test_kubectl_cudasched_explain_by_reference(
    kmock: kmock_lib.KubernetesEmulator, tmp_path: Path
) -> None:
    api = ClusterApi.start(kmock, SAMPLE.objects())
    config = str(write_kubeconfig(tmp_path, kmock.url))
    args = ("explain", "isvc/llama3-8b", "-n", "team-nlp")
    code, out, err = await kubectl("cudasched", *args, "--kubeconfig", config, "-o", "json")
    assert (code, err) == (0, ""), err
    assert without_source(out) == without_source(from_file(*args, "-o", "json"))
    doc = json.loads(out)
    assert doc["summary"]["workload"] == "team-nlp/InferenceService/llama3-8b"
    assert doc["summary"]["eligible"] == 11
    # It read the mock cluster (not a file): every node page went over HTTP, 500 at a time.
    assert [r.params.get("limit") for r in api.lists_of(NODE)] == ["500"]
    assert api.lists_of(INFERENCE_SERVICE)

    # The table, and kubectl's global flags before the command.
    code, out, err = await kubectl(
        "cudasched", "--kubeconfig", config, "-n", "team-nlp", "explain", "isvc/llama3-8b"
    )
    assert (code, err) == (0, ""), err
    assert out == from_file(*args)
    assert "(11 nodes) can run it" in out


@needs_kubectl
async def test_kubectl_cudasched_snapshot_and_errors(
    kmock: kmock_lib.KubernetesEmulator, tmp_path: Path
) -> None:
    api = ClusterApi.start(kmock, SAMPLE.objects())
    config = str(write_kubeconfig(tmp_path, kmock.url))
    code, out, err = await kubectl("cudasched", "snapshot", "-o", "json", kubeconfig=config)
    assert (code, err) == (0, ""), err  # $KUBECONFIG, as kubectl itself would use
    assert out == from_file("snapshot", "-o", "json")

    api.fail(NODE, 403, forbidden(NODE, user="bob"))
    code, out, err = await kubectl("cudasched", "explain", kubeconfig=config)
    assert (code, out) == (2, "")
    assert err == (
        "cudasched: error: cannot list nodes at the cluster scope: grant list on nodes "
        "(denied to User 'bob')\n"
    )

    code, out, err = await kubectl("cudasched", "--help", kubeconfig=config)
    assert code == 0 and "Usage: kubectl cudasched" in out
    # Issue 20 item 5: the plugin's help says it reads the live cluster by default.
    assert "every command that reads a cluster reads the LIVE cluster" in " ".join(out.split())


@needs_kubectl
async def test_kubectl_cudasched_audit_takes_namespace_and_selector(
    kmock: kmock_lib.KubernetesEmulator, tmp_path: Path
) -> None:
    """``kubectl cudasched audit -n X -l Y`` against the API server: -n keeps the namespace's
    objects (issue 27 item 9: the cluster-scoped ones only with --cluster-scoped), -l every
    object whose labels match; a namespace that does not exist is said so."""
    ClusterApi.start(kmock, SAMPLE.objects())
    config = str(write_kubeconfig(tmp_path, kmock.url))
    base = ("cudasched", "audit", "--kubeconfig", config, "-o", "json")
    code, out, _ = await kubectl(*base, "-n", "team-nlp", "-l", "!aml.cpaas.io/runtime-type")
    assert code == 1  # nemotron's no-compatible-node is an error
    found = [(f["code"], f["object"]) for f in json.loads(out)["findings"]]
    assert found == [("no-compatible-node", "InferenceService/team-nlp/nemotron-nano-fp4")]
    code, out, _ = await kubectl(
        *base, "-n", "team-nlp", "-l", "!aml.cpaas.io/runtime-type", "--cluster-scoped"
    )
    found = [(f["code"], f["object"]) for f in json.loads(out)["findings"]]
    assert all(o.startswith(("Node/", "InferenceService/team-nlp/")) for _, o in found)
    assert len(found) == 5  # and the four nodes with GFD's old keys
    code, out, err = await kubectl(*base, "-n", "nosuchns")
    assert (code, out) == (2, "")
    assert err.startswith("cudasched: error: namespace 'nosuchns' does not exist in live cluster")
    code, out, _ = await kubectl(*base, "-n", "team-nlp", "-l", "aml.cpaas.io/runtime-type=vllm")
    doc = json.loads(out)
    assert (code, doc["findings"]) == (0, [])
    assert doc["cluster"]["scope"] == "namespace team-nlp, selector aml.cpaas.io/runtime-type=vllm"
    code, out, _ = await kubectl("cudasched", "-n", "team-vision", "audit", "--kubeconfig", config)
    assert code == 0 and "requirement-unknown" in out and "nemotron" not in out


@needs_kubectl
async def test_kubectl_cudasched_audit_names_the_cause_and_its_own_command_line(
    kmock: kmock_lib.KubernetesEmulator, tmp_path: Path
) -> None:
    """Issue 27 item 11: pods on nodes that cannot run them and no cudasched webhook
    registered: the audit says so (the likeliest cause), and its fixes name the command line
    the person ran (kubectl cudasched ..., not cudasched ...)."""
    bound = load_snapshot(Path(__file__).parents[1] / "data" / "audit" / "bound.yaml")
    ClusterApi.start(kmock, bound.objects())
    config = str(write_kubeconfig(tmp_path, kmock.url))
    code, out, _ = await kubectl(
        "cudasched", "audit", "--kubeconfig", config, "--as-of", "2026-12-01", "-o", "json"
    )
    assert code == 1
    found = {f["code"]: f for f in json.loads(out)["findings"]}
    cause = found["webhook-not-registered"]
    assert cause["fix"].startswith("install the webhook: kubectl cudasched manifests ")
    fixes = " ".join(f["fix"] or "" for f in json.loads(out)["findings"])
    assert "kubectl cudasched plan-drivers" in fixes
    assert " cudasched plan-drivers" not in fixes.replace("kubectl cudasched plan-drivers", "")
    args = ["audit", "--kubeconfig", config, "--as-of", "2026-12-01", "-o", "json"]
    direct = await asyncio.to_thread(CliRunner().invoke, app, args)  # as cudasched: its own
    assert "kubectl cudasched" not in direct.stdout and "cudasched manifests" in direct.stdout
