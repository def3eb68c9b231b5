"""What lets several servers share a database, and keeps a second off SQLite: the SQLite
one-server lock, and migrations run one at a time on PostgreSQL."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest
from sqlalchemy import create_engine

from proctor.errors import ConfigError
from proctor.server import migrations
from proctor.server.db.sole_server import hold_sqlite
from tests.support.databases import fresh_database


def test_a_second_holder_of_a_sqlite_file_is_refused_naming_the_first(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'proctor.db'}"
    first = hold_sqlite(url)
    assert first is not None
    with pytest.raises(ConfigError) as refused:
        hold_sqlite(url)
    message = str(refused.value)
    assert f"pid {os.getpid()} on {socket.gethostname()}" in message
    assert "PROCTOR_DATABASE_URL" in message and "\n" not in message
    first.release()
    again = hold_sqlite(url)  # released: the next server may serve it
    assert again is not None
    again.release()


def test_postgresql_and_memory_need_no_lock() -> None:
    assert hold_sqlite("postgresql+psycopg://u@127.0.0.1:5432/db") is None
    assert hold_sqlite("sqlite:///:memory:") is None


@pytest.mark.postgres
def test_servers_starting_together_migrate_one_at_a_time(tmp_path: Path) -> None:
    with fresh_database("postgres", tmp_path) as url:
        engines = [create_engine(url) for _ in range(3)]
        errors: list[BaseException] = []

        def migrate(engine: object) -> None:
            try:
                migrations.upgrade(engine)  # type: ignore[arg-type]
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=migrate, args=(e,), daemon=True) for e in engines]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        try:
            assert not any(t.is_alive() for t in threads), "a migration never finished"
            assert not errors, errors
            head = migrations.current_revision(engines[0])
            assert head is not None and all(migrations.current_revision(e) == head for e in engines)
        finally:
            for engine in engines:
                engine.dispose()
