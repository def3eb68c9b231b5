"""The built-in environments' tasks and reward functions, without a model."""

from __future__ import annotations

from typing import Any

import pytest

from proctor.envs import load_environment
from proctor.envs.builtin import alphabet_sort, arithmetic, reverse_text, tool_calc


def _assistant(*contents: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for content in contents:
        messages += [{"role": "user", "content": "..."}, {"role": "assistant", "content": content}]
    return messages


def _alphabet_info(**kwargs: Any) -> dict[str, Any]:
    tasks = load_environment("alphabet-sort", **kwargs).taskset.select(20)
    return next(t.info for t in tasks if t.info["num_turns"] == 2)


def test_alphabet_sort_stream_is_seeded_and_shaped() -> None:
    env = load_environment("alphabet-sort")
    tasks = env.taskset.select(200)
    assert tasks == load_environment("alphabet-sort").taskset.select(200)
    assert [t.index for t in tasks] == list(range(200))
    assert tasks != load_environment("alphabet-sort", seed=1).taskset.select(200)
    assert {t.info["num_turns"] for t in tasks} == {1, 2, 3}
    for task in tasks:
        info = task.info
        assert len(info["user_turns"]) == len(info["ground_truths"]) == info["num_turns"]
        assert task.prompt == info["user_turns"][0]
        assert "<alphabetical_sorted>" in info["user_turns"][0]
        assert all("<combined_alphabetical_sorted>" in t for t in info["user_turns"][1:])
        first = info["ground_truths"][0].splitlines()
        assert 1 <= len(first) <= 5
        assert first == alphabet_sort.sort_names(first, info["sort_by"])
    two = next(t for t in tasks if t.info["num_turns"] >= 2).info
    assert "// new name!" in two["ground_truths"][1]


def test_alphabet_sort_names_are_sorted_by_first_or_last_name() -> None:
    names = ["Zoe Abe", "Adam Young", "Mia Lee"]
    assert alphabet_sort.sort_names(names, "FIRST") == ["Adam Young", "Mia Lee", "Zoe Abe"]
    assert alphabet_sort.sort_names(names, "LAST") == ["Zoe Abe", "Mia Lee", "Adam Young"]


def test_alphabet_sort_reward_perfect_wrong_and_missing() -> None:
    info = _alphabet_info()
    truths = info["ground_truths"]
    perfect = _assistant(
        f"<alphabetical_sorted>\n{truths[0]}\n</alphabetical_sorted>",
        f"Here:\n<combined_alphabetical_sorted>\n{truths[1].upper()}  \n"
        "</combined_alphabetical_sorted>",
    )
    assert alphabet_sort.alphabet_sort(messages=perfect, info=info) == 1.0

    reversed_lists = _assistant(
        "<alphabetical_sorted>\nnobody here\n</alphabetical_sorted>",
        "<combined_alphabetical_sorted>\n"
        + "\n".join(reversed(truths[1].splitlines()))
        + "\n</combined_alphabetical_sorted>",
    )
    assert alphabet_sort.alphabet_sort(messages=reversed_lists, info=info) < 0.5

    untagged = _assistant(truths[0], truths[1])
    assert alphabet_sort.alphabet_sort(messages=untagged, info=info) == 0.0
    wrong_tag = _assistant(f"<alphabetical_sorted>{truths[0]}</alphabetical_sorted>", truths[1])
    assert alphabet_sort.alphabet_sort(messages=wrong_tag, info=info) == 0.5
    one_turn_only = perfect[:2]
    assert alphabet_sort.alphabet_sort(messages=one_turn_only, info=info) == 0.5


def test_alphabet_sort_counts_several_blocks_only_when_they_improve() -> None:
    info = {"ground_truths": ["Ann Bo\nCy Do\nEd Fu"], "num_turns": 1}
    worse_then_right = _assistant(
        "<alphabetical_sorted>Ed Fu\nAnn Bo</alphabetical_sorted> no wait "
        "<alphabetical_sorted>Ann Bo\nCy Do\nEd Fu</alphabetical_sorted>"
    )
    assert alphabet_sort.alphabet_sort(messages=worse_then_right, info=info) == 1.0
    right_then_worse = _assistant(
        "<alphabetical_sorted>Ann Bo\nCy Do\nEd Fu</alphabetical_sorted>"
        "<alphabetical_sorted>Ed Fu</alphabetical_sorted>"
    )
    assert alphabet_sort.alphabet_sort(messages=right_then_worse, info=info) == 0.0
    swapped = _assistant("<alphabetical_sorted>Cy Do\nAnn Bo\nEd Fu</alphabetical_sorted>")
    score = alphabet_sort.alphabet_sort(messages=swapped, info=info)
    assert 0.1 < score < 0.9


@pytest.mark.parametrize("name", ["reverse-text", "arithmetic", "tool-calc"])
def test_finite_tasksets_are_deterministic_and_large(name: str) -> None:
    env = load_environment(name)
    assert not env.taskset.infinite and len(env.taskset) >= 1000
    tasks = env.taskset.select(None)
    assert tasks == load_environment(name).taskset.select(None)
    assert tasks != load_environment(name, seed=5).taskset.select(None)
    assert len({t.prompt for t in tasks}) > 900, "tasks should be (nearly all) distinct"
    assert len(load_environment(name, num_tasks=10).taskset) == 10


def test_reverse_text_reward() -> None:
    task = load_environment("reverse-text").taskset.select(1)[0]
    answer = task.answer
    assert answer[::-1] in (task.prompt or "")
    perfect = f"<reversed_text>\n{answer}\n</reversed_text>"
    assert reverse_text.reverse_similarity(response=perfect, answer=answer) == 1.0
    assert reverse_text.reverse_similarity(response=answer, answer=answer) == 1.0
    typo = answer[:5] + "#" + answer[6:]
    assert 0.9 < reverse_text.reverse_similarity(response=typo, answer=answer) < 1.0
    unreversed = f"<reversed_text>{answer[::-1]}</reversed_text>"
    assert reverse_text.reverse_similarity(response=unreversed, answer=answer) < 0.5


@pytest.mark.parametrize(
    ("reply", "parsed"),
    [
        ("So 3 + 4 = 7.\nAnswer: 7", "7"),
        ("first 12 then 30\nanswer = 1,200", "1200"),
        ("the result is \\boxed{42}", "42"),
        ("maybe 5, maybe 6", "6"),
        ("Answer: -3.0", "-3"),
        ("no idea", None),
    ],
)
def test_arithmetic_parses_the_answer(reply: str, parsed: str | None) -> None:
    assert arithmetic.parse_answer(reply) == parsed


def test_arithmetic_reward_and_answers_match_templates() -> None:
    tasks = load_environment("arithmetic").taskset.select(16)
    for task in tasks:
        template = arithmetic.TEMPLATES[task.info["template"]]
        assert int(task.answer) >= 0, template.text
        assert arithmetic.exact_answer(response=f"Answer: {task.answer}", answer=task.answer) == 1
        assert arithmetic.exact_answer(response="Answer: 99999", answer=task.answer) == 0


@pytest.mark.parametrize(
    ("expression", "value"),
    [("(3 + 4) * 12", "84"), ("2 ** 10 / 4", "256"), ("-7 // 2", "-4"), ("10 / 4", "2.5")],
)
def test_calculator_evaluates_arithmetic(expression: str, value: str) -> None:
    assert tool_calc.calculator(expression) == value


@pytest.mark.parametrize(
    "expression", ["__import__('os').system('true')", "x + 1", "2 ** 1000", "1 +", "True + 1"]
)
def test_calculator_refuses_anything_else(expression: str) -> None:
    with pytest.raises(ValueError):
        tool_calc.calculator(expression)


def test_tool_calc_reward_and_metric() -> None:
    task = load_environment("tool-calc").taskset.select(1)[0]
    assert task.answer == tool_calc.calculator(task.info["expression"])
    assert tool_calc.correct_answer(response=f"Answer: {task.answer}", answer=task.answer) == 1
    called = [{"role": "assistant", "tool_calls": [{"function": {"name": "calculator"}}]}]
    assert tool_calc.used_calculator(messages=called) == 1.0
    assert tool_calc.used_calculator(messages=[{"role": "assistant", "content": "4"}]) == 0.0
