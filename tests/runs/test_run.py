"""`init()` and `Run`: settings, create/attach, finish rules, counters, crash at exit."""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from proctor import runs
from proctor.errors import ConfigError, PlatformError
from tests.runs.support import (
    all_samples,
    create_launcher_evaluation,
    get_evaluation,
    make_record,
)
from tests.support.platform import Platform

ENVS = ["alphabet-sort"]


def _init(tmp_path: Path, **kwargs: object) -> runs.Run:
    options: dict[str, object] = {
        "name": "sdk-test",
        "environments": ENVS,
        "model": "demo",
        "config": {"num_examples": 3, "rollouts_per_example": 1},
        "run_dir": tmp_path / "run",
        **kwargs,
    }
    return runs.init(**options)  # type: ignore[arg-type]


def test_created_run_uploads_summarizes_and_finalizes(tmp_path: Path, online: Platform) -> None:
    run = _init(tmp_path)
    records = [
        make_record(0, run_id=run.id, reward=1.0),
        make_record(1, run_id=run.id, reward=0.5),
        make_record(2, run_id=run.id, reward=0.0, error={"type": "ModelError", "message": "x"}),
    ]
    run.log_episodes(records[:1])
    run.log_episodes(records[1:])
    run.finish()
    counters = run.counters
    assert (counters.logged, counters.spooled, counters.sent, counters.pending) == (3, 3, 3, 0)
    assert counters.errors == 0
    record = get_evaluation(online, run.id)
    assert record["status"] in ("PROCESSING", "COMPLETED")
    assert record["metadata"] == {"num_examples": 3, "rollouts_per_example": 1}
    metrics = record["metrics"]
    assert isinstance(metrics, dict)
    assert metrics["avg_reward"] == pytest.approx(0.5)
    assert metrics["avg_error"] == pytest.approx(1 / 3)
    assert metrics["avg_metrics"] == {"alphabet_sort": pytest.approx(0.5), "num_names": 3.0}
    stored = {s["sample_id"]: s for s in all_samples(online, run.id)}
    assert set(stored) == {r["id"] for r in records}
    sample = stored[records[1]["id"]]
    assert sample["alphabet_sort"] == 0.5 and sample["episode_id"] == records[1]["id"]
    assert sample["prompt"][-1]["role"] == "user"
    assert sample["completion"] == [records[1]["messages"][-1]]
    # A clean finish leaves no spool behind, only the run's description.
    spool = tmp_path / "run" / "platform" / run.id
    assert not (spool / "spool.jsonl").exists()
    assert json.loads((spool / "run.json").read_text())["phase"] == "finished"


def test_caller_summary_keys_are_merged(tmp_path: Path, online: Platform) -> None:
    run = _init(tmp_path)
    run.log_episodes([make_record(0, run_id=run.id, reward=0.25)])
    run.finish(summary={"wall_s": 1.5})
    metrics = get_evaluation(online, run.id)["metrics"]
    assert metrics == {
        "avg_reward": 0.25,
        "avg_metrics": {"alphabet_sort": 0.25, "num_names": 3.0},
        "avg_error": 0.0,
        "wall_s": 1.5,
    }


@pytest.mark.parametrize(("status", "wire"), [("failed", "FAILED"), ("cancelled", "CANCELLED")])
def test_created_run_that_fails_is_closed_with_its_reason(
    tmp_path: Path, online: Platform, status: str, wire: str
) -> None:
    run = _init(tmp_path)
    run.log_episodes([make_record(0, run_id=run.id)])
    run.finish(status=status, error="RuntimeError: boom")  # type: ignore[arg-type]
    record = get_evaluation(online, run.id)
    assert record["status"] == wire
    assert record["error_message"] == "RuntimeError: boom"
    assert record["total_samples"] == 1 or len(all_samples(online, run.id)) == 1


def test_attached_run_never_touches_metadata(tmp_path: Path, online: Platform) -> None:
    eid = create_launcher_evaluation(online, launcher="hosted-smoke", n=[1, 2])
    before = get_evaluation(online, eid)["metadata"]
    run = _init(tmp_path, id=eid)
    run.log_episodes([make_record(0, run_id=eid), make_record(1, run_id=eid)])
    run.finish()
    record = get_evaluation(online, eid)
    assert record["metadata"] == before == {"launcher": "hosted-smoke", "n": [1, 2]}
    assert record["status"] in ("PROCESSING", "COMPLETED")
    assert record["total_samples"] == 2


def test_attached_run_that_fails_leaves_the_status_to_the_launcher(
    tmp_path: Path, online: Platform
) -> None:
    eid = create_launcher_evaluation(online, launcher="x")
    run = _init(tmp_path, id=eid)
    run.log_episodes([make_record(0, run_id=eid, reward=0.5)])
    run.finish(status="failed", error="RuntimeError: boom")
    record = get_evaluation(online, eid)
    assert record["status"] == "RUNNING"
    assert record["metadata"] == {"launcher": "x"}
    assert record["metrics"]["avg_reward"] == 0.5  # type: ignore[index]
    assert len(all_samples(online, eid)) == 1


def test_a_run_cancelled_before_its_finalize_is_refused_and_not_left_for_a_sync(
    tmp_path: Path, online: Platform
) -> None:
    run = _init(tmp_path)
    run.log_episodes([make_record(0, run_id=run.id, reward=1.0)])
    with online.client() as http:
        assert http.put(f"/evaluations/{run.id}", json={"status": "CANCELLED"}).is_success
    run.finish()
    assert run.refused is not None and f"evaluation {run.id}" in run.refused
    record = get_evaluation(online, run.id)
    assert record["status"] == "CANCELLED" and record["metrics"] == {}
    state = json.loads((tmp_path / "run" / "platform" / run.id / "run.json").read_text())
    assert state["phase"] == "finished" and state["pending_finish"] is None


def test_no_key_gives_a_disabled_run_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="proctor"):
        run = _init(tmp_path)
    assert run.disabled and run.id.startswith("local-") and run.url is None
    assert "PROCTOR_API_KEY" in caplog.text
    run.log_episodes([make_record(0)])
    run.finish()
    assert run.counters.logged == 0
    assert not (tmp_path / "run").exists()


def test_online_mode_without_key_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="set PROCTOR_API_KEY"):
        _init(tmp_path, mode="online")


def test_settings_come_from_the_config_file(
    tmp_path: Path, plat: Platform, client_env: Path
) -> None:
    (client_env / ".proctor").mkdir()
    (client_env / ".proctor" / "config.toml").write_text(
        f'api_url = "{plat.url}/api/v1"\napi_key = "{plat.api_key}"\n'
    )
    run = _init(tmp_path)
    assert not run.disabled
    run.finish()
    assert get_evaluation(plat, run.id)["name"] == "sdk-test"


def test_logging_after_finish_is_refused(tmp_path: Path, online: Platform) -> None:
    run = _init(tmp_path)
    run.finish()
    run.finish()  # idempotent
    with pytest.raises(PlatformError, match="finished"):
        run.log_episodes([make_record(0)])


def test_non_finite_numbers_arrive_as_null(tmp_path: Path, online: Platform) -> None:
    run = _init(tmp_path)
    record = make_record(0, run_id=run.id)
    record["metrics"] = {"ratio": math.nan, "big": math.inf}
    run.log_episodes([record])
    run.finish()
    (sample,) = all_samples(online, run.id)
    assert sample["metrics"] == {"ratio": None, "big": None}


def test_backpressure_spools_instead_of_dropping(tmp_path: Path, online: Platform) -> None:
    # A 2-call queue: most calls overflow to the producer's own spool appends. Full batches of
    # 500 go out at once; the last 10 records wait (30 s interval) until finish() drains them.
    # None may be lost or sent twice.
    options = runs.UploaderOptions(queue_size=2, batch_interval=30.0, max_batch_samples=500)
    run = _init(tmp_path, upload=options)
    records = [make_record(i, run_id=run.id) for i in range(2010)]
    for record in records:
        run.log_episodes([record])
    assert run.counters.logged == 2010
    assert run.counters.sent <= 2000
    run.finish()
    assert run.counters.sent == 2010 and run.counters.pending == 0
    ids = [s["sample_id"] for s in all_samples(online, run.id)]
    assert sorted(ids) == sorted(r["id"] for r in records)


def test_a_process_that_exits_without_finishing_marks_its_run_crashed(
    tmp_path: Path, online: Platform
) -> None:
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from proctor import runs
        from tests.runs.support import make_record
        run = runs.init(name="crash", environments=["alphabet-sort"], model="demo",
                        config={{}}, run_dir=Path({str(tmp_path / "run")!r}))
        run.log_episodes([make_record(i, run_id=run.id) for i in range(5)])
        print(run.id)
        raise SystemExit(3)  # leaves without run.finish()
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=Path.cwd()
    )
    assert proc.returncode == 3, proc.stderr
    eid = proc.stdout.strip()
    record = get_evaluation(online, eid)
    assert record["status"] == "FAILED"
    assert str(record["error_message"]).startswith("crashed: ")
    assert len(all_samples(online, eid)) == 5  # drained before closing


def test_a_sample_the_platform_refuses_is_set_aside_and_the_rest_arrive(
    tmp_path: Path, online: Platform
) -> None:
    run = _init(tmp_path)
    records = [make_record(i, run_id=run.id) for i in range(6)]
    records[3]["example_id"] = "not-an-integer"
    run.log_episodes(records)
    run.finish()
    assert (run.counters.sent, run.counters.rejected) == (5, 1)
    stored = sorted(s["sample_id"] for s in all_samples(online, run.id))
    assert stored == sorted(r["id"] for i, r in enumerate(records) if i != 3)
    rejected = (tmp_path / "run" / "platform" / run.id / "rejected.jsonl").read_text()
    assert json.loads(rejected)["sample_id"] == records[3]["id"]
    assert get_evaluation(online, run.id)["status"] in ("PROCESSING", "COMPLETED")


def test_an_evaluation_closed_by_its_launcher_mid_run_ends_the_uploads_quietly(
    tmp_path: Path, online: Platform, caplog: pytest.LogCaptureFixture
) -> None:
    eid = create_launcher_evaluation(online, launcher="x")
    run = _init(tmp_path, id=eid)
    run.log_episodes([make_record(0, run_id=eid)])
    with online.client() as c:
        c.put(f"/evaluations/{eid}", json={"status": "CANCELLED"}).raise_for_status()
    with caplog.at_level(logging.WARNING, logger="proctor"):
        run.finish(timeout=30)
    assert "was closed on the platform" in caplog.text
    assert "proctor runs sync" not in caplog.text
    record = get_evaluation(online, eid)
    assert record["status"] == "CANCELLED" and record["metadata"] == {"launcher": "x"}


def test_a_malformed_record_is_counted_and_the_rest_still_arrive(
    tmp_path: Path, online: Platform
) -> None:
    run = _init(tmp_path)
    good = make_record(0, run_id=run.id)
    run.log_episodes([{"no": "id"}, good])  # type: ignore[list-item]
    run.finish()
    assert run.counters.errors == 1 and "could not be turned into a sample" in str(
        run.counters.last_error
    )
    assert [s["sample_id"] for s in all_samples(online, run.id)] == [good["id"]]


def test_a_forked_child_leaves_the_parents_run_alone(tmp_path: Path, online: Platform) -> None:
    run = _init(tmp_path)
    run.log_episodes([make_record(0, run_id=run.id)])
    pid = os.fork()
    if pid == 0:  # the child logs, finishes and exits normally: none of it may reach the run
        try:
            run.log_episodes([make_record(1, run_id=run.id)])
            run.finish(status="failed", error="child")
        finally:
            os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    run.log_episodes([make_record(2, run_id=run.id)])
    run.finish()
    record = get_evaluation(online, run.id)
    assert record["status"] in ("PROCESSING", "COMPLETED") and record["total_samples"] == 2
