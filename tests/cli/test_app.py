"""The command table: every command is listed without importing it, and runs when asked."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from cudasched.cli import app
from cudasched.cli.app import COMMANDS


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_command_registers_itself_with_the_listed_summary(name: str) -> None:
    entry = COMMANDS[name]
    importlib.import_module(entry.module)
    infos = [info.callback for info in app.registered_commands if info.name == name]
    # A command with subcommands (knowledge) is a group: its help is its callback's.
    groups = [g.typer_instance for g in app.registered_groups if g.name == name]
    infos += [g.registered_callback.callback for g in groups if g and g.registered_callback]
    assert len(infos) == 1, f"{entry.module} must register exactly one {name!r}"
    doc = " ".join((infos[0].__doc__ or "").split() if infos[0] else [])
    assert doc.startswith(entry.summary), "the table's summary opens the command's own help"
    assert entry.summary.endswith("."), "a whole sentence"


def test_help_lists_every_command_without_importing_any() -> None:
    code = (
        "import sys\n"
        "sys.argv = ['cudasched', '--help']\n"
        "from cudasched.cli import app\n"
        "try:\n    app()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('cudasched')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    help_text, _, modules = out.stdout.rpartition("\n[")
    for name in COMMANDS:
        assert f"  {name} " in help_text
    loaded = eval("[" + modules)  # noqa: S307 - our own process's output
    assert loaded == [
        "cudasched",
        "cudasched.cli",
        "cudasched.cli.app",
        "cudasched.vocab",
        "cudasched.vocab.errors",
    ]


def test_a_command_imports_only_its_own_module() -> None:
    code = (
        "import sys\n"
        "sys.argv = ['cudasched', 'affinity', '--cuda', '12.4']\n"
        "from cudasched.cli import app\n"
        "try:\n    app()\nexcept SystemExit:\n    pass\n"
        "print([m for m in sys.modules if m.startswith('cudasched.cli.')])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(eval(out.stdout.splitlines()[-1]))  # noqa: S307 - our own process's output
    assert "cudasched.cli.affinity" in loaded
    assert not loaded & {"cudasched.cli.explain", "cudasched.cli.webhook", "cudasched.cli.demo"}


def test_check_on_the_cached_knowledge_loads_no_yaml_and_no_rich_console(tmp_path: Path) -> None:
    """PyYAML and rich's console and progress bar are most of ``check``'s start-up: with the
    knowledge cached no YAML is read, and a piped answer needs neither (the start-up goal of
    benchmarks/startup.py)."""
    code = (
        "import sys\n"
        "sys.argv = ['cudasched', 'check', '--gpu', 'A100', '--driver', '535.104.05',"
        " '--cuda', '12.2']\n"
        "from cudasched.cli import app\n"
        "try:\n    app()\nexcept SystemExit:\n    pass\n"
        "heavy = ('yaml', 'rich.console', 'rich.progress')\n"
        "print(sorted(m for m in sys.modules if m in heavy or m.startswith('yaml.')))\n"
    )
    env = {**os.environ, "CUDASCHED_CACHE_DIR": str(tmp_path)}
    runs = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        for _ in range(2)
    ]
    assert "yaml" in runs[0].stdout.splitlines()[-1], "the first run builds the cache from YAML"
    assert runs[1].stdout.splitlines()[-1] == "[]"


def test_unknown_command_is_a_usage_error() -> None:
    result = CliRunner().invoke(app, ["no-such-command"])
    assert result.exit_code == 2


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["explain", "-o", "bogus"], "'bogus' is not one of"),
        (["check", "--bogus"], "No such option: --bogus"),
        (["nope"], "No such command 'nope'"),
        (["affinity", "--cuda"], "requires an argument"),
    ],
)
def test_usage_errors_are_one_line_with_exit_2(args: list[str], fragment: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", "from cudasched.cli import main; main()", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2
    assert out.stdout == ""
    [line] = out.stderr.splitlines()
    assert line.startswith("cudasched: error: ") and fragment in line


def test_help_groups_every_command_once() -> None:
    from cudasched.cli.app import GROUPS

    listed = [name for names in GROUPS.values() for name in names]
    assert sorted(listed) == sorted(COMMANDS)
    result = CliRunner().invoke(app, ["--help"])
    for title in GROUPS:
        assert f"{title}:" in result.stdout


@pytest.mark.parametrize(
    ("typed", "meant"),
    [("audti", "audit"), ("explian", "explain"), ("plan-driver", "plan-drivers")],
)
def test_a_misspelled_command_gets_a_suggestion(typed: str, meant: str) -> None:
    result = CliRunner().invoke(app, [typed])
    assert result.exit_code == 2
    assert f"No such command {typed!r}; did you mean {meant!r}?" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_at_80_columns_cuts_no_word(name: str) -> None:
    """click wraps help at hyphens (``minor-``/``compat``), as help texts conventionally do,
    but a word without one is never split: every such word of a command's help and of its
    options' helps appears whole in ``--help`` at 80 columns."""
    import typer

    importlib.import_module(COMMANDS[name].module)
    command = typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]
    texts = [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)]
    words = {w for text in texts for w in text.split() if "-" not in w}
    shown = CliRunner().invoke(app, [name, "--help"], env={"COLUMNS": "80"}).stdout
    assert sorted(w for w in words if w not in shown) == []


#: Every command that reads a cluster (it takes --live), as a user first runs it, and whether
#: it answers in JSON (which then names the cluster it judged).
SAMPLE_RUNS: dict[str, tuple[list[str], bool]] = {
    "explain": (["explain", "-o", "json"], True),
    "audit": (["audit", "-o", "json"], True),
    "report": (["report", "-o", "json"], True),
    "plan-drivers": (["plan-drivers", "-o", "json"], True),
    "snapshot": (["snapshot"], False),  # a kubectl List: read back by --cluster as is
    "mutate": (["mutate", "examples/team-llm.yaml"], False),  # an AdmissionReview
    "demo": (["demo"], False),
    "device-classes": (["device-classes", "-o", "json"], True),
    "kueue": (["kueue", "-o", "json"], True),
}


def test_every_command_that_reads_a_cluster_is_in_the_sample_runs() -> None:
    import typer

    group = typer.main.get_command(app)
    ctx = typer.Context(group)
    commands = {n: group.get_command(ctx, n) for n in group.list_commands(ctx)}  # type: ignore[attr-defined]
    readers = {n for n, c in commands.items() if any(p.name == "live" for p in c.params)}
    assert readers == set(SAMPLE_RUNS)


@pytest.mark.parametrize("name", sorted(SAMPLE_RUNS))
def test_judging_the_bundled_sample_is_said_first_on_stderr_and_in_json(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 27 item 5: with no cluster configured (the suite configures none) a command judges
    the bundled sample and says so in the first line of stderr, once (and in its JSON answer);
    asked for with --sample, or given a cluster, it says nothing. The demo's cluster is the
    sample: it never says so."""
    import itertools
    import json
    from pathlib import Path

    from cudasched.cli.inputs import SAMPLE_NOTE

    root = Path(__file__).parents[2]
    monkeypatch.chdir(root)
    args, answers_json = SAMPLE_RUNS[name]
    note = f"cudasched: note: {SAMPLE_NOTE}"
    fallback = CliRunner().invoke(app, args)
    asked = CliRunner().invoke(app, [*args, "--sample"])
    given = CliRunner().invoke(
        app, [*args, "--cluster", str(root / "src/cudasched/data/sample-cluster.yaml")]
    )
    assert asked.exit_code in (0, 1), asked.output
    assert given.exit_code == asked.exit_code and note not in given.stderr + asked.stderr
    if name != "demo":  # the demo's ports and timings differ run by run
        assert fallback.stdout == asked.stdout
    if name == "demo":
        assert note not in fallback.stderr and fallback.exit_code == 0
    else:
        lines = fallback.stderr.splitlines()
        leading = list(itertools.takewhile(lambda line: line.startswith("cudasched: note:"), lines))
        assert note in leading and lines.count(note) == 1  # before anything else it says
    # audit's exit code judges your cluster: with none configured it audited nothing of yours
    assert fallback.exit_code == (2 if name == "audit" else asked.exit_code)
    if answers_json:
        assert json.loads(fallback.stdout)["cluster"]["sample"] is True
        assert json.loads(asked.stdout)["cluster"]["sample"] is True
        assert json.loads(given.stdout)["cluster"]["sample"] is False


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_shows_no_docstring_markup(name: str) -> None:
    """A command's help is its docstring: the RST double backticks of ``manifests`` that the
    help once showed are not there, in any command."""
    shown = CliRunner().invoke(app, [name, "--help"]).stdout
    assert shown.startswith("Usage: ") and "``" not in shown and ":func:" not in shown


def _json_commands() -> set[str]:
    """Every command and subcommand whose ``-o/--output`` offers ``json`` (in its choices, or
    in its help where the option is free text), walked from the command table (typer vendors
    click, so its classes are matched by what they have)."""
    group = typer.main.get_command(app)
    ctx = group.make_context("cudasched", ["--help"], resilient_parsing=True)
    found: set[str] = set()

    def walk(command: Any, path: str) -> None:
        for name in command.list_commands(ctx) if hasattr(command, "list_commands") else ():
            walk(command.get_command(ctx, name), f"{path} {name}".strip())
        for param in command.params:
            if "--output" not in getattr(param, "opts", ()):
                continue
            offered = getattr(param.type, "choices", None) or (param.help or "").split()
            if any(str(c).strip(":;,.") == "json" for c in offered):
                found.add(path)

    walk(group, "")
    return found


# One run of each command that answers in JSON; a new one must be added here (or to
# _OBJECTS_NOT_ANSWERS with its reason), which the walk below enforces.
_JSON_RUNS: dict[str, list[str]] = {
    "version": ["version", "-o", "json"],
    "check": ["check", "--gpu", "T4", "--driver", "550.90.07", "--cuda", "12.4", "-o", "json"],
    "explain": ["explain", "isvc/llama3-8b", "-n", "team-nlp", "--sample", "-o", "json"],
    "audit": ["audit", "--sample", "-o", "json"],
    "report": ["report", "--sample", "-o", "json"],
    "plan-drivers": ["plan-drivers", "--sample", "-o", "json"],
    "recommend-driver": ["recommend-driver", "--gpu", "T4", "--cuda", "12.4", "-o", "json"],
    "node-template": ["node-template", "--gpu", "T4", "--driver", "550.90.07", "-o", "json"],
    "device-classes": ["device-classes", "--sample", "-o", "json"],
    "kueue": ["kueue", "--sample", "-o", "json"],
    "knowledge": ["knowledge", "-o", "json"],
    "knowledge gpus": ["knowledge", "gpus", "T4", "-o", "json"],
    "knowledge images": ["knowledge", "images", "vllm", "-o", "json"],
    "knowledge cuda": ["knowledge", "cuda", "-o", "json"],
    "knowledge drivers": ["knowledge", "drivers", "-o", "json"],
    "knowledge frameworks": ["knowledge", "frameworks", "-o", "json"],
    "knowledge diff": ["knowledge", "diff", "built-in", "built-in", "-o", "json"],
    "knowledge verify": ["knowledge", "verify", "built-in", "-o", "json"],
    # Nothing listens on port 1: the answer is a row that says why, exit 1.
    "image": ["image", "127.0.0.1:1/ml/llm:7", "--plain-http", "127.0.0.1:1", "-o", "json"],
    "probe": [
        "probe",
        "--from-nvidia-smi",
        str(Path(__file__).parents[1] / "data" / "nvidia-smi" / "plain-550-l40s.txt"),
        "-o",
        "json",
    ],
}

# JSON that is a Kubernetes object to apply or paste, not an answer: a foreign key would make
# it invalid for the API server (docs/design.md, "the version in every JSON answer").
_OBJECTS_NOT_ANSWERS = {"affinity", "snapshot"}


def test_version_is_a_command_an_option_and_in_every_json_answer() -> None:
    """Issue 27 item 12: cudasched version, --version (the plugin's too) and the version in
    every JSON answer, walked from the command table so that none is left out, so a saved
    answer says which cudasched gave it."""
    import json

    from cudasched import __version__

    assert CliRunner().invoke(app, ["--version"]).stdout == f"cudasched {__version__}\n"
    assert CliRunner().invoke(app, ["version"]).stdout == f"cudasched {__version__}\n"
    assert _json_commands() == set(_JSON_RUNS) | _OBJECTS_NOT_ANSWERS
    docs = {
        name: json.loads(CliRunner().invoke(app, args).stdout) for name, args in _JSON_RUNS.items()
    }
    versions = {name: doc.get("cudaschedVersion") for name, doc in docs.items()}
    assert versions == dict.fromkeys(_JSON_RUNS, __version__)
    assert docs["version"] == {"cudaschedVersion": __version__}
    assert docs["image"]["images"][0]["image"] == "127.0.0.1:1/ml/llm:7"


@pytest.mark.parametrize("output", ["json", "wide"])  # written by hand, and through rich
def test_a_closed_pipe_is_no_error(output: str) -> None:
    """Issue 27 item 12: ``cudasched explain -o wide | head -1`` exits 0 without a word when
    head closes the pipe (rich exited 1, Python printed a BrokenPipeError at exit)."""
    import subprocess
    import sys

    CLI = (sys.executable, "-c", "from cudasched.cli import main; main()")  # noqa: N806
    process = subprocess.Popen(
        [*CLI, "explain", "--sample", "-o", output],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    first = process.stdout.read(10)  # more than a pipe holds follows: the writer blocks
    process.stdout.close()
    errors = process.stderr.read()
    assert (first != b"", process.wait(timeout=120), errors) == (True, 0, b"")


def test_the_group_takes_clicks_main_arguments_by_position(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The group's main once took (*args, standalone_mode=True, **kwargs) and called click's
    # with standalone_mode=False besides: a caller passing click's fourth positional argument
    # (standalone_mode) got a TypeError for a keyword given twice (mypy: misc).
    group = typer.main.get_command(app)
    assert group.main(["--help"], "cudasched", None, False) == 0
    assert "Usage: cudasched" in capsys.readouterr().out
