"""The demo model's scripted policies, called directly."""

from __future__ import annotations

import random
from typing import Any

from proctor.demo import respond
from proctor.demo.policy import GENERIC_REPLY, solve_word_problem
from proctor.envs import load_environment
from proctor.envs.builtin import alphabet_sort, arithmetic

CALCULATOR = load_environment("tool-calc", num_tasks=1).tool_schemas


def _user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def test_unknown_conversations_get_the_generic_reply() -> None:
    message, finish = respond(_user("What is the capital of France?"), None, random.Random(0))
    assert message == {"role": "assistant", "content": GENERIC_REPLY}
    assert finish == "stop"
    assert respond([], None, random.Random(0))[0]["content"] == GENERIC_REPLY


def test_replies_are_deterministic_in_the_generator() -> None:
    prompt = _user(load_environment("reverse-text").taskset.select(1)[0].prompt or "")
    replies = {respond(prompt, None, random.Random(7))[0]["content"] for _ in range(5)}
    assert len(replies) == 1
    varied = {respond(prompt, None, random.Random(seed))[0]["content"] for seed in range(50)}
    assert len(varied) > 1


def test_every_arithmetic_task_is_recognised_and_solved() -> None:
    for task in load_environment("arithmetic").taskset.select(None):
        assert str(solve_word_problem(task.prompt or "")) == task.answer, task.prompt


def test_arithmetic_policy_is_mostly_right() -> None:
    tasks = load_environment("arithmetic").taskset.select(200)
    rng = random.Random(3)
    right = sum(
        arithmetic.exact_answer(
            response=respond(_user(t.prompt or ""), None, rng)[0]["content"], answer=t.answer
        )
        for t in tasks
    )
    assert 0.65 * len(tasks) < right < 0.95 * len(tasks)


def test_alphabet_sort_policy_follows_the_conversation() -> None:
    task = next(
        t for t in load_environment("alphabet-sort").taskset.select(50) if t.info["num_turns"] == 3
    )
    scores = []
    for seed in range(30):
        rng = random.Random(seed)
        messages: list[dict[str, Any]] = []
        for turn in task.info["user_turns"]:
            messages.append({"role": "user", "content": turn})
            messages.append(respond(messages, None, rng)[0])
        scores.append(alphabet_sort.alphabet_sort(messages=messages, info=task.info))
    assert max(scores) == 1.0
    assert min(scores) < 1.0


def test_tool_calc_policy_calls_the_tool_then_answers_from_it() -> None:
    task = load_environment("tool-calc").taskset.select(1)[0]
    messages = _user(task.prompt or "")
    calls = 0
    for seed in range(20):
        message, finish = respond(messages, CALCULATOR, random.Random(seed))
        if finish == "tool_calls":
            calls += 1
            call = message["tool_calls"][0]
            assert call["function"]["name"] == "calculator"
            assert task.info["expression"] in call["function"]["arguments"]
    assert calls >= 15
    after_tool = [
        *messages,
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": {}}]},
        {"role": "tool", "tool_call_id": "c", "content": "1234"},
    ]
    answers = {respond(after_tool, CALCULATOR, random.Random(s))[0]["content"] for s in range(40)}
    assert "The calculator returned 1234.\nAnswer: 1234" in answers
    assert len(answers) > 1, "sometimes it misreads the tool's result"
