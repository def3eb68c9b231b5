"""alphabet-sort: sort names, then keep re-sorting as a scripted user adds more.

Turn 1 asks to sort a few names by FIRST or LAST name inside `<alphabetical_sorted>` tags;
each later turn adds names and asks to re-sort all of them inside
`<combined_alphabetical_sorted>`, marking the new ones with `// new name!`. The taskset is
an infinite seeded stream (runs pass `-n`); names combine shipped first- and last-name lists.
"""

from __future__ import annotations

import difflib
import itertools
import random
import re
from collections.abc import Iterator
from typing import Any

from proctor.envs import MultiTurnEnv, Task, Taskset, reward
from proctor.envs.builtin import read_data_lines

FIRST_TAG = "alphabetical_sorted"
COMBINED_TAG = "combined_alphabetical_sorted"
NEW_MARK = "// new name!"


def _format_names(names: list[str]) -> str:
    return ", ".join(names)


def first_prompt(names: list[str], sort_by: str) -> str:
    """The opening user message."""
    return (
        f"Sort these names in alphabetical order by {sort_by} name: {_format_names(names)}\n\n"
        f"Use exactly this format:\n<{FIRST_TAG}>\nName One\nName Two\n</{FIRST_TAG}>"
    )


def follow_up_prompt(names: list[str], sort_by: str) -> str:
    """A later user message: new names to merge into the sorted list."""
    return (
        f"Now sort ALL of the names so far (the earlier ones and these new ones) "
        f"by {sort_by} name. New names: {_format_names(names)}\n\n"
        f"Mark each new name with {NEW_MARK} and use exactly this format:\n"
        f"<{COMBINED_TAG}>\nName One\nName Two {NEW_MARK}\n</{COMBINED_TAG}>"
    )


def sort_names(names: list[str], sort_by: str) -> list[str]:
    """Names sorted case-insensitively by first name (FIRST) or last name (LAST)."""
    if sort_by == "LAST":
        return sorted(names, key=lambda n: (n.split()[-1].lower(), n.lower()))
    return sorted(names, key=str.lower)


def make_task(
    index: int,
    *,
    seed: int,
    first_names: list[str],
    last_names: list[str],
    min_turns: int,
    max_turns: int,
    min_names_per_turn: int,
    max_names_per_turn: int,
) -> Task:
    """Task number `index` of the stream (depends only on `seed` and `index`)."""
    rng = random.Random(f"alphabet-sort:{seed}:{index}")
    num_turns = rng.randint(min_turns, max_turns)
    counts = [rng.randint(min_names_per_turn, max_names_per_turn) for _ in range(num_turns)]
    chosen: dict[str, None] = {}
    while len(chosen) < sum(counts):
        chosen[f"{rng.choice(first_names)} {rng.choice(last_names)}"] = None
    names = list(chosen)
    sort_by = rng.choice(["FIRST", "LAST"])
    user_turns: list[str] = []
    ground_truths: list[str] = []
    seen: list[str] = []
    for turn, count in enumerate(counts):
        new = names[len(seen) : len(seen) + count]
        seen += new
        if turn == 0:
            user_turns.append(first_prompt(new, sort_by))
            ground_truths.append("\n".join(sort_names(seen, sort_by)))
        else:
            user_turns.append(follow_up_prompt(new, sort_by))
            marked = [f"{n} {NEW_MARK}" if n in new else n for n in sort_names(seen, sort_by)]
            ground_truths.append("\n".join(marked))
    return Task(
        index=index,
        prompt=user_turns[0],
        answer=None,
        info={
            "user_turns": user_turns,
            "ground_truths": ground_truths,
            "num_turns": num_turns,
            "sort_by": sort_by,
        },
    )


def scripted_user(messages: list[dict[str, Any]], task: Task) -> str | None:
    """Replays the task's pre-generated turns; None once every turn has been answered."""
    answered = sum(1 for m in messages if m.get("role") == "assistant")
    turns: list[str] = task.info["user_turns"]
    return turns[answered] if answered < len(turns) else None


_SPACES = re.compile(r"[ \t]+")


def _normalize(block: str) -> str:
    lines = (_SPACES.sub(" ", line.strip()) for line in block.strip().lower().splitlines())
    return "\n".join(line for line in lines if line)


def _turn_score(text: str, tag: str, truth: str, power: float) -> float:
    blocks = re.findall(rf"<{tag}>(.*?)</{tag}>", text, re.DOTALL)
    if not blocks:
        return 0.0
    expected = _normalize(truth)
    ratios = []
    for block in blocks:
        got = _normalize(block)
        ratios.append(
            1.0 if got == expected else difflib.SequenceMatcher(None, got, expected).ratio()
        )
    # Several blocks count only when each improves on the one before (a visible correction).
    if any(b <= a for a, b in itertools.pairwise(ratios)):
        return 0.0
    return float(ratios[-1] ** power)


@reward(weight=1.0)
def alphabet_sort(messages: list[dict[str, Any]], info: dict[str, Any]) -> float:
    """Mean over turns of (similarity of the tagged list to the truth) ** 4; missing = 0."""
    replies = [m.get("content") or "" for m in messages if m.get("role") == "assistant"]
    truths: list[str] = info["ground_truths"]
    total = 0.0
    for turn, truth in enumerate(truths):
        if turn < len(replies):
            tag = FIRST_TAG if turn == 0 else COMBINED_TAG
            total += _turn_score(replies[turn], tag, truth, 4.0)
    return total / len(truths)


def load_environment(
    *,
    seed: int = 1337420,
    min_turns: int = 1,
    max_turns: int = 3,
    min_names_per_turn: int = 1,
    max_names_per_turn: int = 5,
) -> MultiTurnEnv:
    """The alphabet-sort environment (an infinite seeded stream of tasks)."""
    if not 1 <= min_turns <= max_turns:
        raise ValueError("need 1 <= min_turns <= max_turns")
    if not 1 <= min_names_per_turn <= max_names_per_turn:
        raise ValueError("need 1 <= min_names_per_turn <= max_names_per_turn")
    first_names = read_data_lines("first_names.txt")
    last_names = read_data_lines("last_names.txt")

    def stream() -> Iterator[Task]:
        for index in itertools.count():
            yield make_task(
                index,
                seed=seed,
                first_names=first_names,
                last_names=last_names,
                min_turns=min_turns,
                max_turns=max_turns,
                min_names_per_turn=min_names_per_turn,
                max_names_per_turn=max_names_per_turn,
            )

    return MultiTurnEnv(
        name="alphabet-sort",
        description="Sort names by first or last name over 1-3 turns as a user adds more.",
        taskset=Taskset.stream(stream),
        rubric=[alphabet_sort],
        user=scripted_user,
        max_turns=max_turns,
    )
