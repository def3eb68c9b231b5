"""humaneval: the package's 164 problems, graded by their real unit tests in the sandbox."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from proctor.envs import Episode, Task, load_environment
from proctor.envs.builtin import humaneval
from proctor.testing import ScriptedClient
from tests.support.procs import PROCTOR

# Scoring runs the reply's code in the sandbox, a process of its own.
pytestmark = pytest.mark.process


@pytest.fixture(scope="module")
def env() -> Any:
    return load_environment("humaneval")


async def _grade(env: Any, replies: dict[int, str]) -> dict[int, Episode]:
    tasks: dict[int, Task] = {t.index: t for t in env.taskset.select()}

    async def one(index: int, reply: str) -> tuple[int, Episode]:
        client = ScriptedClient([reply])
        episode = await env.rollout(
            tasks[index], client, episode_id=f"he-{index}", rollout_number=1
        )
        return index, episode

    return dict(await asyncio.gather(*(one(i, r) for i, r in replies.items())))


def test_reads_all_164_problems_from_the_package(env: Any) -> None:
    tasks = env.taskset.select()
    assert len(tasks) == 164
    assert tasks[0].info["task_id"] == "HumanEval/0"
    assert tasks[163].info["task_id"] == "HumanEval/163"
    assert tasks[0].prompt.startswith(humaneval.INSTRUCTION)


async def test_every_canonical_solution_passes(env: Any) -> None:
    problems = humaneval.read_problems()
    replies = {
        i: f"```python\n{p['prompt']}{p['canonical_solution']}```" for i, p in enumerate(problems)
    }
    episodes = await _grade(env, replies)
    failed = {i: e.trajectory for i, e in episodes.items() if e.rewards["passed"] != 1.0}
    assert failed == {}
    for episode in episodes.values():
        assert episode.ok
        (run,) = episode.trajectory
        assert run["type"] == "sandbox" and run["exit_code"] == 0


async def test_wrong_solutions_fail(env: Any) -> None:
    problems = humaneval.read_problems()
    broken = {
        i: f"```python\n{problems[i]['prompt']}    return None\n```" for i in range(0, 164, 8)
    }
    broken[1] = "I don't know."  # no code at all
    broken[2] = f"```python\n{problems[2]['prompt']}    return (\n```"  # a syntax error
    episodes = await _grade(env, broken)
    assert {i: e.rewards["passed"] for i, e in episodes.items()} == dict.fromkeys(broken, 0.0)
    assert all(e.ok for e in episodes.values())  # a failing solution is a verdict, not an error
    assert "SyntaxError" in episodes[2].trajectory[0]["stderr"]


async def test_a_bare_body_continues_the_prompt(env: Any) -> None:
    problem = humaneval.read_problems()[0]
    episodes = await _grade(env, {0: problem["canonical_solution"]})
    assert episodes[0].rewards["passed"] == 1.0


async def test_a_solution_that_hangs_is_stopped_and_fails() -> None:
    env = load_environment("humaneval", timeout_s=2.0)
    problem = humaneval.read_problems()[0]
    episodes = await _grade(env, {0: f"```python\n{problem['prompt']}    while True: pass\n```"})
    (run,) = episodes[0].trajectory
    assert episodes[0].rewards["passed"] == 0.0
    assert run["timed_out"] or run["exit_code"] == 137


@pytest.mark.e2e
def test_humaneval_end_to_end_against_the_demo_model(demo_model: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    ran = subprocess.run(
        [
            *PROCTOR,
            "eval",
            "humaneval",
            "-n",
            "12",
            "-r",
            "3",
            "--no-push",
            "--no-rich",
            "-o",
            str(out),
            "--run.dir",
            "he",
            "--client.base-url",
            demo_model,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    records = [json.loads(line) for line in (out / "he" / "traces.jsonl").read_text().splitlines()]
    assert len(records) == 36 and all(r["ok"] for r in records)
    rewards = [r["rewards"]["passed"] for r in records]
    assert set(rewards) == {0.0, 1.0}, "the demo model is mostly right, with seeded mistakes"
    assert sum(rewards) / len(rewards) > 0.6
    for record in records:
        (run,) = record["trajectory"]
        assert run["type"] == "sandbox"
        assert (run["exit_code"] == 0) == (record["reward"] == 1.0)
    # pass@k needs several rollouts of one problem: every problem has 3.
    per_problem: dict[int, int] = {}
    for record in records:
        per_problem[record["example_id"]] = per_problem.get(record["example_id"], 0) + 1
    assert set(per_problem.values()) == {3}
