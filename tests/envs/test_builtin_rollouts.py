"""Each built-in environment against the real demo model over HTTP."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from proctor.envs import Episode, load_environment
from tests.envs.chat import OpenAIAdapter

pytestmark = pytest.mark.e2e


@pytest.fixture
async def client(demo_model: str) -> AsyncIterator[OpenAIAdapter]:
    adapter = OpenAIAdapter(demo_model)
    yield adapter
    await adapter.close()


async def _rollouts(name: str, client: OpenAIAdapter, n: int) -> list[Episode]:
    env = load_environment(name)
    tasks = env.taskset.select(n)
    episodes = await asyncio.gather(
        *(
            env.rollout(task, client, episode_id=f"{name}-{task.index}", rollout_number=1)
            for task in tasks
        )
    )
    for episode in episodes:
        assert episode.ok, episode.error
        assert episode.stop_condition == "completed"
        json.dumps(episode.to_record())
    return list(episodes)


def _assert_rewards_vary(episodes: list[Episode]) -> list[float]:
    rewards = [e.reward for e in episodes]
    assert all(0.0 <= r <= 1.0 for r in rewards)
    assert len(set(rewards)) > 1, "the demo model should make some mistakes"
    assert sum(rewards) / len(rewards) > 0.5, "the demo model should mostly be right"
    return rewards


async def test_alphabet_sort(client: OpenAIAdapter) -> None:
    episodes = await _rollouts("alphabet-sort", client, 40)
    _assert_rewards_vary(episodes)
    assert any(e.reward == 1.0 for e in episodes)
    for episode in episodes:
        assert episode.num_turns == episode.task["info"]["num_turns"]
        assert set(episode.rewards) == {"alphabet_sort"}
        assert episode.token_usage["total_tokens"] > 0


async def test_reverse_text(client: OpenAIAdapter) -> None:
    _assert_rewards_vary(await _rollouts("reverse-text", client, 40))


async def test_arithmetic(client: OpenAIAdapter) -> None:
    rewards = _assert_rewards_vary(await _rollouts("arithmetic", client, 60))
    assert set(rewards) == {0.0, 1.0}


async def test_tool_calc_calls_the_calculator(client: OpenAIAdapter) -> None:
    episodes = await _rollouts("tool-calc", client, 40)
    _assert_rewards_vary(episodes)
    called = [e for e in episodes if e.metrics["used_calculator"] == 1.0]
    assert len(called) > len(episodes) / 2
    for episode in called:
        roles = [m["role"] for m in episode.messages]
        assert roles == ["user", "assistant", "tool", "assistant"]
        assert episode.messages[1]["tool_calls"][0]["function"]["name"] == "calculator"
        assert episode.messages[2]["content"] == episode.task["answer"]
        assert episode.metrics["tool_calls"] == 1 and episode.metrics["tool_errors"] == 0


async def test_greedy_reruns_are_reproducible(demo_model: str) -> None:
    greedy = OpenAIAdapter(demo_model, temperature=0)
    first = [e.reward for e in await _rollouts("alphabet-sort", greedy, 10)]
    again = [e.reward for e in await _rollouts("alphabet-sort", greedy, 10)]
    assert first == again


async def test_rollouts_of_one_task_get_one_answer(client: OpenAIAdapter) -> None:
    # The demo model's answer is a pure function of its seed and the conversation, so two
    # runners (or two rollouts) sending the same prompt get the same answer.
    env = load_environment("reverse-text")
    task = env.taskset.select(1)[0]
    episodes = [
        await env.rollout(task, client, episode_id=f"r{i}", rollout_number=i) for i in range(1, 7)
    ]
    assert len({e.messages[-1]["content"] for e in episodes}) == 1
