"""Stopping a run: Ctrl-C keeps what finished (exit 130); a killed run resumes without gaps."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.eval.helpers import (
    eval_process,
    pairs,
    read_config,
    read_traces,
    run_eval,
    wait_for_lines,
)


def test_ctrl_c_keeps_results_and_exits_130(slow_model: str, tmp_path: Path) -> None:
    proc = eval_process(
        "reverse-text", "-n", "200", "-c", "4", "--no-push", "--no-rich", "-o", "out",
        "--run.name", "r", "--client.base-url", slow_model, cwd=tmp_path,
    )  # fmt: skip
    traces = tmp_path / "out" / "r" / "traces.jsonl"
    try:
        wait_for_lines(traces, 4)
        proc.signal(signal.SIGINT)
        assert proc.proc is not None
        assert proc.proc.wait(timeout=15) == 130, proc.output()
    finally:
        proc.stop()
    records = read_traces(tmp_path / "out" / "r")
    assert 4 <= len(records) < 200
    assert len(set(pairs(records))) == len(records)
    output = proc.output()
    assert "run r cancelled" in output
    assert "interrupted; finished episodes kept in" in output
    assert "Traceback" not in output
    assert read_config(tmp_path / "out" / "r")["run"]["id"]


def test_resume_after_kill_runs_only_what_is_missing(
    slow_model: str, demo_model: str, tmp_path: Path
) -> None:
    args = ["reverse-text", "-n", "30", "-r", "2", "--no-push", "--no-rich", "-o", "out",
            "--run.name", "r"]  # fmt: skip
    proc = eval_process(*args, "-c", "4", "--client.base-url", slow_model, cwd=tmp_path)
    run_dir = tmp_path / "out" / "r"
    try:
        wait_for_lines(run_dir / "traces.jsonl", 6)
        proc.kill()  # SIGKILL: no chance to clean up, as in a crash
    finally:
        proc.stop()
    before = read_traces(run_dir)
    first_run_id = read_config(run_dir)["run"]["id"]
    assert 6 <= len(before) < 60

    # The endpoint may move between runs; only what the results depend on must match.
    result = run_eval(*args, "-c", "16", "--resume", "--client.base-url", demo_model, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    after = read_traces(run_dir)
    assert sorted(pairs(after)) == [(i, k) for i in range(30) for k in (1, 2)]
    assert len({r["id"] for r in after}) == 60
    kept_ids = {r["id"] for r in before}
    assert kept_ids <= {r["id"] for r in after}  # finished episodes were not re-run
    new_run_id = read_config(run_dir)["run"]["id"]
    assert all(r["run"] == {"id": new_run_id, "name": "r"} for r in after)
    assert new_run_id == first_run_id  # a local run keeps its id across --resume
    assert f"{60 - len(before)} episodes to run, {len(before)} kept" in result.stderr
    assert "run r completed: 60/60 episodes" in result.stdout


def test_resume_reruns_errored_episodes(broken_model: str, demo_model: str, tmp_path: Path) -> None:
    args = ["arithmetic", "-n", "5", "--no-push", "-o", "out", "--run.name", "r"]
    failing = run_eval(
        *args, "--client.base-url", broken_model, "--client.max-retries", "1",
        "--client.retry-base-delay", "0.01", cwd=tmp_path,
    )  # fmt: skip
    # A failed rollout is data, recorded; but a run where every one failed measured nothing:
    # it fails (exit 1) with the first error's message.
    assert failing.returncode == 1, failing.stderr
    assert "error rate 100.0% (5)" in failing.stdout
    assert "proctor eval: the run failed: every episode failed; the first: model request" in (
        failing.stderr
    )
    assert "Traceback" not in failing.stderr
    records = read_traces(tmp_path / "out" / "r")
    assert len(records) == 5
    for record in records:
        assert record["error"]["type"] == "ModelError"
        assert record["error"]["status_code"] in (429, 500)
        assert "after 2 attempts" in record["error"]["message"]

    resumed = run_eval(*args, "--resume", "--client.base-url", demo_model, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    records = read_traces(tmp_path / "out" / "r")
    assert sorted(pairs(records)) == [(i, 1) for i in range(5)]
    assert all(r["error"] is None for r in records)


def test_resume_by_run_dir_keeps_the_run_name(demo_model: str, tmp_path: Path) -> None:
    args = ["reverse-text", "-n", "3", "--no-push", "--run.dir", "rt", "--client.base-url"]
    first = run_eval(*args, demo_model, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    run_dir = tmp_path / "outputs" / "rt"
    name = read_config(run_dir)["run"]["name"]
    assert name.startswith("reverse-text--demo--")
    lines = (run_dir / "traces.jsonl").read_text().splitlines(keepends=True)
    (run_dir / "traces.jsonl").write_text("".join(lines[:1]))

    resumed = run_eval(*args, demo_model, "--resume", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert f"run {name} completed: 3/3 episodes" in resumed.stdout
    assert {r["run"]["name"] for r in read_traces(run_dir)} == {name}
