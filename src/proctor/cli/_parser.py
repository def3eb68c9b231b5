"""The argument parser every command uses: a usage error is one line, not usage + error."""

from __future__ import annotations

import argparse
from typing import NoReturn

from proctor.errors import ConfigError


class CommandParser(argparse.ArgumentParser):
    """Reports a bad flag as one line naming the fix (via ConfigError, exit 2).

    Subparsers made through `add_subparsers()` are of this class too.
    """

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{message}; run `{self.prog} --help` for the options.")
