"""`proctor evals list|get|compare|export|rename|delete|create|finalize`: evaluations on
the platform at PROCTOR_API_URL.

Every figure comes from the platform's statistics (`/evaluations/{id}/stats` and
`/evaluations/compare`); this module only lays them out. `create` and `finalize` open and
close an evaluation that `proctor eval --shard I/N --run.attach ID` processes fill.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, cast

from proctor.cli._parser import CommandParser
from proctor.errors import APIError

COMPARE_SHOWS = ("all", "regressions", "improvements", "ties", "errored", "one-sided")
"""`--show`'s choices: the platform's filters (its answer explains an unknown one)."""
COMPARE_SORTS = ("example", "diff", "-diff", "spread")


def _parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="proctor evals", description="List, show and compare evaluations on the platform."
    )
    sub = parser.add_subparsers(dest="action", required=True)
    listing = sub.add_parser("list", help="the newest evaluations")
    listing.add_argument("--limit", type=int, default=20, help="how many")
    listing.add_argument("--json", action="store_true", help="print the records as JSON")
    get = sub.add_parser("get", help="one evaluation's record and statistics as JSON")
    get.add_argument("id", help="evaluation id")
    compare = sub.add_parser("compare", help="candidate B against baseline A, paired by example")
    compare.add_argument("baseline", help="evaluation id of the baseline (A)")
    compare.add_argument("candidate", help="evaluation id of the candidate (B)")
    compare.add_argument("--json", action="store_true", help="print the platform's answer")
    compare.add_argument(
        "--pass-threshold",
        type=float,
        default=None,
        help="pass@k's mark on both sides (default: the max_reward both declare, else 1.0)",
    )
    compare.add_argument(
        "--show",
        choices=COMPARE_SHOWS,
        default=None,
        help="also list these examples, filtered over all of them: regressions (B below A), "
        "improvements, ties, errored (in every rollout on a side), one-sided, or all",
    )
    compare.add_argument(
        "--sort",
        choices=COMPARE_SORTS,
        default=None,
        help="order of the listed examples: example id, diff (largest regressions first), "
        "-diff (largest improvements first), spread (default: diff with --show, else example)",
    )
    compare.add_argument(
        "--limit", type=int, default=20, help="how many examples --show/--sort lists (default 20)"
    )
    create = sub.add_parser(
        "create",
        help="create an evaluation for shards to fill; prints its id",
        description="Takes `proctor eval`'s arguments (ENV, -n, -r, -m, --env-args, ...); "
        "run each shard with the same ones plus --shard I/N --run.attach ID.",
    )
    create.add_argument("eval_args", nargs=argparse.REMAINDER, help="proctor eval's arguments")
    export = sub.add_parser(
        "export",
        help="write an evaluation's samples as JSON lines, CSV or Parquet",
        description="Parquet needs pyarrow: pip install 'proctor[parquet]'.",
    )
    export.add_argument("id", help="evaluation id")
    export.add_argument(
        "--format",
        choices=("jsonl", "csv", "parquet"),
        default=None,
        help="file format (default: from -o's suffix, else jsonl)",
    )
    export.add_argument(
        "-o", "--output", default=None, help="file to write, - for stdout (default: ID.FORMAT)"
    )
    rename = sub.add_parser("rename", help="give an evaluation another name")
    rename.add_argument("id", help="evaluation id")
    rename.add_argument("name", help="the new name")
    delete = sub.add_parser(
        "delete",
        help="delete an evaluation and its samples for good",
        description="Only its owner, an admin of its team or a platform admin may.",
    )
    delete.add_argument("id", help="evaluation id")
    delete.add_argument("--yes", action="store_true", help="confirm: nothing can bring it back")
    finalize = sub.add_parser(
        "finalize", help="close a sharded evaluation once it holds every sample"
    )
    finalize.add_argument("id", help="evaluation id")
    finalize.add_argument(
        "--expect", type=int, default=None, help="samples the whole run makes (default: as created)"
    )
    return parser


def _number(value: float | None, digits: int = 3, *, sign: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def format_comparison(answer: dict[str, Any]) -> str:
    """The comparison as text: each side's headline, then the paired difference."""
    lines = []
    for role, stats in zip(("A (baseline) ", "B (candidate)"), answer["evaluations"], strict=False):
        lines.append(f"{role}  {stats['evaluation_id']}  mean reward {stats['headline']}")
    p = answer["paired"]
    half = None if p["ci95"] is None else (p["ci95"][1] - p["ci95"][0]) / 2
    spread = "" if half is None else f" ± {half:.3f} (95% CI)"
    test = "" if p["p_value"] is None else f", p = {_number(p['p_value'])} (paired t, {p['df']} df)"
    lines.append(
        f"B - A over {p['n_common']} common examples: {_number(p['mean_diff'], sign=True)}"
        f"{spread}{test}; wins {p['wins']}, ties {p['ties']}, losses {p['losses']}"
    )
    if p["no_interval"]:
        lines.append(f"no interval or p-value: {p['no_interval']}")
    else:
        lines.append(f"smallest difference detectable at 80% power: {_number(p['mde80'])}")
    errored_a, errored_b = p["errored_baseline"]["count"], p["errored_candidate"]["count"]
    if errored_a or errored_b:
        lines.append(
            f"errored in every rollout, counted as 0: {errored_a} examples in A, {errored_b} in B"
        )
    only_a, only_b = p["only_baseline"]["count"], p["only_candidate"]["count"]
    if only_a or only_b:
        lines.append(f"not paired: {only_a} examples only in A, {only_b} only in B")
    source = {"set": "set by you", "declared": "declared max_reward"}.get(
        answer["pass_threshold_source"], "default"
    )
    lines.append(f"pass@k on both sides at reward >= {answer['pass_threshold']:g} ({source})")
    if answer.get("examples"):
        lines += _example_lines(answer["examples"])
    return "\n".join(lines)


SHOWN_AS = {
    "all": "examples",
    "regressions": "regressions (B below A)",
    "improvements": "improvements (B above A)",
    "ties": "ties",
    "errored": "examples errored in every rollout on a side",
    "one-sided": "examples only one side holds",
}
SORTED_AS = {
    "example": "by example id",
    "diff": "largest regressions first",
    "-diff": "largest improvements first",
    "spread": "most disagreement first",
}


def _example_lines(listed: dict[str, Any]) -> list[str]:
    """The listed examples: id, A's and B's mean (or `error`, or `-` when absent), B - A."""
    rows = listed["rows"]
    shown = min(listed["start"] + len(rows), listed["total"])
    lines = [
        "",
        f"{SHOWN_AS.get(listed['show'], listed['show'])}: {listed['total']} "
        f"({SORTED_AS.get(listed['sort'], listed['sort'])}; "
        f"{'all' if shown == listed['total'] and not listed['start'] else f'{len(rows)}'} shown)",
    ]
    if not rows:
        return lines
    lines.append(f"{'EXAMPLE':>10}  {'A':>7}  {'B':>7}  {'B - A':>7}")
    for row in rows:
        cells = []
        for mean, errored, present in list(
            zip(row["means"], row["errored"], row["present"], strict=True)
        )[:2]:
            cells.append("error" if errored else ("-" if not present else _number(mean)))
        diff = _number(row["diff"], sign=True)
        lines.append(f"{row['example_id']:>10}  {cells[0]:>7}  {cells[1]:>7}  {diff:>7}")
    if listed["next_start"] is not None:
        lines.append(f"... {listed['total'] - shown} more (raise --limit)")
    return lines


def run(argv: list[str]) -> int:
    """Parse the arguments and print what the platform answers."""
    args = _parser().parse_args(argv)
    if args.action == "create":
        return _create(args.eval_args)
    from proctor.sandboxes import remote

    client = remote.connect()
    try:
        return _act(args, client)
    except APIError as e:
        # The platform's sentence, without the method, path and status it came with.
        said = str(e).split(": ", 1)[1] if " answered HTTP " in str(e) else str(e)
        raise APIError(said, status_code=e.status_code, code=e.code) from None
    finally:
        client.close()


def _act(args: argparse.Namespace, client: Any) -> int:
    from proctor.sandboxes import remote

    if args.action == "get":
        record = remote.get(client, args.id)
        record["stats"] = remote.stats(client, args.id)
        print(json.dumps(record, indent=2))
        return 0
    if args.action == "finalize":
        from proctor.runs import finalize_sharded

        summary = finalize_sharded(client, args.id, expected_samples=args.expect)
        print(
            f"evaluation {args.id} finalized: mean reward {summary['avg_reward']:.3f}, "
            f"error rate {summary['avg_error']:.1%}"
        )
        return 0
    if args.action == "export":
        return _export(client, args)
    if args.action == "rename":
        record = remote.rename(client, args.id, args.name)
        print(f"evaluation {args.id} is now named {record.get('name')!r}")
        return 0
    if args.action == "delete":
        return _delete(client, args)
    if args.action == "compare":
        # A filtered list is read for its largest changes first, unless asked otherwise.
        sort = args.sort or {"regressions": "diff", "improvements": "-diff"}.get(args.show or "")
        answer = remote.compare(
            client,
            [args.baseline, args.candidate],
            pass_threshold=args.pass_threshold,
            show=args.show,
            sort=sort,
            limit=args.limit,
        )
        print(json.dumps(answer, indent=2) if args.json else format_comparison(answer))
        return 0
    records = remote.list_evaluations(client, limit=args.limit)
    if args.json:
        print(json.dumps(records, indent=2))
        return 0
    print(f"{'ID':36}  {'STATUS':10}  {'SAMPLES':>7}  {'MEAN REWARD':>11}  HOSTED  NAME")
    for r in records:
        score = r.get("avg_score")
        print(
            f"{r['evaluation_id']:36}  {r['status']:10}  {r.get('total_samples', 0):>7}  "
            f"{'' if score is None else f'{score:.3f}':>11}  "
            f"{'yes' if r.get('is_hosted') else 'no':6}  {r.get('name', '')}"
        )
    return 0


def _delete(client: Any, args: argparse.Namespace) -> int:
    from proctor.errors import ConfigError
    from proctor.sandboxes import remote

    if not args.yes:
        record = remote.get(client, args.id)  # an unknown id is refused before any question
        raise ConfigError(
            f"deleting evaluation {args.id} ({record.get('name')!r}, "
            f"{record.get('total_samples', 0)} samples) cannot be undone; add --yes to do it"
        )
    name = remote.delete(client, args.id)
    print(f"deleted evaluation {args.id} ({name!r}) and its samples")
    return 0


def _export(client: Any, args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from proctor.runs import ExportFormat, export_evaluation

    suffix = Path(args.output).suffix.lstrip(".") if args.output not in (None, "-") else ""
    format = args.format or (suffix if suffix in ("jsonl", "csv", "parquet") else "jsonl")
    target = None if args.output == "-" else Path(args.output or f"{args.id}.{format}")
    count = export_evaluation(client, args.id, target, format=cast("ExportFormat", format))
    where = "stdout" if target is None else str(target)
    print(f"wrote {count} sample(s) of evaluation {args.id} to {where}", file=sys.stderr)
    return 0


def _create(eval_args: list[str]) -> int:
    """Create the evaluation; its id alone on stdout (`ID=$(proctor evals create ...)`)."""
    import sys

    from proctor.eval.args import parse_eval_args
    from proctor.eval.shards import create_for_shards

    created = create_for_shards(parse_eval_args(eval_args))
    print(created.evaluation_id)
    print(
        f"evaluation {created.evaluation_id} waits for {created.expected_samples} samples; "
        f"run `proctor eval ... --shard I/N --run.attach {created.evaluation_id}` for each I, "
        f"then `proctor evals finalize {created.evaluation_id}`",
        file=sys.stderr,
    )
    return 0
