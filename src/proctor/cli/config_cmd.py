"""`proctor config`: every effective setting, its value (secrets masked) and where it was read.

`proctor config` shows the client (runs SDK), server and launcher settings; `proctor config
eval ARGS...` what `proctor eval ARGS...` would run with; `proctor config hosted ARGS...`
what `proctor hosted run ARGS...` sends and what its sandbox reads itself.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import TYPE_CHECKING

from proctor.cli._parser import CommandParser

if TYPE_CHECKING:  # pydantic-settings loads only once the flags parse (help stays instant)
    from proctor.cli._settings_report import Section

SECTIONS = ("client", "server", "launcher", "eval", "hosted")


def _parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="proctor config",
        description="Print every effective setting, its value (secrets masked) and its "
        "source: a flag, an environment variable, the config file ~/.proctor/config.toml, "
        "a TOML file given with @, the default, or 'read in the sandbox' (hosted runs).",
        epilog="`proctor config eval ENV [FLAGS]` resolves an eval's flags and files as "
        "`proctor eval` does; `proctor config hosted ENV -m MODEL [FLAGS]` a hosted run's.",
    )
    parser.add_argument(
        "section",
        nargs="?",
        choices=SECTIONS,
        help="one part only (default: client, server and launcher)",
    )
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the eval or hosted run's arguments")
    return parser


def _sections(section: str | None, args: list[str]) -> list[Section]:
    from proctor.cli import _settings_report as report

    if section == "eval":
        return [report.eval_section(args), report.client_section()]
    if section == "hosted":
        from proctor.cli.hosted_cmd import hosted_overrides

        overrides, secrets = hosted_overrides(args)
        notes = report.unseen_by_sandbox(overrides, secrets=secrets)
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        return [report.hosted_section(overrides), report.client_section()]
    if args:
        _refuse_arguments(section, args)
    by_name = {
        "client": report.client_section,
        "server": report.server_section,
        "launcher": report.launcher_section,
    }
    names = [section] if section else ["client", "server", "launcher"]
    return [by_name[name]() for name in names]


def _refuse_arguments(section: str | None, args: list[str]) -> None:
    from proctor.errors import ConfigError

    raise ConfigError(
        f"proctor config {section or ''} takes no arguments ({' '.join(args)}); only "
        "`proctor config eval ...` and `proctor config hosted ...` do"
    )


def run(argv: list[str]) -> int:
    """Parse the arguments and print the settings."""
    args = _parser().parse_args(argv)
    sections = _sections(args.section, list(args.args))
    if args.json:
        print(json.dumps([asdict(s) for s in sections], indent=2))
        return 0
    for i, section in enumerate(sections):
        if i:
            print()
        print(f"{section.title} — read by {section.read_by}")
        width = max((len(r.name) for r in section.rows), default=0)
        value_width = min(max((len(r.value) for r in section.rows), default=0), 48)
        for row in section.rows:
            print(f"  {row.name.ljust(width)}  {row.value.ljust(value_width)}  [{row.source}]")
    return 0
