"""A bad flag to any command is one line naming the fix (exit 2), never usage text or a trace."""

from __future__ import annotations

import subprocess

import pytest

from proctor.cli.main import COMMANDS
from tests.support.procs import PROCTOR


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_unknown_flag_is_one_line_naming_help(command: str) -> None:
    result = subprocess.run(
        [*PROCTOR, command, "--no-such-flag"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"proctor {command}") and "--help" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("flag", ["--sampling-args", "--env-args"])
def test_a_json_flag_that_is_no_object_names_the_form(flag: str) -> None:
    result = subprocess.run(
        [*PROCTOR, "hosted", "run", "reverse-text", "-m", "demo", flag, "{bad"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr == (
        f"proctor hosted: argument {flag}: expected a JSON object such as '{{\"a\": 1}}', "
        "got '{bad'; run `proctor hosted run --help` for the options.\n"
    )
