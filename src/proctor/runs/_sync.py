"""`proctor runs sync RUN_DIR`: send what a run directory holds that the platform never acked.

For each evaluation spooled under `<run_dir>/platform/`:

1. refill the spool from the engine's `traces.jsonl` (records that never reached the spool
   because the process died between writing the trace and spooling it);
2. send every line past the acknowledged offset (replays are safe: sample ids are
   idempotency keys on the server);
3. close the run if its process could not: a `finish()` that timed out is replayed as it
   was asked; a created run whose process died is finalized when every expected episode is
   there, else marked FAILED ("crashed: ..."); an attached run only gets its samples, the
   launcher decides its status.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proctor.errors import ConfigError, PlatformError
from proctor.runs._client import PlatformClient
from proctor.runs._evaluations import close_evaluation
from proctor.runs._projection import record_to_line
from proctor.runs._settings import load_settings
from proctor.runs._spool import Spool
from proctor.runs._state import STATE_FILE, RunState, RunStatus, spool_dirs
from proctor.runs._summary import summarize
from proctor.runs._uploader import Uploader

log = logging.getLogger(__name__)

TRACES_FILE = "traces.jsonl"


@dataclass(frozen=True)
class SyncReport:
    """What `sync_run_dir` did for one evaluation."""

    evaluation_id: str
    """The evaluation synced."""
    url: str | None
    """Where it can be viewed."""
    recovered: int
    """Records found in `traces.jsonl` that were missing from the spool."""
    sent: int
    """Samples the server acknowledged during this sync."""
    pending: int
    """Samples still not acknowledged (0 when everything arrived)."""
    action: str
    """What was done to the evaluation's status."""


def _process_alive(pid: int | None) -> bool:
    if not pid or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    cmdline = Path(f"/proc/{pid}/cmdline")
    # A recycled pid belongs to some other program; only a proctor process counts.
    return not cmdline.exists() or b"proctor" in cmdline.read_bytes()


def _trace_records(run_dir: Path, evaluation_id: str, *, sole: bool) -> Iterator[dict[str, Any]]:
    """Records of `traces.jsonl` that belong to this evaluation (unstamped ones if `sole`)."""
    path = run_dir / TRACES_FILE
    if not path.is_file():
        return
    with open(path, "rb") as f:
        for raw in f:
            if not raw.endswith(b"\n"):
                break  # a torn last line: the engine died writing it
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            run = record.get("run") if isinstance(record, dict) else None
            run_id = run.get("id") if isinstance(run, dict) else None
            if run_id == evaluation_id or (run_id is None and sole):
                yield record


def _sync_one(
    directory: Path,
    run_dir: Path | None,
    *,
    sole: bool,
    settings_key: str,
    api_url: str | None,
    timeout: float,
) -> SyncReport:
    state = RunState.load(directory)
    eid = state.evaluation_id
    if state.phase == "open" and _process_alive(state.pid):
        raise ConfigError(
            f"evaluation {eid} is still being uploaded by process {state.pid}; "
            "wait for it to finish, or stop it, before syncing"
        )
    spool = Spool(directory)
    records: dict[str, dict[str, Any]] = {}
    recovered = 0
    if run_dir is not None and state.phase != "finished":
        for record in _trace_records(run_dir, eid, sole=sole):
            records[str(record.get("id"))] = record
        known = set(spool.sample_ids())
        missing = [r for i, r in records.items() if i not in known]
        spool.append([record_to_line(r) for r in missing])
        recovered = len(missing)
    client = PlatformClient(api_url or state.api_url, settings_key)
    uploader = Uploader(client, eid, spool, on_record=lambda _: None)
    try:
        drained = uploader.drain(timeout)
    finally:
        uploader.close()
    sent, pending = uploader.sent, spool.pending_records
    action = "nothing to close"
    try:
        if not drained:
            reason = uploader.fatal or uploader.last_error or f"not sent within {timeout:g}s"
            action = f"not closed: {pending} sample(s) still unsent ({reason})"
        elif state.phase == "finish_pending" and state.pending_finish is not None:
            pf = state.pending_finish
            action = close_evaluation(
                client,
                eid,
                attached=state.attached,
                status=pf.status,
                error=pf.error,
                summary=pf.summary,
                metadata=state.config,
            )
            state.phase, state.final_status, state.pending_finish = "finished", action, None
        elif state.phase == "open" and state.attached:
            action = "samples sent; status left to the launcher"
        elif state.phase == "open":
            # The process died before finish(): finalize a complete run, else it crashed.
            done, expected = len(records), state.expected_samples
            status: RunStatus = "failed"
            of = f" of {expected}" if expected is not None else ""
            error: str | None = f"crashed: the eval process stopped after {done}{of} episodes"
            if expected is not None and done >= expected:
                status, error = "completed", None
            action = close_evaluation(
                client,
                eid,
                attached=False,
                status=status,
                error=error,
                summary=summarize(records.values()),
                metadata=state.config,
            )
            state.phase, state.final_status = "finished", action
    except PlatformError as e:
        action = f"not closed: {e}"
    finally:
        client.close()
        state.save(directory)
        spool.close(discard_if_drained=state.phase == "finished")
    return SyncReport(eid, state.viewer_url, recovered, sent, pending, action)


def sync_run_dir(
    path: Path, *, api_url: str | None = None, api_key: str | None = None, timeout: float = 120.0
) -> list[SyncReport]:
    """Send everything under a run directory (or one spool directory) not yet acknowledged.

    Raises:
        ConfigError: no spool under `path`, no API key, or the run is still uploading.
    """
    if (path / STATE_FILE).is_file():
        dirs, run_dir = [path], None
    else:
        dirs, run_dir = spool_dirs(path), path
    if not dirs:
        raise ConfigError(
            f"{path} holds no platform spool (no platform/*/run.json); pass a run directory "
            "of an eval that pushed to a platform"
        )
    key = load_settings(api_key=api_key).key()
    if key is None:
        raise ConfigError("syncing needs the platform's API key; set PROCTOR_API_KEY")
    return [
        _sync_one(
            d, run_dir, sole=len(dirs) == 1, settings_key=key, api_url=api_url, timeout=timeout
        )
        for d in dirs
    ]
