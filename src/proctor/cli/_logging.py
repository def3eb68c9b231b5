"""How the commands log: one line format for every command, terminal or not."""

from __future__ import annotations

import argparse
import logging

LOG_LEVELS = ("debug", "info", "warning", "error")

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""Every command's log lines (and the run directory's logs/eval.log) read the same."""


def add_log_level_flag(parser: argparse.ArgumentParser) -> None:
    """Add `--log-level` (default info) to a command's parser."""
    parser.add_argument(
        "--log-level",
        default="info",
        choices=LOG_LEVELS,
        help="least severe log lines shown on stderr",
    )


def log_formatter() -> logging.Formatter:
    """The formatter of LOG_FORMAT."""
    return logging.Formatter(LOG_FORMAT)


def configure_logging(level: str) -> None:
    """Timestamped lines on stderr at `level`; Alembic's per-start migration chatter muted."""
    logging.basicConfig(level=level.upper(), format=LOG_FORMAT)
    logging.getLogger("alembic").setLevel(logging.WARNING)
