"""arithmetic: short word problems with a whole-number answer.

Single turn. Problems are generated deterministically from templates; the answer is read
from the reply (`Answer: N`, else `\\boxed{N}`, else the last number) and must match exactly.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass

from proctor.envs import SingleTurnEnv, Task, Taskset, reward
from proctor.envs.builtin import read_data_lines

INSTRUCTION = "Give your final answer as a whole number on the last line, as 'Answer: N'."


@dataclass(frozen=True)
class Template:
    """A word problem with `{name}`, `{a}`, `{b}`, `{c}` placeholders."""

    text: str
    make: Callable[[random.Random], dict[str, int]]
    """Draws the numbers for one problem."""
    solve: Callable[[dict[str, int]], int]
    """The answer, from the numbers."""


def _exact_division(rng: random.Random) -> dict[str, int]:
    b = rng.randint(2, 12)
    return {"a": b * rng.randint(2, 15), "b": b}


def _minuend_first(rng: random.Random) -> dict[str, int]:
    b = rng.randint(2, 60)
    return {"a": b + rng.randint(1, 80), "b": b}


def _change(rng: random.Random) -> dict[str, int]:
    a, b = rng.randint(2, 9), rng.randint(2, 12)
    return {"a": a, "b": b, "c": a * b + rng.randint(1, 40)}


def _rows_picked(rng: random.Random) -> dict[str, int]:
    a, b = rng.randint(2, 15), rng.randint(2, 15)
    return {"a": a, "b": b, "c": rng.randint(1, a * b - 1)}


TEMPLATES: list[Template] = [
    Template(
        "{name} has {a} apples and buys {b} more. How many apples does {name} have now?",
        lambda r: {"a": r.randint(2, 99), "b": r.randint(2, 99)},
        lambda v: v["a"] + v["b"],
    ),
    Template(
        "{name} had {a} marbles and gave {b} of them away. How many marbles are left?",
        _minuend_first,
        lambda v: v["a"] - v["b"],
    ),
    Template(
        "A box holds {a} pencils. How many pencils are there in {b} boxes?",
        lambda r: {"a": r.randint(3, 24), "b": r.randint(2, 19)},
        lambda v: v["a"] * v["b"],
    ),
    Template(
        "{name} shares {a} cookies equally among {b} friends. How many cookies does each "
        "friend get?",
        _exact_division,
        lambda v: v["a"] // v["b"],
    ),
    Template(
        "A train travels {a} km every hour for {b} hours, then {c} km more. How far does it "
        "travel in total, in km?",
        lambda r: {"a": r.randint(40, 120), "b": r.randint(2, 6), "c": r.randint(5, 90)},
        lambda v: v["a"] * v["b"] + v["c"],
    ),
    Template(
        "{name} buys {a} notebooks at {b} dollars each and pays with {c} dollars. How many "
        "dollars of change does {name} get?",
        _change,
        lambda v: v["c"] - v["a"] * v["b"],
    ),
    Template(
        "A garden has {a} rows of {b} tulips, and {c} tulips are picked. How many tulips remain?",
        _rows_picked,
        lambda v: v["a"] * v["b"] - v["c"],
    ),
    Template(
        "{name} reads {b} pages a day. How many days does {name} need to finish a book of "
        "{a} pages?",
        _exact_division,
        lambda v: v["a"] // v["b"],
    ),
]


def make_tasks(num_tasks: int, seed: int) -> list[Task]:
    """`num_tasks` problems cycling through the templates; deterministic in `seed`."""
    names = read_data_lines("first_names.txt")
    rng = random.Random(f"arithmetic:{seed}")
    tasks = []
    for index in range(num_tasks):
        template = TEMPLATES[index % len(TEMPLATES)]
        values = template.make(rng)
        question = template.text.format(name=rng.choice(names), **values)
        tasks.append(
            Task(
                index=index,
                prompt=f"{question}\n\n{INSTRUCTION}",
                answer=str(template.solve(values)),
                info={"template": index % len(TEMPLATES)},
            )
        )
    return tasks


_ANSWER = re.compile(r"answer\s*[:=]\s*\$?(-?[\d,]+(?:\.\d+)?)", re.IGNORECASE)
_BOXED = re.compile(r"\\boxed\{\s*(-?[\d,]+(?:\.\d+)?)\s*\}")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def parse_answer(text: str) -> str | None:
    """The number a reply gives as its answer, normalised (`1,200.0` -> `1200`), or None."""
    found = _ANSWER.findall(text) or _BOXED.findall(text) or _NUMBER.findall(text)
    if not found:
        return None
    number = found[-1].replace(",", "")
    if "." in number:
        number = number.rstrip("0").rstrip(".")
    return number or None


@reward(weight=1.0)
def exact_answer(response: str, answer: str) -> float:
    """1.0 when the parsed answer equals the reference answer, else 0.0."""
    return 1.0 if parse_answer(response) == answer else 0.0


def load_environment(*, num_tasks: int = 1000, seed: int = 0) -> SingleTurnEnv:
    """The arithmetic environment (`num_tasks` word problems)."""
    if num_tasks < 1:
        raise ValueError("num_tasks must be at least 1")
    return SingleTurnEnv(
        name="arithmetic",
        description="Word problems with a whole-number answer (exact match).",
        taskset=Taskset(make_tasks(num_tasks, seed)),
        rubric=[exact_answer],
    )
