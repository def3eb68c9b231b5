"""Every built-in environment end to end: `proctor eval` against the demo model over HTTP."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from proctor.stats import TIMES
from tests.eval.helpers import pairs, read_config, read_traces, run_eval


@pytest.mark.parametrize("env", ["reverse-text", "arithmetic", "tool-calc", "alphabet-sort"])
def test_env_runs_end_to_end(env: str, demo_model: str, tmp_path: Path) -> None:
    result = run_eval(
        env, "-n", "8", "-r", "2", "-c", "4", "--no-push", "-o", "out", "--run.name", "r1",
        "--client.base-url", demo_model, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    run_dir = tmp_path / "out" / "r1"
    records = read_traces(run_dir)
    assert sorted(pairs(records)) == [(i, k) for i in range(8) for k in (1, 2)]
    assert len({r["id"] for r in records}) == 16
    config = read_config(run_dir)
    assert config["env"] == env and config["num_examples"] == 8
    assert config["run"]["name"] == "r1" and config["run"]["id"]
    for record in records:
        assert record["error"] is None, record["error"]
        assert record["run"] == {"id": config["run"]["id"], "name": "r1"}
        assert record["messages"][-1]["role"] in ("assistant", "user")
        assert record["rewards"] and 0.0 <= record["reward"] <= 1.0
        assert record["token_usage"]["total_tokens"] > 0
        assert record["timing"]["duration_s"] >= 0
        assert record["task"]["index"] == record["example_id"]
    assert (run_dir / "logs" / "eval.log").read_text().strip()
    assert "run r1 completed: 16/16 episodes, mean reward " in result.stdout
    # The closing line's mean comes with its interval and shape, computed from the records.
    rewards = [r["reward"] for r in records]
    mean = f"{sum(rewards) / len(rewards):.3f}"
    assert re.search(
        rf"mean reward {mean}( ± \d\.\d{{3}} \(95% CI\)| \(95% CI \d\.\d{{3}} to \d\.\d{{3}}\)"
        rf"| \(no interval: [a-z ]+\))?, 8 examples {TIMES} 2 rollouts",
        result.stdout,
    ), result.stdout
    assert "error rate 0.0%" in result.stdout

    if env == "tool-calc":
        roles = {m["role"] for r in records for m in r["messages"]}
        assert "tool" in roles
        assert any(m.get("tool_calls") for r in records for m in r["messages"])
    if env == "alphabet-sort":
        # The scripted user sets the number of turns per task; the runner must play them all.
        assert all(r["num_turns"] == r["task"]["info"]["num_turns"] for r in records)
        assert any(r["num_turns"] > 1 for r in records)


def test_rewards_vary_across_tasks(demo_model: str, tmp_path: Path) -> None:
    result = run_eval(
        "arithmetic", "-n", "30", "--no-push", "-o", "out", "--run.name", "a",
        "--client.base-url", demo_model, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rewards = {r["reward"] for r in read_traces(tmp_path / "out" / "a")}
    assert rewards == {0.0, 1.0}


def test_default_run_name_and_output_dir(demo_model: str, tmp_path: Path) -> None:
    result = run_eval(
        "reverse-text", "-n", "2", "--no-push", "-m", "org/model-x",
        "--client.base-url", demo_model, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (run_dir,) = (tmp_path / "outputs").iterdir()
    env, model, short_id = run_dir.name.split("--")
    assert (env, model, len(short_id)) == ("reverse-text", "org_model-x", 8)
    assert f"results: {run_dir}\n" in result.stdout  # absolute: one the user can open
