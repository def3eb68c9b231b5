"""Statistics of the evaluation page: histogram edges and pass@k on odd reward ranges."""

from __future__ import annotations

import pytest

from proctor.server.web.histograms import HISTOGRAM_BUCKETS
from tests.web.conftest import Web, tool_sample


def test_histogram_spans_rewards_outside_zero_one_and_skips_missing(web: Web) -> None:
    api = web.api
    key = api.key("carol", user="carol")
    evaluation = api.create(key, name="wide")
    samples = [
        tool_sample(0, 1, -1.0),
        tool_sample(0, 2, 0.5),
        tool_sample(1, 1, 2.0),
        tool_sample(1, 2, 2.0),
        {**tool_sample(2, 1, 0.0), "reward": None},
    ]
    assert api.post(f"/evaluations/{evaluation}/samples", key, json={"samples": samples}).is_success
    web.login(key)
    data = web.client.get(f"/evaluations/{evaluation}?format=json").json()
    bars = data["histogram"]
    assert len(bars) == HISTOGRAM_BUCKETS
    assert bars[0]["low"] == -1.0 and bars[-1]["high"] == 2.0
    assert [b["count"] for b in bars if b["count"]] == [1, 1, 2]  # -1, 0.5, and 2.0 twice
    assert bars[-1]["count"] == 2  # the maximum falls in the last, closed bar
    examples = data["examples"]
    # Example 2's only rollout has no reward: it is not an example with rollouts.
    assert examples["examples"] == 2 and examples["max_rollouts"] == 2
    assert examples["mean_per_example"] == pytest.approx((-0.25 + 2.0) / 2)
    # The default pass mark is 1.0, never the best reward reached (2.0 here).
    assert data["stats"]["pass_threshold"] == 1.0
    assert data["stats"]["pass_threshold_source"] == "default"
    pass_at = {row["k"]: row["value"] for row in data["stats"]["pass_at_k"]}
    assert pass_at == {1: pytest.approx(0.5), 2: pytest.approx(0.5)}
    sorted_low = web.client.get(f"/evaluations/{evaluation}/samples?sort=reward&format=json")
    assert [s["reward"] for s in sorted_low.json()["table"]["samples"]] == [-1.0, 0.5, 2.0, 2.0]
