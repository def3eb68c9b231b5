"""Claims on hosted evaluations: a lease renewed apart from the launcher's loop, and a claim
lost to another launcher let go instead of closed (SQLite, and PostgreSQL when set)."""

from __future__ import annotations

import socket
import threading
import time
from datetime import timedelta
from typing import Any

from sqlalchemy import update

from proctor.server.db.base import utcnow
from proctor.server.db.models import Evaluation, HostedEvaluation
from proctor.server.db.session import Database
from proctor.server.hosted.claims import adoptable_here, complete_stranded, server_launcher_id
from tests.server.hosted.test_launcher import _create, _launcher, _record, _tick_until


def _wait(condition: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def test_a_slow_start_keeps_its_claim_and_starts_once(db: Database, tmp_path: Any) -> None:
    evaluation_id = _create(db)
    release = threading.Event()
    slow = _launcher(
        db, tmp_path, "echo started >> starts; exit 0", launcher_id="L1", stale_seconds=0.4
    )
    real_start = slow.backend.start

    def start_slowly(spec: Any) -> Any:  # an install that outlasts the claim's lifetime
        release.wait(30)
        return real_start(spec)

    slow.backend.start = start_slowly  # type: ignore[method-assign]
    slow.start()
    try:
        _wait(lambda: _record(db, evaluation_id)[1].launcher_id == "L1")
        other = _launcher(
            db, tmp_path, "echo started >> starts", launcher_id="L2", stale_seconds=0.4
        )
        for _ in range(8):  # twice the claim's lifetime and more: the lease keeps renewing it
            other.tick()
            time.sleep(0.2)
        assert _record(db, evaluation_id)[1].launcher_id == "L1" and other.running == 0
        release.set()
        _wait(lambda: _record(db, evaluation_id)[1].ended_at is not None)
    finally:
        release.set()
        slow.stop()
    hosted = _record(db, evaluation_id)[1]
    assert hosted.attempt == 1 and hosted.launcher_id == "L1"
    starts = (tmp_path / "sandboxes" / evaluation_id / "work" / "starts").read_text()
    assert starts == "started\n"


def test_a_claim_lost_to_another_launcher_is_let_go_not_closed(db: Database, tmp_path: Any) -> None:
    evaluation_id = _create(db)
    first = _launcher(db, tmp_path, "sleep 30", launcher_id="L1")
    _tick_until(
        first, lambda: first.running == 1 and _record(db, evaluation_id)[0].status == "RUNNING"
    )
    # L1 stalled past its lease; L2 adopted the sandbox (as repository.abandoned lets it).
    with db.write() as session:
        session.execute(
            update(HostedEvaluation)
            .where(HostedEvaluation.evaluation_id == evaluation_id)
            .values(launcher_id="L2")
        )
    first.tick()
    evaluation, hosted = _record(db, evaluation_id)
    assert first.running == 0 and hosted.ended_at is None and evaluation.status == "RUNNING"
    second = _launcher(db, tmp_path, "true", launcher_id="L2")
    _tick_until(second, lambda: second.running == 1)
    with db.write() as session:
        session.execute(
            update(HostedEvaluation)
            .where(HostedEvaluation.evaluation_id == evaluation_id)
            .values(cancel_requested=True)
        )
    _tick_until(second, lambda: _record(db, evaluation_id)[1].ended_at is not None)
    assert _record(db, evaluation_id)[0].status == "CANCELLED"


def test_servers_on_two_hosts_never_share_a_launcher_id() -> None:
    ours = server_launcher_id("/srv/proctor", 8000)
    assert socket.gethostname() in ours and ours.endswith(":8000")
    assert ours != server_launcher_id("/srv/proctor", 8001)


def test_a_local_sandbox_is_adopted_only_on_its_own_machine() -> None:
    here = socket.gethostname()
    started = {"backend": "local", "sandbox_handle": "123@1.0"}
    assert adoptable_here(HostedEvaluation(launcher_id=f"server:{here}:/d:8000", **started))
    assert not adoptable_here(HostedEvaluation(launcher_id="server:elsewhere:/d:8000", **started))
    assert not adoptable_here(HostedEvaluation(launcher_id="elsewhere:42:abc123", **started))
    assert adoptable_here(HostedEvaluation(launcher_id="L1", **started))  # named by hand
    ray = {"backend": "ray", "sandbox_handle": "raysubmit_1"}
    assert adoptable_here(HostedEvaluation(launcher_id="server:elsewhere:/d:8000", **ray))


def test_runs_a_dead_server_left_processing_are_completed(db: Database) -> None:
    stranded, fresh = _create(db), _create(db)
    now = utcnow()
    with db.write() as session:
        for evaluation_id, finalized in ((stranded, now - timedelta(minutes=5)), (fresh, now)):
            session.execute(
                update(Evaluation)
                .where(Evaluation.id == evaluation_id)
                .values(status="PROCESSING", finalized_at=finalized)
            )
    complete_stranded(db, stale_seconds=15)
    assert _record(db, stranded)[0].status == "COMPLETED"
    assert _record(db, fresh)[0].status == "PROCESSING"  # its own server's task is due
