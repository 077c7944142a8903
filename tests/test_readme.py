"""The README is the user's guide: it starts with the two set-up commands, its glossary names
every reason and finding code the tools print, and every link in it and in ``docs/`` leads
somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cudasched.compat.verdict import REASON_CODES
from cudasched.explain import decision, selectors
from cudasched.operations.audit import findings

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _setup_commands() -> list[str]:
    return README.split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()


def test_it_starts_with_exactly_the_demo_and_the_test_commands() -> None:
    first = _setup_commands()
    assert len(first) == 2
    assert first[0].endswith("cudasched demo")
    assert first[1].endswith(".venv/bin/pytest")
    assert " && .venv/bin/mypy && " in first[1]  # the types are checked with the tests


def test_ci_ends_with_the_readmes_test_command() -> None:
    venv, _, test_command = _setup_commands()[1].partition(" && ")
    assert venv == "python3 -m venv .venv"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert ci.strip().splitlines()[-1] == test_command


def _glossary_codes() -> set[str]:
    return set(re.findall(r"^\| `([a-z-]+)` \|", _section("Reason codes"), re.M))


def test_the_glossary_names_every_node_reason() -> None:
    node_codes = set(REASON_CODES) | {
        decision.NO_GPU_RESOURCE,
        selectors.NODE_SELECTOR_MISMATCH,
        selectors.AFFINITY_MISMATCH,
        decision.REQUIREMENT_LABELS_MISSING,
    }
    assert node_codes - _glossary_codes() == set()


def test_the_glossary_names_every_audit_finding() -> None:
    codes = {
        value
        for name, value in vars(findings).items()
        if name.isupper() and isinstance(value, str) and re.fullmatch(r"[a-z]+(-[a-z]+)+", value)
    }
    assert len(codes) >= 11
    assert codes - _glossary_codes() == set()


def _markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes."""
    out = set()
    for heading in re.findall(r"^#+ (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


def _relative_links(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # links in console output are not links
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:", t)]


def test_the_link_check_reads_links() -> None:
    """The per-page check below is only as good as the link pattern: it must find links."""
    pages = _markdown_files()
    assert len(pages) >= 10
    assert len(_relative_links(ROOT / "README.md")) >= 20
    assert sum(len(_relative_links(page)) for page in pages) >= 40


@pytest.mark.parametrize("path", _markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_somewhere(path: Path) -> None:
    # house: loop-asserts only (a page may have no links; test_the_link_check_reads_links
    # counts them over all pages)
    for target in _relative_links(path):
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        assert dest.exists(), f"{path.name}: {target}"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest.read_text(encoding="utf-8")), f"{path.name}: {target}"
