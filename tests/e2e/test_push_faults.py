"""Uploads under faults, with real processes: nothing lost, nothing stored twice.

- the platform is SIGKILLed mid-run and restarted on the same port and data dir;
- the eval is SIGKILLed mid-run, then `proctor runs sync` (in this process) delivers the rest;
- the platform answers 503/429 to sample uploads for a while (a loopback proxy in front).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.e2e import durability
from tests.e2e.durability import FaultProxy, in_process_sync, run_id, stored_ids, trace_ids
from tests.support.databases import BACKENDS, platform_on
from tests.support.platform import Platform
from tests.support.procs import ManagedProcess, wait_http
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

EPISODES = 40


@pytest.fixture(scope="module")
def slow_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A demo model that takes 100 ms per answer, so a run lasts long enough to hurt."""
    with durability.demo_model(tmp_path_factory.mktemp("slow-model"), latency_ms=100) as url:
        yield url


@pytest.fixture(params=BACKENDS)
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Platform]:
    """A platform of its own on each database backend (the test kills and restarts it)."""
    data_dir = tmp_path / "platform"
    data_dir.mkdir()
    with platform_on(request.param, data_dir) as platform:
        yield platform


def eval_process(api_url: str, key: str, model_url: str, out: Path, *flags: str) -> ManagedProcess:
    """`proctor eval alphabet-sort -n 40 -c 2` as a process of its own (not started)."""
    env = durability.eval_env(api_url, key, out / "home")
    out.mkdir(parents=True, exist_ok=True)
    args = durability.eval_args(model_url, out, *flags, n=EPISODES)
    return ManagedProcess(args, out / "eval.log", env=env)


def launcher_evaluation(plat: Platform) -> str:
    with plat.client() as c:
        body = {"name": "hosted", "environments": [], "tags": [], "metadata": {"launcher": "t"}}
        r = c.post("/evaluations/", json=body)
        r.raise_for_status()
        return str(r.json()["evaluation_id"])


def test_platform_killed_mid_run_and_restarted(
    server: Platform, slow_model: str, tmp_path: Path
) -> None:
    eid = launcher_evaluation(server)
    proc = eval_process(server.url, server.api_key, slow_model, tmp_path, "--run.attach", eid)
    proc.start()
    try:
        wait_until(lambda: len(stored_ids(server, eid)) > 0)
        server.process.kill()
        assert proc.proc is not None and proc.proc.poll() is None, "the eval ended too early"
        time.sleep(1.0)
        server.process.start()
        wait_http(f"{server.url}/healthz", proc=server.process.proc, timeout=60)
        assert proc.proc.wait(timeout=180) == 0, proc.output()
    finally:
        proc.stop()
    ids = stored_ids(server, eid)
    assert len(ids) == EPISODES
    assert sorted(ids) == sorted(trace_ids(tmp_path / "r"))
    with server.client() as c:
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
    eid = run_id(run_dir)
    written = trace_ids(run_dir)
    assert 10 <= len(written) < EPISODES
    sync = in_process_sync(run_dir, platform.api_key, timeout=120)  # the eval's was killed
    assert sync.returncode == 0, sync.stderr
    assert f"evaluation {eid}:" in sync.stdout and "0 still unsent" in sync.stdout
    ids = stored_ids(platform, eid)
    assert sorted(ids) == sorted(written)  # every episode, none twice
    with platform.client() as c:
        record = c.get(f"/evaluations/{eid}").json()
    assert record["status"] == "FAILED" and record["error_message"].startswith("crashed: ")


def busy_for(seconds: float) -> durability.Refusal:
    """503/429 to sample uploads for `seconds` from the first non-empty one.

    The window opens at the first non-empty upload, so the attach check (an empty upload)
    goes through and the failures hit real batches.
    """
    window: list[float] = []
    refused = [0]

    def refuse(method: str, path: str, body: bytes) -> int | None:
        if method != "POST" or not path.endswith("/samples") or body.endswith(b"[]}"):
            return None
        window[:] = window or [time.monotonic()]
        if time.monotonic() - window[0] >= seconds:
            return None
        refused[0] += 1
        return 503 if refused[0] % 2 else 429

    return refuse


def test_platform_busy_for_a_while_loses_nothing(
    platform: Platform, demo_model: str, tmp_path: Path
) -> None:
    eid = launcher_evaluation(platform)
    with FaultProxy(platform.url, busy_for(3.0), retry_after="1") as proxy:
        proc = eval_process(proxy.url, platform.api_key, demo_model, tmp_path, "--run.attach", eid)
        proc.start()
        try:
            assert proc.proc is not None and proc.proc.wait(timeout=120) == 0, proc.output()
        finally:
            proc.stop()
    assert proxy.refused >= 2 and proxy.forwarded_uploads >= 1
    ids = stored_ids(platform, eid)
    assert sorted(ids) == sorted(trace_ids(tmp_path / "r"))
    assert len(ids) == EPISODES
    with platform.client() as c:
        assert c.get(f"/evaluations/{eid}").json()["status"] in ("PROCESSING", "COMPLETED")
