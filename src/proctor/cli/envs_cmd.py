"""`proctor envs list`: the installed environments, with description and size."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from proctor.cli._parser import CommandParser


def _parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="proctor envs", description="Work with the installed environments.")
    sub = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=CommandParser)
    listing = sub.add_parser("list", help="list the installed environments (the default)")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return parser


def run(argv: list[str]) -> int:
    """List the environments found under the `proctor.environments` entry point."""
    args = _parser().parse_args(argv or ["list"])
    from proctor.envs import list_environments

    infos = list_environments()
    if args.json:
        print(json.dumps([asdict(i) for i in infos], indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    class PipeConsole(Console):
        def on_broken_pipe(self) -> None:
            raise BrokenPipeError  # handled once, in `proctor.cli.main`, like any output

    table = Table(title="Installed environments", title_justify="left")
    table.add_column("name", style="bold")
    table.add_column("tasks", justify="right")
    table.add_column("description")
    for info in infos:
        size = {"infinite": "infinite (-n)", "broken": "-"}.get(info.kind, str(info.size))
        table.add_row(info.name, size, info.description)
    PipeConsole(soft_wrap=False).print(table)
    return 0
