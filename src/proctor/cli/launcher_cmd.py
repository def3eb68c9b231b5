"""`proctor launcher`: run the hosted-evaluation launcher as its own process.

It shares the server's database (`--data-dir` or `PROCTOR_DATABASE_URL`); several launchers
may run at once. Turn the server's own launcher off with `PROCTOR_HOSTED_IN_SERVER=false`.
"""

from __future__ import annotations

import argparse
import signal
from types import FrameType

from proctor.cli._logging import add_log_level_flag, configure_logging
from proctor.cli._parser import DATA_DIR_DEFAULT, CommandParser


def _parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="proctor launcher",
        description="Run hosted evaluations from the platform's queue in sandboxes.",
    )
    parser.add_argument("--data-dir", help=f"server data directory (default: {DATA_DIR_DEFAULT})")
    parser.add_argument(
        "--api-url",
        help="platform URL handed to sandboxes "
        "(default: $PROCTOR_HOSTED_API_URL, else http://$PROCTOR_HOST:$PROCTOR_PORT)",
    )
    parser.add_argument(
        "--sandbox",
        metavar="NAME",
        help="sandbox backend by name, e.g. local or ray "
        "(default: $PROCTOR_HOSTED_SANDBOX, else local)",
    )
    parser.add_argument(
        "--ray-address",
        help="Ray job API address, e.g. http://127.0.0.1:8265 "
        "(default: $PROCTOR_HOSTED_RAY_ADDRESS)",
    )
    parser.add_argument(
        "--sandbox-isolation",
        choices=["bwrap", "none"],
        help="confine sandboxes (bwrap) or run them as this user on a single-user server "
        "(none) (default: $PROCTOR_HOSTED_ISOLATION, else bwrap)",
    )
    parser.add_argument(
        "--max-sandboxes",
        type=int,
        help="sandboxes run at once (default: $PROCTOR_HOSTED_MAX_SANDBOXES, else 8)",
    )
    parser.add_argument(
        "--id",
        help="stable launcher id, so a restart recovers its work at once "
        "(default: host:pid:random)",
    )
    add_log_level_flag(parser)
    return parser


def run(argv: list[str]) -> int:
    """Parse the arguments and run the launcher until SIGTERM or Ctrl-C."""
    args = _parser().parse_args(argv)
    configure_logging(args.log_level)
    from proctor.server.hosted.launcher import Launcher
    from proctor.server.hosted.settings import LauncherSettings
    from proctor.server.setup import open_database, settings_from

    settings = LauncherSettings.load(
        sandbox=args.sandbox,
        ray_address=args.ray_address,
        isolation=args.sandbox_isolation,
        max_sandboxes=args.max_sandboxes,
        api_url=args.api_url,
    )
    server = settings_from(args.data_dir)
    db = open_database(server)
    launcher = Launcher(
        db,
        settings,
        api_url=server.local_url(),  # unless settings.api_url names another
        data_dir=server.resolved_data_dir(),
        launcher_id=args.id,
    )

    def _stop(signum: int, _frame: FrameType | None) -> None:
        launcher.stop_soon()

    signal.signal(signal.SIGTERM, _stop)
    try:
        launcher.run()
    except KeyboardInterrupt:
        pass
    finally:
        db.dispose()
    return 0
