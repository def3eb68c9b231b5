"""Episode record → platform sample, and the summary metrics."""

from __future__ import annotations

import json
import math

from proctor.projection import encode_sample
from proctor.runs import project_sample, summarize
from tests.runs.support import make_record


def test_sample_carries_the_contract_fields() -> None:
    record = make_record(4, rollout=2)
    sample = project_sample(record)
    assert sample["sample_id"] == sample["episode_id"] == record["id"]
    assert (sample["example_id"], sample["rollout_number"]) == (4, 2)
    assert sample["task"] == record["task"] and sample["answer"] == "Amy, Bob, Zed"
    assert sample["prompt"] == record["messages"][:2]
    assert sample["completion"] == record["messages"][2:]
    assert sample["info"] == {"n": 3}
    for key in ("reward", "metrics", "timing", "token_usage", "is_completed", "is_truncated"):
        assert sample[key] == record[key]
    assert sample["error"] is None and sample["stop_condition"] == "completed"
    assert sample["alphabet_sort"] == 1.0


def test_task_messages_are_the_prompt() -> None:
    record = make_record(0)
    record["task"] = {"index": 0, "messages": record["messages"][:2], "answer": None, "info": {}}
    sample = project_sample(record)
    assert sample["prompt"] == record["messages"][:2]
    assert sample["completion"] == record["messages"][2:]


def test_reward_scores_never_overwrite_sample_fields() -> None:
    record = make_record(0)
    record["rewards"] = {"reward": 0.1, "answer": 0.2, "exact": 1.0, "skipped": None}
    sample = project_sample(record)
    assert sample["reward"] == record["reward"] and sample["answer"] == "Amy, Bob, Zed"
    assert sample["exact"] == 1.0 and "skipped" not in sample


def test_non_finite_numbers_become_null() -> None:
    record = make_record(0)
    record["metrics"] = {"a": math.nan, "b": -math.inf, "c": 2.0}
    record["reward"] = math.inf
    encoded = json.loads(encode_sample(project_sample(record)))
    assert encoded["metrics"] == {"a": None, "b": None, "c": 2.0}
    assert encoded["reward"] is None
    text = make_record(1)
    text["messages"][-1]["content"] = "NaN and Infinity are words here"
    assert json.loads(encode_sample(project_sample(text)))["completion"][0]["content"] == (
        "NaN and Infinity are words here"
    )


def test_summary_averages_rewards_metrics_and_errors() -> None:
    records = [make_record(0, reward=1.0), make_record(1, reward=0.0)]
    records[1]["error"] = {"type": "ModelError", "message": "down"}
    records[1]["ok"] = False
    records[1]["rewards"] = {"alphabet_sort": None}
    records[0]["metrics"] = {"num_names": 3.0, "alphabet_sort": 0.5}  # a metric wins
    summary = summarize(records)
    assert summary == {
        "avg_reward": 0.5,
        "avg_metrics": {"alphabet_sort": 0.5, "num_names": 3.0},
        "avg_error": 0.5,
    }
    assert summarize([]) == {"avg_reward": 0.0, "avg_metrics": {}, "avg_error": 0.0}


def test_lone_surrogate_halves_are_mended_not_dropped() -> None:
    # What a model cut mid-emoji returns: the platform refuses it, so the SDK sends U+FFFD.
    record = make_record(0, reward=1.0)
    record["messages"][-1]["content"] = "cut \ud83d"
    line = encode_sample(project_sample(record))
    sample = json.loads(line)
    assert sample["completion"][-1]["content"] == "cut \ufffd"
    assert sample["reward"] == 1.0
    assert json.loads(encode_sample({"ok": "\U0001f600"})) == {"ok": "\U0001f600"}
