"""Secrets at rest (#21 D14): the data dir is 0700, the SQLite database and its WAL/shm are
0600, and deleted rows are overwritten (`secure_delete`)."""

from __future__ import annotations

import stat
from pathlib import Path

from sqlalchemy import text

from proctor.server import migrations
from proctor.server.db.session import make_session_factory
from proctor.server.settings import Settings


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_data_dir_and_database_files_are_private_and_deletes_overwrite(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "fresh" / "data"
    db = make_session_factory(Settings(data_dir=data_dir))
    try:
        migrations.upgrade(db.write_engine)
        with db.write() as session:
            session.execute(text("CREATE TABLE probe (v TEXT)"))
            session.execute(text("INSERT INTO probe VALUES ('s3cret-value-to-forget')"))
        with db.write() as session:
            session.execute(text("DELETE FROM probe"))
            assert session.execute(text("PRAGMA secure_delete")).scalar() == 1
        assert _mode(data_dir) == 0o700
        files = [data_dir / name for name in ("proctor.db", "proctor.db-wal", "proctor.db-shm")]
        assert {f.name: _mode(f) for f in files if f.exists()} == {f.name: 0o600 for f in files}
    finally:
        db.dispose()
    for name in ("proctor.db", "proctor.db-wal"):
        path = data_dir / name
        assert not path.exists() or b"s3cret-value-to-forget" not in path.read_bytes()


def test_an_existing_database_left_world_readable_is_tightened(tmp_path: Path) -> None:
    (tmp_path / "proctor.db").touch(mode=0o644)
    (tmp_path / "proctor.db").chmod(0o644)
    db = make_session_factory(Settings(data_dir=tmp_path))
    try:
        migrations.upgrade(db.write_engine)
    finally:
        db.dispose()
    assert _mode(tmp_path / "proctor.db") == 0o600
