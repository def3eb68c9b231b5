"""Count what makes the test suite slow, statically: process starts, CLI runs, sleeps,
hand-written polling loops, and uses of the in-process seams; optionally the tests collected
per tier. Writes nothing; the figures go in `bench/results/test_suite.md`.

    .venv/bin/python bench/test_census.py [--collect] [--at REV]

`--at REV` counts the test tree of a git revision instead of the working tree.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROCESS_STARTS = {
    "ManagedProcess",
    "Popen",
    "start_platform",
    "platform_on",
    "start_demo_model",
    "spawn",
    "create_subprocess_exec",
    "create_subprocess_shell",
    "fork",
}
"""Calls that start a long-lived process (a server, the demo model, a sandbox, a child)."""

RUNS = {"run", "check_output", "check_call", "call"}
"""`subprocess.<name>(...)`: a command run to its end (mostly the CLI)."""

SEAMS = {"ScriptedClient", "TestClient", "MockTransport", "PlatformClient", "cli_in_process"}
"""The in-process seams: a scripted chat client, FastAPI's TestClient, httpx's MockTransport, the
runs SDK's client over a given HTTP client, the CLI run in this process."""


def _name(func: ast.expr) -> tuple[str, str]:
    """(receiver, attribute) of a call: ("subprocess", "run"), ("", "start_platform")."""
    if isinstance(func, ast.Attribute):
        owner = func.value.id if isinstance(func.value, ast.Name) else ""
        return owner, func.attr
    if isinstance(func, ast.Name):
        return "", func.id
    return "", ""


def _is_polling_loop(node: ast.AST) -> bool:
    """A function with a `while` loop that sleeps: a hand-written wait."""
    for loop in ast.walk(node):
        if isinstance(loop, ast.While):
            for call in ast.walk(loop):
                if isinstance(call, ast.Call) and _name(call.func)[1] == "sleep":
                    return True
    return False


def census(tests: Path) -> Counter[str]:
    counts: Counter[str] = Counter()
    for path in sorted(tests.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        counts["files"] += 1
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if node.name.startswith("test_"):
                    counts["test functions"] += 1
                elif _is_polling_loop(node):
                    counts["polling helpers (a while loop that sleeps)"] += 1
            if not isinstance(node, ast.Call):
                continue
            owner, name = _name(node.func)
            if name in PROCESS_STARTS and (owner or name not in {"spawn", "fork"}):
                counts["process starts"] += 1
            elif owner == "subprocess" and name in RUNS:
                counts["subprocess runs (mostly the CLI)"] += 1
            elif name == "sleep" and owner in {"time", "asyncio", ""}:
                counts["sleeps"] += 1
            elif name in SEAMS:
                counts["in-process seams"] += 1
    return counts


def collect(root: Path) -> dict[str, int]:
    """Tests collected in all and in each tier (needs the dev venv)."""
    figures = {}
    for label, args in (("tests collected", []), ("in-process tier", ["-m", "not process"])):
        command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
        out = (
            subprocess.run(
                [*command, *args],
                cwd=root,
                capture_output=True,
                text=True,
            )
            .stdout.strip()
            .splitlines()
        )
        last = next((line for line in reversed(out) if "test" in line), "0")
        figures[label] = int(last.split("/")[0].split()[0])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collect", action="store_true", help="also count collected tests")
    parser.add_argument("--at", help="a git revision whose tests/ to count")
    args = parser.parse_args()
    if args.at:
        with tempfile.TemporaryDirectory() as tmp:
            archive = subprocess.run(
                ["git", "archive", args.at, "tests"], cwd=ROOT, capture_output=True, check=True
            )
            subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
            counts = census(Path(tmp) / "tests")
    else:
        counts = census(ROOT / "tests")
    for key, value in sorted(counts.items()):
        print(f"{key:45} {value}")
    if args.collect:
        for key, value in collect(ROOT).items():
            print(f"{key:45} {value}")


if __name__ == "__main__":
    main()
