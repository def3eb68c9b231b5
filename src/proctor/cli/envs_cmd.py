"""`proctor envs list|push|harness-index`: the installed environments; publish one to the
platform's hub; a local index of verifiers' harness wheels for offline runs."""

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
    push = sub.add_parser(
        "push",
        help="publish an environment package to the hub (PROCTOR_API_URL, PROCTOR_API_KEY)",
    )
    push.add_argument(
        "path",
        nargs="?",
        default=".",
        metavar="PATH",
        help="a project folder with a pyproject.toml, or a built .whl (default: .)",
    )
    push.add_argument("--name", help="name on the hub (default: [project].name)")
    push.add_argument("--team", help="publish for this team (default: under your user)")
    push.add_argument(
        "--visibility",
        choices=["private", "public"],
        help="who may see and run it (new environments are private)",
    )
    push.add_argument(
        "--no-build-isolation",
        action="store_true",
        help="build with this environment's packages instead of an isolated build environment",
    )
    index = sub.add_parser(
        "harness-index",
        help="download what verifiers' harness programs install into a local index (offline runs)",
    )
    index.add_argument("dest", metavar="DEST", help="folder to hold the wheels and the index")
    return parser


def _harness_index(args: argparse.Namespace) -> int:
    from pathlib import Path

    from proctor.envs.verifiers import build_harness_index

    url = build_harness_index(Path(args.dest))
    print(f"harness index written to {args.dest}; to use it offline:")
    print(f"  export UV_DEFAULT_INDEX={url}")
    return 0


def _push(args: argparse.Namespace) -> int:
    from pathlib import Path

    from proctor import hub
    from proctor.sandboxes import remote

    client = remote.connect()
    try:
        pushed = hub.push_path(
            client,
            Path(args.path),
            name=args.name,
            team_id=args.team,
            visibility=args.visibility.upper() if args.visibility else None,
            isolation=not args.no_build_isolation,
        )
    finally:
        client.close()
    slug = f"{pushed.owner}/{pushed.name}"
    print(pushed.message or f"Published {slug}.")
    print(f"  version: {pushed.version or '-'}  content hash: {pushed.content_hash[:12]}")
    print(f"  run it hosted: proctor hosted run {slug} -m MODEL")
    return 0


def run(argv: list[str]) -> int:
    """List the environments found under the `proctor.environments` entry point, or push one."""
    args = _parser().parse_args(argv or ["list"])
    if args.action == "push":
        return _push(args)
    if args.action == "harness-index":
        return _harness_index(args)
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
    table.add_column("from")
    for info in infos:
        size = "infinite (-n)" if info.kind == "infinite" else str(info.size or "-")
        origin = info.entry_point.split(":")[0]
        if info.framework != "proctor":
            origin = f"{info.framework}: {info.entry_point}"
        table.add_row(info.name, size, info.description, origin)
    PipeConsole(soft_wrap=False).print(table)
    return 0
