"""SQLite's write lock: a writer kept waiting says who holds the lock, instead of a silent hang."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from proctor.server.db import session as db_session
from proctor.server.db.session import Database


def test_a_waiting_writer_names_the_holder(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db_session._WriteLock, "warn_after_s", 0.05)
    db = Database(f"sqlite:///{tmp_path / 'lock.db'}")
    held, release, written = threading.Event(), threading.Event(), threading.Event()

    def hold() -> None:
        with db.write():
            held.set()
            release.wait(10)

    def write() -> None:
        with db.write():
            written.set()

    holder = threading.Thread(target=hold, name="holder")
    writer = threading.Thread(target=write, name="writer")
    with caplog.at_level(logging.WARNING, logger=db_session.__name__):
        holder.start()
        assert held.wait(10)
        writer.start()
        assert not written.wait(0.3)  # still waiting, and said so
        release.set()
        holder.join(10)
        writer.join(10)
    assert written.is_set()
    warnings = [r.getMessage() for r in caplog.records if "write lock" in r.getMessage()]
    assert warnings and "thread holder" in warnings[0]
    assert f"{Path(__file__).name}:" in warnings[0]  # where the holder took it
    db.dispose()


def test_try_write_inside_a_write_skips_instead_of_waiting(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'lock.db'}")
    with db.write(), db.try_write() as inner:
        assert inner is None
    with db.try_write() as alone:
        assert alone is not None
    db.dispose()
