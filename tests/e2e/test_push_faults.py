"""Uploads under faults, with real processes: nothing lost, nothing stored twice.

- the platform is SIGKILLed mid-run and restarted on the same port and data dir;
- the eval is SIGKILLed mid-run, then `proctor runs sync` delivers the rest;
- the platform answers 503/429 to sample uploads for a while (a loopback proxy in front).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import tomllib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from tests.conftest import Platform
from tests.procs import PROCTOR, ManagedProcess, free_port, wait_http

pytestmark = pytest.mark.e2e

CLIENT_VARS = ("PROCTOR_API_URL", "PROCTOR_API_KEY", "PROCTOR_TEAM_ID", "PROCTOR_RUNS_MODE")
EPISODES = 40


@pytest.fixture(scope="module")
def slow_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A demo model that takes 100 ms per answer, so a run lasts long enough to hurt."""
    port = free_port()
    log = tmp_path_factory.mktemp("slow-model") / "demo-model.log"
    args = [*PROCTOR, "demo-model", "--host", "127.0.0.1", "--port", str(port)]
    proc = ManagedProcess([*args, "--latency-ms", "100"], log).start()
    wait_http(f"http://127.0.0.1:{port}/v1/models", proc=proc.proc)
    yield f"http://127.0.0.1:{port}/v1"
    proc.stop()


def eval_process(api_url: str, key: str, model_url: str, out: Path, *flags: str) -> ManagedProcess:
    """`proctor eval alphabet-sort -n 40 -c 2` as a process of its own (not started)."""
    env = {k: v for k, v in os.environ.items() if k not in CLIENT_VARS}
    env.update(HOME=str(out / "home"), PROCTOR_API_URL=api_url, PROCTOR_API_KEY=key)
    args = [*PROCTOR, "eval", "alphabet-sort", "-n", str(EPISODES), "-r", "1", "-c", "2"]
    args += ["--no-serve", "--no-rich", "--client.base-url", model_url, "-o", str(out)]
    args += ["--run.name", "r", *flags]
    out.mkdir(parents=True, exist_ok=True)
    return ManagedProcess(args, out / "eval.log", env=env)


def launcher_evaluation(plat: Platform) -> str:
    with plat.client() as c:
        body = {"name": "hosted", "environments": [], "tags": [], "metadata": {"launcher": "t"}}
        r = c.post("/evaluations/", json=body)
        r.raise_for_status()
        return str(r.json()["evaluation_id"])


def sample_ids(plat: Platform, eid: str) -> list[str]:
    ids: list[str] = []
    with plat.client() as c:
        page = 1
        while True:
            r = c.get(f"/evaluations/{eid}/samples", params={"page": page, "limit": 100})
            r.raise_for_status()
            body = r.json()
            ids += [s["sample_id"] for s in body["samples"]]
            if not body["has_more"]:
                return ids
            page += 1


def trace_ids(run_dir: Path) -> list[str]:
    """Episode ids of every complete line of traces.jsonl."""
    text = (run_dir / "traces.jsonl").read_text()
    return [
        json.loads(line)["id"] for line in text.splitlines(keepends=True) if line.endswith("\n")
    ]


def wait_until(cond: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_platform_killed_mid_run_and_restarted(
    platform: Platform, slow_model: str, tmp_path: Path
) -> None:
    eid = launcher_evaluation(platform)
    proc = eval_process(platform.url, platform.api_key, slow_model, tmp_path, "--run.attach", eid)
    proc.start()
    try:
        wait_until(lambda: len(sample_ids(platform, eid)) > 0)
        platform.process.kill()
        assert proc.proc is not None and proc.proc.poll() is None, "the eval ended too early"
        time.sleep(1.0)
        platform.process.start()
        wait_http(f"{platform.url}/healthz", proc=platform.process.proc, timeout=60)
        assert proc.proc.wait(timeout=180) == 0, proc.output()
    finally:
        proc.stop()
    ids = sample_ids(platform, eid)
    assert len(ids) == EPISODES
    assert sorted(ids) == sorted(trace_ids(tmp_path / "r"))
    with platform.client() as c:
        assert c.get(f"/evaluations/{eid}").json()["status"] in ("PROCESSING", "COMPLETED")


def test_eval_killed_mid_run_then_sync_delivers_the_rest(
    platform: Platform, slow_model: str, tmp_path: Path
) -> None:
    proc = eval_process(platform.url, platform.api_key, slow_model, tmp_path)
    run_dir = tmp_path / "r"
    proc.start()
    try:
        wait_until(lambda: (run_dir / "traces.jsonl").exists() and len(trace_ids(run_dir)) >= 10)
        proc.kill()
    finally:
        proc.stop()
    eid = tomllib.loads((run_dir / "config.toml").read_text())["run"]["id"]
    written = trace_ids(run_dir)
    assert 10 <= len(written) < EPISODES
    env = {**os.environ, "PROCTOR_API_KEY": platform.api_key, "HOME": str(tmp_path / "home")}
    sync = subprocess.run(
        [*PROCTOR, "runs", "sync", str(run_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert sync.returncode == 0, sync.stderr
    assert f"evaluation {eid}:" in sync.stdout and "0 still unsent" in sync.stdout
    ids = sample_ids(platform, eid)
    assert sorted(ids) == sorted(written)  # every episode, none twice
    with platform.client() as c:
        record = c.get(f"/evaluations/{eid}").json()
    assert record["status"] == "FAILED" and record["error_message"].startswith("crashed: ")


class FlakyProxy:
    """A loopback HTTP proxy that answers 503/429 to sample uploads for `fail_for` seconds.

    The window opens at the first non-empty upload, so the attach check (an empty upload)
    goes through and the failures hit real batches.
    """

    def __init__(self, target: str, fail_for: float) -> None:
        self.target = target
        self.fail_for = fail_for
        self.window_start: float | None = None
        self.refused = 0
        self.forwarded_uploads = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FlakyProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _refuse(self, method: str, path: str, body: bytes) -> int | None:
        if method != "POST" or not path.endswith("/samples") or body.endswith(b"[]}"):
            return None
        now = time.monotonic()
        if self.window_start is None:
            self.window_start = now
        if now - self.window_start >= self.fail_for:
            return None
        self.refused += 1
        return 503 if self.refused % 2 else 429

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status = proxy._refuse(self.command, self.path, body)
                if status is not None:
                    payload = b'{"error":{"code":"busy","message":"try later"},"detail":"busy"}'
                    self.send_response(status)
                    self.send_header("Retry-After", "1")
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() in ("authorization", "content-type")
                }
                r = httpx.request(
                    self.command,
                    proxy.target + self.path,
                    headers=headers,
                    content=body,
                    timeout=60,
                )
                if self.command == "POST" and self.path.endswith("/samples"):
                    proxy.forwarded_uploads += 1
                self.send_response(r.status_code)
                self.send_header("Content-Type", r.headers.get("content-type", "application/json"))
                self.send_header("Content-Length", str(len(r.content)))
                self.end_headers()
                self.wfile.write(r.content)

            do_GET = do_POST = do_PUT = do_PATCH = _any

            def log_message(self, format: str, *args: object) -> None:
                pass

        return Handler


def test_platform_busy_for_a_while_loses_nothing(
    platform: Platform, demo_model: str, tmp_path: Path
) -> None:
    eid = launcher_evaluation(platform)
    with FlakyProxy(platform.url, fail_for=3.0) as proxy:
        proc = eval_process(proxy.url, platform.api_key, demo_model, tmp_path, "--run.attach", eid)
        proc.start()
        try:
            assert proc.proc is not None and proc.proc.wait(timeout=120) == 0, proc.output()
        finally:
            proc.stop()
    assert proxy.refused >= 2 and proxy.forwarded_uploads >= 1
    ids = sample_ids(platform, eid)
    assert sorted(ids) == sorted(trace_ids(tmp_path / "r"))
    assert len(ids) == EPISODES
    with platform.client() as c:
        assert c.get(f"/evaluations/{eid}").json()["status"] in ("PROCESSING", "COMPLETED")
