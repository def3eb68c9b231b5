"""The durability harness: the one home of what the fault tests and bench/faults.py share.

Real parts only: a demo model process, `proctor eval` and `proctor runs sync` command lines,
tmpfs mounts to fill (root), a loopback proxy that takes the platform away, and what the
platform holds afterwards, read over HTTP.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import struct
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from tests.support.cli import Finished, cli_in_process
from tests.support.platform import Platform
from tests.support.procs import PROCTOR, ManagedProcess, free_port, tls, wait_http

CLIENT_VARS = ("PROCTOR_API_URL", "PROCTOR_API_KEY", "PROCTOR_TEAM_ID", "PROCTOR_RUNS_MODE")
"""The client's settings from the environment, dropped so each process gets only its own."""

# -- processes --------------------------------------------------------------------------


@contextlib.contextmanager
def demo_model(log_dir: Path, latency_ms: float = 0.0) -> Iterator[str]:
    """`proctor demo-model` on loopback, `latency_ms` per answer; yields its base URL (/v1)."""
    port = free_port()
    args = [*PROCTOR, "demo-model", "--host", "127.0.0.1", "--port", str(port)]
    proc = ManagedProcess([*args, "--latency-ms", str(latency_ms)], log_dir / "demo-model.log")
    proc.start()
    try:
        wait_http(f"http://127.0.0.1:{port}/v1/models", proc=proc.proc)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.stop()


def env_without_client_vars(**extra: str) -> dict[str, str]:
    """This process's environment without the client's settings, plus `extra`."""
    return {**{k: v for k, v in os.environ.items() if k not in CLIENT_VARS}, **extra}


def eval_env(api_url: str, api_key: str, home: Path) -> dict[str, str]:
    """The environment of an eval that pushes to `api_url` (and nothing else)."""
    return env_without_client_vars(PROCTOR_API_URL=api_url, PROCTOR_API_KEY=api_key, HOME=str(home))


def eval_args(
    model_url: str,
    out: Path,
    *flags: str,
    env: str = "alphabet-sort",
    n: int = 30,
    rollouts: int = 1,
    concurrency: int = 2,
    name: str = "r",
) -> list[str]:
    """`proctor eval ENV` writing `<out>/<name>` (the run dir), with push as configured."""
    args = [*PROCTOR, "eval", env, "-n", str(n), "-r", str(rollouts), "-c", str(concurrency)]
    args += ["--no-serve", "--no-rich", "--client.base-url", model_url, "-o", str(out)]
    return [*args, "--run.name", name, *flags]


def runs_sync(
    run_dir: Path, api_key: str, *extra: str, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """`proctor runs sync RUN_DIR` as its own process (pass `--api-url` in `extra` to redirect)."""
    return subprocess.run(
        [*PROCTOR, "runs", "sync", str(run_dir), "--timeout", f"{timeout:g}", *extra],
        env=env_without_client_vars(PROCTOR_API_KEY=api_key, HOME=str(run_dir / "home")),
        capture_output=True,
        text=True,
        timeout=timeout * 2 + 60,
    )


def in_process_sync(run_dir: Path, api_key: str, *extra: str, timeout: float = 60.0) -> Finished:
    """`runs_sync` run in this process (`cli_in_process`), for a test where the sync's process
    is not the point; HOME a folder beside the run dir."""
    home = run_dir.parent / "sync-home"
    home.mkdir(parents=True, exist_ok=True)
    args = ("runs", "sync", str(run_dir), "--timeout", f"{timeout:g}", *extra)
    return cli_in_process(*args, home=home, env={"PROCTOR_API_KEY": api_key})


# -- disks ------------------------------------------------------------------------------


@contextlib.contextmanager
def tmpfs(directory: Path, size: str = "4m") -> Iterator[Path]:
    """A tmpfs mounted over `directory` (created if missing), unmounted even on failure."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)], check=True
    )
    try:
        yield directory
    finally:
        # Lazy: a process of the test may still hold a file open there.
        subprocess.run(["umount", "-l", str(directory)], check=False)


def fill(fs: Path) -> Path:
    """Fill the filesystem of `fs` to the last byte; returns the filler file."""
    filler = fs / ".filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for size in (1 << 20, 65536, 4096, 512, 1):
            block = b"\0" * size
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, block)
    finally:
        os.close(fd)
    return filler


def unfill(filler: Path) -> None:
    filler.unlink(missing_ok=True)


def remount(fs: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(fs)], check=True)


# -- what the run dir and the platform hold ---------------------------------------------


def line_count(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except OSError:
        return 0


def trace_ids(run_dir: Path, *, whole: bool = False) -> list[str]:
    """Episode ids of every complete line of traces.jsonl (`whole`: assert none is torn)."""
    lines = (run_dir / "traces.jsonl").read_text().splitlines(keepends=True)
    if whole:
        assert all(line.endswith("\n") for line in lines), "traces.jsonl has a torn line"
    return [json.loads(line)["id"] for line in lines if line.endswith("\n")]


def run_id(run_dir: Path) -> str:
    """The evaluation id the eval stamped into the run dir's config.toml."""
    return str(tomllib.loads((run_dir / "config.toml").read_text())["run"]["id"])


def stored_ids(plat: Platform, eid: str) -> list[str]:
    """Every sample id the platform holds for `eid`, with repeats (there must be none)."""
    ids: list[str] = []
    with plat.client() as c:
        page = 1
        while True:
            r = c.get(f"/evaluations/{eid}/samples", params={"page": page, "limit": 500})
            r.raise_for_status()
            body = r.json()
            ids += [s["sample_id"] for s in body["samples"]]
            if not body["has_more"]:
                return ids
            page += 1


def record(plat: Platform, eid: str) -> dict[str, object]:
    with plat.client() as c:
        r = c.get(f"/evaluations/{eid}")
        r.raise_for_status()
        return dict(r.json())


def settled(plat: Platform, eid: str, timeout: float = 30.0) -> dict[str, object]:
    """The record once it is out of PROCESSING (the statistics task is quick)."""
    deadline = time.monotonic() + timeout
    while True:
        rec = record(plat, eid)
        if rec["status"] != "PROCESSING" or time.monotonic() > deadline:
            return rec
        time.sleep(0.1)


# -- the network between a run and its platform -----------------------------------------

Refusal = Callable[[str, str, bytes], int | None]
"""(method, path, body) -> a status to answer instead of forwarding, or None to forward."""

_BUSY = b'{"error":{"code":"unavailable","message":"busy, try later"}}'


class _FaultServer(ThreadingHTTPServer):
    """The proxy's server: a connection reset mid-request (a client the faults killed) is part
    of the run, not an error to print a traceback for."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FaultProxy:
    """A loopback proxy (to the platform, or a model) that fails requests as a bad network would.

    - `refuse` picks requests to answer with its status (503, 429...) instead of forwarding;
    - while a storm is open (`storm(seconds)`) every request gets a 503 or a 429;
    - while resets are open (`resets(seconds)`) connections are reset, half of them before
      forwarding (the platform never saw the request), half after (it stored the batch,
      the client never heard).

    Args:
        target: the platform's URL.
        refuse: a rule for refusals (see `Refusal`).
        retry_after: the Retry-After header sent with each refusal (none when None).
        answered: called with (method, path) once the target answered, before the answer
            is passed on (e.g. to kill the client after the platform committed a finalize).
    """

    def __init__(
        self,
        target: str,
        refuse: Refusal | None = None,
        *,
        retry_after: str | None = None,
        answered: Callable[[str, str], None] | None = None,
    ) -> None:
        self.target = target
        self.refuse = refuse
        self.retry_after = retry_after
        self.answered = answered
        self.refused = 0
        """Requests answered with an error status."""
        self.injected = 0
        """Requests refused or reset by a storm or a reset window."""
        self.forwarded = 0
        """Requests the target answered."""
        self.forwarded_uploads = 0
        """Sample uploads the platform answered."""
        self._storm_until = 0.0
        self._reset_until = 0.0
        self.server = _FaultServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def storm(self, seconds: float) -> None:
        self._storm_until = time.monotonic() + seconds

    def resets(self, seconds: float) -> None:
        self._reset_until = time.monotonic() + seconds

    def calm(self) -> None:
        """End any storm or reset window now."""
        self._storm_until = self._reset_until = 0.0

    def _status(self, method: str, path: str, body: bytes) -> tuple[int | None, str | None]:
        if time.monotonic() < self._storm_until:
            self.injected += 1
            return random.choice((503, 429)), random.choice(("0", "1"))
        if self.refuse is not None:
            status = self.refuse(method, path, body)
            if status is not None:
                return status, self.retry_after
        return None, None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
                with contextlib.suppress(OSError):  # the client is gone (a killed eval)
                    self.send_response(status)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

            def _reset(self) -> None:
                # SO_LINGER 0: close with a RST, as a crashing middlebox would.
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.close()

            def _any(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, retry_after = proxy._status(self.command, self.path, body)
                if status is not None:
                    proxy.refused += 1
                    headers = {"Content-Type": "application/json"}
                    if retry_after is not None:
                        headers["Retry-After"] = retry_after
                    self._reply(status, _BUSY, headers)
                    return
                resetting = time.monotonic() < proxy._reset_until
                if resetting and random.random() < 0.5:
                    proxy.injected += 1
                    self._reset()  # before forwarding: the platform never saw it
                    return
                keep = ("authorization", "content-type", "idempotency-key")
                headers = {k: v for k, v in self.headers.items() if k.lower() in keep}
                try:
                    r = httpx.request(
                        self.command,
                        proxy.target + self.path,
                        headers=headers,
                        content=body,
                        timeout=60,
                        verify=tls(),
                    )
                except httpx.TransportError:
                    self._reset()  # the platform is down: the client sees a dead connection
                    return
                proxy.forwarded += 1
                if proxy.answered is not None:
                    proxy.answered(self.command, self.path)
                if self.command == "POST" and self.path.endswith("/samples"):
                    proxy.forwarded_uploads += 1
                if resetting:
                    proxy.injected += 1
                    self._reset()  # after forwarding: stored, but the answer is lost
                    return
                content_type = r.headers.get("content-type", "application/json")
                self._reply(r.status_code, r.content, {"Content-Type": content_type})

            do_GET = do_POST = do_PUT = do_PATCH = _any

            def log_message(self, format: str, *args: object) -> None:
                pass

        return Handler
