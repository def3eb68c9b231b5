"""`--shard I/N`: the slices of N shards are disjoint and together the unsharded run."""

from __future__ import annotations

import pytest

from proctor.envs import load_environment
from proctor.eval.config import EvalConfig
from proctor.eval.shards import pairs_of_other_shards


@pytest.mark.parametrize("count", [1, 2, 3, 7, 40])
def test_the_shards_partition_the_plan(count: int) -> None:
    tasks = load_environment("reverse-text").taskset.select(6)
    everything = {(t.index, k) for t in tasks for k in range(1, 4)}
    slices = []
    for index in range(count):
        config = EvalConfig(
            env="reverse-text",
            rollouts_per_example=3,
            shard=f"{index}/{count}",
            run={"attach": "e"},
        )
        slices.append(everything - pairs_of_other_shards(tasks, config))
    assert set().union(*slices) == everything
    assert sum(len(s) for s in slices) == len(everything)
    # Round robin: no shard is more than one pair larger than another.
    assert max(map(len, slices)) - min(map(len, slices)) <= 1


def test_no_shard_runs_everything() -> None:
    tasks = load_environment("reverse-text").taskset.select(3)
    assert pairs_of_other_shards(tasks, EvalConfig(env="reverse-text")) == set()
