"""`proctor teams ...`: create teams and manage membership directly in the server's database.

Like `proctor keys`, these act on the database of `--data-dir` (or `PROCTOR_DATABASE_URL`).
A team's id is what clients send as `team_id`; it defaults to the team's name.
"""

from __future__ import annotations

import argparse

from proctor.cli._parser import CommandParser, add_data_dir_option


def _parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="proctor teams", description="Manage teams.")
    sub = parser.add_subparsers(dest="action", required=True)
    create = sub.add_parser("create", help="create a team")
    create.add_argument("name", help="team name")
    create.add_argument("--id", help="team id clients send as team_id (default: NAME)")
    sub.add_parser("list", help="list teams")
    add = sub.add_parser("add-member", help="add a user (created if missing) to a team")
    add.add_argument("team", help="team id")
    add.add_argument("user", help="user name")
    add.add_argument(
        "--role",
        choices=("member", "admin"),
        default=None,
        help="admin: may also delete the team's evaluations (default: member, or unchanged)",
    )
    remove = sub.add_parser("remove-member", help="remove a user from a team")
    remove.add_argument("team", help="team id")
    remove.add_argument("user", help="user name")
    members = sub.add_parser("members", help="list a team's members")
    members.add_argument("team", help="team id")
    add_data_dir_option(sub.choices.values())
    return parser


def run(argv: list[str]) -> int:
    """Parse the arguments and act on the database."""
    args = _parser().parse_args(argv)
    from proctor.server.auth import service
    from proctor.server.setup import database_of

    with database_of(args.data_dir, create=args.action == "create") as db:
        if args.action == "create":
            with db.write() as session:
                team = service.create_team(session, args.name, team_id=args.id)
                print(f"created team {team.id}")
        elif args.action == "list":
            with db.read() as session:
                for team in service.list_teams(session):
                    print(f"{team.id}\t{team.name}")
        elif args.action == "add-member":
            with db.write() as session:
                member = service.add_member(session, args.team, args.user, role=args.role)
                role = member.role
            print(f"added {args.user} to {args.team} as {role}")
        elif args.action == "remove-member":
            with db.write() as session:
                service.remove_member(session, args.team, args.user)
            print(f"removed {args.user} from {args.team}")
        else:
            with db.read() as session:
                for member, user in service.list_members(session, args.team):
                    print(f"{user.name}\t{member.role}")
    return 0
