"""Injected 429/500s from the demo model are retried: the run ends with no errored episode."""

from __future__ import annotations

from pathlib import Path

from tests.eval.helpers import read_traces, run_eval


def test_injected_errors_are_retried(flaky_model: str, tmp_path: Path) -> None:
    result = run_eval(
        "tool-calc", "-n", "20", "-c", "8", "--no-push", "-v", "-o", "out", "--run.name", "r",
        "--client.base-url", flaky_model, "--client.retry-base-delay", "0.01",
        "--client.max-retries", "8", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    records = read_traces(tmp_path / "out" / "r")
    assert len(records) == 20
    assert all(r["error"] is None for r in records), [r["error"] for r in records]
    log = (tmp_path / "out" / "r" / "logs" / "eval.log").read_text()
    assert "HTTP 429" in log and "HTTP 500" in log and "retrying" in log
    assert "error rate 0.0%" in result.stdout
