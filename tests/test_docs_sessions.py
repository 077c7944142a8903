"""Every console session in the README and ``docs/`` runs as shown.

Each document's sessions run in order in one bash process (see ``tests/support/sessions.py``), in a
fresh directory that holds links to the repository's ``examples/``, ``docs/``, ``src/``, ``tests/``
and ``deploy/`` (so ``examples/nemotron.yaml`` is where the reader's checkout has it), with the
project's console scripts first on ``PATH``. No cluster is configured there: ``$KUBECONFIG`` names
a file that does not exist and ``$HOME`` is the test's own, so a command given no cluster judges
the bundled sample (and says so), whatever the machine running the test has configured; the
documents' examples say ``--sample``, which reads no kubeconfig at all. A session that wants a
cluster exports ``KUBECONFIG=kubeconfig``, which names an API server on kmock that serves the
bundled sample cluster the way a real one does (paged, list items without kinds, without the
LLMInferenceService and NVIDIADriver CRDs), with three contexts: ``mock`` (may read
everything), ``alice`` (may not list pods) and ``down`` (no server listens). The doc's webhook
port 18443 is replaced by a free one.

To re-record after an intended change of output::

    CUDASCHED_RECORD_SESSIONS=1 .venv/bin/pytest tests/test_docs_sessions.py

writes what each command printed into the documents in place; review it with ``git diff``.
The README's first block (the set-up commands, which would install a venv and run this very
suite) is not a session; ``tests/test_readme.py`` checks it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import kmock as kmock_lib
import pytest
import yaml

from cudasched.cluster.snapshot import bundled_snapshot
from cudasched.vocab.kinds import LLM_INFERENCE_SERVICE, NVIDIA_DRIVER, POD
from tests.harness.controlplane.processes import free_port
from tests.support import sessions
from tests.support.kube_api import ClusterApi, forbidden

ROOT = Path(__file__).resolve().parents[1]
RECORD = os.environ.get("CUDASCHED_RECORD_SESSIONS", "") not in ("", "0")
DOC_PORT = "18443"
LINKED = ("examples", "src", "tests", "deploy", "docs")
TIMEOUT_S = 900


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _with_sessions() -> list[Path]:
    out = []
    for path in _documents():
        blocks = sessions.blocks_of(path.read_text(encoding="utf-8"))
        if any(b.steps for b in blocks):
            out.append(path)
    return out


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", _documents(), ids=_rel)
def test_no_path_of_the_authors_machine(path: Path) -> None:
    found = sessions.author_paths(path.read_text(encoding="utf-8"), ROOT)
    assert found == [], f"{_rel(path)}: absolute paths of the machine it was written on: {found}"


@pytest.mark.parametrize("path", _documents(), ids=_rel)
def test_every_session_is_a_console_block(path: Path) -> None:
    """A ``$ command`` followed by its output in a block that is not ``console`` would be a
    session this test never runs."""
    blocks = sessions.blocks_of(path.read_text(encoding="utf-8"))
    assert sessions.prompt_lines_outside_sessions(blocks) == []


def test_the_documents_have_sessions() -> None:
    """The sessions test would pass vacuously if the parser found none."""
    found = {_rel(p) for p in _with_sessions()}
    assert {"README.md", "docs/guide/live-cluster.md", "docs/guide/webhook.md"} <= found
    steps = sum(
        len(b.steps)
        for p in _with_sessions()
        for b in sessions.blocks_of(p.read_text(encoding="utf-8"))
    )
    assert steps >= 40


#: The sessions kept out of the test, per document: each needs what the test cannot give (a
#: registry holding an in-house image; a control plane compiled from source, whose ports,
#: timings and scheduling differ per run; tests/e2e covers those). Raising a number here is a
#: decision a reviewer sees.
NOT_RUN_ALLOWED = {"docs/guide/compatibility.md": 1, "docs/guide/controlplane.md": 3}


def test_sessions_not_run_are_few_and_say_why() -> None:
    """A session can be kept out of the test only by a comment that says why, and only as
    many per document as :data:`NOT_RUN_ALLOWED` says."""
    skipped: dict[str, list[str]] = {}
    for path in _with_sessions():
        for block in sessions.blocks_of(path.read_text(encoding="utf-8")):
            if block.not_run:
                skipped.setdefault(_rel(path), []).append(block.not_run)
    assert all(why for reasons in skipped.values() for why in reasons)
    counts = {doc: len(reasons) for doc, reasons in skipped.items()}
    over = {doc: n for doc, n in counts.items() if n > NOT_RUN_ALLOWED.get(doc, 0)}
    assert over == {}, counts
    assert 1 <= sum(counts.values()) <= sum(NOT_RUN_ALLOWED.values())


def _kubeconfig(directory: Path, url: str) -> Path:
    def context(name: str, cluster: str, user: str) -> dict[str, object]:
        return {"name": name, "context": {"cluster": cluster, "user": user, "namespace": "default"}}

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "mock", "cluster": {"server": url.rstrip("/")}},
            {"name": "nowhere", "cluster": {"server": "http://127.0.0.1:1"}},
        ],
        "users": [
            {"name": "reader", "user": {"token": "reader-token"}},
            {"name": "alice", "user": {"token": "alice-token"}},
        ],
        "contexts": [
            context("mock", "mock", "reader"),
            context("alice", "mock", "alice"),
            context("down", "nowhere", "reader"),
        ],
        "current-context": "mock",
    }
    path = directory / "kubeconfig"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _environment(home: Path) -> dict[str, str]:
    tools = Path(sys.executable).parent
    return {
        "PATH": f"{tools}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "KUBECONFIG": "no-kubeconfig",  # none configured: a session exports kubeconfig
        "TERM": "dumb",
    }


def _commands(steps: list[sessions.Step], port: int) -> list[sessions.Step]:
    out = []
    for step in steps:
        if "pytest" in step.command:
            raise AssertionError(f"line {step.line}: a session may not run the test suite")
        command = step.command.replace(DOC_PORT, str(port))
        out.append(sessions.Step(command, step.line, step.expected))
    return out


@pytest.mark.parametrize("path", _with_sessions(), ids=_rel)
async def test_sessions_run_as_shown(
    path: Path, kmock: kmock_lib.KubernetesEmulator, tmp_path: Path
) -> None:
    text = path.read_text(encoding="utf-8")
    blocks = sessions.blocks_of(text)
    steps = [s for b in blocks if not b.not_run for s in b.steps]
    missing = [name for name in ("jq", "curl", "column", "kubectl") if shutil.which(name) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (.ci/run installs them)")

    api = ClusterApi.start(
        kmock, bundled_snapshot().objects(), missing=(LLM_INFERENCE_SERVICE, NVIDIA_DRIVER)
    )
    api.fail_for_token("alice-token", POD, 403, forbidden(POD, user="alice"))
    work = tmp_path / "work"
    work.mkdir()
    for name in LINKED:
        if (ROOT / name).exists():
            (work / name).symlink_to(ROOT / name)
    _kubeconfig(work, str(kmock.url))

    port = free_port()
    run = sessions.script(_commands(steps, port))
    process = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        run,
        cwd=work,
        env=_environment(tmp_path),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        raw, _ = await asyncio.wait_for(process.communicate(), TIMEOUT_S)
    except TimeoutError:
        process.kill()
        raise
    printed = sessions.split_output(raw.decode("utf-8", "replace"), len(steps))
    assert len(printed) == len(steps), f"the session stopped after {len(printed)} commands"

    failures, actuals = [], {}
    for step, lines in zip(steps, printed, strict=True):
        actual = sessions.normalise(lines, work)
        expected = sessions.normalise(step.expected)
        if not sessions.matches(expected, actual):
            failures.append(sessions.diff(step, expected, actual, _rel(path)))
            shown = [
                line.replace(f"{work}/", "").replace(str(work), ".").replace(str(port), DOC_PORT)
                for line in lines
            ]
            actuals[step.line] = sessions.recorded(step, shown)
    if RECORD and actuals:
        path.write_text(sessions.rerecorded(text, blocks, actuals), encoding="utf-8")
        return
    hint = (
        f"\n\n{len(failures)} of {len(steps)} commands print something else now. If that is "
        "intended, re-record: CUDASCHED_RECORD_SESSIONS=1 .venv/bin/pytest "
        f"tests/test_docs_sessions.py -k '{path.name}'"
    )
    assert not failures, "\n\n".join(failures) + hint


# --------------------------------------------------------------------------- the harness itself

_DOC = """# t

```console
$ printf 'a\\nb\\nc\\n'
a
...
c
$ echo $?
0
```
"""


def test_a_cut_matches_any_lines_and_nothing_else() -> None:
    assert sessions.matches(["a", "...", "c"], ["a", "b", "b2", "c"])
    assert sessions.matches(["a", "...", "c"], ["a", "c"])
    assert not sessions.matches(["a", "...", "c"], ["a", "b"])
    assert not sessions.matches(["a", "b"], ["a", "b", "c"])
    assert sessions.matches(["a", "...", "x", "...", "c"], ["a", "x", "y", "c"])
    assert not sessions.matches(["a", "...", "x", "...", "c"], ["a", "y", "c"])


def test_normalising_changes_only_ports_workdir_and_times(tmp_path: Path) -> None:
    lines = [
        f"at http://127.0.0.1:41285 in {tmp_path}/kubeconfig",
        "2026-12-01 15:59:14,060 WARNING x",
        "driver 550.90.07 on port 18443 of node a",
    ]
    assert sessions.normalise(lines, tmp_path) == [
        "at http://127.0.0.1:<port> in kubeconfig",
        "<time> WARNING x",
        "driver 550.90.07 on port 18443 of node a",
    ]


def test_a_session_runs_and_is_rerecorded_in_place() -> None:
    blocks = sessions.blocks_of(_DOC)
    steps = [s for b in blocks for s in b.steps]
    assert [s.command for s in steps] == ["printf 'a\\nb\\nc\\n'", "echo $?"]
    out = subprocess.run(
        ["bash", "-c", sessions.script(steps)], capture_output=True, text=True, check=True
    ).stdout
    printed = sessions.split_output(out, len(steps))
    assert printed == [["a", "b", "c"], ["0"]]
    assert all(sessions.matches(s.expected, p) for s, p in zip(steps, printed, strict=True))
    changed = {steps[0].line: sessions.recorded(steps[0], ["a", "x", "y", "z"])}
    again = sessions.rerecorded(_DOC, blocks, changed)
    assert "$ printf 'a\\nb\\nc\\n'\na\n...\nz\n$ echo $?\n0\n" in again


def test_a_prompt_with_output_outside_a_console_block_is_found() -> None:
    text = "```\n$ cudasched check --gpu T4\ncompatible\n```\n```bash\n$ ls\n```\n"
    assert sessions.prompt_lines_outside_sessions(sessions.blocks_of(text)) == [2]


def test_an_authors_path_is_found() -> None:
    assert sessions.author_paths("see /home/alice/x and /tmp/livedemo/kubeconfig", ROOT) == [
        "/home/alice",
        "/tmp/livedemo/",
    ]
    assert sessions.author_paths("write to /dev/null or /etc/kubernetes", ROOT) == []
