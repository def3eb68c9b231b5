"""Reward functions and metrics: decorators, argument passing, weights, failures."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proctor.envs import Episode, SingleTurnEnv, Task, Taskset, extract_tag, metric, reward
from proctor.testing import ScriptedClient


@reward(weight=2.0)
def says_yes(response: str) -> float:
    return 1.0 if "yes" in response else 0.0


@reward(weight=0.5, name="matches")
async def matches_answer(response: str, answer: str) -> float:
    return 1.0 if response.strip() == answer else 0.0


@metric
def reply_length(completion: list[dict[str, Any]], prompt: list[dict[str, Any]]) -> float:
    assert [m["role"] for m in prompt] == ["user"]
    return float(sum(len(m.get("content") or "") for m in completion))


@reward
def broken(info: dict[str, Any]) -> float:
    return float(info["missing"])


def _env(*rubric: Any) -> SingleTurnEnv:
    return SingleTurnEnv(
        name="t", taskset=Taskset([Task(index=0, prompt="q", answer="yes")]), rubric=rubric
    )


async def _run(env: SingleTurnEnv, reply: str) -> Episode:
    task = env.taskset.select(1)[0]
    return await env.rollout(task, ScriptedClient([reply]), episode_id="e1", rollout_number=1)


async def test_reward_is_the_weighted_sum_and_every_raw_score_is_recorded() -> None:
    episode = await _run(_env(says_yes, matches_answer, reply_length), "yes")
    assert episode.rewards == {"says_yes": 1.0, "matches": 1.0}
    assert episode.metrics == {"reply_length": 3.0}
    assert episode.reward == pytest.approx(2.5)
    assert episode.ok and episode.error is None

    miss = await _run(_env(says_yes, matches_answer, reply_length), "no")
    assert miss.rewards == {"says_yes": 0.0, "matches": 0.0}
    assert miss.reward == 0.0


async def test_a_failing_reward_scores_none_and_marks_the_episode() -> None:
    episode = await _run(_env(says_yes, broken), "yes")
    assert episode.rewards == {"says_yes": 1.0, "broken": None}
    assert episode.reward == pytest.approx(2.0), "failed functions count 0 in the sum"
    assert not episode.ok
    assert episode.error is not None
    assert episode.error["type"] == "KeyError"
    assert episode.error["stage"] == "scoring"
    assert "broken" in episode.error["message"]
    assert episode.stop_condition == "completed"
    json.dumps(episode.to_record())


def test_plain_functions_count_as_rewards_and_bad_arguments_are_refused() -> None:
    def plain(answer: str) -> float:
        return 1.0

    env = _env(plain)
    assert env.rubric[0].kind == "reward" and env.rubric[0].weight == 1.0
    with pytest.raises(TypeError, match="may only take"):

        @reward
        def wants_unknown(foo: str) -> float:
            return 0.0

    with pytest.raises(ValueError, match="same name"):
        _env(says_yes, says_yes)


def test_decorated_functions_stay_callable() -> None:
    assert says_yes(response="oh yes") == 1.0
    assert says_yes.name == "says_yes" and says_yes.weight == 2.0
    assert reply_length.kind == "metric"


def test_extract_tag_takes_the_last_block() -> None:
    assert extract_tag("<a> one </a> and <a>\ntwo\n</a>", "a") == "two"
    assert extract_tag("no tags here", "a") is None
