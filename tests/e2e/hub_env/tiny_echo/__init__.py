"""tiny-echo: ask the model to repeat a word; the reward is whether the reply contains it."""

from __future__ import annotations

from proctor.envs import SingleTurnEnv, Task, Taskset, reward

WORDS = ["apple", "river", "cloud", "stone", "maple", "ember", "delta", "quartz"]


@reward(weight=1.0)
def echoed(response: str, answer: str) -> float:
    """1.0 when the reply contains the word."""
    return 1.0 if answer in response.lower() else 0.0


def load_environment(*, num_tasks: int = 8) -> SingleTurnEnv:
    """`num_tasks` words to repeat."""
    tasks = [
        Task(
            index=i,
            prompt=f"Repeat this word: {WORDS[i % len(WORDS)]}",
            answer=WORDS[i % len(WORDS)],
        )
        for i in range(num_tasks)
    ]
    return SingleTurnEnv(
        name="tiny-echo",
        description="Repeat a word (the hub's test environment).",
        taskset=Taskset(tasks),
        rubric=[echoed],
    )
