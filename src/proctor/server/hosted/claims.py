"""Claims on hosted evaluations: which launcher holds each one, and for how long.

A launcher claims a PENDING evaluation by writing its id into the row (`claim_pending`, with
`FOR UPDATE SKIP LOCKED` on PostgreSQL); the claim is a lease that its `Lease` thread renews
by heartbeat, whatever the launcher's loop is doing (a package install may take minutes).
A lease not renewed for `stale_seconds` has expired: another launcher adopts the sandbox
(`repository.abandoned`), and the launcher that lost it lets it go instead of closing it, so
one evaluation is only ever watched and closed by one launcher.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterable
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from proctor.server.db.base import utcnow
from proctor.server.db.models import HostedEvaluation
from proctor.server.db.session import Database
from proctor.server.evaluations import service as evaluations
from proctor.server.hosted import repository

logger = logging.getLogger(__name__)


def server_launcher_id(data_dir: str, port: int) -> str:
    """The in-server launcher's id: stable per host, data dir and port, so a restarted server
    recovers its own sandboxes at once, and two servers (on one host or several) never share
    one."""
    return f"server:{socket.gethostname()}:{data_dir}:{port}"


def holder_host(launcher_id: str) -> str | None:
    """The host a launcher id names (`server:HOST:…`, or the default `HOST:PID:TAG`); None
    for an id that names none (one given by hand)."""
    parts = launcher_id.split(":")
    if parts[0] == "server" and len(parts) >= 4:
        return parts[1]
    return parts[0] if len(parts) == 3 else None


def adoptable_here(hosted: HostedEvaluation) -> bool:
    """Whether this machine may adopt a started sandbox: a `local` one is a process of the
    machine its launcher ran on, and only a launcher there can watch it."""
    if hosted.backend != "local" or hosted.sandbox_handle is None or not hosted.launcher_id:
        return True
    host = holder_host(hosted.launcher_id)
    return host is None or host == socket.gethostname()


def held_by_others(session: Session, launcher_id: str, evaluation_ids: Iterable[str]) -> list[str]:
    """The evaluations among `evaluation_ids` whose claim another launcher now holds."""
    ids = list(evaluation_ids)
    if not ids:
        return []
    rows = session.execute(
        select(HostedEvaluation.evaluation_id, HostedEvaluation.launcher_id).where(
            HostedEvaluation.evaluation_id.in_(ids)
        )
    ).all()
    return [row[0] for row in rows if row[1] is not None and row[1] != launcher_id]


def holds(hosted: HostedEvaluation, launcher_id: str) -> bool:
    """Whether this launcher still holds the claim on `hosted` (read inside a write)."""
    return hosted.launcher_id == launcher_id


def complete_stranded(db: Database, stale_seconds: float) -> None:
    """Complete runs finalized over `stale_seconds` ago and still PROCESSING: the server that
    took the finalize died before its statistics task ran, and a restart may never come."""
    completed = evaluations.complete_stranded_statistics(
        db, utcnow() - timedelta(seconds=stale_seconds)
    )
    if completed:
        logger.info("completed %d evaluation(s) another server left PROCESSING", completed)


class Lease:
    """Renews one launcher's claims every `stale_seconds / 4`, in a thread of its own.

    Args:
        db: The platform's database.
        launcher_id: Whose claims to renew.
        stale_seconds: How long a claim lives without renewal.
    """

    def __init__(self, db: Database, launcher_id: str, stale_seconds: float) -> None:
        self.db = db
        self.launcher_id = launcher_id
        self.interval = stale_seconds / 4
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Renew in the background until `stop()`."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="proctor-lease", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop renewing (the claims then expire after `stale_seconds`)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def renew(self) -> None:
        """Mark every open claim of this launcher as alive now."""
        with self.db.write() as session:
            repository.heartbeat(session, self.launcher_id, utcnow())

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.renew()
            except Exception:
                logger.warning("launcher %s could not renew its claims", self.launcher_id)
