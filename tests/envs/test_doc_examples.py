"""The worked examples of docs/environments.md, run as written."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

from tests.envs.chat import ScriptedClient
from tests.test_docs import code_block

ENV_DOC = Path(__file__).resolve().parents[2] / "docs" / "environments.md"


def doc_module(containing: str) -> types.ModuleType:
    """The ```python block of the page that contains `containing`, imported as a module."""
    module = types.ModuleType("doc_example")
    source = code_block(ENV_DOC.read_text(), "python", containing)
    exec(compile(source, "docs/environments.md", "exec"), vars(module))
    return module


async def test_the_code_env_example_runs_code_and_rewards_its_output() -> None:
    example = doc_module('"""fizzbuzz:')
    env = example.load_environment()
    task = env.taskset.select()[0]
    right = "```python\nfor i in range(1, 16):\n    print('FizzBuzz' if i % 15 == 0 else 'Fizz' if i % 3 == 0 else 'Buzz' if i % 5 == 0 else i)\n```"  # noqa: E501
    wrong = "```python\nfor i in range(1, 16):\n    print(i)\n```"

    async def run(replies: list[Any]) -> Any:
        return await env.rollout(task, ScriptedClient(replies), episode_id="d", rollout_number=1)

    good = await run([right, "That is the output."])
    assert good.ok and good.reward == 1.0
    assert good.trajectory[0]["stdout"].splitlines()[-1] == "FizzBuzz"
    bad = await run([wrong, "Done."])
    assert bad.ok and bad.reward == 0.0


async def test_the_math_example_accepts_any_notation_of_the_answer() -> None:
    example = doc_module('"""unit-fractions:')
    env = example.load_environment()
    task = env.taskset.select()[0]  # 1/2 + 1/3 = 5/6
    assert task.answer == "\\frac{5}{6}"
    for reply, expected in [
        ("It is \\boxed{\\frac{10}{12}}.", 1.0),
        ("1/2 + 1/3 = 5/6", 1.0),
        ("\\boxed{0.8333}", 0.0),
        ("\\boxed{\\frac{2}{5}}", 0.0),
    ]:
        episode = await env.rollout(task, ScriptedClient([reply]), episode_id="u", rollout_number=1)
        assert episode.ok and episode.reward == expected, reply
