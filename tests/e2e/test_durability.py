"""Durability under real faults: expected == stored, no duplicates, a truthful status.

Real processes (a platform server, the demo model, `proctor eval`, an SDK process; `proctor
runs sync`, which nothing kills, runs in this process) and real faults: tmpfs mounts filled
to ENOSPC or remounted read-only (the suite runs as root), SIGINT and SIGKILL, a proxy that
takes the platform away.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.e2e import durability
from tests.e2e.durability import (
    FaultProxy,
    env_without_client_vars,
    fill,
    in_process_sync,
    line_count,
    record,
    remount,
    run_id,
    settled,
    stored_ids,
    tmpfs,
    unfill,
)
from tests.support.cli import Finished
from tests.support.databases import BACKENDS, platform_on
from tests.support.platform import Platform
from tests.support.procs import ManagedProcess, free_port
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
EPISODES = 30

# An SDK process shaped like the engine: each record goes to traces.jsonl first, then to
# the run. Prints what finish() concluded.
SDK_CHILD = """
import json, sys, time
from pathlib import Path
from proctor import runs
from tests.runs.support import make_record

run_dir, n, pause = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
run = runs.init(name="fault", environments=["alphabet-sort"], model="demo", config={},
                run_dir=run_dir, expected_samples=n, finish_timeout=60)
with open(run_dir / "traces.jsonl", "a") as traces:
    for i in range(n):
        rec = make_record(i, run_id=run.id)
        traces.write(json.dumps(rec) + "\\n")
        traces.flush()
        run.log_episodes([rec])
        time.sleep(pause)
run.finish()
print(json.dumps({"id": run.id, "unsynced": run.unsynced}))
"""


def trace_ids(run_dir: Path) -> list[str]:
    return durability.trace_ids(run_dir, whole=True)


def assert_exactly_once(plat: Platform, eid: str, expected: list[str]) -> None:
    stored = stored_ids(plat, eid)
    assert len(stored) == len(set(stored)), "a sample was stored twice"
    assert sorted(stored) == sorted(expected)
    assert record(plat, eid)["total_samples"] == len(expected)


@pytest.fixture(scope="module")
def plat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    from tests.support.platform import start_platform

    platform = start_platform(tmp_path_factory.mktemp("platform"))
    yield platform
    platform.process.stop()


@pytest.fixture(scope="module", params=BACKENDS)
def store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Platform]:
    """A platform on each database backend, for the faults whose outcome is the server's
    (what it holds, reopens, refuses, emits); the disk faults are the client's, on `plat`."""
    with platform_on(request.param, tmp_path_factory.mktemp(f"store-{request.param}")) as p:
        yield p


@pytest.fixture(scope="module")
def slow_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A demo model that takes 50 ms per answer, so there is time to hurt a run."""
    with durability.demo_model(tmp_path_factory.mktemp("slow-model"), latency_ms=50) as url:
        yield url


def sdk_process(plat: Platform, run_dir: Path, n: int, pause: float) -> subprocess.Popen[str]:
    env = env_without_client_vars(
        PROCTOR_API_URL=plat.url,
        PROCTOR_API_KEY=plat.api_key,
        HOME=str(run_dir.parent / "home"),
        PYTHONPATH=str(REPO),
    )
    return subprocess.Popen(
        [sys.executable, "-c", SDK_CHILD, str(run_dir), str(n), str(pause)],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def eval_args(model_url: str, out: Path, *flags: str, n: int = EPISODES) -> list[str]:
    return durability.eval_args(model_url, out, *flags, n=n)


def eval_env(api_url: str, plat: Platform, out: Path) -> dict[str, str]:
    return durability.eval_env(api_url, plat.api_key, out / "home")


def sync(plat: Platform, run_dir: Path, *extra: str) -> Finished:
    """`proctor runs sync RUN_DIR EXTRA` in this process (`cli_in_process`): nothing kills it,
    what it sends and prints is the point."""
    return in_process_sync(run_dir, plat.api_key, *extra)


# -- the spool's disk -------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["burst", "whole-run", "acked-offset"])
def test_a_full_spool_disk_loses_nothing_and_the_run_completes(
    plat: Platform, tmp_path: Path, fault: str
) -> None:
    run_dir = tmp_path / "run"
    n = 200
    with tmpfs(run_dir / "platform", "1m") as fs:
        filler = fill(fs) if fault == "whole-run" else None
        proc = sdk_process(plat, run_dir, n, pause=0.004)
        try:
            traces = run_dir / "traces.jsonl"
            if fault == "burst":
                wait_until(lambda: line_count(traces) >= n // 3)
                filler = fill(fs)
                time.sleep(0.5)
                unfill(filler)
            elif fault == "acked-offset":
                # Room reserved for the spool file (appends fit), none for anything else:
                # every write of spool.acked (and run.json) meets ENOSPC.
                wait_until(lambda: any(fs.glob("*/spool.jsonl")))
                spool = next(fs.glob("*/spool.jsonl"))
                subprocess.run(["fallocate", "-n", "-l", "512k", str(spool)], check=True)
                filler = fill(fs)
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, err
        done = json.loads(out.strip().splitlines()[-1])
        if fault == "acked-offset":
            # The offset's writes really failed, and the uploader carried on.
            assert "cannot record the acknowledged offset" in err
            assert "No space left on device" in err
        if filler is not None:
            unfill(filler)
    assert "cannot" in err  # the trouble was reported, not silent
    assert done["unsynced"] is False
    assert_exactly_once(plat, done["id"], trace_ids(run_dir))
    assert settled(plat, done["id"])["status"] == "COMPLETED"


# -- the run directory's disk -----------------------------------------------------------


@pytest.mark.parametrize("fault", ["full-mid-run", "full-from-start", "read-only-from-start"])
def test_an_unwritable_run_dir_fails_the_run_in_one_sentence_and_corrupts_nothing(
    plat: Platform, slow_model: str, tmp_path: Path, fault: str
) -> None:
    run_dir = tmp_path / "out" / "r"
    with tmpfs(tmp_path / "out", "2m") as fs:
        filler = fill(fs) if fault == "full-from-start" else None
        if fault == "read-only-from-start":
            remount(fs, "ro")  # (a busy mount cannot be made read-only mid-run)
        proc = subprocess.Popen(
            eval_args(slow_model, tmp_path / "out", n=200),
            env=eval_env(plat.url, plat, tmp_path),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            if fault == "full-mid-run":
                wait_until(lambda: line_count(run_dir / "traces.jsonl") >= 10)
                filler = fill(fs)
            _out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        if fault == "read-only-from-start":
            remount(fs, "rw")
        if filler is not None:
            unfill(filler)
        assert "Traceback" not in err
        reason = "Read-only file system" if fault.startswith("read-only") else "No space left"
        failure = [line for line in err.splitlines() if line.startswith("proctor eval:")]
        assert len(failure) == 1 and f"the run directory {run_dir}" in failure[0], err
        assert f"({reason}" in failure[0], err
        with plat.client() as c:
            mine = [
                e
                for e in c.get("/evaluations/", params={"limit": 500}).json()["evaluations"]
                if e["metadata"].get("output_dir") == str(tmp_path / "out")
            ]
        if fault.endswith("from-start"):
            # Nothing ran: refused before any evaluation exists, and --resume is no advice.
            assert proc.returncode == 2, err
            assert "pass another -o" in failure[0] and "--resume" not in failure[0]
            assert mine == []
            return
        assert proc.returncode == 1, err
        assert f"cannot write the run directory {run_dir} ({reason}" in failure[0]
        assert len(mine) == 1
        eid = mine[0]["evaluation_id"]
        rec = record(plat, eid)
        assert rec["status"] == "FAILED" and reason in str(rec["error_message"])
        written = trace_ids(run_dir) if (run_dir / "traces.jsonl").exists() else []
        assert_exactly_once(plat, eid, written)


# -- the platform away ------------------------------------------------------------------


def test_platform_down_at_start_then_sync_twice_uploads_exactly_once(
    store: Platform, demo_model: str, tmp_path: Path
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    result = subprocess.run(
        eval_args(demo_model, tmp_path),
        env=eval_env(dead, store, tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    run_dir = tmp_path / "r"
    assert result.returncode == 75, result.stderr
    assert result.stderr.strip().splitlines()[-1].endswith(f"proctor runs sync {run_dir}")
    first = sync(store, run_dir, "--api-url", store.url)
    assert first.returncode == 0, first.stderr
    eid = first.stdout.split()[1].rstrip(":")
    again = sync(store, run_dir, "--api-url", store.url)
    assert again.returncode == 0, again.stderr
    assert again.stdout.split()[1].rstrip(":") == eid
    with store.client() as c:
        named = [
            e
            for e in c.get("/evaluations/", params={"limit": 500}).json()["evaluations"]
            if e["metadata"].get("output_dir") == str(tmp_path)
        ]
    assert [e["evaluation_id"] for e in named] == [eid]  # created once
    assert_exactly_once(store, eid, trace_ids(run_dir))
    assert settled(store, eid)["status"] == "COMPLETED"


@pytest.mark.parametrize("outage", ["shorter", "longer"])
def test_an_outage_spanning_finalize(
    store: Platform, demo_model: str, tmp_path: Path, outage: str
) -> None:
    """Shorter than the finish timeout: ridden out. Longer: exit 75, RUNNING, then sync."""
    started: list[float] = []

    def refuse(method: str, path: str, body: bytes) -> int | None:
        if not path.endswith("/finalize"):
            return None
        started.append(time.monotonic())
        return 503 if outage == "longer" or started[-1] - started[0] < 2.0 else None

    with FaultProxy(store.url, refuse) as proxy:
        result = subprocess.run(
            eval_args(demo_model, tmp_path, "--run.finish-timeout", "4"),
            env=eval_env(proxy.url, store, tmp_path),
            capture_output=True,
            text=True,
            timeout=120,
        )
    run_dir = tmp_path / "r"
    eid = run_id(run_dir)
    assert proxy.refused >= 2
    assert_exactly_once(store, eid, trace_ids(run_dir))
    if outage == "shorter":
        assert result.returncode == 0, result.stderr
        assert settled(store, eid)["status"] == "COMPLETED"
        return
    assert result.returncode == 75, result.stderr
    assert result.stderr.strip().splitlines()[-1].endswith(f"proctor runs sync {run_dir}")
    assert record(store, eid)["status"] == "RUNNING"  # never closed on a lie
    done = sync(store, run_dir, "--api-url", store.url)
    assert done.returncode == 0, done.stderr
    assert settled(store, eid)["status"] == "COMPLETED"
    assert_exactly_once(store, eid, trace_ids(run_dir))


# -- the eval stopped -------------------------------------------------------------------


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "crash"])
def test_resume_continues_the_same_evaluation(
    store: Platform, slow_model: str, tmp_path: Path, stop: signal.Signals
) -> None:
    run_dir = tmp_path / "r"
    env = eval_env(store.url, store, tmp_path)
    first = ManagedProcess(eval_args(slow_model, tmp_path), tmp_path / "first.log", env=env)
    first.start()
    try:
        wait_until(lambda: line_count(run_dir / "traces.jsonl") >= 8)
        first.signal(stop)
        assert first.proc is not None
        code = first.proc.wait(timeout=60)
    finally:
        first.stop()
    assert code == (130 if stop == signal.SIGINT else -signal.SIGKILL), first.output()
    eid = run_id(run_dir)
    assert record(store, eid)["status"] == ("CANCELLED" if stop == signal.SIGINT else "RUNNING")
    resumed = subprocess.run(
        eval_args(slow_model, tmp_path, "--resume"), env=env, capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr
    assert run_id(run_dir) == eid  # one run dir, one evaluation
    rec = settled(store, eid)
    assert rec["status"] == "COMPLETED" and rec["attempts"] == 2
    assert_exactly_once(store, eid, trace_ids(run_dir))
    assert len(trace_ids(run_dir)) == EPISODES


def test_a_completed_evaluation_is_never_reopened(
    store: Platform, demo_model: str, tmp_path: Path
) -> None:
    env = eval_env(store.url, store, tmp_path)
    done = subprocess.run(eval_args(demo_model, tmp_path), env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    run_dir = tmp_path / "r"
    eid = run_id(run_dir)
    assert settled(store, eid)["status"] == "COMPLETED"
    before = stored_ids(store, eid)
    count = evaluation_count(store)
    again = subprocess.run(
        eval_args(demo_model, tmp_path, "--resume"), env=env, capture_output=True, text=True
    )
    # Nothing to resume: no second evaluation, and the message points at the first one.
    assert again.returncode == 0, again.stderr
    assert f"nothing to resume: this run's evaluation {eid} is already COMPLETED" in again.stderr
    assert "Traceback" not in again.stderr
    assert run_id(run_dir) == eid
    assert stored_ids(store, eid) == before
    assert record(store, eid)["attempts"] == 1
    assert evaluation_count(store) == count


def test_resume_after_a_finalize_whose_answer_never_came_opens_no_second_evaluation(
    plat: Platform, demo_model: str, tmp_path: Path
) -> None:
    # The eval is SIGKILLed once the platform has committed its finalize, before the answer
    # reaches it: its run.json still says the run is open.
    first = ManagedProcess(eval_args(demo_model, tmp_path), tmp_path / "first.log")

    def kill_after_finalize(method: str, path: str) -> None:
        if method == "POST" and path.endswith("/finalize"):
            first.signal(signal.SIGKILL)

    run_dir = tmp_path / "r"
    with durability.FaultProxy(plat.url, answered=kill_after_finalize) as proxy:
        first.env = eval_env(proxy.url, plat, tmp_path)
        first.start()
        try:
            assert first.proc is not None
            assert first.proc.wait(timeout=120) == -signal.SIGKILL, first.output()
        finally:
            first.stop()
    eid = run_id(run_dir)
    assert settled(plat, eid)["status"] == "COMPLETED"
    state = json.loads(next((run_dir / "platform").glob("*/run.json")).read_text())
    assert state["phase"] == "open"  # what the killed process left
    count = evaluation_count(plat)

    resumed = subprocess.run(
        eval_args(demo_model, tmp_path, "--resume"),
        env=eval_env(plat.url, plat, tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "nothing to resume" in resumed.stderr and eid in resumed.stderr
    assert evaluation_count(plat) == count  # no second evaluation
    assert_exactly_once(plat, eid, trace_ids(run_dir))
    assert record(plat, eid)["attempts"] == 1
    # The run dir now tells the truth: a sync has nothing left to do. (It is pointed at the
    # platform: the proxy the run dir names is gone, and a sync against it only retries until
    # its timeout and reports "not closed".)
    synced = sync(plat, run_dir, "--api-url", plat.url)
    assert synced.returncode == 0, synced.stderr
    assert "0 sample(s) sent" in synced.stdout and "0 still unsent" in synced.stdout
    assert "nothing to close" in synced.stdout, synced.stdout


def evaluation_count(plat: Platform) -> int:
    with plat.client() as c:
        r = c.get("/evaluations/", params={"limit": 1})
        r.raise_for_status()
        return int(r.json()["total"])


def test_rewards_near_the_float_limit_keep_every_answer_valid_json(
    store: Platform, tmp_path: Path
) -> None:
    from tests.runs.support import make_record

    from proctor import runs

    run = runs.init(
        name="huge",
        environments=["alphabet-sort"],
        model="demo",
        config={},
        run_dir=tmp_path / "run",
        api_url=store.url,
        api_key=store.api_key,
    )
    run.log_episodes([make_record(0, reward=1e308), make_record(1, reward=1e308)])
    run.finish()
    rec = settled(store, run.id)
    assert rec["status"] == "COMPLETED" and rec["avg_score"] is None
    assert rec["metrics"]["avg_reward"] is None  # type: ignore[index]
    with store.client() as c:
        for path in ("/evaluations/", f"/evaluations/{run.id}"):
            text = c.get(path, params={"limit": 500}).text
            assert "Infinity" not in text and "NaN" not in text
