"""The rollout loop: keep `concurrency` jobs in flight until the plan's last one has run.

The parent process owns the plan (`plan_jobs`: the selected tasks and their rollouts). Each
job carries its task, so whoever executes it needs the environment and nothing else: the
in-process run and every worker process (`proctor.eval.workers`) run the very same
`run_jobs`, fed from a `JobFeed`. In-process, the feed holds the whole plan; in a worker,
the parent's pipe fills it.

Any exception out of a rollout slot (an episode that cannot be recorded, a bug in the
progress or upload path) cancels the other slots and propagates: the run ends with it,
never with a slot quietly gone. Failures the contract records on an episode (a model error,
a driver or scoring bug) never get here: `Environment.rollout` turns them into data.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import deque
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


class JobFeed:
    """The jobs still to run: filled up front or as they arrive, then closed.

    `get()` hands out the next job without suspending when one is there (the common case
    costs a `popleft`), and None once the feed is closed and empty.
    """

    def __init__(self, jobs: Iterable[Job] = (), *, closed: bool = False) -> None:
        self._jobs: deque[Job] = deque(jobs)
        self._closed = closed
        self._waiters: deque[asyncio.Future[None]] = deque()

    def put(self, job: Job) -> None:
        self._jobs.append(job)
        self._wake(1)

    def close(self) -> None:
        """No more jobs: the slots stop once the feed runs dry."""
        self._closed = True
        self._wake(len(self._waiters))

    def _wake(self, n: int) -> None:
        while n and self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                n -= 1

    async def get(self) -> Job | None:
        while not self._jobs:
            if self._closed:
                return None
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._wake(1)  # pass the wake-up on to another slot
                raise
        return self._jobs.popleft()


async def run_jobs(
    env: Environment,
    client: ChatClient,
    feed: JobFeed,
    *,
    concurrency: int,
    on_episode: Callable[[Episode], None],
    pair_named: bool = False,
) -> None:
    """Run the feed's jobs with at most `concurrency` in flight, each episode to `on_episode`.

    `pair_named` names each episode by its (example, rollout) pair instead of at random, so
    the processes writing one evaluation in shards, or a shard run again, name it alike and
    the platform stores it once.

    A fixed set of slots pulls from the feed: no task or semaphore per rollout, so scheduling
    costs next to nothing per episode. If a slot raises (`on_episode` included), or the
    caller is cancelled, the other slots are cancelled and the error propagates.
    """
    rollout = env.rollout

    async def slot() -> None:
        while (job := await feed.get()) is not None:
            episode_id = (
                f"e{job.task.index}-r{job.rollout_number}" if pair_named else uuid.uuid4().hex
            )
            episode = await rollout(
                job.task, client, episode_id=episode_id, rollout_number=job.rollout_number
            )
            on_episode(episode)

    slots = [asyncio.create_task(slot()) for _ in range(max(1, concurrency))]
    try:
        await asyncio.gather(*slots)
    finally:
        for s in slots:
            s.cancel()
        await asyncio.gather(*slots, return_exceptions=True)
