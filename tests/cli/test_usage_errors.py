"""A bad flag to any command is one line naming the fix (exit 2), never usage text or a trace.
The CLI runs in this process (`cli_in_process`): what it prints and returns is the point."""

from __future__ import annotations

from pathlib import Path

import pytest

from proctor.cli.main import COMMANDS
from tests.support.cli import cli_in_process


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_unknown_flag_is_one_line_naming_help(command: str, tmp_path: Path) -> None:
    result = cli_in_process(command, "--no-such-flag", home=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"proctor {command}") and "--help" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("flag", ["--sampling-args", "--env-args"])
def test_a_json_flag_that_is_no_object_names_the_form(flag: str, tmp_path: Path) -> None:
    result = cli_in_process(
        "hosted", "run", "reverse-text", "-m", "demo", flag, "{bad", home=tmp_path
    )
    assert result.returncode == 2
    assert result.stderr == (
        f"proctor hosted: argument {flag}: expected a JSON object such as '{{\"a\": 1}}', "
        "got '{bad'; run `proctor hosted run --help` for the options.\n"
    )
