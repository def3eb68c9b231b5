"""`proctor keys create|list|revoke`: manage API keys directly in the server's database.

These commands open the same database as `proctor server` (`--data-dir`, or
`PROCTOR_DATABASE_URL`/`DATABASE_URL`), so they work whether or not the server runs.
"""

from __future__ import annotations

import argparse
import os

from proctor.cli._parser import CommandParser, add_data_dir_option
from proctor.errors import ConfigError


def _parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="proctor keys", description="Manage API keys.")
    sub = parser.add_subparsers(dest="action", required=True)
    create = sub.add_parser("create", help="create a key and print its secret once")
    create.add_argument("--name", required=True, help="display name of the key")
    create.add_argument(
        "--user", help="user the key belongs to (created if missing; default: NAME)"
    )
    create.add_argument("--team", help="add the user to this team so the key sees its evaluations")
    create.add_argument(
        "--admin", action="store_true", help="the key sees and may change everything"
    )
    create.add_argument("--evaluation", help="limit the key to this one evaluation id")
    listing = sub.add_parser("list", help="list keys (never their secrets)")
    listing.add_argument(
        "--all",
        action="store_true",
        help="also list the revoked keys of finished hosted runs (`sandbox:` keys)",
    )
    revoke = sub.add_parser("revoke", help="revoke a key by id or displayed prefix")
    revoke.add_argument("key", help="key id or prefix as shown by `proctor keys list`")
    add_data_dir_option(sub.choices.values())
    return parser


def run(argv: list[str]) -> int:
    """Parse the arguments and act on the database."""
    args = _parser().parse_args(argv)
    # Imported after parsing, so `--help` and usage errors do not pay for SQLAlchemy.
    from proctor.server.auth import service
    from proctor.server.db.base import as_utc
    from proctor.server.setup import database_of

    create = args.action == "create"
    if create:
        _refuse_a_mistyped_data_dir(args.data_dir)
    with database_of(args.data_dir, create=create) as db:
        if args.action == "create":
            with db.write() as session:
                created = service.create_key(
                    session,
                    name=args.name,
                    user_name=args.user,
                    team_id=args.team,
                    is_admin=args.admin,
                    evaluation_id=args.evaluation,
                )
            print(created.secret)
            print(
                f"created key {created.key.id} ({created.key.prefix}...); "
                "this is the only time the secret is shown."
            )
        elif args.action == "list":
            with db.read() as session:
                rows = service.list_keys(session, everything=args.all)
                hidden = len(service.list_keys(session)) - len(rows)
            print(f"{'ID':36}  {'PREFIX':12}  {'NAME':20}  {'USER':16}  FLAGS")
            for key, user in rows:
                flags = []
                if key.is_admin:
                    flags.append("admin")
                if key.scope_evaluation_id:
                    flags.append(f"evaluation={key.scope_evaluation_id}")
                if key.revoked_at:
                    flags.append(f"revoked={as_utc(key.revoked_at):%Y-%m-%dT%H:%M:%SZ}")
                name, owner = key.name[:20], user.name[:16]
                print(f"{key.id:36}  {key.prefix:12}  {name:20}  {owner:16}  {' '.join(flags)}")
            if hidden:
                print(f"({hidden} revoked sandbox key(s) of finished hosted runs not shown; --all)")
        else:
            with db.write() as session:
                key = service.revoke_key(session, args.key)
                key_id = key.id
            print(f"revoked key {key_id}")
    return 0


def _refuse_a_mistyped_data_dir(flag: str | None) -> None:
    """A data directory named (flag or PROCTOR_DATA_DIR) that holds no database is most likely
    a typo: a key made there would be one no server knows. The default one may be new."""
    named = flag or os.environ.get("PROCTOR_DATA_DIR")
    if not named:
        return
    from proctor.server.setup import settings_from

    settings = settings_from(flag)
    if settings.database_url:
        return
    data_dir = settings.resolved_data_dir()
    if not (data_dir / "proctor.db").is_file():
        raise ConfigError(
            f"there is no proctor database in {data_dir}; check --data-dir (or "
            f"PROCTOR_DATA_DIR), or run `proctor server migrate --data-dir {data_dir}` first "
            "to start a new platform there"
        )
