"""One writer per run directory: a second `proctor eval` or `--resume` on a run directory in
use is refused, naming the process that runs it; a killed run leaves no stale lock."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from proctor.errors import RunDirError
from proctor.eval.run_dir import LOCK_FILE, RunDirectory
from tests.eval.helpers import (
    cli_env,
    count_complete_lines,
    pairs,
    read_traces,
    run_eval,
    wait_for_lines,
)
from tests.support.procs import PROCTOR, ManagedProcess

EPISODES = 40
ARGS = ["reverse-text", "-n", str(EPISODES), "-c", "2", "--no-push", "--no-rich", "-o", "out",
        "--run.name", "r"]  # fmt: skip


def start(tmp_path: Path, log: str, *flags: str) -> ManagedProcess:
    args = [*PROCTOR, "eval", *ARGS, *flags]
    return ManagedProcess(args, tmp_path / log, env=cli_env(), cwd=tmp_path).start()


def test_a_second_writer_is_refused_and_a_killed_one_leaves_no_lock(
    slow_model: str, demo_model: str, tmp_path: Path
) -> None:
    run_dir = tmp_path / "out" / "r"
    traces = run_dir / "traces.jsonl"
    first = start(tmp_path, "first.log", "--client.base-url", slow_model)
    try:
        wait_for_lines(traces, 2, first)
        # Paused (SIGSTOP), it is alive and holds the run dir however slow the checks are.
        first.signal(signal.SIGSTOP)
        # While it runs: a resume, and a fresh eval of the same run, are both refused.
        for flags in (["--resume"], []):
            second = run_eval(*ARGS, *flags, "--client.base-url", demo_model, cwd=tmp_path)
            assert second.returncode == 2, second.stderr
            last = second.stderr.strip().splitlines()[-1]
            assert f"is in use by proctor process {first.pid} (`proctor eval" in last
            assert "Traceback" not in second.stderr
        assert first.proc is not None and first.proc.poll() is None  # untouched, still going
        first.signal(signal.SIGCONT)
        wait_for_lines(traces, count_complete_lines(traces) + 1, first)  # it goes on
        first.kill()  # SIGKILL: the kernel drops its lock
    finally:
        first.stop()
    before = read_traces(run_dir)
    assert 2 <= len(before) < EPISODES

    # Now the resumes: the first one takes the lock; one started while it runs is refused.
    resumed = start(tmp_path, "resumed.log", "--resume", "--client.base-url", slow_model)
    try:
        wait_for_lines(traces, len(before) + 2, resumed)
        resumed.signal(signal.SIGSTOP)
        late = run_eval(*ARGS, "--resume", "--client.base-url", demo_model, cwd=tmp_path)
        assert late.returncode == 2, late.stderr
        assert f"is in use by proctor process {resumed.pid}" in late.stderr
        resumed.signal(signal.SIGCONT)
        assert resumed.proc is not None
        assert resumed.proc.wait(timeout=120) == 0, resumed.output()
    finally:
        resumed.stop()
    after = read_traces(run_dir)
    assert sorted(pairs(after)) == [(i, 1) for i in range(EPISODES)]  # none doubled, none lost
    assert {r["id"] for r in before} <= {r["id"] for r in after}


def test_the_lock_names_its_holder_and_leaves_nothing_behind(tmp_path: Path) -> None:
    run_dir = RunDirectory(tmp_path / "out" / "r")
    held = run_dir.lock()
    try:
        with pytest.raises(RunDirError, match=r"is in use by proctor process \d+ \(`proctor"):
            RunDirectory(tmp_path / "out" / "r").lock()
        # The lock file is no result: a fresh run there is not told the dir holds results.
        run_dir.check(resume=False, clean=False)
    finally:
        held.release()
    # Nothing was written: the directories made for the lock go with it.
    assert not (tmp_path / "out").exists()
    again = run_dir.lock()
    (run_dir.path / "traces.jsonl").write_text("")
    run_dir.prepare(clean=True, kept=None)  # --clean keeps the lock it runs under
    assert (run_dir.path / LOCK_FILE).exists()
    again.release()
    assert (run_dir.path / "logs").is_dir()


def test_an_unwritable_output_dir_is_refused_before_anything_runs(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    ran = subprocess.run(
        [*PROCTOR, "eval", *ARGS[:-4], "-o", str(blocked / "out"), "--run.name", "r"],
        cwd=tmp_path,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 2, ran.stderr
    assert "cannot create the run directory" in ran.stderr and "pass another -o" in ran.stderr
    assert "--resume" not in ran.stderr and "Traceback" not in ran.stderr
