"""Fixtures shared by the whole suite: the demo model and a platform server, as real processes."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.procs import PROCTOR, ManagedProcess, free_port, wait_http

pytest_plugins = ["tests.support.tiers"]

BOOTSTRAP_KEY = "pk-test-bootstrap-0123456789abcdef"


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Drop the template databases this process (one xdist worker) made."""
    from tests.databases import drop_templates

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


@dataclass
class Platform:
    """A running `proctor server` and an admin key for it."""

    url: str
    api_key: str
    data_dir: Path
    database_url: str | None
    process: ManagedProcess

    def client(self, key: str | None = None) -> httpx.Client:
        return httpx.Client(
            base_url=f"{self.url}/api/v1",
            headers={"Authorization": f"Bearer {key or self.api_key}"},
            timeout=30.0,
        )

    def restart(self) -> None:
        self.process.stop()
        self.process.start()
        wait_http(f"{self.url}/healthz", proc=self.process.proc)


def start_platform(
    data_dir: Path, *, database_url: str | None = None, extra_env: dict[str, str] | None = None
) -> Platform:
    """Start `proctor server` on a free loopback port with a bootstrap admin key."""
    port = free_port()
    env = {"PROCTOR_BOOTSTRAP_KEY": BOOTSTRAP_KEY, **(extra_env or {})}
    if database_url:
        env["PROCTOR_DATABASE_URL"] = database_url
    args = [
        *PROCTOR,
        "server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--data-dir",
        str(data_dir),
    ]
    proc = ManagedProcess(args, data_dir / "server.log", env=env).start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/healthz", proc=proc.proc, timeout=60)
    except Exception:
        proc.stop()
        raise RuntimeError(proc.output()) from None
    return Platform(url, BOOTSTRAP_KEY, data_dir, database_url, proc)


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    """A fresh platform server on SQLite in a temp data dir."""
    data_dir = tmp_path / "platform"
    data_dir.mkdir()
    plat = start_platform(data_dir)
    yield plat
    plat.process.stop()


def postgres_url() -> str | None:
    """The throwaway PostgreSQL server's URL, set by scripts/test (None when absent)."""
    return os.environ.get("PROCTOR_TEST_POSTGRES_URL") or None
