"""`proctor hosted run|logs|cancel`: hosted evaluations on the platform at PROCTOR_API_URL."""

from __future__ import annotations

import argparse
import difflib
import json
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

from proctor.cli._parser import CommandParser
from proctor.cli._settings_report import unseen_by_sandbox
from proctor.errors import APIError, ConfigError, ProctorError
from proctor.eval.args import add_eval_flags, check_overrides, given_overrides
from proctor.models.config import DEFAULT_BASE_URL
from proctor.sandboxes.command import HOSTED_FIELDS, wire_config

if TYPE_CHECKING:
    from proctor.runs import PlatformClient


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
    _say_read_in_the_sandbox(run)
    # The public `prime` client's spellings, and this command's own before it took eval's.
    for old, dest in (
        ("--rollouts", "rollouts_per_example"),
        ("--api-base-url", "client.base_url"),
        ("--api-key-var", "client.api_key_var"),
    ):
        run.add_argument(
            old,
            dest=dest,
            default=argparse.SUPPRESS,
            help=f"the same as --{dest.replace('_', '-')}",
        )
    run.add_argument(
        "--sampling-args", type=_json_object, default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )
    run.add_argument("--timeout-minutes", type=float, help="kill the sandbox after this long")
    run.add_argument(
        "--shards",
        type=int,
        metavar="N",
        help="run the evaluation in N sandboxes at once, each one slice (--shard I/N)",
    )
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
    logs.add_argument(
        "--shard", type=int, metavar="I", help="only shard I's log (of a sharded evaluation)"
    )
    cancel = sub.add_parser("cancel", help="cancel a hosted evaluation")
    cancel.add_argument("id", help="evaluation id")
    for p in (run, logs):
        p.add_argument("--poll-seconds", type=float, default=1.0, help="polling interval")
    return parser


SANDBOX_DEFAULTS = {
    "client.base_url": f"read in the sandbox: its $PROCTOR_MODEL_BASE_URL, else {DEFAULT_BASE_URL}",
    "client.api_key_var": "OPENAI_API_KEY, read in the sandbox",
}
"""Defaults of a hosted run that the sandbox's environment decides, not this shell's."""


def _say_read_in_the_sandbox(parser: argparse.ArgumentParser) -> None:
    """Eval's help says `(default: $PROCTOR_MODEL_BASE_URL ...)`; for a hosted run it is the
    sandbox's variable, so the help says where it is read."""
    for action in parser._actions:
        if action.dest in SANDBOX_DEFAULTS and action.help and "(default:" in action.help:
            text = action.help.split(" (default:", 1)[0].rstrip(". ")
            text = text.split(" (unset:", 1)[0]
            action.help = f"{text} (default: {SANDBOX_DEFAULTS[action.dest]})"


def hosted_overrides(argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    """The eval settings `proctor hosted run ARGV` gives as flags, and its `--secret` names.

    Raises:
        ConfigError: the arguments do not parse.
    """
    args = _parser().parse_args(["run", *argv])
    return given_overrides(args, HOSTED_FIELDS), list(args.secret)


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
    if args.shards is not None:
        config["shards"] = args.shards
    secrets = {}
    for name in args.secret:
        if name not in os.environ:
            raise ConfigError(f"--secret {name}: the variable is not set in this shell; export it.")
        secrets[name] = os.environ[name]
    if secrets:
        config["custom_secrets"] = secrets
    return config


def _follow(client: Any, evaluation_id: str, poll_seconds: float) -> int:
    from proctor.sandboxes import remote

    def show_status(record: dict[str, Any]) -> None:
        print(f"[{record['status']}] {evaluation_id}", file=sys.stderr, flush=True)

    # A command started in the background inherits SIGINT ignored; following is a view a
    # user stops, so SIGINT stops it as it stops `proctor eval`.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
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
    finally:
        signal.signal(signal.SIGINT, previous)
    return _report(record, client)


def mean_reward_line(client: PlatformClient, record: dict[str, Any]) -> str:
    """`mean reward 0.771 ± 0.046 (95% CI)`: the platform's headline, as every view says it."""
    from proctor.sandboxes import remote

    try:
        figures = remote.stats(client, str(record.get("evaluation_id")))
        return f"{figures.get('label') or 'mean reward'} {figures['headline']}"
    except (ProctorError, KeyError):
        score = record.get("avg_score")
        return f"mean reward {score:.3f}" if isinstance(score, int | float) else "mean reward -"


def _report(record: dict[str, Any], client: PlatformClient) -> int:
    status = record.get("status")
    print(f"evaluation {record.get('evaluation_id')}: {status}", file=sys.stderr)
    if record.get("error_message"):
        # Whole, as the dashboard shows it: the reason's tail is often the sandbox's output.
        reason = record["error_message"].rstrip().replace("\n", "\n    ")
        print(f"  reason: {reason}", file=sys.stderr)
    if status == "COMPLETED":
        print(f"  samples: {record.get('total_samples')}, {mean_reward_line(client, record)}")
        print(f"  dashboard: {record.get('viewer_url')}")
    return 0 if status == "COMPLETED" else 1


def run(argv: list[str]) -> int:
    """Parse the arguments and talk to the platform."""
    args = _parser().parse_args(argv)
    from proctor.sandboxes import remote

    client = remote.connect()
    try:
        return _act(args, client)
    except APIError as e:
        return _refused(e, args, client)
    finally:
        client.close()


def _act(args: argparse.Namespace, client: PlatformClient) -> int:
    from proctor.sandboxes import remote

    if args.action == "run":
        # Before the evaluation exists: what this shell holds that the sandbox will not see.
        for note in unseen_by_sandbox(given_overrides(args, HOSTED_FIELDS), secrets=args.secret):
            print(f"proctor hosted: note: {note}", file=sys.stderr)
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
        print(remote.logs(client, args.id, shard=args.shard), end="")
        return 0
    print(remote.cancel(client, args.id))
    return 0


def _refused(error: APIError, args: argparse.Namespace, client: PlatformClient) -> int:
    """The platform's refusal in the CLI's words (no HTTP method, path or status).

    Raises:
        ProctorError: always (exit 1; 2 for an environment name the hub does not know).
    """
    said = str(error).split(": ", 1)[1] if " answered HTTP " in str(error) else str(error)
    if args.action == "cancel" and error.status_code == 409:
        status = _status_of(client, args.id)
        ended = f" ({status})" if status else ""
        raise APIError(
            f"evaluation {args.id} has already ended{ended}; there is nothing to cancel",
            status_code=409,
            code=error.code,
        ) from None
    if args.action == "run" and error.status_code == 404 and "environment" in said.lower():
        near = _near_names(client, args.env)
        guess = f"did you mean {near}? " if near else ""
        raise ConfigError(
            f"no environment {args.env!r} is on the hub for this key; {guess}check the name, "
            "or publish it with `proctor envs push`"
        ) from None
    raise APIError(said, status_code=error.status_code, code=error.code) from None


def _status_of(client: PlatformClient, evaluation_id: str) -> str | None:
    try:
        return str(client.call("GET", f"/evaluations/{evaluation_id}").get("status") or "")
    except ProctorError:
        return None


def _near_names(client: PlatformClient, wanted: str) -> str | None:
    """The hub name closest to a mistyped one (`revers-text` -> `reverse-text`), if any."""
    try:
        listing = client.call("GET", "/environmentshub/?limit=100")
    except ProctorError:
        return None
    names: list[str] = []
    for row in listing.get("data") or []:
        name = str(row.get("name") or "")
        owner = str((row.get("owner") or {}).get("name") or "")
        names += [name, f"{owner}/{name}"] if owner else [name]
    near = difflib.get_close_matches(wanted, names, n=1, cutoff=0.75)
    return near[0] if near else None
