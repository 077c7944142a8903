"""Console sessions in Markdown, run as tests: the parser, the runner, the comparison and the
re-recorder behind ``tests/test_docs_sessions.py``.

A session is a fenced block whose info string is ``console``. In it, a line that starts with
``$ `` is a command (a trailing backslash continues it on the next line) and the lines up to the
next command are what it prints, stdout and stderr together as a terminal shows them. A line
that is exactly ``...`` stands for any number of lines (none included), so a long output can be
cut in the document without lying about the rest.

Every session of one document runs in ONE bash process, in document order, so a file written or
a server started by one command is there for the next. Output is compared after
:func:`normalise`, which changes only what differs from run to run and nothing a reader relies
on: TCP ports on the loopback address, the temporary directory the commands run in, and
timestamps.

Re-recording: with ``CUDASCHED_RECORD_SESSIONS=1`` the test writes what each command printed back
into the document in place (keeping a ``...`` cut where there was one), and passes; ``git diff``
then shows what changed.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "ELLIPSIS",
    "Block",
    "Step",
    "author_paths",
    "blocks_of",
    "matches",
    "normalise",
    "prompt_lines_outside_sessions",
    "rerecorded",
    "script",
    "split_output",
]

ELLIPSIS = "..."
MARK = "\x1e@@cudasched-session-step@@\x1e"
#: ``<!-- session not run: WHY -->`` right before a console block: the one way to keep a
#: session out of the test, and it must say why.
_NOT_RUN = re.compile(r"<!--\s*session not run:(.*?)-->")
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<ticks>```+)(?P<info>[^`]*)$")


@dataclass
class Step:
    """One command of a session and the output the document shows for it."""

    command: str
    line: int  # 1-based line of the ``$`` in the document
    expected: list[str] = field(default_factory=list)
    first_output_line: int = 0  # 0-based index in the document of the first output line
    last_output_line: int = 0  # exclusive


@dataclass
class Block:
    """A fenced block: its info string, where it is, its text lines and (for sessions) steps."""

    info: str
    line: int  # 1-based line of the opening fence
    indent: str
    lines: list[str]
    steps: list[Step] = field(default_factory=list)
    not_run: str = ""  # why, when an HTML comment before the fence says it is not run

    @property
    def is_session(self) -> bool:
        return self.info.split()[0:1] == ["console"]


def blocks_of(text: str) -> list[Block]:
    """Every fenced block of a Markdown text, the console ones parsed into steps."""
    lines = text.split("\n")
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opened = _FENCE.match(lines[i])
        if opened is None:
            i += 1
            continue
        indent, ticks = opened["indent"], opened["ticks"]
        block = Block(opened["info"].strip(), i + 1, indent, [])
        before = next((lines[k].strip() for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        marked = _NOT_RUN.fullmatch(before)
        if marked is not None:
            block.not_run = marked[1].strip()
        j = i + 1
        while j < len(lines) and lines[j].strip() != ticks:
            block.lines.append(lines[j].removeprefix(indent))
            j += 1
        if block.is_session:
            block.steps = _steps(block, i + 1)
        blocks.append(block)
        i = j + 1
    return blocks


def _steps(block: Block, first: int) -> list[Step]:
    steps: list[Step] = []
    k = 0
    while k < len(block.lines):
        line = block.lines[k]
        if line.startswith("$ "):
            command = line[2:]
            start = k
            while command.endswith("\\") and k + 1 < len(block.lines):
                k += 1
                command = command + "\n" + block.lines[k]
            steps.append(Step(command, first + start + 1, [], first + k + 1, first + k + 1))
        elif not steps:
            raise ValueError(
                f"line {first + k + 1}: a console block must start with a '$ ' command, "
                f"found {line!r}"
            )
        else:
            steps[-1].expected.append(line)
            steps[-1].last_output_line = first + k + 1
        k += 1
    return steps


def prompt_lines_outside_sessions(blocks: Sequence[Block]) -> list[int]:
    """Lines of ``$ command`` with output in a block that is not a ``console`` session: a session
    the test would not run."""
    found = []
    for block in blocks:
        if block.is_session:
            continue
        texts = block.lines
        for n, line in enumerate(texts):
            later = texts[n + 1] if n + 1 < len(texts) else ""
            if line.startswith("$ ") and later and not later.startswith(("$ ", "#")):
                found.append(block.line + n + 1)
    return found


def script(steps: Sequence[Step]) -> str:
    """One bash script running every step in order, a mark after each (the exit status is kept
    for the next command's ``$?``), and every background job stopped at the end."""
    parts = ["set +e"]
    for step in steps:
        parts.append(step.command)
        parts.append(f"__rc=$?; printf '\\n%s\\n' '{MARK}'; (exit $__rc)")
    parts.append('for job in $(jobs -p); do kill "$job" 2>/dev/null; done; wait 2>/dev/null')
    parts.append("exit 0")
    return "\n".join(parts) + "\n"


def split_output(output: str, count: int) -> list[list[str]]:
    """The output of :func:`script`, cut into each step's lines (right-stripped, without
    trailing blank lines); fewer than ``count`` parts when the script was cut short."""
    pieces = output.split(f"\n{MARK}\n")
    found = []
    for piece in pieces[:count]:
        lines = [line.rstrip() for line in piece.split("\n")]
        while lines and not lines[-1]:
            lines.pop()
        found.append(lines)
    return found


_TIMESTAMPS = (
    (re.compile(r"\b\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d([.,]\d+)?(Z|[+-]\d\d:?\d\d)?"), "<time>"),
)
_PORT = re.compile(r"\b(127\.0\.0\.1|localhost|\[::1\]):\d{2,5}\b")


def normalise(lines: Sequence[str], workdir: Path | None = None) -> list[str]:
    """What may differ between two honest runs replaced by a token: loopback ports, the
    temporary work directory, timestamps with seconds."""
    out = []
    for line in lines:
        if workdir is not None:
            line = line.replace(f"{workdir}/", "").replace(str(workdir), ".")
        line = _PORT.sub(lambda m: f"{m[1]}:<port>", line)
        for pattern, token in _TIMESTAMPS:
            line = pattern.sub(token, line)
        out.append(line.rstrip())
    return out


def matches(expected: Sequence[str], actual: Sequence[str]) -> bool:
    """Whether ``actual`` is ``expected`` line for line, a ``...`` line matching any run of
    lines."""
    chunks: list[list[str]] = [[]]
    for line in expected:
        if line == ELLIPSIS:
            chunks.append([])
        else:
            chunks[-1].append(line)
    if len(chunks) == 1:
        return list(expected) == list(actual)
    head, *middle, tail = chunks
    if list(actual[: len(head)]) != head:
        return False
    if tail and list(actual[len(actual) - len(tail) :]) != tail:
        return False
    position, end = len(head), len(actual) - len(tail)
    if end < position:
        return False
    for chunk in middle:
        found = next(
            (
                at
                for at in range(position, end - len(chunk) + 1)
                if list(actual[at : at + len(chunk)]) == chunk
            ),
            None,
        )
        if found is None:
            return False
        position = found + len(chunk)
    return True


def diff(step: Step, expected: Sequence[str], actual: Sequence[str], doc: str) -> str:
    """A unified diff of one step, headed by where it is and what ran."""
    body = "\n".join(
        difflib.unified_diff(
            list(expected), list(actual), "shown in the document", "printed now", lineterm="", n=2
        )
    )
    return f"{doc}:{step.line}: $ {step.command}\n{body}"


def recorded(step: Step, actual: Sequence[str]) -> list[str]:
    """What to write for ``step``: ``actual``, cut where the document cut it: as many lines
    before the first ``...`` as the document shows, then each excerpt the document shows after a
    cut where it still appears, in order (after the last one, whatever follows it); an excerpt
    that is gone gives way to as many of the last lines as it had."""
    chunks: list[list[str]] = [[]]
    for line in step.expected:
        if line == ELLIPSIS:
            chunks.append([])
        else:
            chunks[-1].append(line)
    if len(chunks) == 1:
        return list(actual)
    head, *rest = chunks
    if len(head) >= len(actual):
        return list(actual)
    out = [*actual[: len(head)]]
    position = len(head)
    for number, chunk in enumerate(rest):
        last = number == len(rest) - 1
        found = next(
            (
                at
                for at in range(position, len(actual) - len(chunk) + 1)
                if chunk and list(actual[at : at + len(chunk)]) == chunk
            ),
            None,
        )
        if found is not None:
            out += [ELLIPSIS, *chunk] if found > position else chunk
            position = found + len(chunk)
            if last:
                out += actual[position:]
        elif last:
            start = max(position, len(actual) - len(chunk))
            out += ([ELLIPSIS] if start > position else []) + list(actual[start:])
    return out


def rerecorded(text: str, blocks: Sequence[Block], actuals: dict[int, list[str]]) -> str:
    """``text`` with the output of every step whose line is in ``actuals`` replaced."""
    lines = text.split("\n")
    replacements = []
    for block in blocks:
        for step in block.steps:
            if step.line in actuals:
                new = [block.indent + line if line else line for line in actuals[step.line]]
                replacements.append((step.first_output_line, step.last_output_line, new))
    for start, end, new in sorted(replacements, reverse=True):
        lines[start:end] = new
    return "\n".join(lines)


_AUTHOR_PATHS = re.compile(r"(?<![\w.])/(home|Users|root|work)/[\w.-]+|/tmp/[\w.-]+/")


def author_paths(text: str, root: Path) -> list[str]:
    """Absolute paths of the machine a document was written on: the repository's own, home
    directories, ``/work``, and temporary directories."""
    found = [str(root)] if str(root) in text else []
    found += [m[0] for m in _AUTHOR_PATHS.finditer(text)]
    return found
