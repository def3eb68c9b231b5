"""`proctor server` as a user starts it: a busy port, and what it prints per request."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import httpx

from tests.support.platform import BOOTSTRAP_KEY
from tests.support.procs import PROCTOR, ManagedProcess, free_port, wait_http


def server_args(port: int, data_dir: Path, *extra: str) -> list[str]:
    return [*PROCTOR, "server", "--port", str(port), "--data-dir", str(data_dir), *extra]


def test_a_busy_port_is_one_line_naming_port_and_nothing_starts(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            server_args(port, data_dir),
            env={**os.environ, "PROCTOR_BOOTSTRAP_KEY": BOOTSTRAP_KEY},
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"proctor server: port {port} on 127.0.0.1 is in use (another proctor server?); "
        "pass --port with a free one (or stop what listens there)\n"
    )
    # Checked before the database, the launcher or uvicorn started: nothing was created.
    assert not data_dir.exists()


def test_requests_are_not_logged_unless_asked(tmp_path: Path) -> None:
    for extra, logged in (((), False), (("--access-log",), True)):
        port = free_port()
        data_dir = tmp_path / f"data-{logged}"
        server = ManagedProcess(
            server_args(port, data_dir, *extra),
            tmp_path / f"server-{logged}.log",
            env={"PROCTOR_BOOTSTRAP_KEY": BOOTSTRAP_KEY, "PROCTOR_HOSTED_IN_SERVER": "false"},
        ).start()
        try:
            wait_http(f"http://127.0.0.1:{port}/healthz", proc=server.proc, timeout=60)
            assert httpx.get(f"http://127.0.0.1:{port}/api/v1/no-such-path").status_code == 404
        finally:
            server.stop()
        output = server.output()
        assert f"serving http://127.0.0.1:{port}" in output
        assert ("GET /api/v1/no-such-path" in output) is logged, output
