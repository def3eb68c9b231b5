"""`proctor runs sync RUN_DIR`: send what a run directory still holds for the platform;
`proctor runs export RUN_DIR`: write it as `metadata.json` + `results.jsonl` (what
`prime eval push` and `vf-eval` read)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from proctor.cli._logging import log_formatter
from proctor.cli._parser import CommandParser
from proctor.errors import ConfigError


def _parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="proctor runs", description="Work with local run directories.")
    sub = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=CommandParser)
    sync = sub.add_parser(
        "sync",
        help="send a run's unsent samples and close the run if its process could not",
        description=(
            "Send every sample a run directory holds that the platform has not acknowledged "
            "(from its spool and its traces.jsonl), then close the run as its process would "
            "have. Needs PROCTOR_API_KEY (or ~/.proctor/config.toml)."
        ),
    )
    sync.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the eval's run directory")
    sync.add_argument(
        "--api-url", default=None, help="platform origin (default: the URL the run used)"
    )
    sync.add_argument("--timeout", type=float, default=300.0, help="seconds to keep trying")
    sync.add_argument("-v", "--verbose", action="store_true", help="log every step")
    export = sub.add_parser(
        "export",
        help="write a run as metadata.json + results.jsonl (for prime eval push)",
        description=(
            "Write the run's samples as results.jsonl (one per episode, with its sample_id, "
            "so pushing it again stores nothing twice) and metadata.json (environment, model, "
            "sizes, avg_reward and avg_<metric>), the layout `prime eval push` and vf-eval "
            "read. Needs no platform."
        ),
    )
    export.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the eval's run directory")
    export.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        metavar="DIR",
        help="where to write the two files (default: RUN_DIR)",
    )
    return parser


def _export(args: argparse.Namespace) -> int:
    from proctor.eval.export import export_run

    if not args.run_dir.is_dir():
        raise ConfigError(f"{args.run_dir} is not a directory; pass an eval's run directory")
    done = export_run(args.run_dir, args.output)
    print(f"wrote {done.samples} sample(s) to {done.results_path} and {done.metadata_path}")
    target = done.metadata_path.parent
    if "/" in done.env:
        print(f"push it with: prime eval push {target} --env {done.env}")
    else:
        print(
            f"push it with: prime eval push {target} --env OWNER/{done.env} "
            f"(primeintellect/{done.env} for a built-in)"
        )
    return 0


def run(argv: list[str]) -> int:
    """Run `proctor runs ...`; 0 when everything was sent, 1 when samples remain unsent."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.action is None:
        parser.print_help()
        return 0 if not argv else 2
    if args.action == "export":
        return _export(args)
    from proctor.runs import sync_run_dir

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(log_formatter())
    root = logging.getLogger("proctor")
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if args.verbose else logging.WARNING)
    if not args.run_dir.is_dir():
        raise ConfigError(f"{args.run_dir} is not a directory; pass an eval's run directory")
    reports = sync_run_dir(args.run_dir, api_url=args.api_url, timeout=args.timeout)
    for r in reports:
        if r.pending < 0:  # nothing could be counted: the platform was not reached
            print(f"evaluation {r.evaluation_id}: nothing sent; {r.action}")
            continue
        print(
            f"evaluation {r.evaluation_id}: {r.sent} sample(s) sent"
            f" ({r.recovered} recovered from traces.jsonl), {r.pending} still unsent; {r.action}"
        )
        if r.url:
            print(f"  {r.url}")
    return 1 if any(r.pending for r in reports) else 0
