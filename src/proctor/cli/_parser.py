"""The argument parser every command uses: a usage error is one line, not usage + error."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import NoReturn

from proctor.errors import ConfigError


class CommandParser(argparse.ArgumentParser):
    """Reports a bad flag as one line naming the fix (via ConfigError, exit 2).

    Subparsers made through `add_subparsers()` are of this class too.
    """

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{message}; run `{self.prog} --help` for the options.")


def add_data_dir_option(subcommands: Iterable[argparse.ArgumentParser]) -> None:
    """Give every subcommand `--data-dir`: commands that act on the server's database directly."""
    for parser in subcommands:
        parser.add_argument("--data-dir", help="server data directory (default ~/.proctor)")
