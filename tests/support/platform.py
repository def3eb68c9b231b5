"""A real `proctor server` for tests: started on a free loopback port with an admin key."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.procs import PROCTOR, ManagedProcess, free_port, tls, wait_http

BOOTSTRAP_KEY = "pk-test-bootstrap-0123456789abcdef"


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
            verify=tls(),
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


def postgres_url() -> str | None:
    """The throwaway PostgreSQL server's URL, set by scripts/test (None when absent)."""
    return os.environ.get("PROCTOR_TEST_POSTGRES_URL") or None
