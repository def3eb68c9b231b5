"""Conversation drivers with an in-test client: turns, stop conditions, failures as data."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from proctor.envs import Environment, Episode, MultiTurnEnv, SingleTurnEnv, Task, Taskset, reward
from proctor.errors import ModelError
from proctor.testing import HangingClient, ScriptedClient


@reward
def echoed(response: str, answer: str) -> float:
    return 1.0 if answer in response else 0.0


def _task() -> Task:
    return Task(index=4, prompt="say ok", answer="ok")


async def _rollout(env: Environment, client: Any) -> Episode:
    return await env.rollout(_task(), client, episode_id="ep-9", rollout_number=3)


async def test_single_turn_records_the_whole_episode() -> None:
    env = SingleTurnEnv(
        name="single", taskset=Taskset([_task()]), rubric=[echoed], system_prompt="sys"
    )
    episode = await _rollout(env, ScriptedClient(["ok then"]))
    assert episode.id == "ep-9" and episode.env == "single"
    assert episode.example_id == 4 and episode.rollout_number == 3
    assert [m["role"] for m in episode.messages] == ["system", "user", "assistant"]
    assert episode.reward == 1.0 and episode.rewards == {"echoed": 1.0}
    assert episode.stop_condition == "completed" and episode.is_completed
    assert not episode.is_truncated and episode.num_turns == 1
    assert episode.token_usage == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    timing = episode.timing
    assert timing["end"] >= timing["start"]
    assert timing["duration_s"] >= timing["scoring_s"] >= 0
    assert timing["model_s"] == pytest.approx(0.01)
    assert episode.task["prompt"] == "say ok"


async def test_length_finish_marks_truncation() -> None:
    env = SingleTurnEnv(name="single", taskset=Taskset([_task()]), rubric=[echoed])
    episode = await _rollout(env, ScriptedClient(["o"], finish_reason="length"))
    assert episode.is_truncated


async def test_model_error_is_recorded_not_raised_and_not_scored() -> None:
    env = SingleTurnEnv(name="single", taskset=Taskset([_task()]), rubric=[echoed])
    client = ScriptedClient([ModelError("the endpoint said 503 after 5 retries", status_code=503)])
    episode = await _rollout(env, client)
    assert episode.error == {
        "type": "ModelError",
        "message": "the endpoint said 503 after 5 retries",
        "status_code": 503,
    }
    assert episode.stop_condition == "model_error"
    assert not episode.ok and not episode.is_completed
    assert episode.rewards == {"echoed": None} and episode.reward == 0.0


async def test_a_bug_in_a_driver_fails_the_rollout_not_the_caller() -> None:
    class Broken(Environment):
        async def converse(self, task: Task, client: Any, episode: Episode) -> None:
            raise RuntimeError("driver bug")

    episode = await _rollout(Broken(name="broken", taskset=Taskset([_task()])), ScriptedClient([]))
    assert episode.stop_condition == "env_error"
    assert episode.error is not None and episode.error["message"] == "driver bug"


async def test_cancellation_propagates() -> None:
    env = SingleTurnEnv(name="single", taskset=Taskset([_task()]))
    rollout = asyncio.create_task(_rollout(env, HangingClient()))
    await asyncio.sleep(0.01)
    rollout.cancel()
    with pytest.raises(asyncio.CancelledError):
        await rollout


def _countdown_user(messages: list[dict[str, Any]], task: Task) -> str | None:
    answered = sum(m["role"] == "assistant" for m in messages)
    return None if answered >= task.info["turns"] else f"again ({answered})"


async def test_multi_turn_alternates_with_the_scripted_user_until_it_stops() -> None:
    task = Task(index=0, prompt="start", info={"turns": 3})
    env = MultiTurnEnv(name="multi", taskset=Taskset([task]), user=_countdown_user, max_turns=5)
    client = ScriptedClient(["a1", "a2", "a3"])
    episode = await env.rollout(task, client, episode_id="e", rollout_number=1)
    roles = [m["role"] for m in episode.messages]
    assert roles == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert episode.messages[2]["content"] == "again (1)"
    assert episode.num_turns == 3 and episode.stop_condition == "completed"
    assert episode.is_completed and not episode.is_truncated
    assert len(client.requests[2][0]) == 5, "each request carries the conversation so far"


async def test_multi_turn_stops_at_max_turns_and_accepts_an_async_user() -> None:
    async def user(messages: list[dict[str, Any]], task: Task) -> dict[str, Any]:
        return {"role": "user", "content": "more"}

    task = Task(index=0, prompt="start")
    env = MultiTurnEnv(name="multi", taskset=Taskset([task]), user=user, max_turns=2)
    episode = await env.rollout(task, ScriptedClient(["x", "y"]), episode_id="e", rollout_number=1)
    assert episode.num_turns == 2
    assert episode.stop_condition == "max_turns" and episode.is_truncated
    assert not episode.is_completed
    assert episode.messages[-1]["role"] == "assistant"
