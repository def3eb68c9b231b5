"""The `proctor` entry point itself: bare `proctor`, `--help`, and output into a closed pipe."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.support.procs import PROCTOR


def test_bare_proctor_prints_the_commands_and_exits_2() -> None:
    result = subprocess.run(PROCTOR, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("usage: proctor [--version] COMMAND")
    assert "  eval " in result.stderr and "Traceback" not in result.stderr


def test_help_lists_version() -> None:
    result = subprocess.run([*PROCTOR, "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert "--version   print the installed version and exit" in result.stdout


@pytest.mark.parametrize(
    "argv",
    [
        ["envs", "list", "--json"],
        ["envs"],
        ["--help"],
        ["eval", "--help"],
        ["server", "--help"],
        ["eval", "reverse-text", "--dry-run"],
    ],
    ids=" ".join,
)
def test_a_closed_pipe_ends_quietly(argv: list[str]) -> None:
    # The reader is gone before the first write, as with `| head -0`; with `| head -5` the
    # same error comes after five lines. Either way: no traceback, no "Exception ignored".
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [*PROCTOR, *argv], stdout=write_end, stderr=subprocess.PIPE, timeout=60
        )
    finally:
        os.close(write_end)
    assert result.stderr.decode() == ""
    assert result.returncode == 141


def test_a_pipe_closed_midway_ends_quietly() -> None:
    # `proctor envs list --json | head -c 10`: the reader leaves after a few bytes.
    proc = subprocess.Popen(
        [*PROCTOR, "eval", "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(10)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert "Traceback" not in err and "Exception ignored" not in err
    assert proc.returncode in (0, 141)  # 0 when all of the help fit in the pipe before we left
