"""Tasks and tasksets: what an environment asks a model to do.

A `Taskset` is either a finite list of tasks or an infinite, seeded stream of them. Both are
deterministic: `select(n)` returns the same first `n` tasks every time, so a run can be
resumed and reruns compare like with like.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from proctor.errors import ConfigError


@dataclass(slots=True, frozen=True)
class Task:
    """One problem: a prompt (or ready-made messages), the expected answer and free-form info.

    Args:
        index: Position in the taskset (the episode's `example_id`).
        prompt: The first user message, when the task is a plain prompt.
        messages: The opening conversation (OpenAI chat dicts), instead of `prompt`.
        answer: The reference answer reward functions compare with (any JSON value).
        info: Anything else the environment's driver or reward functions need.
    """

    index: int
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    answer: Any = None
    info: dict[str, Any] = field(default_factory=dict)

    def opening_messages(self, system_prompt: str | None = None) -> list[dict[str, Any]]:
        """The conversation a rollout starts from: system prompt, then the task's messages."""
        opening: list[dict[str, Any]] = []
        if system_prompt:
            opening.append({"role": "system", "content": system_prompt})
        if self.messages is not None:
            # Shallow copies: the rollout appends to its own list, never to the task's.
            opening.extend(dict(m) for m in self.messages)
        elif self.prompt is not None:
            opening.append({"role": "user", "content": self.prompt})
        return opening

    def to_record(self) -> dict[str, Any]:
        """JSON-ready form: `{"index", "prompt"|"messages", "answer", "info"}`."""
        record: dict[str, Any] = {"index": self.index}
        if self.messages is not None:
            record["messages"] = self.messages
        else:
            record["prompt"] = self.prompt
        record["answer"] = self.answer
        record["info"] = self.info
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Task:
        """Rebuild a task from `to_record()` output."""
        return cls(
            index=int(record["index"]),
            prompt=record.get("prompt"),
            messages=record.get("messages"),
            answer=record.get("answer"),
            info=dict(record.get("info") or {}),
        )


class Taskset:
    """A deterministic collection of tasks: a finite list or an infinite seeded stream.

    Build one with `Taskset(tasks)` for a finite list, or `Taskset.stream(make_stream)` where
    `make_stream()` returns a fresh iterator of tasks that yields the same tasks every time.
    """

    def __init__(self, tasks: Sequence[Task] | None = None, *, name: str = "") -> None:
        self.name = name
        """Environment name used in error messages (filled in by the environment)."""
        self._tasks: list[Task] | None = list(tasks) if tasks is not None else None
        self._make_stream: Callable[[], Iterable[Task]] | None = None

    @classmethod
    def stream(cls, make_stream: Callable[[], Iterable[Task]], *, name: str = "") -> Taskset:
        """An infinite taskset; `make_stream()` must restart the same seeded sequence."""
        taskset = cls(name=name)
        taskset._make_stream = make_stream
        return taskset

    @property
    def infinite(self) -> bool:
        """True for a stream without end: runs must say how many tasks they want."""
        return self._tasks is None

    def __len__(self) -> int:
        if self._tasks is None:
            raise TypeError(f"{self.name or 'this taskset'} is infinite and has no length")
        return len(self._tasks)

    def __iter__(self) -> Iterator[Task]:
        if self._tasks is not None:
            return iter(self._tasks)
        assert self._make_stream is not None
        return iter(self._make_stream())

    def select(self, n: int | None = None) -> list[Task]:
        """The first `n` tasks (all of a finite set when `n` is None).

        Raises:
            ConfigError: `n` is negative, or None for an infinite stream.
        """
        if n is not None and n < 0:
            raise ConfigError(f"the number of tasks must be 0 or more, not {n}: pass -n N.")
        if self._tasks is not None:
            return self._tasks[:n]
        if n is None:
            name = self.name or "this environment"
            raise ConfigError(
                f"{name} is an infinite stream of tasks: pass -n N to choose how many to run."
            )
        return list(itertools.islice(self, n))
