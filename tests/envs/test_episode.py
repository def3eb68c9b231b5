"""Episodes: the record form is JSON-ready, stable and round-trips."""

from __future__ import annotations

import json

from proctor.envs import Episode

KEYS = {
    "id",
    "env",
    "example_id",
    "rollout_number",
    "task",
    "messages",
    "trajectory",
    "rewards",
    "metrics",
    "reward",
    "timing",
    "token_usage",
    "error",
    "stop_condition",
    "is_completed",
    "is_truncated",
    "num_turns",
    "run",
    "ok",
}


def test_record_round_trip_through_json() -> None:
    episode = Episode(
        id="ep-1",
        env="arithmetic",
        example_id=7,
        rollout_number=2,
        task={"index": 7, "prompt": "1+1?", "answer": "2", "info": {}},
        messages=[{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"}],
        rewards={"exact_answer": 1.0},
        metrics={"m": None},
        reward=1.0,
        timing={"start": 1.0, "end": 2.0, "duration_s": 1.0, "model_s": 0.5, "scoring_s": 0.0},
        stop_condition="completed",
        is_completed=True,
        num_turns=1,
    )
    record = episode.to_record()
    assert set(record) == KEYS
    assert record["ok"] is True
    assert record["token_usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    again = Episode.from_record(json.loads(json.dumps(record)))
    assert again == episode


def test_an_error_makes_the_episode_not_ok() -> None:
    episode = Episode(id="e", env="x", example_id=0, rollout_number=1, task={"index": 0})
    episode.error = {"type": "ModelError", "message": "boom", "status_code": 500}
    assert not episode.ok
    assert episode.to_record()["ok"] is False
    assert Episode.from_record(episode.to_record()).error == episode.error
