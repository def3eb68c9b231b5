"""Pushing to a real platform server: episodes land as samples, a resume re-logs kept ones."""

from __future__ import annotations

from pathlib import Path

from tests.eval.helpers import read_config, read_traces, run_eval
from tests.support.platform import Platform


def samples(platform: Platform, evaluation_id: str) -> list[dict[str, object]]:
    with platform.client() as client:
        r = client.get(f"/evaluations/{evaluation_id}/samples", params={"limit": 100})
        r.raise_for_status()
        body = r.json()
    assert body["total"] == len(body["samples"])
    return list(body["samples"])


def test_resume_relogs_kept_episodes_to_the_new_evaluation(
    platform: Platform, demo_model: str, tmp_path: Path
) -> None:
    args = ["arithmetic", "-n", "4", "-r", "2", "-o", "out", "--run.name", "r",
            "--client.base-url", demo_model]  # fmt: skip
    first = run_eval(*args, "--no-push", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    run_dir = tmp_path / "out" / "r"
    # Lose three episodes, as a crash before their lines were written would.
    lines = (run_dir / "traces.jsonl").read_text().splitlines(keepends=True)
    (run_dir / "traces.jsonl").write_text("".join(lines[:5]))

    env = {"PROCTOR_API_URL": platform.url, "PROCTOR_API_KEY": platform.api_key,
           "HOME": str(tmp_path / "home")}  # fmt: skip
    resumed = run_eval(*args, "--resume", "--push", cwd=tmp_path, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert "3 episodes to run, 5 kept" in resumed.stderr
    evaluation_id = read_config(run_dir)["run"]["id"]
    assert f"evaluation: {platform.url}" in resumed.stdout
    records = read_traces(run_dir)
    assert len(records) == 8
    stored = samples(platform, evaluation_id)
    assert sorted(str(s["sample_id"]) for s in stored) == sorted(r["id"] for r in records)
