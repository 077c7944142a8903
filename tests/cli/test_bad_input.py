"""Every command over a corpus of garbage input, as a user would run it (issue 13, item 8).

Each run is the real console command in its own process, under a time limit: the contract is
exit status 2, nothing on stdout, exactly one line on stderr (``cudasched: error: ...``), and an
answer before the limit, whatever the file is: a device, a FIFO nobody writes to, invalid
UTF-8, nesting past any parser's comfort, a billion-laughs document, duplicate keys, a number
of 5,000 digits, 10 MB on one line. The limit is generous (a busy two-core runner); a hang
would take forever, and a correct refusal takes about a second.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

TIME_LIMIT = 30.0
REVIEW = Path(__file__).parents[1] / "data" / "admission" / "pod-predictor-triton.json"


def _cudasched() -> list[str]:
    found = shutil.which("cudasched", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "cudasched.cli"]


def billion_laughs() -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 10):
        prev, name = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{name}: &{name} [{', '.join(['*' + prev] * 9)}]")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Name -> path of each garbage input."""
    root = tmp_path_factory.mktemp("corpus")
    files: dict[str, bytes | str] = {
        "not-utf8": b"\xff\xfe\x00garbage\x80\x81",
        "utf16": "apiVersion: v1\nkind: Node\n".encode("utf-16"),
        "deep-yaml": "a: " + "[" * 900 + "]" * 900 + "\n",
        "deep-block-yaml": "".join("  " * i + f"k{i}:\n" for i in range(300)) + "  " * 300 + "x\n",
        "deep-json": "[" * 5000 + "]" * 5000,
        "digits-yaml": "apiVersion: v1\nkind: Node\nmetadata:\n  name: n\nx: " + "9" * 5000 + "\n",
        "digits-json": '{"apiVersion": "v1", "kind": "Node", "x": ' + "9" * 5000 + "}",
        "billion-laughs": billion_laughs(),
        "duplicate-keys": "apiVersion: v1\nkind: Node\nkind: Pod\nmetadata: {name: n}\n",
        "one-line-10mb": "a: " + "x" * 10_000_000 + "\n",
        "flow-10mb": "a: [" + "1," * 5_000_000 + "1]\n",
        "binary": os.urandom(4096),
        "nan-json": '{"apiVersion": "v1", "kind": "Node", "x": NaN}',
        "control-chars": "apiVersion: v1\nkind: \x07\x1b[31mNode\n",
        "recursive-alias": "a: &x [1, *x]\n",
        "empty": "",
    }
    out: dict[str, str] = {}
    for name, content in files.items():
        path = root / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        out[name] = str(path)
    fifo = root / "fifo"
    os.mkfifo(fifo)
    out["fifo"] = str(fifo)
    out["dev-zero"] = "/dev/zero"
    out["directory"] = str(root)
    out["missing"] = str(root / "missing.yaml")
    return out


# The two readers of YAML/JSON documents (settings-sized files and cluster dumps) get the whole
# corpus; the other ways of reading a file (admission reviews, webhook settings, nvidia-smi
# outputs) get the inputs the attack run used; the options that read through the same
# functions get the nastiest of those. FILE is replaced by the input. (Each run is a new
# interpreter, about a second of CPU, so the matrix is chosen rather than complete.)
READERS = {
    "check --node-labels": ["check", "--node-labels", "FILE", "--cuda", "12.4"],
    "explain --cluster": ["explain", "--cluster", "FILE"],
}
OTHER_READERS = {
    "mutate REVIEW": ["mutate", "FILE"],
    "webhook --config": ["webhook", "--config", "FILE", "--self-signed", "--port", "1"],
    "probe --from-nvidia-smi": ["probe", "--from-nvidia-smi", "FILE"],
}
ATTACK_RUN = (
    "not-utf8",
    "deep-yaml",
    "deep-json",
    "digits-yaml",
    "dev-zero",
    "fifo",
    "one-line-10mb",
    "billion-laughs",
    "duplicate-keys",
)
SAME_READERS = {
    "explain --workload": ["explain", "--workload", "FILE"],
    "explain --nodes": ["explain", "--nodes", "FILE"],
    "mutate --cluster": ["mutate", "--cluster", "FILE", str(REVIEW)],
    "mutate --config": ["mutate", "--config", "FILE", str(REVIEW)],
    "demo --cluster": ["demo", "--cluster", "FILE"],
    "webhook --cluster": ["webhook", "--cluster", "FILE", "--self-signed", "--port", "1"],
}
NASTIEST = ("fifo", "dev-zero", "not-utf8", "billion-laughs", "deep-json")

# Values on the command line.
ARGUMENTS = [
    ["check", "--gpu", "A100", "--driver", "535.104.05", "--cuda", "12.x"],
    ["check", "--gpu", "A100", "--driver", "535.104.05", "--cuda", "١٢.٨"],
    ["check", "--gpu", "A100", "--driver", "535.104.05", "--cuda", "9" * 5000],
    ["check", "--gpu", "A100", "--driver", "9" * 5000, "--cuda", "12.4"],
    ["check", "--gpu", "x" * 100_000, "--driver", "535.104.05", "--cuda", "12.4"],
    ["check", "--gpu", "A100", "--driver", "535.104.05", "--min-compute-capability", "٨.٠"],
    ["affinity", "--cuda", "cu" + "1" * 5000, "--scheme", "gfd"],
    ["manifests", "--image", ""],
    ["manifests", "--image", "", "--no-agent"],
    ["manifests", "--namespace", "x" * 300],
    ["manifests", "--api-server-cidr", "10.0.0.0/33"],
    ["check", "--bogus"],
    ["check", "--cuda"],
    ["no-such-command"],
    ["webhook", "--port", "70000"],
    ["webhook", "--log-level", "shout"],
    ["agent", "--interval", "-1", "--output", "nfd"],
]


def run(args: list[str]) -> tuple[list[str], subprocess.CompletedProcess[str] | None]:
    try:
        done = subprocess.run(
            [*_cudasched(), *args],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=TIME_LIMIT,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return args, None
    return args, done


def problems(results: list[tuple[list[str], subprocess.CompletedProcess[str] | None]]) -> list[str]:
    out = []
    for args, done in results:
        shown = " ".join(a if len(a) < 40 else a[:37] + "..." for a in args)
        if done is None:
            out.append(f"{shown}: no answer within {TIME_LIMIT:g} s")
            continue
        lines = done.stderr.splitlines()
        if done.returncode != 2:
            out.append(f"{shown}: exit {done.returncode}, stderr {done.stderr[-300:]!r}")
        elif done.stdout:
            out.append(f"{shown}: wrote to stdout: {done.stdout[:200]!r}")
        elif len(lines) != 1 or not lines[0].startswith("cudasched: error: "):
            out.append(f"{shown}: stderr is not one error line: {done.stderr[:300]!r}")
        elif "Traceback" in done.stderr:
            out.append(f"{shown}: traceback")
    return out


def test_every_file_option_refuses_garbage_in_one_line(corpus: dict[str, str]) -> None:
    cases = [(t, name) for t in READERS.values() for name in corpus]
    cases += [(t, name) for t in OTHER_READERS.values() for name in ATTACK_RUN]
    cases += [(t, name) for t in SAME_READERS.values() for name in NASTIEST]
    runs = [[corpus[name] if a == "FILE" else a for a in template] for template, name in cases]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run, runs))
    found = problems(results)
    assert not found, f"{len(found)} of {len(runs)} runs failed:\n" + "\n".join(found)


def test_every_bad_argument_is_refused_in_one_line() -> None:
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run, ARGUMENTS))
    found = problems(results)
    assert not found, "\n".join(found)
