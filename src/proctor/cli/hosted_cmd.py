"""`proctor hosted run|logs|cancel`: hosted evaluations on the platform at PROCTOR_API_URL."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from proctor.cli._parser import CommandParser
from proctor.errors import ConfigError
from proctor.eval.args import add_eval_flags, check_overrides, given_overrides
from proctor.hosted.command import HOSTED_FIELDS, wire_config


def _parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="proctor hosted",
        description="Start, follow and cancel hosted evaluations "
        "(on PROCTOR_API_URL, with PROCTOR_API_KEY).",
    )
    sub = parser.add_subparsers(dest="action", required=True)
    run = sub.add_parser("run", help="start a hosted evaluation")
    run.add_argument("env", metavar="ENV", help="environment name, e.g. alphabet-sort")
    run.add_argument("-m", "--model", required=True, help="model the sandbox evaluates")
    # `proctor eval`'s own flags, names and defaults for what a hosted run sets.
    add_eval_flags(run, HOSTED_FIELDS, json_object=_json_object)
    # The public `prime` client's spellings, and this command's own before it took eval's.
    for old, dest in (
        ("--rollouts", "rollouts_per_example"),
        ("--api-base-url", "client.base_url"),
        ("--api-key-var", "client.api_key_var"),
    ):
        run.add_argument(old, dest=dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    run.add_argument(
        "--sampling-args", type=_json_object, default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )
    run.add_argument("--timeout-minutes", type=float, help="kill the sandbox after this long")
    run.add_argument(
        "--secret",
        action="append",
        default=[],
        metavar="NAME",
        help="pass the variable NAME from this shell to the sandbox as a secret (repeatable)",
    )
    run.add_argument("--name", help="name of the evaluation (default: <env>--<model>--hosted-<id>)")
    run.add_argument("--team-id", help="team that owns the evaluation (default: personal)")
    run.add_argument("--follow", action="store_true", help="stream logs until it ends")
    logs = sub.add_parser("logs", help="print a hosted evaluation's logs")
    logs.add_argument("id", help="evaluation id")
    logs.add_argument("--follow", "-f", action="store_true", help="stream until it ends")
    cancel = sub.add_parser("cancel", help="cancel a hosted evaluation")
    cancel.add_argument("id", help="evaluation id")
    for p in (run, logs):
        p.add_argument("--poll-seconds", type=float, default=1.0, help="polling interval")
    return parser


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(
            f"expected a JSON object such as '{{\"a\": 1}}', got {text!r}"
        )
    return value


def _eval_config(args: argparse.Namespace) -> dict[str, Any]:
    overrides = given_overrides(args, HOSTED_FIELDS)
    if sampling := getattr(args, "sampling_args", None):
        overrides["sampling"] = {**sampling, **overrides.get("sampling", {})}
    config = wire_config(check_overrides(overrides))
    if args.timeout_minutes is not None:
        config["timeout_minutes"] = args.timeout_minutes
    secrets = {}
    for name in args.secret:
        if name not in os.environ:
            raise ConfigError(f"--secret {name}: the variable is not set in this shell; export it.")
        secrets[name] = os.environ[name]
    if secrets:
        config["custom_secrets"] = secrets
    return config


def _follow(client: Any, evaluation_id: str, poll_seconds: float) -> int:
    from proctor.hosted import remote

    def show_status(record: dict[str, Any]) -> None:
        print(f"[{record['status']}] {evaluation_id}", file=sys.stderr, flush=True)

    try:
        record = remote.follow(
            client,
            evaluation_id,
            on_logs=lambda text: print(text, end="", flush=True),
            on_status=show_status,
            poll_seconds=poll_seconds,
        )
    except KeyboardInterrupt:
        # Ctrl-C stops this terminal's view only; the sandbox runs on the platform.
        print(
            f"\nproctor hosted: stopped following; the evaluation goes on — "
            f"`proctor hosted cancel {evaluation_id}` to stop it.",
            file=sys.stderr,
        )
        return 130
    return _report(record)


def _report(record: dict[str, Any]) -> int:
    status = record.get("status")
    print(f"evaluation {record.get('evaluation_id')}: {status}", file=sys.stderr)
    if record.get("error_message"):
        # Whole, as the dashboard shows it: the reason's tail is often the sandbox's output.
        reason = record["error_message"].rstrip().replace("\n", "\n    ")
        print(f"  reason: {reason}", file=sys.stderr)
    if status == "COMPLETED":
        print(f"  samples: {record.get('total_samples')}, avg score: {record.get('avg_score')}")
        print(f"  dashboard: {record.get('viewer_url')}")
    return 0 if status == "COMPLETED" else 1


def run(argv: list[str]) -> int:
    """Parse the arguments and talk to the platform."""
    args = _parser().parse_args(argv)
    from proctor.hosted import remote

    client = remote.connect()
    try:
        if args.action == "run":
            ids = remote.submit(
                client,
                environment=args.env,
                model=args.model,
                eval_config=_eval_config(args),
                name=args.name,
                team_id=args.team_id,
            )
            for evaluation_id in ids:
                print(evaluation_id)
            if args.follow:
                return _follow(client, ids[0], args.poll_seconds)
            return 0
        if args.action == "logs":
            if args.follow:
                return _follow(client, args.id, args.poll_seconds)
            print(remote.logs(client, args.id), end="")
            return 0
        print(remote.cancel(client, args.id))
        return 0
    finally:
        client.close()
