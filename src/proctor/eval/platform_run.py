"""How an eval talks to the platform: open (or attach to) a run, log episodes, finish.

The engine calls only `open_platform_run` and the `PlatformRun` methods; the rules of the
attach contract (DESIGN.md) live here, on top of the public `proctor.runs` API:

| situation                                   | result                                        |
|---------------------------------------------|-----------------------------------------------|
| `--no-push`                                 | a local run, nothing sent                     |
| push, no attach                             | a created run; platform unreachable or the    |
|                                             | create refused (bad key, TLS...): an offline  |
|                                             | run (`proctor runs sync` uploads it, exit 75) |
| push, `--resume` of a pushed run            | the same evaluation, reopened                 |
| attach with `--no-push`                     | `ConfigError` (exit 2)                        |
| attach with `PROCTOR_RUNS_MODE=disabled`    | `AttachError`                                 |
| attach, unknown/closed/unwritable/unreachable | `AttachError`, before any rollout           |
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from proctor.errors import AttachError, ConfigError, PlatformError

if TYPE_CHECKING:
    from proctor import runs
    from proctor.contract import RunStatus

logger = logging.getLogger(__name__)


class PlatformRun(Protocol):
    """The handle the engine logs episodes to (`proctor.runs.Run` is one)."""

    id: str
    """The platform's evaluation id, or a local id when not pushing."""
    url: str | None
    """Where the evaluation can be viewed, when it is on a platform."""
    attached: bool
    unsynced: bool
    """After finish: the platform does not hold the whole run yet (see `sync_command`)."""
    refused: str | None
    """After finish: why the platform refused to close the run (closed there first)."""

    def sync_command(self) -> str:
        """The command that finishes the upload of this run."""

    def log_episodes(self, records: list[dict[str, Any]]) -> None:
        """Hand finished episodes (`Episode.to_record()` dicts) over; never waits on the network."""

    def finish(
        self,
        *,
        status: RunStatus = "completed",
        error: str | None = None,
        timeout: float | None = None,
    ) -> None:
        """Drain uploads, write the summary metrics, finalize (or mark failed/cancelled)."""


LOCAL_PREFIX = "local-"
"""How the ids of runs that are not on the platform begin."""


class LocalRun:
    """The run of `--no-push`: nothing is sent, so the runs SDK (httpx, settings) never loads."""

    def __init__(self, id: str | None = None) -> None:
        self.id = id or f"{LOCAL_PREFIX}{uuid.uuid4().hex[:12]}"
        self.url: str | None = None
        self.attached = False
        self.unsynced = False
        self.refused: str | None = None

    def sync_command(self) -> str:
        """Nothing to sync: a local run is whole in its directory."""
        return ""

    def log_episodes(self, records: list[dict[str, Any]]) -> None:
        """Nothing to hand over: the trace file is the whole record."""

    def finish(
        self,
        *,
        status: RunStatus = "completed",
        error: str | None = None,
        timeout: float | None = None,
    ) -> None:
        """Nothing to drain or finalize."""


def _expected_samples(config: dict[str, Any]) -> int | None:
    """Episodes a complete run logs, when the config pins the task count."""
    n, r = config.get("num_examples"), config.get("rollouts_per_example", 1)
    if config.get("shard") is not None:
        return None  # a shard's count is not the evaluation's; its finalizer checks that
    return n * r if isinstance(n, int) and isinstance(r, int) else None


def open_platform_run(
    *,
    push: bool,
    attach: str | None,
    name: str,
    environment: str,
    model: str,
    config: dict[str, Any],
    run_dir: Path,
    local_id: str | None = None,
    resume: bool = False,
    finish_timeout: float = 120.0,
    framework: str = "proctor",
) -> PlatformRun:
    """Open the run an eval logs to, following the attach contract.

    The returned run's id names the run; it is also stamped into `config["run"]["id"]`.
    `local_id` is the id of the local run being resumed: a run that stays local keeps it.

    Raises:
        ConfigError: `attach` without `push`, or malformed client settings.
        AttachError: `attach` given and the evaluation cannot be attached to.
    """
    if attach and not push:
        raise ConfigError(
            "--run.attach names an evaluation on the platform, so it needs push; drop --no-push"
        )
    common: dict[str, Any] = {
        "name": name,
        "environments": [environment],
        "model": model,
        "config": config,
        "run_dir": run_dir,
        "expected_samples": _expected_samples(config),
        "finish_timeout": finish_timeout,
        "framework": framework,
    }
    if not push:
        # A resumed local run is the same run, under the same id.
        resumed = local_id if local_id and local_id.startswith(LOCAL_PREFIX) else None
        local = LocalRun(resumed)
        if isinstance(config.get("run"), dict):
            config["run"]["id"] = local.id
        return local
    from proctor import runs

    run: runs.Run
    if attach:
        # No fallback: a launcher is waiting for samples under exactly this id.
        run = runs.init(id=attach, shard=config.get("shard"), **common)
    else:
        try:
            run = runs.init(**common, resume=resume)
        except ConfigError:
            raise
        except PlatformError as e:
            logger.warning("%s; continuing without the platform (results stay local)", e)
            run = runs.init(mode="disabled", **common)
    if attach and run.id != attach:  # defensive: attaching must never create a second run
        raise AttachError(f"attached to {run.id} instead of {attach}; this is a bug in proctor")
    if local_id and local_id.startswith(LOCAL_PREFIX) and run.id.startswith(LOCAL_PREFIX):
        run.id = local_id  # a resumed local run is the same run, under the same id
    if isinstance(config.get("run"), dict):
        config["run"]["id"] = run.id
    return run
