"""`proctor runs sync RUN_DIR`: send what a run directory still holds for the platform;
`proctor runs export RUN_DIR`: write it as `metadata.json` + `results.jsonl` (what
`prime eval push` and `vf-eval` read); `proctor runs list`: the earlier runs in `-o`."""

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
    listing = sub.add_parser(
        "list",
        help="list the earlier runs in an output directory",
        description=(
            "List the run directories under -o (newest first): name, environment, model, "
            "episodes done, status (running, completed, incomplete: continue it with "
            "--resume, failed, cancelled) and the evaluation it pushed to."
        ),
    )
    listing.add_argument(
        "-o",
        "--output-dir",
        type=Path,
        default=Path("outputs"),
        help="the output directory proctor eval wrote to",
    )
    listing.add_argument("--json", action="store_true", help="print the runs as JSON")
    return parser


def _list(args: argparse.Namespace) -> int:
    import json
    from dataclasses import asdict

    from proctor.eval.run_list import list_runs

    runs = list_runs(args.output_dir)
    if args.json:
        print(json.dumps([asdict(r) for r in runs], indent=2))
        return 0
    if not runs:
        print(f"no runs in {args.output_dir}/ (proctor eval writes them there)", file=sys.stderr)
        return 0
    rows = [("NAME", "ENV", "MODEL", "EPISODES", "STATUS", "EVALUATION")]
    for r in runs:
        done = f"{r.episodes}/{r.expected}" if r.expected else str(r.episodes)
        if r.errored:
            done += f" ({r.errored} errored)"
        rows.append((r.name, r.env, r.model, done, r.status, r.evaluation or "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]]))
    if any(r.status == "incomplete" for r in runs):
        print(
            f"continue an incomplete run with: proctor eval ... -o {args.output_dir} "
            "--run.dir NAME --resume",
            file=sys.stderr,
        )
    return 0


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
    if args.action == "list":
        return _list(args)
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
