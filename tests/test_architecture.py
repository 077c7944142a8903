"""The house rules, checked: the import-layer contracts hold (and catch a planted violation), and
``docs/architecture.md`` places every module and draws the same layers as the contract."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tomllib
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
    assert len(rooms) == 5
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
