"""`proctor server`: run the platform; `proctor server migrate`: only apply migrations.

Storage is a SQLite file in the data dir unless `PROCTOR_DATABASE_URL` (or `DATABASE_URL`)
names another database (PostgreSQL: `postgresql://user:pass@host:port/db`).
"""

from __future__ import annotations

import argparse
import errno
import logging
import signal
import socket
from types import FrameType
from typing import TYPE_CHECKING

from proctor.cli._logging import add_log_level_flag, configure_logging
from proctor.cli._parser import DATA_DIR_DEFAULT, CommandParser, port_number
from proctor.errors import ConfigError

if TYPE_CHECKING:
    from proctor.server.settings import Settings


def _parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="proctor server",
        description="Run the platform server (REST API + dashboard). "
        "`proctor server migrate` applies database migrations and exits.",
    )
    parser.add_argument("action", nargs="?", choices=["migrate"], help="only apply migrations")
    parser.add_argument("--host", help="address to bind (default: $PROCTOR_HOST, else 127.0.0.1)")
    parser.add_argument(
        "--port", type=port_number, help="port to listen on (default: $PROCTOR_PORT, else 8000)"
    )
    parser.add_argument(
        "--data-dir",
        help=f"directory of the SQLite file and hosted-run logs (default: {DATA_DIR_DEFAULT})",
    )
    parser.add_argument(
        "--public-url",
        help="origin of the dashboard links in viewer_url "
        "(default: $PROCTOR_PUBLIC_URL, else http://HOST:PORT)",
    )
    parser.add_argument(
        "--access-log",
        action="store_true",
        help="log one line per HTTP request (off: requests would flood a shared terminal)",
    )
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
    from proctor.server.hosted.settings import LauncherSettings

    LauncherSettings.load()  # a bad PROCTOR_HOSTED_* variable stops the server before it starts
    return serve(settings, log_level=args.log_level, access_log=args.access_log)


def serve(settings: Settings, *, log_level: str = "info", access_log: bool = False) -> int:
    """Bind the port, prepare the database, then run uvicorn until SIGTERM/SIGINT."""
    import uvicorn

    from proctor.server.app import create_app
    from proctor.server.db.sole_server import hold_sqlite
    from proctor.server.setup import open_database, prepare_database

    # Bound first and handed to uvicorn: a busy port stops us before the database, the
    # launcher or anything else starts (the launcher would adopt the other server's sandboxes).
    sock = bind_socket(settings.host, settings.port)
    sole = hold_sqlite(settings.resolved_database_url())  # SQLite: one server process
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
        access_log=access_log,
        timeout_graceful_shutdown=15,
        log_config=None,
    )
    # Given a socket, uvicorn does not say where it listens; this line does.
    logging.getLogger("proctor.server").info(
        "serving %s (dashboard at /, API under /api/v1)", settings.local_url()
    )
    server = uvicorn.Server(config)
    # uvicorn stops gracefully on SIGINT/SIGTERM (the launcher ends its sandboxes) and then
    # dies of the signal; a SIGHUP (the terminal closed) takes the same way out.
    hangups: list[int] = []
    hup = signal.SIGHUP
    ignored = signal.getsignal(hup) is signal.SIG_IGN  # nohup: it stays ignored

    def on_hangup(signum: int, frame: FrameType | None) -> None:
        if not hangups:
            hangups.append(signum)
            server.handle_exit(signum, frame)

    previous = None if ignored else signal.signal(hup, on_hangup)
    try:
        server.run(sockets=[sock])
    finally:
        if previous is not None:
            signal.signal(hup, signal.SIG_DFL)
        if sole is not None:
            sole.release()
    if hangups:
        signal.raise_signal(hup)  # exit 129, as a hung-up process does
    return 0


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening-ready socket on host:port, or a ConfigError naming --host/--port.

    Raises:
        ConfigError: the port is taken or not ours to bind, or the host is no local address.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"port {port} on {host} is in use (another proctor server?); "
                "pass --port with a free one (or stop what listens there)"
            ) from None
        if e.errno == errno.EACCES:
            raise ConfigError(
                f"port {port} needs more privileges than this user has; pass --port above 1023"
            ) from None
        raise ConfigError(
            f"cannot listen on {host}:{port} ({e.strerror or e}); pass --host with a local address"
        ) from None
    sock.set_inheritable(True)
    return sock
