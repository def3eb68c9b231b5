"""Fixtures shared by the whole suite: the demo model and a platform server, as real processes.

What they are built from lives in `tests/support/`; the names re-exported here keep older
imports (`from tests.conftest import Platform`) working."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.platform import BOOTSTRAP_KEY, Platform, postgres_url, start_platform
from tests.support.procs import PROCTOR, ManagedProcess, free_port, wait_http

pytest_plugins = ["tests.support.tiers"]

__all__ = ["BOOTSTRAP_KEY", "Platform", "postgres_url", "start_platform"]


def pytest_configure(config: pytest.Config) -> None:
    """Give the tests' processes the signals a terminal's foreground job has.

    A runner started in the background of a script (`cmd &`, nohup) ignores SIGINT and
    SIGHUP, and a child inherits an ignored signal, so a server a test stops with SIGHUP
    would never see it. Each xdist worker runs this too."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked `postgres` needs scripts/test's PostgreSQL: without it, a skip on a
    workstation and a failure under CI."""
    from tests.support.databases import require_postgres

    require_postgres(item)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Drop the template databases this process (one xdist worker) made."""
    from tests.support.databases import drop_templates

    drop_templates()


@pytest.fixture(scope="session")
def demo_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL (ending in /v1) of a demo model served over HTTP for the whole session."""
    port = free_port()
    log = tmp_path_factory.mktemp("demo-model") / "demo-model.log"
    proc = ManagedProcess([*PROCTOR, "demo-model", "--host", "127.0.0.1", "--port", str(port)], log)
    proc.start()
    try:
        wait_http(f"http://127.0.0.1:{port}/v1/models", proc=proc.proc)
    except Exception:
        proc.stop()
        raise RuntimeError(proc.output()) from None
    yield f"http://127.0.0.1:{port}/v1"
    proc.stop()


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    """A fresh platform server on SQLite in a temp data dir."""
    data_dir = tmp_path / "platform"
    data_dir.mkdir()
    plat = start_platform(data_dir)
    yield plat
    plat.process.stop()
