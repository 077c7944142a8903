"""``cudasched audit`` and ``cudasched report``: exit codes, the JSON contract, the HTML page,
and the report rendered by a real browser (headless Chromium: a screenshot and the DOM)."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import zlib
from html import unescape
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from cudasched.cli import app
from cudasched.cli.inputs import SAMPLE_NOTE
from cudasched.cluster.fleet import Fleet
from cudasched.cluster.snapshot import bundled_snapshot
from cudasched.knowledge import KnowledgeBase
from cudasched.knowledge.images import ImageTable
from cudasched.operations.pools import node_pools
from cudasched.operations.runtimes import runtime_rows

DATA = Path(__file__).parents[1] / "data" / "audit"
runner = CliRunner()

FINDING_KEYS = {
    "severity",
    "code",
    "object",
    "kind",
    "namespace",
    "name",
    "node",
    "nodes",
    "message",
    "fix",
}


AS_OF = ("--as-of", "2026-12-01")  # lifecycles are judged on a date: a fixed one
LIFECYCLE = ("driver-branch-ended", "driver-branch-legacy", "driver-branch-ending")


def audit_json(*args: str) -> tuple[int, dict[str, Any]]:
    result = runner.invoke(app, ["audit", *AS_OF, *args, "-o", "json"])
    return result.exit_code, json.loads(result.stdout)


# --------------------------------------------------------------------------- audit


def test_audit_json_contract_and_exit_1_on_errors() -> None:
    code, doc = audit_json("--sample")  # the bundled sample cluster
    assert code == 1
    assert set(doc) == {"findings", "summary", "cluster", "cudaschedVersion"}
    assert doc["cluster"] == {"source": "bundled sample cluster", "sample": True}
    # 12 warnings: the sample's pools on ended (10) and legacy (2) driver branches.
    assert doc["summary"] == {"error": 1, "warning": 12, "info": 5}
    lifecycle = [f for f in doc["findings"] if f["code"] in LIFECYCLE]
    assert len(lifecycle) == 12 and all(f["object"].startswith("Pool/") for f in lifecycle)
    for finding in doc["findings"]:
        assert set(finding) == FINDING_KEYS
        assert finding["severity"] in ("error", "warning", "info")
        assert isinstance(finding["message"], str) and finding["message"]
        assert finding["node"] is None or isinstance(finding["node"], str)
    assert sum(doc["summary"].values()) == len(doc["findings"])
    # issue 27 item 12: the object's parts, for scripts that would otherwise split it
    parts = {(f["kind"], f["namespace"], f["name"]) for f in doc["findings"]}
    assert ("InferenceService", "team-nlp", "nemotron-nano-fp4") in parts
    assert ("Node", None, "dc1-k80-01") in parts
    assert all(f["object"].split("/")[-1] == f["name"] for f in doc["findings"])
    pool = next(f for f in doc["findings"] if f["object"] == "Pool/k80-r470-ubuntu20.04")
    assert (pool["kind"], pool["nodes"]) == ("Pool", ["dc1-k80-01", "dc1-k80-02"])


@pytest.mark.parametrize(
    ("cluster", "exit_code"),
    [("healthy.yaml", 0), ("labels.yaml", 0), ("stale.yaml", 0), ("bound.yaml", 1)],
)
def test_audit_exit_code_is_a_ci_gate(cluster: str, exit_code: int) -> None:
    code, doc = audit_json("--cluster", str(DATA / cluster))
    assert code == exit_code
    assert (doc["summary"]["error"] > 0) == (exit_code == 1)


def test_audit_policy_option() -> None:
    strict, before = audit_json("--cluster", str(DATA / "bound.yaml"))
    code, doc = audit_json("--cluster", str(DATA / "bound.yaml"), "--policy", "minor-compat")
    assert strict == 1 and code == 1
    # vllm-0 names no policy: minor-compat lets R550 run it. vllm-gated-0's image gate holds
    # under every policy, and no policy gives R550 CUDA 13.0.
    assert "StatefulSet/llm/vllm" in [f["object"] for f in before["findings"]]  # vllm-0's
    workloads = [f["object"] for f in doc["findings"] if f["code"] not in LIFECYCLE]
    assert workloads == ["Pod/llm/vllm-gated-0", "Pod/llm/vllm-next-0"]


def test_audit_table() -> None:
    result = runner.invoke(app, ["audit", *AS_OF, "--cluster", str(DATA / "pending.yaml")])
    assert result.exit_code == 1
    out = result.stdout
    # The L4 pool runs R550 (ended), the K80 pool the legacy R470.
    assert "cudasched audit:" in out and "3 error, 3 warning, 0 info" in out
    for code in ("no-compatible-node", "runtime-without-node"):
        assert code in out
    assert "fix:" in out
    # A cluster whose workloads all run: only its ended R550 drivers are worth a word.
    code, healthy = audit_json("--cluster", str(DATA / "healthy.yaml"))
    assert code == 0
    assert [f["code"] for f in healthy["findings"]] == ["driver-branch-ended"] * 2


def test_audit_html_to_stdout() -> None:
    result = runner.invoke(
        app, ["audit", *AS_OF, "--cluster", str(DATA / "labels.yaml"), "-o", "html"]
    )
    assert result.exit_code == 0
    assert result.stdout.startswith("<!DOCTYPE html>")
    assert result.stdout.count('data-severity="warning"') == 8  # 5 about labels, 3 lifecycles


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cluster", "/nonexistent/cluster.yaml"], "/nonexistent/cluster.yaml: no such file"),
        (["--policy", "lenient"], "invalid policy 'lenient'"),
    ],
)
@pytest.mark.parametrize("command", ["audit", "report"])
def test_bad_input_exits_2_with_one_line(command: str, args: list[str], message: str) -> None:
    result = runner.invoke(app, [command, *args])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("cudasched: error: ") and message in lines[0]


# --------------------------------------------------------------------------- report


def test_report_writes_one_file(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = runner.invoke(app, ["report", *AS_OF, "--output-file", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert result.stderr.strip().splitlines() == [
        f"cudasched: wrote {out}: 8 serving runtimes × 13 node pools, 1 error, 12 warning, "
        "5 info findings",
        f"cudasched: note: {SAMPLE_NOTE}",
    ]
    assert list(tmp_path.iterdir()) == [out]


def test_report_json_to_stdout_names_what_it_judged() -> None:
    result = runner.invoke(app, ["report", "-o", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert set(doc) == {
        "cluster",
        "knowledge",
        "matrix",
        "pools",
        "findings",
        "summary",
        "cudaschedVersion",
    }
    assert doc["cluster"] == {"source": "bundled sample cluster", "sample": True}
    assert len(doc["pools"]) == len(doc["matrix"]["pools"]) == 13
    assert result.stderr == f"cudasched: note: {SAMPLE_NOTE}\n"


def test_report_scoped_to_a_namespace_keeps_its_runtimes_and_findings() -> None:
    whole = json.loads(runner.invoke(app, ["report", "-o", "json"]).stdout)
    scoped = json.loads(runner.invoke(app, ["report", "-o", "json", "-n", "team-nlp"]).stdout)
    kept = [f["object"] for f in scoped["findings"]]
    assert kept and all("/team-nlp/" in o or o.count("/") == 1 for o in kept)
    assert len(kept) < len(whole["findings"])
    runtimes = [r["runtime"] for r in scoped["matrix"]["runtimes"]]
    assert runtimes and all("/team-vision/" not in r for r in runtimes)


def test_report_to_stdout() -> None:
    result = runner.invoke(app, ["report", "--cluster", str(DATA / "pending.yaml"), "-o", "html"])
    assert result.exit_code == 0
    assert result.stdout.startswith("<!DOCTYPE html>") and result.stderr == ""


def test_report_unwritable_path_exits_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["report", "--output-file", str(tmp_path / "missing" / "r.html")])
    assert result.exit_code == 2
    assert result.stderr.startswith("cudasched: error: cannot write ")
    assert len(result.stderr.strip().splitlines()) == 1


# --------------------------------------------------------------------------- in a browser


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and Path("/usr/bin/chromium").exists():
        found = "/usr/bin/chromium"
    if found is None:
        pytest.skip(
            "Chromium is not installed (Debian: apt-get install -y --no-install-recommends "
            "chromium); .ci/run installs it"
        )
    return found


def _browser(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            *args,
        ],
        capture_output=True,
        timeout=180,
        check=True,
    )


def _png(path: Path) -> tuple[int, int, bytes]:
    """Width, height and the inflated pixel rows of a PNG (standard library only)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    offset, width, height, idat = 8, 0, 0, b""
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        kind = data[offset + 4 : offset + 8]
        body = data[offset + 8 : offset + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        offset += 12 + length
    return width, height, zlib.decompress(idat)


class _Dom(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.attrs: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.attrs.append((tag, dict(attrs)))


def test_report_renders_in_chromium(tmp_path: Path) -> None:
    chromium = _chromium()
    out = tmp_path / "report.html"
    assert (
        runner.invoke(app, ["report", "--sample", *AS_OF, "--output-file", str(out)]).exit_code == 0
    )
    url = out.resolve().as_uri()

    shot = tmp_path / "report.png"
    _browser(chromium, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1400,1000", url)
    width, height, pixels = _png(shot)
    assert (width, height) == (1400, 1000)
    assert shot.stat().st_size > 20_000
    # Not a blank page: many distinct byte values in the image (a white page has a handful).
    assert len(set(pixels)) > 64

    dom = _browser(chromium, tmp_path / "profile", "--dump-dom", url).stdout.decode()
    parsed = _Dom()
    parsed.feed(dom)
    snapshot = bundled_snapshot()
    kb = KnowledgeBase.load()
    fleet = Fleet.from_snapshot(snapshot, kb)
    runtimes = {r.ref for r in runtime_rows(fleet, ImageTable.builtin(kb))}
    pools = {p.name for p in node_pools(snapshot, fleet)}
    rendered_runtimes = {
        a["data-runtime"] for t, a in parsed.attrs if t == "th" and "data-runtime" in a
    }
    rendered_pools = {a["data-pool"] for t, a in parsed.attrs if t == "th" and "data-pool" in a}
    assert rendered_runtimes == runtimes and len(runtimes) == 8
    assert rendered_pools == pools and len(pools) == 13
    findings = [
        (a["data-severity"], a["data-code"])
        for t, a in parsed.attrs
        if t == "tr" and "data-severity" in a
    ]
    _, audited = audit_json()
    # One row per finding the audit reports on the same date, in the same order.
    assert findings == [(f["severity"], f["code"]) for f in audited["findings"]]
    assert len(findings) == 18
    # The inline script ran: it shows the severity filters, which the file itself hides.
    assert 'class="filters" hidden' in out.read_text(encoding="utf-8")
    (filters,) = [a for t, a in parsed.attrs if t == "p" and a.get("class") == "filters"]
    assert "hidden" not in filters


def test_the_matrix_fits_1400_pixels_and_cuts_no_name(tmp_path: Path) -> None:
    """Issue 27 item 12: the sample's matrix was 1852 pixels wide in a 1400-pixel window, and
    its names broke at hyphens and anywhere (``overflow-wrap: anywhere``). A probe added to the
    page measures, in Chromium, the table's right edge and every name's characters: all on
    one line (across the line direction, so the vertical runtime heads count too)."""
    chromium = _chromium()
    out = tmp_path / "report.html"
    result = runner.invoke(app, ["report", "--sample", *AS_OF, "--output-file", str(out)])
    assert result.exit_code == 0, result.output
    probe = (Path(__file__).parents[1] / "data" / "report" / "matrix-probe.js").read_text()
    page = out.read_text(encoding="utf-8").replace("</body>", f"<script>{probe}</script></body>")
    probed = tmp_path / "probed.html"
    probed.write_text(page, encoding="utf-8")
    dom = _browser(
        chromium,
        tmp_path / "profile",
        "--window-size=1400,1000",
        "--dump-dom",
        probed.resolve().as_uri(),
    ).stdout.decode()
    found = json.loads(unescape(dom.split('<pre id="probe">', 1)[1].split("</pre>", 1)[0]))
    assert found["viewport"] == 1400
    assert found["right"] <= 1400 and found["page"] <= 1400, found
    assert found["broken"] == []


# --------------------------------------------------------------------------- progress


class _Terminal:
    """A stderr that says it is a terminal and keeps what is written to it."""

    def __init__(self, tty: bool) -> None:
        self.tty = tty
        self.written: list[str] = []

    def isatty(self) -> bool:
        return self.tty

    def write(self, text: str) -> int:
        self.written.append(text)
        return len(text)

    def flush(self) -> None:
        pass


@pytest.mark.parametrize("tty", [True, False])
def test_progress_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch, tty: bool) -> None:
    import sys

    from cudasched.cli.options import progress_bar

    stderr = _Terminal(tty)
    monkeypatch.setattr(sys, "stderr", stderr)
    with progress_bar("auditing") as progress:
        if tty:
            assert progress is not None
            progress(3, 10)
            progress(10, 10)
        else:
            assert progress is None
    assert bool("".join(stderr.written)) is tty


@pytest.mark.parametrize("columns", ["80", "200"])
def test_audit_text_folds_alike_findings_and_cuts_nothing(
    columns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    _, doc = audit_json(*AS_OF)
    out = runner.invoke(app, ["audit", *AS_OF]).stdout
    assert (
        out.splitlines()[0]
        == "cudasched audit: bundled sample cluster: 1 error, 12 warning, 5 info"
    )
    deprecated = [f for f in doc["findings"] if f["code"] == "labels-deprecated-only"]
    assert len(deprecated) == 4
    assert out.count("labels-deprecated-only") == 1  # four nodes, one entry
    words = set(out.replace(",", " ").split())
    for finding in doc["findings"]:
        assert finding["code"] in words
        assert finding["object"].split("/")[-1] in " ".join(out.split())
    assert all(len(line) <= int(columns) or " " not in line.strip() for line in out.splitlines())


def test_audit_reads_a_directory_of_manifests_as_ci_does(tmp_path: Path) -> None:
    """``audit --cluster DIR``: every YAML/JSON file under it (hidden ones skipped) is one
    cluster; exit 1 on an error finding, so a merge can be gated on it."""
    repo = tmp_path / "repo"
    (repo / "apps" / "llm").mkdir(parents=True)
    (repo / ".git").mkdir()
    nodes = runner.invoke(app, ["snapshot", "-l", "kubernetes.io/os"]).stdout
    (repo / "cluster.yaml").write_text(nodes, encoding="utf-8")
    examples = Path(__file__).parents[2] / "examples"
    for name in ("nemotron.yaml", "team-llm.yaml"):
        (repo / "apps" / "llm" / name).write_text((examples / name).read_text(), "utf-8")
    (repo / ".git" / "junk.yaml").write_text("{not: [yaml", encoding="utf-8")
    result = runner.invoke(app, ["audit", "--cluster", str(repo), "-o", "json"])
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    codes = {(f["code"], f["object"]) for f in doc["findings"]}
    assert ("no-compatible-node", "InferenceService/team-nlp/nemotron-nano-fp4") in codes
    assert ("requirement-unknown", "Pod/default/team-llm") in codes
    assert doc["cluster"] == {"source": str(repo), "sample": False}
    empty = tmp_path / "empty"
    empty.mkdir()
    result = runner.invoke(app, ["audit", "--cluster", str(empty)])
    assert result.exit_code == 2 and "holds no .yaml, .yml or .json file" in result.stderr
    only_apps = runner.invoke(app, ["audit", "--cluster", str(repo / "apps")])
    assert only_apps.exit_code == 2 and "no Node objects" in only_apps.stderr


@pytest.mark.parametrize(
    "command",
    [["audit"], ["report", "-o", "json"], ["plan-drivers"], ["plan-drivers", "-o", "json"]],
    ids=lambda c: " ".join(c),
)
def test_a_dump_without_nodes_is_refused_by_every_command_that_judges_nodes(
    command: list[str], tmp_path: Path
) -> None:
    """A folder of workload manifests without the cluster's nodes has nothing to be judged
    against: the commands say so in one line (exit 2) instead of an empty answer."""
    (tmp_path / "app.yaml").write_text(
        (Path(__file__).parents[2] / "examples" / "team-llm.yaml").read_text(), "utf-8"
    )
    result = runner.invoke(app, [*command, "--cluster", str(tmp_path)])
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (
        f"cudasched: error: {tmp_path}: no Node objects, so nothing to judge the workloads "
        "against: add the cluster's nodes (cudasched snapshot --live, or kubectl get nodes -o "
        "yaml) to it\n"
    )


def test_audit_of_a_namespace_reports_its_objects(tmp_path: Path) -> None:
    """Issue 27 item 9: audit -n NS reported every node and pool finding too; they are the
    cluster's (--cluster-scoped, or -A, adds them). A namespace that does not exist is said
    so: the dump's Namespaces when it holds them, else none of its objects in it."""
    _, scoped = audit_json("--sample", "-n", "team-nlp")
    assert {f["object"] for f in scoped["findings"]} == {
        "InferenceService/team-nlp/nemotron-nano-fp4"
    }
    _, wider = audit_json("--sample", "-n", "team-nlp", "--cluster-scoped")
    assert {f["kind"] for f in wider["findings"]} == {"InferenceService", "Node", "Pool"}
    missing = runner.invoke(app, ["audit", "--sample", "-n", "nosuchns"])
    assert (missing.exit_code, missing.stdout) == (2, "")
    assert missing.stderr == (
        "cudasched: error: namespace 'nosuchns' does not exist in bundled sample cluster: none "
        "of its objects is in it\n"
    )
    sample = Path(__file__).parents[2] / "src/cudasched/data/sample-cluster.yaml"
    items = yaml.safe_load(sample.read_text())["items"]
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "empty"}}
    path = tmp_path / "cluster.yaml"
    path.write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [*items, namespace]})
    )
    empty = runner.invoke(app, ["audit", "--cluster", str(path), "-n", "empty"])
    assert empty.exit_code == 0 and "no findings" in empty.stdout  # it exists, and is clean


def test_audit_of_a_namespace_names_the_webhook_its_misplaced_pods_lack(tmp_path: Path) -> None:
    """Issue 27 items 9 and 11: the likeliest cause of a namespace's pods on nodes that cannot
    run them is the cluster's webhook, whose Service lives in another namespace (or whose
    registration in none): ``audit -n NS`` says it as ``-A`` does, naming NS's workloads only."""
    items = [d for d in yaml.safe_load_all((DATA / "bound.yaml").read_text()) if d]
    objects = [o for d in items for o in (d.get("items") or [d])]
    hook = {"name": "pods.cudasched.io", "failurePolicy": "Ignore"}
    service = {"service": {"namespace": "cudasched", "name": "cudasched-webhook"}}
    registration = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "cudasched-webhook"},
        "webhooks": [{**hook, "clientConfig": service}],
    }
    path = tmp_path / "cluster.yaml"
    path.write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [*objects, registration]})
    )
    webhook = ("webhook-unreachable", "Service/cudasched/cudasched-webhook")

    def found(*scope: str) -> dict[tuple[str, str], str]:
        _, doc = audit_json("--cluster", str(path), *scope)
        return {(f["code"], f["object"]): f["message"] for f in doc["findings"]}

    everywhere, llm = found("-A"), found("-n", "llm")
    assert webhook in everywhere and "StatefulSet/llm/vllm" in everywhere[webhook]
    assert webhook in llm and "StatefulSet/llm/vllm" in llm[webhook]
    assert {k for k in llm if k != webhook} == {
        k for k in everywhere if k[1].startswith(("Pod/llm/", "StatefulSet/llm/"))
    }
    # A namespace with nothing misplaced is told nothing of the webhook.
    assert webhook not in found("-n", "vision")
    # Unregistered: the registration is cluster-scoped, and still the cause said for NS.
    registration["webhooks"] = [{"name": "other.example.com", "clientConfig": service}]
    path.write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [*objects, registration]})
    )
    missing = ("webhook-not-registered", "MutatingWebhookConfiguration/cudasched-webhook")
    assert missing in found("-n", "llm")
