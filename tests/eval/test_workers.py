"""Rollouts in worker processes (-w): the run behaves exactly as in one process.

One trace file written by the parent alone, every episode exactly once, one evaluation on the
platform; a worker killed mid-run loses nothing; a killed parent takes its workers with it and
`--resume` completes the run; Ctrl-C stops everything and keeps what finished.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from tests.eval.helpers import (
    eval_process,
    pairs,
    read_config,
    read_traces,
    run_eval,
    wait_for_lines,
)
from tests.eval.test_platform_push import samples
from tests.support.platform import Platform


def workers_of(pid: int, n: int, *, timeout: float = 60) -> list[psutil.Process]:
    """The worker processes of the eval `pid`, once `n` of them run."""
    deadline = time.monotonic() + timeout
    while True:
        found = [
            p
            for p in psutil.Process(pid).children()
            if "from proctor.eval.workers import main" in " ".join(p.cmdline())
        ]
        if len(found) >= n:
            return found
        assert time.monotonic() < deadline, f"{n} workers never started"
        time.sleep(0.05)


def assert_exactly_once(records: list[dict[str, object]], tasks: int, rollouts: int) -> None:
    assert sorted(pairs(records)) == [(i, k) for i in range(tasks) for k in range(1, rollouts + 1)]
    assert len({r["id"] for r in records}) == len(records)


def test_every_episode_runs_once_and_only_the_parent_writes(
    demo_model: str, tmp_path: Path
) -> None:
    result = run_eval(
        "reverse-text", "-n", "60", "-r", "3", "-c", "12", "-w", "3", "-v", "--no-push",
        "--no-rich", "-o", "out", "--run.name", "r", "--client.base-url", demo_model,
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    run_dir = tmp_path / "out" / "r"
    records = read_traces(run_dir)
    assert_exactly_once(records, 60, 3)
    run_id = read_config(run_dir)["run"]["id"]
    assert all(r["run"] == {"id": run_id, "name": "r"} for r in records)
    assert all(r["error"] is None for r in records)
    listed = sorted(p.name for p in run_dir.iterdir() if p.name != ".proctor.lock")
    assert listed == ["config.toml", "logs", "traces.jsonl"]
    log = (run_dir / "logs" / "eval.log").read_text()
    for n in range(3):
        assert f"worker {n} (pid" in log  # workers' own log lines reach the run's log
    assert "run r completed: 180/180 episodes" in result.stdout


def test_a_killed_worker_loses_nothing(slow_model: str, tmp_path: Path) -> None:
    proc = eval_process(
        "reverse-text", "-n", "40", "-c", "8", "-w", "2", "--no-push", "--no-rich", "-o", "out",
        "--run.name", "r", "--client.base-url", slow_model, cwd=tmp_path,
    )  # fmt: skip
    run_dir = tmp_path / "out" / "r"
    try:
        wait_for_lines(run_dir / "traces.jsonl", 4)
        victim = workers_of(proc.pid, 2)[0]
        victim.kill()
        assert proc.proc is not None
        assert proc.proc.wait(timeout=90) == 0, proc.output()
    finally:
        proc.stop()
    assert_exactly_once(read_traces(run_dir), 40, 1)
    output = proc.output()
    assert "died (signal 9)" in output and "run again on a new worker" in output
    assert "run r completed: 40/40 episodes" in output


def test_a_killed_parent_takes_its_workers_and_resume_completes(
    slow_model: str, demo_model: str, tmp_path: Path
) -> None:
    args = ["reverse-text", "-n", "30", "-r", "2", "--no-push", "--no-rich", "-o", "out",
            "--run.name", "r", "-w", "2"]  # fmt: skip
    proc = eval_process(*args, "-c", "6", "--client.base-url", slow_model, cwd=tmp_path)
    run_dir = tmp_path / "out" / "r"
    try:
        wait_for_lines(run_dir / "traces.jsonl", 6)
        workers = workers_of(proc.pid, 2)
        os.kill(proc.pid, signal.SIGKILL)  # the parent only, as the OOM killer would
        _, alive = psutil.wait_procs(workers, timeout=30)
        assert not alive, f"workers outlived their parent: {alive}"
    finally:
        proc.stop()
    before = read_traces(run_dir)
    assert 6 <= len(before) < 60
    assert len(set(pairs(before))) == len(before)

    result = run_eval(*args, "-c", "8", "--resume", "--client.base-url", demo_model, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    after = read_traces(run_dir)
    assert_exactly_once(after, 30, 2)
    assert {r["id"] for r in before} <= {r["id"] for r in after}
    assert f"{60 - len(before)} episodes to run, {len(before)} kept" in result.stderr


def test_ctrl_c_stops_the_workers_and_keeps_results(slow_model: str, tmp_path: Path) -> None:
    proc = eval_process(
        "reverse-text", "-n", "200", "-c", "8", "-w", "2", "--no-push", "--no-rich", "-o", "out",
        "--run.name", "r", "--client.base-url", slow_model, cwd=tmp_path,
    )  # fmt: skip
    traces = tmp_path / "out" / "r" / "traces.jsonl"
    try:
        wait_for_lines(traces, 4)
        workers = workers_of(proc.pid, 2)
        proc.signal(signal.SIGINT)  # to the whole group, as a terminal sends it
        assert proc.proc is not None
        assert proc.proc.wait(timeout=30) == 130, proc.output()
        _, alive = psutil.wait_procs(workers, timeout=10)
        assert not alive
    finally:
        proc.stop()
    records = read_traces(tmp_path / "out" / "r")
    assert 4 <= len(records) < 200
    assert len(set(pairs(records))) == len(records)
    output = proc.output()
    assert "run r cancelled" in output
    assert "Traceback" not in output


def test_workers_push_to_one_evaluation(
    platform: Platform, demo_model: str, tmp_path: Path
) -> None:
    env = {"PROCTOR_API_URL": platform.url, "PROCTOR_API_KEY": platform.api_key,
           "HOME": str(tmp_path / "home")}  # fmt: skip
    result = run_eval(
        "arithmetic", "-n", "20", "-r", "2", "-c", "8", "-w", "2", "--push", "-o", "out",
        "--run.name", "r", "--client.base-url", demo_model, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    run_dir = tmp_path / "out" / "r"
    records = read_traces(run_dir)
    assert_exactly_once(records, 20, 2)
    stored = samples(platform, read_config(run_dir)["run"]["id"])
    assert sorted(str(s["sample_id"]) for s in stored) == sorted(r["id"] for r in records)


def test_default_workers_are_the_cores_beyond_the_first_for_big_runs() -> None:
    from proctor.eval.workers import effective_workers

    # Two cores or fewer: one process (a second one only competes for the same cores).
    assert effective_workers(None, concurrency=1024, jobs=2000, cores=2) == 1
    assert effective_workers(None, concurrency=1024, jobs=2000, cores=1) == 1
    # More: one per core beyond the first, at most one per 32 episodes in flight.
    assert effective_workers(None, concurrency=1024, jobs=2000, cores=16) == 15
    assert effective_workers(None, concurrency=256, jobs=2000, cores=16) == 8
    assert effective_workers(None, concurrency=32, jobs=2000, cores=16) == 1
    # A small run never waits for interpreters to start.
    assert effective_workers(None, concurrency=256, jobs=1, cores=16) == 1
    # Asked for: as asked, within the episodes to run.
    assert effective_workers(3, concurrency=256, jobs=2000, cores=2) == 3
    assert effective_workers(4, concurrency=2, jobs=2000, cores=16) == 2


RAISING_ENV = """
from proctor.envs import SingleTurnEnv, Task, Taskset, reward


@reward(weight=1.0)
def one(response: str) -> float:
    return 1.0


def load_environment(*, kind: str = "set"):
    if kind == "set":  # a task no trace line can hold: the episode's record cannot be written
        tasks = [Task(index=i, prompt=f"say {i}", info={"tags": {"a", "b"}}) for i in range(4)]
    else:
        tasks = [Task(index=i, prompt=f"say {i}") for i in range(4)]
    return SingleTurnEnv(name="raising", taskset=Taskset(tasks), rubric=[one])
"""


def plugin_env(tmp_path: Path) -> dict[str, str]:
    """`raising` installed as pip would (a module and a dist-info naming its entry point)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "raising_env.py").write_text(RAISING_ENV)
    dist = site / "raising_env-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: raising-env\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text(
        "[proctor.environments]\nraising = raising_env:load_environment\n"
    )
    return {"PYTHONPATH": str(site)}


@pytest.mark.parametrize("workers", ["1", "3", "4"])
def test_an_exception_in_a_rollout_slot_ends_the_run_with_its_message(
    demo_model: str, tmp_path: Path, workers: str
) -> None:
    # -w is forced: on CI's two cores the default would run everything in one process.
    result = run_eval(
        "raising", "-r", "2", "-c", "8", "-w", workers, "--no-push", "--no-rich", "-o", "out",
        "--run.name", "r", "--client.base-url", demo_model,
        cwd=tmp_path, env=plugin_env(tmp_path), timeout=120,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "TypeError: Object of type set is not JSON serializable" in output
    assert "Traceback" not in output
    assert "run r failed" in output
