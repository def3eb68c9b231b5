"""Start and stop the in-server launcher with the app (unless `proctor launcher` runs it)."""

from __future__ import annotations

import logging

from fastapi import FastAPI

from proctor.errors import ProctorError
from proctor.server.db.session import Database
from proctor.server.hosted.claims import server_launcher_id
from proctor.server.hosted.launcher import Launcher
from proctor.server.settings import Settings

logger = logging.getLogger(__name__)


def start_launcher(app: FastAPI, db: Database, settings: Settings) -> Launcher | None:
    """Start the in-server launcher in a background thread, when enabled."""
    try:
        launcher_settings = app.state.launcher_settings = settings.hosted
        if not launcher_settings.in_server:
            logger.info("in-server launcher disabled (PROCTOR_HOSTED_IN_SERVER=false)")
            return None
        launcher = Launcher(
            db,
            launcher_settings,
            api_url=settings.local_url(),
            data_dir=settings.resolved_data_dir(),
            launcher_id=server_launcher_id(str(settings.resolved_data_dir()), settings.port),
        )
    except ProctorError as e:
        # One line for the operator; the API keeps serving, hosted runs wait as PENDING.
        logger.error("the hosted launcher cannot start: %s", e)
        return None
    launcher.start()
    app.state.launcher = launcher
    return launcher


def wake_launcher(app: FastAPI) -> None:
    """Let the in-server launcher pick up new work now instead of at its next poll."""
    launcher: Launcher | None = getattr(app.state, "launcher", None)
    if launcher is not None:
        launcher.wake()


def stop_launcher(app: FastAPI) -> None:
    """Stop the in-server launcher's loop; its sandboxes keep running for the next start."""
    launcher: Launcher | None = getattr(app.state, "launcher", None)
    if launcher is not None:
        launcher.stop()
        app.state.launcher = None
