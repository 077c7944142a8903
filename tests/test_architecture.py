"""The house rules, checked: the import contracts hold (and catch a planted violation), only the
edges import client and server libraries, ``docs/architecture.md`` places every module and
draws the same layers as the contract, and says truly where each module is tested."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "cudasched"
MAP = ROOT / "docs" / "architecture.md"


def _lint_imports(cwd: Path, src: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` over the package under ``src``, with the contracts of ``cwd``."""
    exe = Path(sys.executable).with_name("lint-imports")
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [str(exe), "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def _contracts() -> list[dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return config["tool"]["importlinter"]["contracts"]


def test_the_contracts_hold() -> None:
    result = _lint_imports(ROOT, ROOT / "src")
    assert result.returncode == 0, result.stdout + result.stderr
    kept = re.findall(r" KEPT$", result.stdout, flags=re.M)
    assert len(kept) == len(_contracts()) >= 4, result.stdout


@pytest.mark.parametrize(
    ("module", "imports", "contract"),
    [
        # the core importing an edge
        ("vocab/planted.py", "import cudasched.webhook.server.app", "The pipeline reads bottom-up"),
        # nodes and workloads are siblings that never import each other
        ("nodes/planted.py", "import cudasched.workloads.gpu", "The pipeline reads bottom-up"),
        # one command borrowing from another
        ("cli/planted.py", "", "Each command stands alone"),
        # a client library below the edges: the core, and a command beside cudasched.kube
        ("workloads/planted.py", "import lightkube", "imported only by their edges"),
        ("operations/planted.py", "from httpx import Client", "imported only by their edges"),
        # the webhook's decision reaching for the Kubernetes client (only its server may serve)
        ("webhook/admission/planted.py", "import lightkube", "imported only by their edges"),
        # the pure decision importing the Events reporter (what the rooms undid)
        (
            "webhook/admission/planted.py",
            "import cudasched.webhook.background.nofit",
            "Webhook rooms",
        ),
        # a module of the webhook outside every room
        ("webhook/planted.py", "", "Webhook rooms"),
    ],
)
def test_a_planted_violation_breaks_the_contract(
    tmp_path: Path, module: str, imports: str, contract: str
) -> None:
    """A copy of the package with one forbidden import fails ``lint-imports``, naming the
    contract: the contract is not vacuous."""
    src = tmp_path / "src"
    shutil.copytree(PACKAGE, src / "cudasched", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    if module == "cli/planted.py":
        # the audit command importing the report command
        target = src / "cudasched" / "cli" / "audit.py"
        target.write_text(target.read_text() + "\nimport cudasched.cli.report  # planted\n")
    else:
        (src / "cudasched" / module).write_text(f'"""Planted."""\n\n{imports}\n')
    result = _lint_imports(tmp_path, src)
    assert result.returncode != 0, result.stdout
    assert re.search(re.escape(contract) + r".* BROKEN", result.stdout), result.stdout


#: The stage packages that talk to the network: the only importers of its client and server
#: libraries (the ``edges`` contract); of the webhook, only its server room.
EDGES = {"kube", "registry", "webhook"}
WEBHOOK_SERVER = "webhook.server"


def test_every_other_stage_is_forbidden_the_client_libraries() -> None:
    """The ``edges`` contract lists its importers the other way round (who may not), so a new
    stage package, or a new part of the webhook, must be added to it: every stage package but
    the edges is a source, and every part of the webhook but its server room."""
    edges = next(c for c in _contracts() if c["id"] == "edges")
    sources = {str(m).removeprefix("cudasched.") for m in edges["source_modules"]}  # type: ignore[union-attr]
    stages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    webhook = PACKAGE / "webhook"
    parts = {
        f"webhook.{p.stem}"
        for p in webhook.iterdir()
        if (p / "__init__.py").is_file() or (p.suffix == ".py" and p.stem != "__init__")
    }
    assert WEBHOOK_SERVER in parts
    assert sources == (stages - EDGES) | (parts - {WEBHOOK_SERVER})
    assert {"lightkube", "httpx", "uvicorn"} <= set(edges["forbidden_modules"])  # type: ignore[arg-type]


def _layers_in_map(fence: str = "layers") -> list[str]:
    block = re.search(rf"```{fence}\n(.*?)```", MAP.read_text(), flags=re.S)
    assert block, f"docs/architecture.md has no ```{fence} block"
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


def test_the_map_draws_the_contract_layers() -> None:
    pipeline = next(c for c in _contracts() if c["id"] == "pipeline")
    contract = [
        " | ".join(part.strip().removeprefix("cudasched.") for part in str(layer).split("|"))
        for layer in pipeline["layers"]  # type: ignore[union-attr]
    ]
    assert _layers_in_map() == contract
    assert len(contract) == 12  # the registry edge (issue 19) sits between kube and the servers


def test_every_stage_package_is_a_layer() -> None:
    stages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    layered = {name.strip() for line in _layers_in_map() for name in line.split("|")}
    assert stages == layered


def test_the_map_draws_the_webhook_rooms() -> None:
    """The webhook's section draws its rooms in the contract's order, and every package and
    module directly in ``webhook/`` is one of them (the contract is exhaustive too)."""
    rooms = next(c for c in _contracts() if c["id"] == "webhook")
    assert rooms["containers"] == ["cudasched.webhook"]
    assert rooms["exhaustive"] is True
    assert _layers_in_map("webhook-layers") == rooms["layers"]
    webhook = PACKAGE / "webhook"
    present = {p.stem for p in webhook.iterdir() if p.suffix == ".py" and p.stem != "__init__"}
    present |= {p.name for p in webhook.iterdir() if (p / "__init__.py").is_file()}
    assert present == set(rooms["layers"])  # type: ignore[arg-type]


def test_every_webhook_room_says_what_it_holds() -> None:
    """Each room's ``__init__`` is its docstring alone, naming every module it holds."""
    rooms = sorted(p for p in (PACKAGE / "webhook").iterdir() if (p / "__init__.py").is_file())
    unsaid: dict[str, list[str]] = {}
    for room in rooms:
        init = room / "__init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        modules = sorted(p.stem for p in room.glob("*.py") if p.name != "__init__.py")
        missing = [m for m in modules if f"``{m}``" not in doc]
        if missing or not doc or not _only_a_docstring(init):
            unsaid[room.name] = missing
    assert len(rooms) == 6
    assert unsaid == {}


def _only_a_docstring(path: Path) -> bool:
    body = ast.parse(path.read_text()).body
    return len(body) <= 1 and all(
        isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) for node in body
    )


def _harness_modules() -> list[str]:
    """The end-to-end harness's modules as the map names them, by their path from the
    repository root (``tests/harness/...``: it lives with the tests, outside the product); a
    package by its own name when its ``__init__`` holds code, none when it holds only its
    docstring, as in the product's packages."""
    harness = ROOT / "tests" / "harness"
    named = []
    for path in harness.rglob("*.py"):
        module = path.relative_to(ROOT).with_suffix("")
        if path.name == "__init__.py":
            if _only_a_docstring(path):
                continue
            module = module.parent
        if module != harness.relative_to(ROOT):
            named.append(str(module))
    return named


def test_the_map_places_every_module() -> None:
    text = MAP.read_text()
    modules = sorted(
        str(p.relative_to(PACKAGE).with_suffix(""))
        for p in PACKAGE.rglob("*.py")
        if p.name != "__init__.py"
    )
    modules += _harness_modules()
    missing = [m for m in modules if f"`{m}`" not in text]
    assert not missing, f"docs/architecture.md does not place: {missing}"
    # and names no module that does not exist
    named = set(re.findall(r"^\| `([a-z0-9_/]+)` \|", text, flags=re.M))
    assert named - set(modules) == set()
    assert len(modules) > 100


# ------------------------------------------------------------------ where modules are tested

TESTS = ROOT / "tests"


def _product_modules() -> list[str]:
    return sorted(
        str(p.relative_to(PACKAGE).with_suffix(""))
        for p in PACKAGE.rglob("*.py")
        if p.name != "__init__.py"
    )


def _own_test_files(module: str) -> list[Path]:
    """``tests/<stage>/**/test_<module>.py``: the files named after ``module``."""
    stage, name = module.split("/")[0], module.rsplit("/", 1)[-1]
    return sorted((TESTS / stage).rglob(f"test_{name}.py"))


def _topic_rows() -> dict[str, list[str]]:
    """The map's table of modules tested under a topic: test file -> the modules it names."""
    section = MAP.read_text().split("## Where each module is tested", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(tests/[^`]+)` \| (.+) \|$", section, flags=re.M)
    return {path: re.findall(r"`([a-z0-9_/]+)`", modules) for path, modules in rows}


def _imports_and_strings(path: Path) -> tuple[set[str], set[str]]:
    """The modules ``path`` imports (through the ``tests.support`` modules it imports too) and
    the string constants it holds."""
    names: set[str] = set()
    strings: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            strings.add(node.value)
    for support in [n for n in names if n.startswith("tests.support.")]:
        found = ROOT / (support.replace(".", "/") + ".py")
        if found.is_file():
            names |= _imports_and_strings(found)[0]
    return names, strings


@pytest.fixture(scope="module")
def reach() -> Callable[[Path, str], bool]:
    """Whether a test file reaches a module: imports it, or a module that imports it (directly
    or not); a command module of ``cli/`` also through a file that runs the command."""
    import grimp

    from cudasched.cli.app import COMMANDS

    graph = grimp.build_graph("cudasched", cache_dir=None)
    read: dict[Path, tuple[set[str], set[str]]] = {}

    def reaches(path: Path, module: str) -> bool:
        if path not in read:
            read[path] = _imports_and_strings(path)
        imported, strings = read[path]
        imported = {name for name in imported if name in graph.modules}
        imported |= {e.module for c, e in COMMANDS.items() if c in strings and c != e.module}
        dotted = "cudasched." + module.replace("/", ".")
        return dotted in imported or any(
            dotted in graph.find_upstream_modules(name) for name in imported
        )

    return reaches


def test_every_module_has_its_own_test_file_or_a_topic_row() -> None:
    rows = _topic_rows()
    listed = [m for modules in rows.values() for m in modules]
    assert len(listed) == len(set(listed)), "a module is in two rows"
    modules = _product_modules()
    unplaced = [m for m in modules if not _own_test_files(m) and m not in listed]
    assert not unplaced, (
        f"tested where? add a test file or a row in docs/architecture.md: {unplaced}"
    )
    both = [m for m in listed if _own_test_files(m)]
    assert not both, f"these have a file named after them; drop their rows: {both}"
    assert set(listed) <= set(modules), set(listed) - set(modules)
    assert len(rows) > 20


def test_each_test_file_reaches_the_modules_it_is_said_to_test(
    reach: Callable[[Path, str], bool],
) -> None:
    rows = _topic_rows()
    missing = [path for path in rows if not (ROOT / path).is_file()]
    assert not missing, missing
    unreached = [(p, m) for p, modules in rows.items() for m in modules if not reach(ROOT / p, m)]
    assert not unreached, unreached
    named = {m: _own_test_files(m) for m in _product_modules()}
    strays = [
        (m, files) for m, files in named.items() if files and not any(reach(f, m) for f in files)
    ]
    assert not strays, f"a file named after a module that does not test it: {strays}"
