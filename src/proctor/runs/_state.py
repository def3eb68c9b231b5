"""`run.json`: what `proctor runs sync` needs to finish a run's uploads later (never the key)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from proctor.contract import RunStatus

STATE_FILE = "run.json"
PLATFORM_DIR = "platform"

RunPhase = Literal["open", "finish_pending", "finished"]


class PendingFinish(BaseModel):
    """A `finish()` that could not complete because samples were still spooled."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    status: RunStatus
    """The status the run finished with."""
    error: str | None = None
    """The failure reason, for failed and cancelled runs."""
    summary: dict[str, Any] = Field(default_factory=dict)
    """The summary metrics to write once every sample is sent."""


class PendingCreate(BaseModel):
    """An evaluation to create once the platform answers (the run began offline)."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    key: str
    """The Idempotency-Key of the create: however often it is sent, one evaluation."""
    environments: list[str] = Field(default_factory=list)
    """Environment names to resolve on the hub."""
    model: str = ""
    """The model evaluated."""
    team_id: str | None = None
    """The team that owns the evaluation."""
    framework: str = "proctor"
    """What ran the environments (`proctor`, `verifiers`)."""
    reason: str | None = None
    """Why the platform did not create it when the run started (unreachable, refused key)."""


class RunState(BaseModel):
    """The spool directory's description of its evaluation."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="ignore")

    evaluation_id: str
    """The platform's evaluation id."""
    api_url: str
    """Origin of the platform the evaluation lives on."""
    attached: bool
    """True when the run attached to an evaluation someone else created (a launcher)."""
    shard: str | None = None
    """`I/N` when the run writes one slice of a sharded evaluation: it never closes it."""
    name: str = ""
    """The run's display name."""
    viewer_url: str | None = None
    """Where the evaluation can be viewed."""
    config: dict[str, Any] | None = None
    """The run config stored as the evaluation's metadata (created runs only)."""
    expected_samples: int | None = None
    """How many episodes a complete run logs, when the caller said."""
    phase: RunPhase = "open"
    """`open` while the process runs, `finish_pending` when finish() left samples spooled."""
    pending_finish: PendingFinish | None = None
    """The finish to replay after the spool drained (phase `finish_pending`)."""
    final_status: str | None = None
    """How the run was closed (phase `finished`)."""
    pid: int | None = None
    """The process uploading right now (cleared when it finishes), so sync leaves it alone."""
    create_key: str | None = None
    """The Idempotency-Key the evaluation was created with."""
    pending_create: PendingCreate | None = None
    """Set while the evaluation does not exist yet: `evaluation_id` is then a local id."""
    reopen_pending: bool = False
    """A resumed attempt ran offline: reopen the evaluation before sending to it."""
    local_ids: list[str] = Field(default_factory=list)
    """Local ids this run's traces were stamped with before the evaluation existed."""

    def save(self, directory: Path) -> None:
        """Write `run.json` atomically into `directory`."""
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / (STATE_FILE + ".tmp")
        tmp.write_text(self.model_dump_json(indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, directory / STATE_FILE)

    @classmethod
    def load(cls, directory: Path) -> RunState:
        """Read `run.json` from `directory`."""
        return cls.model_validate_json((directory / STATE_FILE).read_text(encoding="utf-8"))


def spool_dir(run_dir: Path, evaluation_id: str) -> Path:
    """`<run_dir>/platform/<evaluation_id>`: the spool of one evaluation."""
    return run_dir / PLATFORM_DIR / evaluation_id


def latest_own_state(run_dir: Path) -> tuple[Path, RunState] | None:
    """The newest state of an evaluation this run directory created (not attached), if any."""
    for directory in reversed(spool_dirs(run_dir)):
        try:
            state = RunState.load(directory)
        except (OSError, ValueError):
            continue
        if not state.attached:
            return directory, state
    return None


def spool_dirs(run_dir: Path) -> list[Path]:
    """Every evaluation spool directory under a run directory, oldest first."""
    root = run_dir / PLATFORM_DIR
    if not root.is_dir():
        return []
    dirs = [d for d in root.iterdir() if (d / STATE_FILE).is_file()]
    return sorted(dirs, key=lambda d: (d / STATE_FILE).stat().st_mtime)


def retire_state(directory: Path) -> None:
    """Hide a superseded state from `spool_dirs` (kept as `run.json.superseded`)."""
    with contextlib.suppress(OSError):
        os.replace(directory / STATE_FILE, directory / (STATE_FILE + ".superseded"))


def upload_of(run_dir: Path) -> tuple[str, str] | None:
    """(evaluation id, what remains) of the newest evaluation a run directory logged to, or
    None for a run that never pushed: `on the platform`, `unsynced`, or `offline` (the
    evaluation does not exist yet); both of the last two are what `proctor runs sync` is for.
    """
    dirs = spool_dirs(run_dir)
    for directory in reversed(dirs):
        try:
            state = RunState.load(directory)
        except (OSError, ValueError):
            continue
        if state.pending_create is not None:
            return state.evaluation_id, "offline"
        if state.phase == "finish_pending":
            return state.evaluation_id, "unsynced"
        return state.evaluation_id, "on the platform"
    return None
