"""Sharded hosted evaluations: one evaluation written by N sandboxes, each `--shard I/N`.

With `eval_config.shards` N > 1 the launcher starts N sandboxes for one evaluation, each the
same command plus `--shard I/N`, and keeps a `hosted_shards` row per shard. A `ShardSet` is
its view of them, polled every tick:

| shards                                       | evaluation                                   |
|----------------------------------------------|----------------------------------------------|
| one exits != 0 (or cannot start)             | that shard is started again, up to           |
|                                              | `shard_attempts` times in all                |
| one out of attempts                          | the others stopped; FAILED naming the shard, |
|                                              | its exit and its log's tail                  |
| all exited 0, stored == expected             | finalized by the launcher with the summary   |
|                                              | of the stored samples; then COMPLETED        |
| all exited 0, fewer stored                   | FAILED "incomplete: X of Y samples"          |
| cancel, timeout                              | every shard stopped (the launcher's rules)   |

A retry doubles nothing: a shard names each sample by its (example, rollout) pair, so the
platform stores a pair once however often it is sent. An unbounded run (`num_examples` -1)
has no expected count; there every shard's exit 0 vouches for its slice, as a run that exits
0 only once the platform acknowledged every sample it logged.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from proctor.sandboxes.sandbox import SandboxBackend, SandboxHandle, SandboxSpec, SandboxState
from proctor.server.db.base import utcnow
from proctor.server.db.models import Evaluation, HostedShard
from proctor.server.db.session import Database
from proctor.server.evaluations import repository as samples_repository
from proctor.server.evaluations import service as evaluations
from proctor.server.hosted import repository

logger = logging.getLogger(__name__)

_ERROR_TAIL_BYTES = 2000


def shard_count(config: Mapping[str, Any] | None) -> int:
    """How many shards a hosted evaluation's stored config asks for (1: unsharded)."""
    eval_config = (config or {}).get("eval_config") or {}
    shards = eval_config.get("shards")
    return shards if isinstance(shards, int) and shards > 1 else 1


def sharded_handle(count: int) -> str:
    """What a sharded evaluation's own `sandbox_handle` holds once its shards are recorded:
    no sandbox of its own (each shard's is in its row), but started."""
    return f"shards:{count}"


def shard_box(box: Path, index: int) -> Path:
    """Where shard `index` of the evaluation whose box is `box` works and logs (local)."""
    return box / f"shard-{index}"


def describe_exit(state: SandboxState) -> str:
    """`exit code 1 (killed by SIGKILL)`: how one attempt of a shard ended."""
    if state.exit_code is None:
        return f"no exit code ({state.detail or 'lost'})"
    how = f" ({state.detail})" if state.detail else ""
    return f"exit code {state.exit_code}{how}"


@dataclass
class _Shard:
    index: int
    state: str
    attempt: int
    handle: SandboxHandle | None


@dataclass(frozen=True)
class Ended:
    """How a set of shards ended: every shard done, or `failed` out of attempts."""

    failed: int | None = None
    """The shard that ran out of attempts; None when every shard exited 0."""
    error: str | None = None
    """Why it failed: the shard, its attempts, its exit and its log's tail."""


class ShardSet:
    """The shards of one hosted evaluation, as the launcher watches them.

    Args:
        db: The platform's database (each shard's row is written as it changes).
        backend: Where the shards' sandboxes run.
        evaluation_id: The evaluation the shards write.
        count: N, the number of shards.
        attempts: How often one shard is started before the evaluation fails.
        box: The evaluation's directory on the launcher's machine (handle files).
        spec_of: The sandbox spec of shard I (called once per start).
        rows: The stored shard rows, when adopting (default: every shard pending).
    """

    def __init__(
        self,
        *,
        db: Database,
        backend: SandboxBackend,
        evaluation_id: str,
        count: int,
        attempts: int,
        box: Path,
        spec_of: Callable[[int], SandboxSpec],
        rows: list[HostedShard] | None = None,
    ) -> None:
        self.db = db
        self.backend = backend
        self.evaluation_id = evaluation_id
        self.count = count
        self.attempts = attempts
        self.box = box
        self.spec_of = spec_of
        self.ended: Ended | None = None
        self.shards = [_Shard(i, "pending", 0, None) for i in range(count)]
        for row in rows or []:
            if 0 <= row.shard < count:
                self.shards[row.shard] = _Shard(
                    row.shard, row.state, row.attempt, self._handle(row)
                )

    def _handle(self, row: HostedShard) -> SandboxHandle | None:
        token = row.sandbox_handle
        if token is None and row.state == "running":
            # Started, but the launcher died before it recorded the handle?
            try:
                token = (shard_box(self.box, row.shard) / "handle").read_text().strip() or None
            except OSError:
                token = None
        if token is None:
            return None
        log_path = row.log_path or str(shard_box(self.box, row.shard) / "sandbox.log")
        return SandboxHandle.from_token(self.backend.name, token, log_path=log_path)

    @staticmethod
    def create_rows(session: Session, evaluation_id: str, count: int, backend: str) -> None:
        """Record every shard as pending before any starts (so none is ever lost)."""
        for index in range(count):
            if session.get(HostedShard, (evaluation_id, index)) is None:
                session.add(HostedShard(evaluation_id=evaluation_id, shard=index, backend=backend))
        session.flush()

    @property
    def running(self) -> list[SandboxHandle]:
        """The handles of the shards whose sandboxes run now."""
        return [s.handle for s in self.shards if s.state == "running" and s.handle is not None]

    def poll(self) -> Ended | None:
        """Start pending shards, retry failed ones, note finished ones; how they all ended
        once they have (None while any still runs)."""
        if self.ended is not None:
            return self.ended
        for shard in self.shards:
            if shard.state == "pending":
                self._start(shard, after=None)
            elif shard.state == "running":
                if shard.handle is None:
                    self._start(shard, after="its sandbox was never recorded")
                    continue
                state = self.backend.poll(shard.handle)
                if state.running:
                    continue
                if state.exit_code == 0:
                    self._update(shard, state="done", exit_code=0, ended_at=utcnow())
                    logger.info("shard %s of %s done", self._name(shard), self.evaluation_id)
                    continue
                self._attempt_failed(shard, state)
            if self.ended is not None:
                return self.ended
        if all(s.state == "done" for s in self.shards):
            self.ended = Ended()
        return self.ended

    def _name(self, shard: _Shard) -> str:
        return f"{shard.index}/{self.count}"

    def _attempt_failed(self, shard: _Shard, state: SandboxState) -> None:
        assert shard.handle is not None
        tail = self.backend.logs(shard.handle, _ERROR_TAIL_BYTES).strip()
        how = describe_exit(state)
        self._update(shard, exit_code=state.exit_code, error=f"{how}; last output:\n{tail}")
        self._start(shard, after=how, tail=tail)

    def _start(self, shard: _Shard, *, after: str | None, tail: str = "") -> None:
        """Start the shard's next attempt, or end the set when it has had them all."""
        if shard.attempt >= self.attempts:
            where = self._log_name(shard)
            error = (
                f"shard {self._name(shard)} failed {shard.attempt} "
                f"time{'s' if shard.attempt != 1 else ''}; its last attempt "
                f"ended with {after}; its log ({where}) ends:\n{tail}"
            )
            self._update(shard, state="failed", ended_at=utcnow())
            self.ended = Ended(failed=shard.index, error=error)
            logger.warning("%s: %s", self.evaluation_id, error.splitlines()[0])
            return
        if after is not None:
            logger.info(
                "shard %s of %s ended with %s; starting attempt %d of %d",
                self._name(shard),
                self.evaluation_id,
                after,
                shard.attempt + 1,
                self.attempts,
            )
        shard.attempt += 1
        try:
            spec = self.spec_of(shard.index)
            handle = self.backend.start(spec)
        except Exception as e:
            reason = f"the sandbox could not start: {e}"
            shard.state, shard.handle = "pending", None
            self._update(shard, state="pending", error=reason)
            if shard.attempt >= self.attempts:
                self._start(shard, after=reason)
            return
        # Recorded at once, so a launcher dying before the database write cannot orphan it.
        box = shard_box(self.box, shard.index)
        box.mkdir(parents=True, exist_ok=True)
        (box / "handle").write_text(handle.token())
        shard.handle = handle
        self._update(
            shard,
            state="running",
            sandbox_handle=handle.token(),
            backend=self.backend.name,
            log_path=handle.log_path,
            exit_code=None,
            started_at=utcnow(),
            ended_at=None,
        )

    def _log_name(self, shard: _Shard) -> str:
        if shard.handle is not None and shard.handle.log_path:
            return shard.handle.log_path
        if shard.handle is not None:
            return f"{self.backend.name} job {shard.handle.ref}"
        return f"`proctor hosted logs {self.evaluation_id} --shard {shard.index}`"

    def _update(self, shard: _Shard, **values: Any) -> None:
        if "state" in values:
            shard.state = values["state"]
        with self.db.write() as session:
            row = session.get(HostedShard, (self.evaluation_id, shard.index))
            if row is None:
                row = HostedShard(evaluation_id=self.evaluation_id, shard=shard.index)
                session.add(row)
            row.attempt = shard.attempt
            for name, value in values.items():
                setattr(row, name, value)

    def stop_all(self, grace_seconds: float) -> None:
        """Stop every running shard (each stop waits out its own grace, one after another
        would add them up: the launcher's pool runs them side by side)."""
        handles = self.running
        if not handles:
            return

        def stop(handle: SandboxHandle) -> None:
            try:
                self.backend.stop(handle, grace_seconds=grace_seconds)
            except Exception:
                logger.exception("stopping a shard of %s failed", self.evaluation_id)

        with ThreadPoolExecutor(max_workers=min(16, len(handles))) as pool:
            list(pool.map(stop, handles))
        ended = utcnow()
        for shard in self.shards:
            if shard.state == "running":
                state = self.backend.poll(shard.handle) if shard.handle else None
                code = state.exit_code if state is not None else None
                self._update(shard, state="stopped", exit_code=code, ended_at=ended)


def close_finished(
    session: Session, evaluation: Evaluation, expected: int | None
) -> tuple[bool, str | None]:
    """Every shard exited 0: finalize the evaluation if it holds every sample.

    Returns whether it was finalized here, and else why it failed ("incomplete: ...");
    `(False, None)` when it was closed meanwhile (e.g. `proctor evals finalize`).
    """
    from proctor.runs import summarize_samples

    fresh = repository.evaluation(session, evaluation.id) or evaluation
    got = fresh.total_samples
    if expected is not None and got != expected:
        return False, f"incomplete: {got} of {expected} samples; every shard exited 0"
    summary, counted = summarize_samples(_stored(session, fresh.id))
    if expected is not None and counted != expected:
        return False, f"incomplete: {counted} of {expected} samples; every shard exited 0"
    if not evaluations.mark_finalized(session, fresh, summary):
        return False, None
    return True, None


def _stored(session: Session, evaluation_id: str) -> Iterator[dict[str, Any]]:
    for row in samples_repository.all_samples(session, evaluation_id):
        yield json.loads(row.data)


@dataclass(frozen=True)
class ShardProgress:
    """One shard as `proctor hosted logs` and the dashboard show it."""

    index: int
    count: int
    state: str
    attempt: int
    samples: int
    """Samples of its slice the platform holds."""
    expected: int | None
    """Samples in its slice, when the run's size is bounded."""
    error: str | None
    """Why its last attempt failed (the dashboard shows the first line)."""

    def headline(self) -> str:
        """`shard 1/4: running, attempt 2, 7 of 25 samples`."""
        of = f"{self.samples} of {self.expected}" if self.expected is not None else self.samples
        return (
            f"shard {self.index}/{self.count}: {self.state}, attempt {self.attempt}, {of} samples"
        )


def slice_size(total: int, index: int, count: int) -> int:
    """How many of `total` plan positions fall to shard `index` of `count` (round robin)."""
    return len(range(index, total, count))


def progress(
    session: Session, evaluation_id: str, config: Mapping[str, Any] | None, expected: int | None
) -> list[ShardProgress]:
    """Each shard's state and stored samples (empty for an unsharded evaluation)."""
    count = shard_count(config)
    if count <= 1:
        return []
    rollouts = int(((config or {}).get("eval_config") or {}).get("rollouts_per_example") or 1)
    held = repository.samples_per_shard(session, evaluation_id, count=count, rollouts=rollouts)
    rows = {row.shard: row for row in repository.shards_of(session, evaluation_id)}
    out = []
    for index in range(count):
        row = rows.get(index)
        out.append(
            ShardProgress(
                index=index,
                count=count,
                state=row.state if row is not None else "pending",
                attempt=row.attempt if row is not None else 0,
                samples=held.get(index, 0),
                expected=None if expected is None else slice_size(expected, index, count),
                error=row.error if row is not None else None,
            )
        )
    return out


def handle_of(row: HostedShard, backend: str) -> SandboxHandle | None:
    """The handle of a shard's latest sandbox, to read its log (None before it started)."""
    if row.sandbox_handle is None:
        return None
    return SandboxHandle.from_token(backend, row.sandbox_handle, log_path=row.log_path)
