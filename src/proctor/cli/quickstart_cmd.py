"""`proctor quickstart`: a local platform, the demo model and one hosted evaluation.

Shows the evaluation's live logs, then its metrics and dashboard URL, and keeps serving
until Ctrl-C, SIGTERM or SIGHUP, which stop everything it started (exit 130, 143, 129;
`--exit`: stop once the evaluation has ended).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from proctor.cli._logging import configure_logging
from proctor.cli._parser import CommandParser, port_number
from proctor.cli._signals import exit_code, interrupt_on_stop_signals
from proctor.eval.args import add_eval_flags, check_overrides, given_overrides

if TYPE_CHECKING:
    from proctor.server.quickstart import Quickstart, QuickstartOptions

QUICKSTART_FIELDS = ("num_examples", "rollouts_per_example", "max_concurrent", "sampling")
"""The `proctor eval` flags quickstart takes for its hosted evaluation."""

QUICKSTART_EXAMPLES = 20
"""Tasks of quickstart's evaluation unless `-n` says otherwise (alphabet-sort has no end)."""


def _parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="proctor quickstart",
        description="Start a platform server (SQLite), the demo model and one hosted "
        "alphabet-sort evaluation; follow it, then keep serving until Ctrl-C.",
    )
    parser.add_argument("--data-dir", default="~/.proctor", help="data directory")
    parser.add_argument("--port", type=port_number, default=8000, help="platform port")
    parser.add_argument("--model-port", type=port_number, default=8001, help="demo model port")
    # `proctor eval`'s flags; alphabet-sort has no end, so -n needs a number by default.
    add_eval_flags(parser, QUICKSTART_FIELDS, defaults={"num_examples": QUICKSTART_EXAMPLES})
    parser.add_argument(  # this command's spelling before it took eval's flags
        "--rollouts", dest="rollouts_per_example", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )
    parser.add_argument("--exit", action="store_true", help="stop once the evaluation ended")
    return parser


def _say(text: str) -> None:
    print(f"quickstart: {text}", file=sys.stderr, flush=True)


def _summary(
    record: dict[str, Any], api_url: str, key: str, data_dir: Path | None, port: int
) -> None:
    """The evaluation's outcome; `data_dir` is set when the server stops right after (--exit),
    so the dashboard line says how to bring it back."""
    from proctor.cli.hosted_cmd import mean_reward_line
    from proctor.sandboxes import remote

    print(f"\nevaluation {record['evaluation_id']}: {record['status']}")
    if record.get("error_message"):
        print(f"  error: {record['error_message']}")
    print(f"  samples: {record.get('total_samples')}")
    metrics = record.get("metrics") or {}
    if record.get("status") == "COMPLETED":
        client = remote.connect(api_url, key)
        try:
            print(f"  {mean_reward_line(client, record)}")
        finally:
            client.close()
    for name, value in sorted((metrics.get("avg_metrics") or {}).items()):
        print(f"  {name}: {value:.4f}")
    if record.get("avg_score") is not None:
        low, high = record.get("min_score") or 0.0, record.get("max_score") or 0.0
        print(f"  scores from {low:.4f} to {high:.4f}")
    later = f" (served by `proctor server --data-dir {data_dir} --port {port}`)" if data_dir else ""
    print(f"  dashboard: {record.get('viewer_url')}{later}", flush=True)


def run(argv: list[str]) -> int:
    """Parse the arguments, start everything, follow the evaluation, serve until Ctrl-C."""
    args = _parser().parse_args(argv)
    configure_logging("warning")
    from proctor.server.quickstart import Quickstart, QuickstartOptions

    options = QuickstartOptions(
        data_dir=Path(args.data_dir).expanduser().absolute(),  # printed: one the user can open
        port=args.port,
        model_port=args.model_port,
        overrides=check_overrides(given_overrides(args, QUICKSTART_FIELDS)),
    )
    quick = Quickstart(options)
    with interrupt_on_stop_signals() as received:
        return _run(args, quick, options, received)


def _run(
    args: argparse.Namespace, quick: Quickstart, options: QuickstartOptions, received: list[int]
) -> int:
    """Start, follow and serve until Ctrl-C, SIGTERM or SIGHUP; everything is stopped after."""
    try:
        _say(f"starting the platform on {quick.api_url} (data in {options.data_dir})")
        key = quick.start()
        _say(f"demo model on {quick.model_url}; API key saved in {options.data_dir}/config.toml")
        evaluation_id = quick.submit(key)
        _say(
            f"hosted evaluation {evaluation_id} queued ({options.environment}, "
            f"{options.num_examples} x {options.rollouts} against the demo model)"
        )
        record = quick.follow(
            key,
            evaluation_id,
            on_logs=lambda text: print(text, end="", flush=True),
            on_status=lambda r: _say(f"status {r['status']}"),
        )
        stopping = options.data_dir if args.exit else None
        _summary(record, quick.api_url, key, stopping, options.port)
        completed = record["status"] == "COMPLETED"
        if args.exit:
            return 0 if completed else 1
        _say(f"serving {quick.api_url} (dashboard {quick.api_url}/); press Ctrl-C to stop")
        while quick.alive():
            time.sleep(0.5)
        _say("a child process exited; stopping")
        return 1
    except KeyboardInterrupt:
        _say("stopping")
        return exit_code(received)
    finally:
        quick.stop()
