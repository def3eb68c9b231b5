"""The environment base class and the single-turn driver.

An environment is a taskset, a conversation driver and a rubric of scoring functions.
`rollout()` runs one task against a model and always returns an `Episode`: model, tool and
scoring failures are recorded on it, and only cancellation propagates.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from proctor.envs._episode import COMPLETED, ENV_ERROR, MODEL_ERROR, Episode
from proctor.envs._scoring import ScoreCallable, ScoreFunction, as_score_function, score_episode
from proctor.envs._task import Task, Taskset
from proctor.errors import ModelError
from proctor.models.types import ChatClient

if TYPE_CHECKING:
    from proctor.envs._judge import Judge

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EnvironmentInfo:
    """What `proctor envs list` shows about an installed environment."""

    name: str
    description: str
    kind: Literal["finite", "infinite", "broken"]
    """`finite`, `infinite` (a stream: runs pass -n), or `broken` (failed to load)."""
    size: int | None
    """Number of tasks, or None for an infinite stream."""
    entry_point: str = ""
    """Where it comes from: `module:function` for a proctor environment, `package@version`
    for a verifiers one."""
    framework: str = "proctor"
    """What runs it: `proctor` (an entry point) or `verifiers` (a verifiers taskset)."""


class Environment:
    """Base class: a taskset, a conversation driver (`converse`) and a rubric.

    Subclasses implement `converse()`; most environments instead instantiate one of the
    drivers (`SingleTurnEnv`, `MultiTurnEnv`, `ToolEnv`) with their taskset and rubric.

    Args:
        name: The environment's name (as installed).
        taskset: The tasks it offers.
        rubric: Reward functions and metrics (`@reward`, `@metric`; a plain function counts
            as a reward of weight 1).
        system_prompt: Prepended to every conversation when set.
        description: One line for `proctor envs list`.
    """

    def __init__(
        self,
        *,
        name: str,
        taskset: Taskset,
        rubric: Sequence[ScoreFunction | ScoreCallable] = (),
        system_prompt: str | None = None,
        description: str = "",
    ) -> None:
        self.name = name
        self.taskset = taskset
        if not taskset.name:
            taskset.name = name
        self.rubric: list[ScoreFunction] = [as_score_function(f) for f in rubric]
        names = [f.name for f in self.rubric]
        if len(set(names)) != len(names):
            raise ValueError(f"environment {name} has two scoring functions of the same name")
        self.system_prompt = system_prompt
        self.description = description
        self.judge: Judge | None = None
        """The judge model handed to scoring functions that name a `judge` argument;
        `proctor eval` sets it from `--judge.*` when `wants_judge`."""

    @property
    def wants_judge(self) -> bool:
        """Some scoring function asks for the judge model."""
        return any("judge" in fn.wants for fn in self.rubric)

    def info(self) -> EnvironmentInfo:
        """Name, description and size of this environment."""
        infinite = self.taskset.infinite
        return EnvironmentInfo(
            name=self.name,
            description=self.description,
            kind="infinite" if infinite else "finite",
            size=None if infinite else len(self.taskset),
        )

    async def rollout(
        self, task: Task, client: ChatClient, *, episode_id: str, rollout_number: int
    ) -> Episode:
        """Run one task against the model and score it; never raises except on cancellation.

        A model failure (`ModelError`) ends the conversation with stop condition
        `model_error` and `error = {"type", "message", "status_code"?}`; a bug in the driver
        with `env_error`. Such an episode is not scored: every reward and metric is None and
        `reward` is 0.0. A scoring function that raises scores None and sets `error` with
        `stage: "scoring"` on an otherwise complete episode.
        """
        start = time.time()
        t0 = time.perf_counter()
        episode = Episode(
            id=episode_id,
            env=self.name,
            example_id=task.index,
            rollout_number=rollout_number,
            task=task.to_record(),
            messages=task.opening_messages(self.system_prompt),
            timing={"start": start, "model_s": 0.0},
        )
        num_prompt_messages = len(episode.messages)
        try:
            await self.converse(task, client, episode)
        except asyncio.CancelledError:
            raise
        except ModelError as e:
            episode.error = {"type": "ModelError", "message": str(e)}
            if e.status_code is not None:
                episode.error["status_code"] = e.status_code
            episode.stop_condition = MODEL_ERROR
        except Exception as e:
            # A bug in an environment's driver fails this rollout, not the whole run.
            logger.debug("environment %s failed a rollout", self.name, exc_info=True)
            episode.error = {"type": type(e).__name__, "message": str(e), "stage": "rollout"}
            episode.stop_condition = ENV_ERROR
        t1 = time.perf_counter()
        if episode.error is None:
            await score_episode(
                self.rubric,
                episode,
                task,
                num_prompt_messages=num_prompt_messages,
                judge=self.judge,
            )
        else:
            # A conversation that broke off is not scored: its rewards are unknown, not low.
            for fn in self.rubric:
                (episode.rewards if fn.kind == "reward" else episode.metrics)[fn.name] = None
        t2 = time.perf_counter()
        timing = episode.timing
        timing["end"] = start + (t2 - t0)
        timing["duration_s"] = t2 - t0
        timing["scoring_s"] = t2 - t1
        return episode

    async def aclose(self) -> None:
        """Release what the rollouts started (servers, pools); the engine calls it once the
        run's rollouts are over. Nothing to release by default."""

    async def converse(self, task: Task, client: ChatClient, episode: Episode) -> None:
        """Drive the conversation, appending to `episode.messages`; set the stop condition."""
        raise NotImplementedError

    async def ask_model(
        self, client: ChatClient, episode: Episode, *, tools: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """Ask the model for its next turn, record it on the episode and return the message.

        Raises:
            ModelError: the request failed for good (the rollout records it).
        """
        completion = await client.complete(episode.messages, tools=tools)
        message = completion.message
        episode.messages.append(message)
        episode.num_turns += 1
        episode.timing["model_s"] += completion.latency_s
        usage = episode.token_usage
        usage["prompt_tokens"] += completion.usage.prompt_tokens
        usage["completion_tokens"] += completion.usage.completion_tokens
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        if completion.finish_reason == "length":
            episode.is_truncated = True
        return message


class SingleTurnEnv(Environment):
    """One model turn per task: the prompt goes in, the answer comes out."""

    async def converse(self, task: Task, client: ChatClient, episode: Episode) -> None:
        await self.ask_model(client, episode)
        episode.stop_condition = COMPLETED
        episode.is_completed = True
