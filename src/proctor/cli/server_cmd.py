"""`proctor server`: run the platform; `proctor server migrate`: only apply migrations.

Storage is a SQLite file in the data dir unless `PROCTOR_DATABASE_URL` (or `DATABASE_URL`)
names another database (PostgreSQL: `postgresql://user:pass@host:port/db`).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from proctor.cli._logging import add_log_level_flag, configure_logging
from proctor.cli._parser import CommandParser

if TYPE_CHECKING:
    from proctor.server.settings import Settings


def _parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="proctor server",
        description="Run the platform server (REST API + dashboard). "
        "`proctor server migrate` applies database migrations and exits.",
    )
    parser.add_argument("action", nargs="?", choices=["migrate"], help="only apply migrations")
    parser.add_argument("--host", help="address to bind (default 127.0.0.1, PROCTOR_HOST)")
    parser.add_argument("--port", type=int, help="port to listen on (default 8000, PROCTOR_PORT)")
    parser.add_argument("--data-dir", help="directory of the SQLite file (default ~/.proctor)")
    parser.add_argument("--public-url", help="origin for links to the dashboard (viewer_url)")
    add_log_level_flag(parser)
    return parser


def run(argv: list[str]) -> int:
    """Parse the arguments and serve (or migrate)."""
    args = _parser().parse_args(argv)
    configure_logging(args.log_level)
    from proctor.server.setup import describe_url, open_database, settings_from

    settings = settings_from(
        args.data_dir, host=args.host, port=args.port, public_url=args.public_url
    )
    if args.action == "migrate":
        open_database(settings).dispose()
        print(f"migrations applied to {describe_url(settings.resolved_database_url())}")
        return 0
    from proctor.hosted.config import LauncherSettings

    LauncherSettings.load()  # a bad PROCTOR_HOSTED_* variable stops the server before it starts
    return serve(settings, log_level=args.log_level)


def serve(settings: Settings, *, log_level: str = "info") -> int:
    """Prepare the database, then run uvicorn until SIGTERM/SIGINT."""
    import uvicorn

    from proctor.server.app import create_app
    from proctor.server.setup import open_database, prepare_database

    db = open_database(settings)
    try:
        prepare_database(settings, db)  # warns, with the command, when no key exists yet
    finally:
        db.dispose()
    app = create_app(settings, prepare=False)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=log_level,
        timeout_graceful_shutdown=15,
        log_config=None,
    )
    uvicorn.Server(config).run()
    return 0
