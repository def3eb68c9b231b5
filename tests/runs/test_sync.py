"""`proctor runs sync`: what a killed or timed-out process left behind reaches the platform once."""

from __future__ import annotations

import _thread
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from proctor import runs
from tests.runs.support import (
    all_samples,
    create_launcher_evaluation,
    get_evaluation,
    make_record,
)
from tests.support.cli import Finished, cli_in_process
from tests.support.platform import Platform
from tests.support.procs import wait_http


def _killed_run(run_dir: Path, *, total: int, expected: int, attach: str | None = None) -> str:
    """Run a process that sends 3 records, spools 2 more, writes `total` traces, then SIGKILLs.

    Like the engine, every record goes to traces.jsonl before it is logged; records 5.. never
    reach the run at all.
    """
    script = textwrap.dedent(
        f"""
        import json, os, signal, time
        from pathlib import Path
        from proctor import runs
        from tests.runs.support import make_record
        run_dir = Path({str(run_dir)!r})
        run = runs.init(name="killed", environments=["alphabet-sort"], model="demo",
                        config={{"n": {total}}}, run_dir=run_dir, id={attach!r},
                        expected_samples={expected},
                        upload=runs.UploaderOptions(batch_interval=60, max_batch_samples=3))
        run_dir.mkdir(parents=True, exist_ok=True)
        records = [make_record(i, run_id=run.id) for i in range({total})]
        with open(run_dir / "traces.jsonl", "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\\n")
        def wait(cond):
            deadline = time.monotonic() + 20
            while not cond() and time.monotonic() < deadline:
                time.sleep(0.01)
        run.log_episodes(records[:3])
        wait(lambda: run.counters.sent == 3)
        run.log_episodes(records[3:5])
        wait(lambda: run.counters.spooled == 5)
        print(run.id, run.counters.sent, run.counters.spooled, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=Path.cwd()
    )
    assert proc.returncode == -9, proc.stderr
    eid, sent, spooled = proc.stdout.split()
    assert (sent, spooled) == ("3", "5")
    return eid


def _sync(run_dir: Path, home: Path) -> Finished:
    """`proctor runs sync RUN_DIR` in this process (what it sends and prints is the point),
    with this process's PROCTOR_* settings (`online`'s platform) and HOME `home`."""
    home.mkdir(parents=True, exist_ok=True)
    own = {k: v for k, v in os.environ.items() if k.startswith("PROCTOR_")}
    return cli_in_process("runs", "sync", str(run_dir), home=home, env=own)


def _trace_ids(run_dir: Path) -> list[str]:
    lines = (run_dir / "traces.jsonl").read_text().splitlines()
    return [json.loads(line)["id"] for line in lines]


def test_sync_after_a_kill_sends_the_rest_once_and_finalizes_a_complete_run(
    tmp_path: Path, online: Platform
) -> None:
    run_dir = tmp_path / "run"
    eid = _killed_run(run_dir, total=10, expected=10)
    assert len(all_samples(online, eid)) == 3
    result = _sync(run_dir, tmp_path / "home")
    assert result.returncode == 0, result.stderr
    assert "7 sample(s) sent (5 recovered from traces.jsonl), 0 still unsent" in result.stdout
    assert "finalized" in result.stdout
    ids = [s["sample_id"] for s in all_samples(online, eid)]
    assert sorted(ids) == sorted(_trace_ids(run_dir))
    record = get_evaluation(online, eid)
    assert record["status"] in ("PROCESSING", "COMPLETED")
    assert record["metrics"]["avg_reward"] == 1.0  # type: ignore[index]
    # Syncing again finds nothing to send and sends nothing twice.
    again = _sync(run_dir, tmp_path / "home")
    assert again.returncode == 0 and "0 sample(s) sent" in again.stdout
    assert len(all_samples(online, eid)) == 10


def test_sync_marks_an_incomplete_created_run_crashed(tmp_path: Path, online: Platform) -> None:
    run_dir = tmp_path / "run"
    eid = _killed_run(run_dir, total=8, expected=20)
    result = _sync(run_dir, tmp_path / "home")
    assert result.returncode == 0, result.stderr
    assert "marked FAILED" in result.stdout
    record = get_evaluation(online, eid)
    assert record["status"] == "FAILED"
    assert (
        record["error_message"]
        == "crashed: the eval process stopped; the platform holds 8 of 20 episodes"
    )
    assert len(all_samples(online, eid)) == 8


def test_sync_of_an_attached_run_only_uploads(tmp_path: Path, online: Platform) -> None:
    eid = create_launcher_evaluation(online, launcher="sync-test")
    run_dir = tmp_path / "run"
    assert _killed_run(run_dir, total=7, expected=7, attach=eid) == eid
    result = _sync(run_dir, tmp_path / "home")
    assert result.returncode == 0, result.stderr
    assert "status left to the launcher" in result.stdout
    record = get_evaluation(online, eid)
    assert record["status"] == "RUNNING"
    assert record["metadata"] == {"launcher": "sync-test"}
    assert len(all_samples(online, eid)) == 7


def test_a_finish_that_times_out_is_completed_by_sync(
    tmp_path: Path, online: Platform, caplog: pytest.LogCaptureFixture
) -> None:
    run_dir = tmp_path / "run"
    run = runs.init(
        name="slow", environments=["alphabet-sort"], model="demo", config={}, run_dir=run_dir
    )
    records = [make_record(i, run_id=run.id, reward=0.5) for i in range(4)]
    run.log_episodes(records)
    with caplog.at_level(logging.WARNING, logger="proctor"):
        run.finish(timeout=0)
    assert f"proctor runs sync {run_dir}" in caplog.text
    assert get_evaluation(online, run.id)["status"] == "RUNNING"
    state = json.loads((run_dir / "platform" / run.id / "run.json").read_text())
    assert state["phase"] == "finish_pending"
    reports = runs.sync_run_dir(run_dir)
    assert [(r.pending, r.action) for r in reports] == [(0, "finalized")]
    record = get_evaluation(online, run.id)
    assert record["status"] in ("PROCESSING", "COMPLETED")
    assert record["metrics"]["avg_reward"] == 0.5  # type: ignore[index]
    assert sorted(s["sample_id"] for s in all_samples(online, run.id)) == sorted(
        r["id"] for r in records
    )


def test_sync_explains_a_directory_without_a_spool(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, online: Platform
) -> None:
    result = _sync(tmp_path, tmp_path_factory.mktemp("home"))
    assert result.returncode == 2
    assert result.stderr.strip().endswith("run it again with PROCTOR_API_KEY set to upload it")
    assert "Traceback" not in result.stderr


def test_a_restarted_process_sends_what_the_spool_still_holds(
    tmp_path: Path, online: Platform
) -> None:
    eid = create_launcher_evaluation(online, launcher="restart")
    run_dir = tmp_path / "run"
    _killed_run(run_dir, total=7, expected=7, attach=eid)  # 3 sent, 2 only spooled
    assert len(all_samples(online, eid)) == 3
    run = runs.init(
        name="again",
        environments=["alphabet-sort"],
        model="demo",
        config={},
        id=eid,
        run_dir=run_dir,
    )
    fresh = make_record(100, run_id=eid)
    run.log_episodes([fresh])
    run.finish()
    spooled = [
        json.loads(line)["id"] for line in (run_dir / "traces.jsonl").read_text().splitlines()
    ]
    assert sorted(s["sample_id"] for s in all_samples(online, eid)) == sorted(
        [*spooled[:5], fresh["id"]]
    )


def test_ctrl_c_while_draining_leaves_the_finish_to_sync(
    tmp_path: Path, platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROCTOR_API_URL", platform.url)
    monkeypatch.setenv("PROCTOR_API_KEY", platform.api_key)
    run_dir = tmp_path / "run"
    run = runs.init(
        name="ctrl-c", environments=["alphabet-sort"], model="demo", config={}, run_dir=run_dir
    )
    records = [make_record(i, run_id=run.id) for i in range(3)]
    run.log_episodes(records)
    platform.process.kill()  # the platform is gone: the drain can only wait
    # Ctrl-C as Python sees it, also where the runner started us with SIGINT ignored.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(1.0, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run.finish(status="cancelled", error="interrupted", timeout=60)
    finally:
        timer.join()
        signal.signal(signal.SIGINT, previous)
    state = json.loads((run_dir / "platform" / run.id / "run.json").read_text())
    assert state["phase"] == "finish_pending"
    assert state["pending_finish"]["status"] == "cancelled"
    platform.process.start()
    wait_http(f"{platform.url}/healthz", proc=platform.process.proc, timeout=60)
    (report,) = runs.sync_run_dir(run_dir)
    assert (report.sent, report.pending, report.action) == (3, 0, "marked CANCELLED")
    record = get_evaluation(platform, run.id)
    assert (record["status"], record["error_message"]) == ("CANCELLED", "interrupted")
    assert len(all_samples(platform, run.id)) == 3


def test_bad_usage_is_one_line(tmp_path: Path) -> None:
    result = cli_in_process("runs", "sync", home=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "proctor runs: the following arguments are required: RUN_DIR; "
        "run `proctor runs sync --help` for the options."
    ]
