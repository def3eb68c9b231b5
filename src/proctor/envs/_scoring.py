"""Reward functions and metrics, declared with decorators and run after each rollout.

A scoring function is a plain (sync or async) function returning a number. It names the
arguments it needs and gets only those:

    messages     the whole conversation (list of OpenAI chat dicts)
    prompt       the opening messages the rollout started from
    completion   the messages the rollout added (assistant and tool turns, later user turns)
    response     the text of the last assistant message ("" when there is none)
    answer       the task's reference answer
    info         the task's info dict
    task         the `Task` itself
    episode      the `Episode` being scored (timing, usage, stop condition, trajectory)
    judge        the run's judge model (a `Judge`, or None); given only to functions
                 that name it, since naming it makes the run open a judge client

`@reward(weight=...)` functions make up the episode's `reward` (the weighted sum);
`@metric` functions are recorded beside it and never change it. Every raw score is recorded
under the function's name. A scoring function that raises scores None (0 in the sum) and the
episode gets an `error` with `stage: "scoring"`: the rollout is kept, marked as failed.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal, overload

if TYPE_CHECKING:
    from proctor.envs._episode import Episode
    from proctor.envs._task import Task

logger = logging.getLogger(__name__)

ScoreKind = Literal["reward", "metric"]
ScoreCallable = Callable[..., float | Awaitable[float]]

ARGUMENTS = frozenset(
    {"messages", "prompt", "completion", "response", "answer", "info", "task", "episode", "judge"}
)


@dataclass(frozen=True, slots=True)
class ScoreFunction:
    """A decorated reward function or metric; calling it calls the wrapped function."""

    func: ScoreCallable
    name: str
    kind: ScoreKind
    weight: float
    is_async: bool
    wants: frozenset[str]
    """The arguments the function takes (all of them when it accepts `**kwargs`)."""

    def __call__(self, *args: Any, **kwargs: Any) -> float | Awaitable[float]:
        return self.func(*args, **kwargs)


def _wanted_arguments(func: Callable[..., Any]) -> frozenset[str]:
    params = inspect.signature(func).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return (ARGUMENTS - {"judge"}) | frozenset(name for name in params if name == "judge")
    unknown = [
        name
        for name, p in params.items()
        if name not in ARGUMENTS and p.default is inspect.Parameter.empty
    ]
    if unknown:
        raise TypeError(
            f"scoring function {func.__name__} asks for {', '.join(unknown)}; "
            f"it may only take {', '.join(sorted(ARGUMENTS))}."
        )
    return frozenset(name for name in params if name in ARGUMENTS)


def as_score_function(
    func: ScoreCallable | ScoreFunction,
    *,
    kind: ScoreKind = "reward",
    weight: float = 1.0,
    name: str | None = None,
) -> ScoreFunction:
    """Wrap a plain function (an undecorated one counts as a reward of weight 1)."""
    if isinstance(func, ScoreFunction):
        return func
    return ScoreFunction(
        func=func,
        name=name or func.__name__,
        kind=kind,
        weight=weight,
        is_async=inspect.iscoroutinefunction(func),
        wants=_wanted_arguments(func),
    )


@overload
def reward(func: ScoreCallable, /) -> ScoreFunction: ...
@overload
def reward(
    *, weight: float = 1.0, name: str | None = None
) -> Callable[[ScoreCallable], ScoreFunction]: ...
def reward(
    func: ScoreCallable | None = None, /, *, weight: float = 1.0, name: str | None = None
) -> ScoreFunction | Callable[[ScoreCallable], ScoreFunction]:
    """Declare a reward function: `@reward` or `@reward(weight=0.5, name="exact")`."""
    if func is not None:
        return as_score_function(func, kind="reward", weight=weight, name=name)
    return lambda f: as_score_function(f, kind="reward", weight=weight, name=name)


@overload
def metric(func: ScoreCallable, /) -> ScoreFunction: ...
@overload
def metric(*, name: str | None = None) -> Callable[[ScoreCallable], ScoreFunction]: ...
def metric(
    func: ScoreCallable | None = None, /, *, name: str | None = None
) -> ScoreFunction | Callable[[ScoreCallable], ScoreFunction]:
    """Declare a metric: recorded on every episode, never part of the reward."""
    if func is not None:
        return as_score_function(func, kind="metric", weight=0.0, name=name)
    return lambda f: as_score_function(f, kind="metric", weight=0.0, name=name)


@lru_cache(maxsize=64)
def _tag_pattern(tag: str) -> re.Pattern[str]:
    return re.compile(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", re.DOTALL)


def extract_tag(text: str, tag: str) -> str | None:
    """The stripped content of the last `<tag>...</tag>` block in `text`, or None."""
    found = _tag_pattern(tag).findall(text)
    return found[-1].strip() if found else None


_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+-]*)[ \t]*\n(.*?)^[ \t]*```", re.DOTALL | re.MULTILINE)


_PYTHON_ALIASES = {"py", "python3"}


def extract_code(text: str, language: str = "python") -> str | None:
    """The last fenced code block of `language` (or with no language) in `text`, or None."""
    accepted = {language, ""} | (_PYTHON_ALIASES if language == "python" else set())
    found = [body for lang, body in _FENCE.findall(text) if lang.lower() in accepted]
    return found[-1] if found else None


def last_response(messages: Sequence[dict[str, Any]]) -> str:
    """The text of the last assistant message ("" when there is none)."""
    for message in reversed(messages):
        if message.get("role") == "assistant":
            return message.get("content") or ""
    return ""


async def score_episode(
    rubric: Sequence[ScoreFunction],
    episode: Episode,
    task: Task,
    *,
    num_prompt_messages: int,
    judge: Any = None,
) -> None:
    """Run every scoring function on a finished episode; fills rewards, metrics and reward."""
    messages = episode.messages
    available: dict[str, Any] = {
        "messages": messages,
        "answer": task.answer,
        "info": task.info,
        "task": task,
        "episode": episode,
        "judge": judge,
    }
    total = 0.0
    for fn in rubric:
        kwargs: dict[str, Any] = {}
        for arg in fn.wants:
            if arg not in available:
                # Slices and text are built only when some function asks for them.
                if arg == "prompt":
                    available[arg] = messages[:num_prompt_messages]
                elif arg == "completion":
                    available[arg] = messages[num_prompt_messages:]
                else:
                    available[arg] = last_response(messages)
            kwargs[arg] = available[arg]
        value: float | None
        try:
            result = fn.func(**kwargs)
            if fn.is_async:
                result = await result  # type: ignore[misc]
            value = float(result)  # type: ignore[arg-type]
        except asyncio.CancelledError:
            raise
        except Exception as e:
            logger.debug("scoring function %s failed", fn.name, exc_info=True)
            value = None
            if episode.error is None:
                episode.error = {
                    "type": type(e).__name__,
                    "message": f"{fn.kind} function {fn.name} failed: {e}",
                    "stage": "scoring",
                }
        if fn.kind == "reward":
            episode.rewards[fn.name] = value
            if value is not None:
                total += value * fn.weight
        else:
            episode.metrics[fn.name] = value
    episode.reward = total
