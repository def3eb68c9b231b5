"""A judge model as a reward, against the real demo model over HTTP."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from proctor.envs import (
    Judge,
    SingleTurnEnv,
    Task,
    Taskset,
    judge_reward,
    load_environment,
    parse_grade,
)
from proctor.models import ClientConfig, Completion, OpenAIChatClient, SamplingConfig
from proctor.testing import ScriptedClient
from tests.support.procs import PROCTOR, ManagedProcess, free_port, wait_http

QUESTION = "What is six times seven?"


def judge_client(base_url: str, *, retries: int = 0) -> OpenAIChatClient:
    return OpenAIChatClient(
        model="demo-judge",
        client=ClientConfig(base_url=base_url, max_retries=retries, retry_base_delay=0.0),
        sampling=SamplingConfig(temperature=0.0),
    )


@pytest.fixture
async def judge(demo_model: str) -> AsyncIterator[Judge]:
    the_judge = Judge(judge_client(demo_model), model="demo-judge")
    yield the_judge
    await the_judge.aclose()


def make_env(template: str | None = None) -> SingleTurnEnv:
    reward = judge_reward(template) if template else judge_reward()
    return SingleTurnEnv(
        name="judged",
        taskset=Taskset([Task(index=0, prompt=QUESTION, answer="42")]),
        rubric=[reward],
    )


async def rollout(env: SingleTurnEnv, reply: str) -> Any:
    task = env.taskset.select()[0]
    return await env.rollout(task, ScriptedClient([reply]), episode_id="j", rollout_number=1)


def test_parse_grade() -> None:
    assert parse_grade("Looks right.\nGRADE: C") == 1.0
    assert parse_grade("grade: p") == 0.5
    assert parse_grade("GRADE: C at first, but no.\nGRADE: **I**") == 0.0
    with pytest.raises(ValueError, match="no 'GRADE"):
        parse_grade("I think it is fine.")


@pytest.mark.e2e
async def test_the_judge_grades_and_its_call_is_on_the_trajectory(judge: Judge) -> None:
    env = make_env()
    env.judge = judge
    assert env.wants_judge
    right = await rollout(env, "Six times seven is 42.")
    wrong = await rollout(env, "It is 48.")
    assert right.ok and right.rewards == {"judge": 1.0} and right.reward == 1.0
    assert wrong.ok and wrong.rewards == {"judge": 0.0}
    (event,) = right.trajectory
    assert event["type"] == "judge" and event["name"] == "judge"
    assert event["model"] == "demo-judge"
    assert QUESTION in event["prompt"] and "Six times seven is 42." in event["prompt"]
    assert "[Reference answer]\n42" in event["prompt"]
    assert event["reply"].endswith("GRADE: C") and event["score"] == 1.0
    assert event["latency_s"] > 0
    json.dumps(right.to_record())


@pytest.mark.e2e
async def test_a_custom_template_and_parser(judge: Judge) -> None:
    # The demo judge only knows the default prompt: any other gets its greeting, which
    # this parser scores by length, to show any reply-to-number function works.
    reward = judge_reward("Rate: {response}", parse=lambda text: len(text) / 1000, name="rated")
    env = SingleTurnEnv(
        name="t", taskset=Taskset([Task(index=0, prompt="q", answer="a")]), rubric=[reward]
    )
    env.judge = judge
    episode = await rollout(env, "an answer")
    assert episode.ok and 0 < episode.rewards["rated"] < 1
    assert episode.trajectory[0]["prompt"] == "Rate: an answer"


@pytest.mark.e2e
async def test_a_reply_without_a_grade_is_a_scoring_error(judge: Judge) -> None:
    env = make_env("Say hello. {response}")
    env.judge = judge
    episode = await rollout(env, "42")
    assert episode.rewards == {"judge": None} and episode.reward == 0.0
    assert episode.error is not None
    assert episode.error["stage"] == "scoring" and episode.error["type"] == "JudgeError"
    assert "holds no score" in episode.error["message"]
    assert episode.trajectory[0]["score"] is None and episode.trajectory[0]["reply"]


async def test_an_unreachable_judge_is_a_scoring_error_not_a_crash() -> None:
    env = make_env()
    env.judge = Judge(judge_client(f"http://127.0.0.1:{free_port()}/v1", retries=1))
    try:
        episode = await rollout(env, "42")
    finally:
        await env.judge.aclose()
    assert episode.error is not None and episode.error["stage"] == "scoring"
    assert "the judge model failed" in episode.error["message"]
    assert episode.messages[-1]["content"] == "42"  # the rollout itself is kept
    (event,) = episode.trajectory
    assert event["reply"] is None and "model request failed" in event["error"]


async def test_without_a_judge_the_reward_says_how_to_configure_one() -> None:
    episode = await rollout(make_env(), "42")
    assert episode.error is not None and episode.error["stage"] == "scoring"
    assert "--judge.model" in episode.error["message"]


@pytest.fixture(scope="module")
def slow_demo_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log = tmp_path_factory.mktemp("slow-demo") / "demo.log"
    args = [*PROCTOR, "demo-model", "--port", str(port), "--latency-ms", "100"]
    proc = ManagedProcess(args, log).start()
    try:
        wait_http(f"http://127.0.0.1:{port}/v1/models", proc=proc.proc)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.stop()


class CountingClient:
    """Passes requests to the real client and records how many were in flight at once."""

    def __init__(self, inner: OpenAIChatClient) -> None:
        self.inner = inner
        self.in_flight = self.peak = 0

    async def complete(self, messages: Any, *, tools: Any = None) -> Completion:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            return await self.inner.complete(messages, tools=tools)
        finally:
            self.in_flight -= 1


@pytest.mark.e2e
async def test_judge_concurrency_is_bounded(slow_demo_model: str) -> None:
    counting = CountingClient(judge_client(slow_demo_model))
    env = make_env()
    env.judge = Judge(counting, max_concurrent=3)
    task = env.taskset.select()[0]
    episodes = await asyncio.gather(
        *(
            env.rollout(task, ScriptedClient(["42"]), episode_id=f"c{i}", rollout_number=i + 1)
            for i in range(12)
        )
    )
    await counting.inner.aclose()
    assert all(e.rewards == {"judge": 1.0} for e in episodes)
    assert counting.peak == 3


@pytest.mark.e2e
def test_eval_with_a_judge_reward_on_your_own_data(demo_model: str, tmp_path: Path) -> None:
    # Questions the demo model answers (arithmetic), graded by the demo model as the judge.
    tasks = load_environment("arithmetic").taskset.select(10)
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps({"q": t.prompt, "a": t.answer}) + "\n" for t in tasks))
    args = {"path": str(data), "prompt": "q", "answer": "a", "reward": "judge"}
    out = tmp_path / "out"
    ran = subprocess.run(
        [
            *PROCTOR,
            "eval",
            "dataset",
            "--env-args",
            json.dumps(args),
            "-r",
            "2",
            "--no-push",
            "--no-rich",
            "-o",
            str(out),
            "--run.dir",
            "judged",
            "--client.base-url",
            demo_model,
            "--judge.base-url",
            demo_model,
            "--judge.model",
            "demo-judge",
            "--judge.max-concurrent",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    lines = (out / "judged" / "traces.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) == 20 and all(r["ok"] for r in records)
    scores = [r["rewards"]["judge"] for r in records]
    assert set(scores) == {0.0, 1.0} and sum(scores) / len(scores) > 0.5
    for record in records:
        (event,) = record["trajectory"]
        assert event["model"] == "demo-judge" and event["score"] == record["reward"]
