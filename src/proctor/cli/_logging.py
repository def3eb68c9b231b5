"""Logging of the long-running commands (`proctor server`, `proctor launcher`)."""

from __future__ import annotations

import argparse
import logging

LOG_LEVELS = ("debug", "info", "warning", "error")


def add_log_level_flag(parser: argparse.ArgumentParser) -> None:
    """Add `--log-level` (default info) to a command's parser."""
    parser.add_argument("--log-level", default="info", choices=LOG_LEVELS)


def configure_logging(level: str) -> None:
    """Timestamped lines on stderr at `level`; Alembic's per-start migration chatter muted."""
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)
