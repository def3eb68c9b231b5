"""reverse-text: reverse a short passage character by character.

Single turn. Passages are built deterministically from a shipped word list; the reward is
the similarity (difflib's longest-matching-blocks ratio) between the reply inside
`<reversed_text>` tags and the exact reversal.
"""

from __future__ import annotations

import difflib
import random

from proctor.envs import SingleTurnEnv, Task, Taskset, extract_tag, reward
from proctor.envs.builtin import read_data_lines

TAG = "reversed_text"
INSTRUCTION = (
    f"Reverse the following text character by character, and put the result inside <{TAG}> tags:"
)


def make_passage(rng: random.Random, words: list[str]) -> str:
    """One or two short sentences of random words."""
    sentences = []
    for _ in range(rng.randint(1, 2)):
        sentence = " ".join(rng.choice(words) for _ in range(rng.randint(4, 9)))
        sentences.append(sentence[0].upper() + sentence[1:] + ".")
    return " ".join(sentences)


def make_tasks(num_tasks: int, seed: int) -> list[Task]:
    """`num_tasks` passages; the same seed always gives the same tasks."""
    words = read_data_lines("words.txt")
    rng = random.Random(f"reverse-text:{seed}")
    tasks = []
    for index in range(num_tasks):
        passage = make_passage(rng, words)
        tasks.append(Task(index=index, prompt=f"{INSTRUCTION}\n\n{passage}", answer=passage[::-1]))
    return tasks


@reward(weight=1.0)
def reverse_similarity(response: str, answer: str) -> float:
    """Similarity in [0, 1] of the tagged reply (or the whole reply) to the reversal."""
    got = extract_tag(response, TAG)
    if got is None:
        got = response.strip()
    if got == answer:
        return 1.0
    return difflib.SequenceMatcher(None, got, answer, autojunk=False).ratio()


def load_environment(*, num_tasks: int = 1000, seed: int = 0) -> SingleTurnEnv:
    """The reverse-text environment (`num_tasks` passages)."""
    if num_tasks < 1:
        raise ValueError("num_tasks must be at least 1")
    return SingleTurnEnv(
        name="reverse-text",
        description="Reverse a short passage character by character (similarity reward).",
        taskset=Taskset(make_tasks(num_tasks, seed)),
        rubric=[reverse_similarity],
    )
