"""Nothing the CLI prints can drive the terminal: escape sequences and controls are removed."""

from __future__ import annotations

import sys
import types

import pytest

from proctor.cli import main as cli_main
from proctor.cli._terminal import clean

HOSTILE = (
    "name\x1b]0;pwned\x07\x1b[2J\x1b[1;31mred\x1b[0m\x9b2K\r\x08\x07 done\u202eevil\x00\ttab\n"
)


def test_clean_removes_sequences_whole_and_keeps_tab_and_newline() -> None:
    assert clean(HOSTILE) == "namered doneevil\ttab\n"
    assert (
        clean("plain ünïcode → 0.812 ± 0.031 (95% CI)\n")
        == "plain ünïcode → 0.812 ± 0.031 (95% CI)\n"
    )
    assert clean("\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\") == "link"
    assert clean("cut off \x1b[") == "cut off "


def test_every_command_prints_through_the_filter(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def run(argv: list[str]) -> int:
        print(HOSTILE, end="")
        print("err " + HOSTILE, end="", file=sys.stderr)
        return 0

    module = types.ModuleType("proctor.cli.hostile_cmd")
    module.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "proctor.cli.hostile_cmd", module)
    monkeypatch.setitem(cli_main.COMMANDS, "hostile", ("hostile_cmd", "prints a hostile name"))
    assert cli_main.main(["hostile"]) == 0
    out, err = capsys.readouterr()
    assert out == "namered doneevil\ttab\n"
    assert err == "err namered doneevil\ttab\n"
    assert sys.stdout is not None and type(sys.stdout).__name__ != "SafeStream"  # restored
