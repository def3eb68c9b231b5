"""CodeEnv: the model's code runs sandboxed, the output comes back, the trajectory keeps it."""

from __future__ import annotations

from typing import Any

import pytest

from proctor.envs import CodeEnv, Sandbox, SandboxLimits, Task, Taskset, extract_code, reward
from proctor.envs._code import executions
from proctor.testing import ScriptedClient

pytestmark = pytest.mark.process  # the code runs in a sandbox process


@reward
def printed_answer(episode: Any, answer: str) -> float:
    runs = executions(episode)
    return 1.0 if runs and runs[-1]["stdout"].strip() == answer else 0.0


def make_env(max_code_turns: int = 3) -> CodeEnv:
    return CodeEnv(
        name="code-test",
        taskset=Taskset([Task(index=0, prompt="Print 6 * 7 with Python.", answer="42")]),
        rubric=[printed_answer],
        sandbox=Sandbox(SandboxLimits(timeout_s=5.0), max_concurrent=1),
        max_code_turns=max_code_turns,
    )


async def test_code_runs_and_its_output_is_the_next_user_message() -> None:
    env = make_env()
    client = ScriptedClient(
        ["Let me try:\n```python\nprint(6 * 7)\n```", "It printed 42, so the answer is 42."]
    )
    episode = await env.rollout(env.taskset.select()[0], client, episode_id="c1", rollout_number=1)
    assert episode.ok and episode.stop_condition == "completed"
    assert episode.reward == 1.0
    (run,) = episode.trajectory
    assert run["type"] == "sandbox" and run["stdout"] == "42\n" and run["exit_code"] == 0
    assert run["turn"] == 1
    feedback = episode.messages[-2]
    assert feedback["role"] == "user" and "exit code 0" in feedback["content"]
    assert "42" in feedback["content"]


async def test_errors_and_timeouts_are_told_to_the_model() -> None:
    env = CodeEnv(
        name="code-test",
        taskset=Taskset([Task(index=0, prompt="p", answer="1")]),
        sandbox=Sandbox(SandboxLimits(timeout_s=1.0, cpu_s=5), max_concurrent=1),
    )
    client = ScriptedClient(
        ["```python\n1/0\n```", "```python\nimport time; time.sleep(30)\n```", "done"]
    )
    episode = await env.rollout(env.taskset.select()[0], client, episode_id="c2", rollout_number=1)
    first, second = episode.trajectory
    assert "ZeroDivisionError" in first["stderr"] and first["exit_code"] == 1
    assert second["timed_out"] is True and second["exit_code"] is None
    assert "timed out" in episode.messages[-2]["content"]


async def test_max_code_turns_cuts_the_conversation() -> None:
    env = make_env(max_code_turns=2)
    client = ScriptedClient(lambda messages, tools: "```python\nprint(1)\n```")
    episode = await env.rollout(env.taskset.select()[0], client, episode_id="c3", rollout_number=1)
    assert episode.stop_condition == "max_turns" and episode.is_truncated
    assert len(episode.trajectory) == 2 and episode.num_turns == 3


def test_extract_code() -> None:
    text = "a\n```py\nx = 1\n```\nthen\n```python\nprint(x)\n```\n```js\nno()\n```"
    assert extract_code(text) == "print(x)\n"
    assert extract_code(text, "js") == "no()\n"
    assert extract_code("no code here") is None
