"""Keep `concurrency` rollouts in flight until every planned (task, rollout) has run."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from proctor.envs import Environment, Episode, Task
    from proctor.models.types import ChatClient


@dataclass(frozen=True, slots=True)
class Job:
    """One planned rollout: a task and the 1-based number of this rollout of it."""

    task: Task
    rollout_number: int


def plan_jobs(
    tasks: Iterable[Task], rollouts_per_example: int, *, done: set[tuple[int, int]]
) -> list[Job]:
    """Every (task, rollout) pair not already in `done`, task by task."""
    return [
        Job(task, k)
        for task in tasks
        for k in range(1, rollouts_per_example + 1)
        if (task.index, k) not in done
    ]


async def run_jobs(
    env: Environment,
    client: ChatClient,
    jobs: list[Job],
    *,
    concurrency: int,
    on_episode: Callable[[Episode], None],
) -> None:
    """Run `jobs` with at most `concurrency` in flight, handing each episode to `on_episode`.

    A fixed pool of workers pulls from one shared iterator: no task or semaphore per
    rollout, so scheduling costs next to nothing per episode. If `on_episode` raises, or the
    caller is cancelled, the in-flight rollouts are cancelled and the error propagates.
    """
    pending = iter(jobs)

    async def worker() -> None:
        # The iterator is shared safely: `next` runs between awaits, on one thread.
        for job in pending:
            episode = await env.rollout(
                job.task, client, episode_id=uuid.uuid4().hex, rollout_number=job.rollout_number
            )
            on_episode(episode)

    workers = [asyncio.create_task(worker()) for _ in range(min(concurrency, len(jobs)))]
    try:
        await asyncio.gather(*workers)
    finally:
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
