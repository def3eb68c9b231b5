"""`proctor evals list|get`: evaluations on the platform at PROCTOR_API_URL."""

from __future__ import annotations

import argparse
import json

from proctor.cli._parser import CommandParser


def _parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="proctor evals", description="List and show evaluations on the platform."
    )
    sub = parser.add_subparsers(dest="action", required=True)
    listing = sub.add_parser("list", help="the newest evaluations")
    listing.add_argument("--limit", type=int, default=20, help="how many (default 20)")
    listing.add_argument("--json", action="store_true", help="print the records as JSON")
    get = sub.add_parser("get", help="one evaluation's record as JSON")
    get.add_argument("id", help="evaluation id")
    return parser


def run(argv: list[str]) -> int:
    """Parse the arguments and print what the platform answers."""
    args = _parser().parse_args(argv)
    from proctor.hosted import remote

    client = remote.connect()
    try:
        if args.action == "get":
            print(json.dumps(remote.get(client, args.id), indent=2))
            return 0
        records = remote.list_evaluations(client, limit=args.limit)
        if args.json:
            print(json.dumps(records, indent=2))
            return 0
        print(f"{'ID':36}  {'STATUS':10}  {'SAMPLES':>7}  {'SCORE':>6}  HOSTED  NAME")
        for r in records:
            score = r.get("avg_score")
            print(
                f"{r['evaluation_id']:36}  {r['status']:10}  {r.get('total_samples', 0):>7}  "
                f"{'' if score is None else f'{score:.3f}':>6}  "
                f"{'yes' if r.get('is_hosted') else 'no':6}  {r.get('name', '')}"
            )
        return 0
    finally:
        client.close()
