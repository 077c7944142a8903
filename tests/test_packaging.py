"""Only the product ships: the wheel holds the package ``cudasched`` (its modules and data files)
and its metadata, nothing of the end-to-end harness, the test data or the benchmarks; the image
copies only what building that wheel needs and installs it, nothing else."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ROOT / "src" / "cudasched"

#: What a checkout holds that is no source: build output, caches, environments.
_NOT_SOURCE = shutil.ignore_patterns(
    ".git",
    ".venv",
    "build",
    "dist",
    "out",
    "*.egg-info",
    "__pycache__",
    ".pytest_cache",
    ".ruff_cache",
    ".mypy_cache",
    ".hypothesis",
)


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The files of the wheel ``pip wheel . --no-deps`` builds from a copy of the checkout, with
    the declared backend as the test extras install it (no download, so it runs offline). A
    copy, because a build in place leaves ``build/`` behind and a stale ``build/lib`` from an
    older checkout would slip its files into the wheel."""
    tree = tmp_path_factory.mktemp("checkout") / "cudasched"
    shutil.copytree(ROOT, tree, ignore=_NOT_SOURCE)
    out = tree.parent / "wheel"
    command = [sys.executable, "-m", "pip", "wheel", str(tree), "--no-deps", "--no-build-isolation"]
    done = subprocess.run(
        [*command, "--no-cache-dir", "-q", "-w", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = out.glob("cudasched-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def test_the_wheel_holds_the_product_alone(wheel_names: list[str]) -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    tops = {name.split("/", 1)[0] for name in wheel_names}
    assert tops == {"cudasched", f"cudasched-{version}.dist-info"}


def test_the_wheel_holds_every_module_and_data_file_of_the_product(
    wheel_names: list[str],
) -> None:
    source = {
        str(path.relative_to(PRODUCT.parent))
        for path in PRODUCT.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    shipped = {name for name in wheel_names if name.startswith("cudasched/")}
    assert shipped == source
    assert {"cudasched/data/compat.yaml", "cudasched/cli/__init__.py"} <= shipped


def _instructions(dockerfile: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, its arguments) per instruction, continuation lines joined."""
    joined = dockerfile.replace("\\\n", " ")
    lines = [line.strip() for line in joined.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in lines
        if line and not line.startswith("#")
    ]


def test_the_image_copies_and_installs_the_product_alone() -> None:
    """The build stage copies what building the wheel needs and ``pip install .``; the image
    takes only the virtual environment from it. Nothing of ``tests/`` or ``benchmarks/``, no
    extras, no editable install."""
    instructions = _instructions((ROOT / "Dockerfile").read_text())
    copies = [args.split() for op, args in instructions if op == "COPY"]
    from_stages = [words for words in copies if words[0].startswith("--from=")]
    from_context = sorted(s for words in copies if words not in from_stages for s in words[:-1])
    assert from_context == ["README.md", "pyproject.toml", "src"]
    assert from_stages == [["--from=build", "/opt/cudasched", "/opt/cudasched"]]
    installed = [
        [word for word in words[2:] if not word.startswith("-")]
        for op, args in instructions
        if op == "RUN"
        for words in (part.split() for part in args.split("&&"))
        if words[:1] and words[0].endswith("/pip") and words[1:2] == ["install"]
    ]
    assert installed == [["pip"], ["."]]  # pip itself upgraded, then the product
