"""math: 225 short math problems whose answers are checked as mathematics (math-verify).

Single turn. The problems ship in `data/math.jsonl` (made by `scripts/make_math_data.py`,
answers computed with sympy): fractions, linear and quadratic equations, radicals,
percentages, areas with units, circles, powers and polynomial expansion. The model puts its
final answer in `\\boxed{}`; the reward `math_answer` compares it with the reference as
mathematics, so `0.5`, `1/2` and `\\dfrac{2}{4}` all count as `\\frac{1}{2}`. Each row also
lists `equivalent` forms of its answer (in the task's info), which the tests check
math-verify accepts.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib.resources import files
from typing import Any

from proctor.envs import SingleTurnEnv, Task, Taskset, math_answer

INSTRUCTION = "Put your final answer in \\boxed{}."


@lru_cache(maxsize=1)
def read_problems() -> tuple[dict[str, Any], ...]:
    """The shipped problems: `problem`, `answer`, `topic`, `equivalent`."""
    text = files("proctor.envs.builtin").joinpath("data", "math.jsonl").read_text("utf-8")
    return tuple(json.loads(line) for line in text.splitlines() if line.strip())


def make_tasks(topics: list[str] | None = None) -> list[Task]:
    """One task per problem (of the given topics, or all), in file order."""
    rows = [r for r in read_problems() if topics is None or r["topic"] in topics]
    return [
        Task(
            index=index,
            prompt=f"{row['problem']}\n\n{INSTRUCTION}",
            answer=row["answer"],
            info={"topic": row["topic"], "equivalent": row["equivalent"]},
        )
        for index, row in enumerate(rows)
    ]


def load_environment(*, topics: list[str] | None = None) -> SingleTurnEnv:
    """The math environment; `topics` keeps only those (e.g. `["fractions", "radicals"]`)."""
    if topics is not None:
        known = sorted({r["topic"] for r in read_problems()})
        unknown = sorted(set(topics) - set(known))
        if unknown:
            raise ValueError(f"unknown topics {', '.join(unknown)}; pick from {', '.join(known)}")
    return SingleTurnEnv(
        name="math",
        description="Short math problems, answers checked as mathematics (math-verify).",
        taskset=Taskset(make_tasks(topics)),
        rubric=[math_answer],
    )
