"""The earlier runs under an output directory (`proctor runs list`): what each ran, how far
it got, whether it is running, finished or left for `--resume`, and its evaluation.

Everything is read from the run directories themselves (`config.toml`, `traces.jsonl`, the
lock, `logs/eval.log`, the upload state under `platform/`); nothing is loaded or sent.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from proctor.eval.run_dir import CONFIG_FILE, LOCK_FILE, LOG_FILE, TRACES_FILE
from proctor.toml_io import read_toml

_ENDED = re.compile(r" proctor\.eval\.runner: run \S+ (completed|failed|cancelled)\b")
"""The runner's closing log line, for runs whose size is not in their config."""


@dataclass(frozen=True)
class RunSummary:
    """One run directory, as `proctor runs list` shows it."""

    name: str
    """The directory's name (what `--run.dir` and `--resume` take)."""
    env: str
    model: str
    episodes: int
    """Episodes in `traces.jsonl`, errored ones included."""
    errored: int
    expected: int | None
    """Episodes the whole run makes, when its config pins the count."""
    status: str
    """`running`, `completed`, `incomplete` (continue with --resume), `failed` or `cancelled`."""
    evaluation: str | None
    """The evaluation it pushed to, with what remains (`unsynced`, `offline`), if any."""
    modified: float
    """When its traces last changed (seconds since the epoch)."""


def list_runs(output_dir: Path) -> list[RunSummary]:
    """Every run directory directly under `output_dir`, newest first."""
    if not output_dir.is_dir():
        return []
    found = [summarize_run(d) for d in output_dir.iterdir() if (d / CONFIG_FILE).is_file()]
    return sorted(found, key=lambda r: r.modified, reverse=True)


def summarize_run(run_dir: Path) -> RunSummary:
    """What one run directory holds."""
    try:
        config = read_toml(run_dir / CONFIG_FILE)
    except Exception:  # a broken config is shown as such, never stops the listing
        config = {}
    episodes = errored = 0
    traces = run_dir / TRACES_FILE
    with contextlib.suppress(OSError), traces.open(encoding="utf-8") as f:
        for line in f:
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line cut short by a crash
            episodes += 1
            errored += bool(record.get("error"))
    n, r = config.get("num_examples"), config.get("rollouts_per_example", 1)
    expected = n * r if isinstance(n, int) and isinstance(r, int) and n > 0 else None
    return RunSummary(
        name=run_dir.name,
        env=str(config.get("env") or "?"),
        model=str(config.get("model") or "?"),
        episodes=episodes,
        errored=errored,
        expected=expected,
        status=_status(run_dir, episodes - errored, expected),
        evaluation=_evaluation(run_dir),
        modified=(traces if traces.exists() else run_dir).stat().st_mtime,
    )


def _status(run_dir: Path, scored: int, expected: int | None) -> str:
    if _locked(run_dir / LOCK_FILE):
        return "running"
    ended = _ended(run_dir / LOG_FILE)
    if ended is not None and ended != "completed":
        return ended  # the last attempt failed or was interrupted
    if expected is not None:
        return "completed" if scored >= expected else "incomplete"
    return ended or "incomplete"


def _locked(path: Path) -> bool:
    """True while a process holds the run directory's lock (it is running now)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing drops a lock we took
    return False


def _ended(log: Path) -> str | None:
    """How the last attempt ended, from the runner's closing log line."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, log.stat().st_size - 64 * 1024))
            tail = f.read().decode(errors="replace")
    except OSError:
        return None
    matches = _ENDED.findall(tail)
    return matches[-1] if matches else None


def _evaluation(run_dir: Path) -> str | None:
    from proctor.runs import upload_of

    upload = upload_of(run_dir)
    if upload is None:
        return None
    evaluation_id, remains = upload
    return evaluation_id if remains == "on the platform" else f"{evaluation_id} ({remains})"
