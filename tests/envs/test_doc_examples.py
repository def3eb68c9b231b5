"""The worked examples of docs/environments.md, run as written."""

from __future__ import annotations

import json
import shlex
import subprocess
import types
from pathlib import Path
from typing import Any

import pytest

from proctor.envs import Judge
from proctor.models import ClientConfig, OpenAIChatClient, SamplingConfig
from proctor.testing import ScriptedClient
from tests.support.procs import PROCTOR
from tests.test_docs import code_block

ENV_DOC = Path(__file__).resolve().parents[2] / "docs" / "environments.md"


def doc_module(containing: str) -> types.ModuleType:
    """The ```python block of the page that contains `containing`, imported as a module."""
    module = types.ModuleType("doc_example")
    source = code_block(ENV_DOC.read_text(), "python", containing)
    exec(compile(source, "docs/environments.md", "exec"), vars(module))
    return module


@pytest.mark.process  # the sandbox runs the code in a process of its own
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


@pytest.mark.e2e
async def test_the_judge_example_is_graded_by_the_demo_judge(demo_model: str) -> None:
    example = doc_module('"""capitals:')
    env = example.load_environment()
    env.judge = Judge(
        OpenAIChatClient(
            model="demo", client=ClientConfig(base_url=demo_model), sampling=SamplingConfig()
        )
    )
    task = env.taskset.select()[0]
    try:
        right, wrong = [
            await env.rollout(task, ScriptedClient([reply]), episode_id="j", rollout_number=1)
            for reply in ["It is Paris.", "It is Lyon."]
        ]
    finally:
        await env.judge.aclose()
    assert (right.reward, wrong.reward) == (1.0, 0.0)
    assert right.trajectory[0]["type"] == "judge"


@pytest.mark.e2e
def test_the_dataset_example_runs_as_documented(demo_model: str, tmp_path: Path) -> None:
    text = ENV_DOC.read_text()
    (tmp_path / "questions.jsonl").write_text(code_block(text, "jsonl", "worksheet"))
    command = next(
        line
        for line in code_block(text, "bash", "proctor eval dataset").splitlines()
        if line.startswith("proctor eval dataset")
    )
    argv = shlex.split(command)[2:]
    ran = subprocess.run(
        [*PROCTOR, "eval", *argv, "--no-rich", "--run.dir", "mine",
         "--client.base-url", demo_model],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    lines = (tmp_path / "outputs/mine/traces.jsonl").read_text().splitlines()
    records = sorted((json.loads(line) for line in lines), key=lambda r: r["example_id"])
    assert len(records) == 2 and all(r["ok"] for r in records)
    assert records[1]["task"]["answer"] == "\\frac{3}{4}"
    assert records[0]["task"]["info"] == {"source": "worksheet 3"}
