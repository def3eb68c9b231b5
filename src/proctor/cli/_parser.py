"""The argument parser every command uses: one help style, one-line usage errors.

Help shows each option's default as `(default: X)`, taken from the parser's own default or,
where another setting decides it (a `PROCTOR_*` variable), written into the help text in
that same form. docs/cli.md's default columns must say the same (tests/test_docs.py).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NoReturn

from proctor.errors import ConfigError

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

DATA_DIR_DEFAULT = "$PROCTOR_DATA_DIR, else ~/.proctor"
"""What decides the server data directory when `--data-dir` is not given."""

_SHOWN = re.compile(r"\(default: (.*)\)\.?$")


def shown_default(value: Any) -> str:
    """A default as help and docs write it: `0.5`, `300` (not `300.0`), `~/.proctor`."""
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def help_default(help_text: str) -> str | None:
    """The `X` of a help text ending in `(default: X)`, or None."""
    match = _SHOWN.search(help_text)
    return match.group(1) if match else None


class HelpFormatter(argparse.HelpFormatter):
    """Appends `(default: X)` to an option's help unless the help already states one.

    Switches (store_true), unset (None) and empty defaults show nothing.
    """

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            not action.option_strings
            or "(default" in text
            or default is None
            or default is argparse.SUPPRESS
            or isinstance(default, bool)
            or default in ([], {}, "")
        ):
            return text
        return f"{text} (default: {shown_default(default).replace('%', '%%')})"


class CommandParser(argparse.ArgumentParser):
    """Reports a bad flag as one line naming the fix (via ConfigError, exit 2).

    Subparsers made through `add_subparsers()` are of this class too.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{message}; run `{self.prog} --help` for the options.")

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        # argparse swallows a closed pipe here; `proctor.cli.main` handles it as for any output.
        if message:
            (file or sys.stdout).write(message)


def port_number(text: str) -> int:
    """argparse type of a TCP port flag: 0-65535 (0: any free one, where a command allows)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port (0-65535)")
    return value


def add_data_dir_option(subcommands: Iterable[argparse.ArgumentParser]) -> None:
    """Give every subcommand `--data-dir`: commands that act on the server's database directly."""
    for parser in subcommands:
        parser.add_argument(
            "--data-dir", help=f"server data directory (default: {DATA_DIR_DEFAULT})"
        )
