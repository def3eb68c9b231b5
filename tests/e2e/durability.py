"""Helpers of the durability tests: tmpfs mounts to fill, a loopback proxy, counts."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
from tests.conftest import Platform


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


def wait_until(cond: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def line_count(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except OSError:
        return 0


class Proxy:
    """A loopback proxy to the platform that answers 503 to requests `refuse` picks."""

    def __init__(self, target: str, refuse: Callable[[str, str], bool]) -> None:
        self.target = target
        self.refuse = refuse
        self.refused = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Proxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if proxy.refuse(self.command, self.path):
                    proxy.refused += 1
                    payload = b'{"error":{"code":"unavailable","message":"down"}}'
                    self.send_response(503)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                keep = ("authorization", "content-type", "idempotency-key")
                headers = {k: v for k, v in self.headers.items() if k.lower() in keep}
                r = httpx.request(
                    self.command,
                    proxy.target + self.path,
                    headers=headers,
                    content=body,
                    timeout=60,
                )
                self.send_response(r.status_code)
                self.send_header("Content-Type", r.headers.get("content-type", "application/json"))
                self.send_header("Content-Length", str(len(r.content)))
                self.end_headers()
                self.wfile.write(r.content)

            do_GET = do_POST = do_PUT = do_PATCH = _any

            def log_message(self, format: str, *args: object) -> None:
                pass

        return Handler


def env_without_client_vars(**extra: str) -> dict[str, str]:
    drop = ("PROCTOR_API_URL", "PROCTOR_API_KEY", "PROCTOR_TEAM_ID", "PROCTOR_RUNS_MODE")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, **extra}
