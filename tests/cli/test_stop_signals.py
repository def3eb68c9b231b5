"""SIGTERM and SIGHUP stop the long-running commands as Ctrl-C does: every child ended, every
port freed, exit 128 + the signal (or death by it). Real processes, signalled by pid only, as
`kill PID` or a closed terminal does."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.support.procs import PROCTOR, ManagedProcess, free_port, gone, wait_http

pytestmark = pytest.mark.e2e

SIGNALS = [signal.SIGTERM, signal.SIGHUP]


def cli_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCTOR_")}
    return {**env, "HOME": str(home)}


def stopped_by(code: int | None, sig: int) -> bool:
    """Exit 128 + N, or death by signal N (what a shell shows as 128 + N as well)."""
    return code in (128 + sig, -sig)


def port_free(port: int, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) != 0:
                return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def wait_exit(proc: ManagedProcess, timeout: float = 60.0) -> int:
    assert proc.proc is not None
    return proc.proc.wait(timeout=timeout)


@pytest.mark.parametrize("sig", SIGNALS, ids=["SIGTERM", "SIGHUP"])
def test_quickstart_ends_its_server_and_demo_model_and_frees_their_ports(
    tmp_path: Path, sig: signal.Signals
) -> None:
    port, model_port = free_port(), free_port()
    args = [*PROCTOR, "quickstart", "--data-dir", str(tmp_path / "data"), "--port", str(port),
            "--model-port", str(model_port), "-n", "2", "-r", "1"]  # fmt: skip
    quick = ManagedProcess(args, tmp_path / "quickstart.log", env=cli_env(tmp_path)).start()
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", proc=quick.proc, timeout=120)
        wait_http(f"http://127.0.0.1:{model_port}/v1/models", proc=quick.proc, timeout=120)
        children = psutil.Process(quick.pid).children(recursive=True)
        assert len(children) >= 2
        os.kill(quick.pid, sig)  # the pid alone, as `kill PID` does
        assert stopped_by(wait_exit(quick), sig), quick.output()
        assert all(gone(child.pid) for child in children), quick.output()
        assert port_free(port) and port_free(model_port)
    finally:
        quick.stop()
    assert "Traceback" not in quick.output()


@pytest.mark.parametrize("sig", SIGNALS, ids=["SIGTERM", "SIGHUP"])
def test_server_stops_and_frees_its_port(tmp_path: Path, sig: signal.Signals) -> None:
    port = free_port()
    args = [*PROCTOR, "server", "--port", str(port), "--data-dir", str(tmp_path / "data")]
    server = ManagedProcess(args, tmp_path / "server.log", env=cli_env(tmp_path)).start()
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", proc=server.proc, timeout=120)
        os.kill(server.pid, sig)
        assert stopped_by(wait_exit(server), sig), server.output()
        assert port_free(port)
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
    finally:
        server.stop()
    assert "Traceback" not in server.output()
