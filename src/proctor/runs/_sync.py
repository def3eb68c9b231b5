"""`proctor runs sync RUN_DIR`: finish a run from `traces.jsonl` and what the server holds.

`traces.jsonl` is the source of truth, the spool a cache: whatever state the spool is in
(partly written, never written, acked offset stale or lost), sync sends the union of both
minus what the platform already has. For each evaluation state under `<run_dir>/platform/`:

1. an offline run (the platform was unreachable when it started) gets its evaluation now,
   created with the run directory's Idempotency-Key, so a sync run twice, or interrupted
   and run again, creates one evaluation; a resumed attempt that ran offline reopens it;
2. ask the server which sample ids it holds, and send every record it lacks (replays are
   harmless: sample ids are idempotency keys);
3. close the run if its process could not (`proctor.runs._finish`): a `finish()` left
   pending is replayed as it was asked; a created run whose process died is finalized when
   every expected episode is on the server, else marked FAILED with the count it holds; an
   attached run only gets its samples, its launcher decides its status.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proctor.errors import APIError, ConfigError, PlatformError
from proctor.projection import record_to_line
from proctor.runs._client import PlatformClient
from proctor.runs._evaluations import create_evaluation, reopen_evaluation
from proctor.runs._finish import settle
from proctor.runs._settings import load_settings
from proctor.runs._spool import Spool
from proctor.runs._state import STATE_FILE, RunState, RunStatus, retire_state, spool_dir, spool_dirs
from proctor.runs._summary import summarize
from proctor.runs._uploader import MAX_REQUEST_BYTES

log = logging.getLogger(__name__)

TRACES_FILE = "traces.jsonl"
BATCH_SAMPLES = 500
_REJECTED = frozenset({400, 413, 422})


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
    """Samples the server did not hold and acknowledged during this sync."""
    pending: int
    """Samples still not on the server (0 when everything arrived)."""
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
    try:
        return b"proctor" in cmdline.read_bytes()
    except OSError:
        return True


def _trace_records(run_dir: Path, ids: set[str], *, sole: bool) -> Iterator[dict[str, Any]]:
    """Records of `traces.jsonl` stamped with one of `ids` (unstamped ones too if `sole`)."""
    path = run_dir / TRACES_FILE
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError:
        return
    with f:
        for raw in f:
            if not raw.endswith(b"\n"):
                break  # a torn last line: the engine died writing it
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(record, dict) or record.get("id") is None:
                continue
            run = record.get("run")
            run_id = run.get("id") if isinstance(run, dict) else None
            if run_id in ids or (run_id is None and sole):
                yield record


def server_sample_ids(client: PlatformClient, evaluation_id: str, *, deadline: float) -> set[str]:
    """Every sample id the platform holds for the evaluation (extension endpoint)."""
    ids: set[str] = set()
    after: int | None = 0
    while after is not None:
        page = client.call_until(
            "GET", f"/evaluations/{evaluation_id}/sample_ids?after={after}", deadline=deadline
        )
        ids.update(str(i) for i in page.get("sample_ids") or [])
        nxt = page.get("next_after")
        after = int(nxt) if isinstance(nxt, int) and nxt > after else None
    return ids


def _post(
    client: PlatformClient, eid: str, lines: list[bytes], deadline: float, spool: Spool
) -> tuple[int, int]:
    """Send lines until acknowledged; split refused batches down to the bad sample.

    Returns (acknowledged, rejected).
    """
    body = b'{"samples":[' + b",".join(line.rstrip(b"\n") for line in lines) + b"]}"
    try:
        client.call_until(
            "POST",
            f"/evaluations/{eid}/samples",
            json_body=None,
            deadline=deadline,
            content=body,
        )
        return len(lines), 0
    except APIError as e:
        if e.status_code not in _REJECTED:
            raise
        if len(lines) == 1:
            log.warning("the platform refused a sample for good: %s", e)
            spool.reject(lines[0])
            return 0, 1
        mid = len(lines) // 2
        a = _post(client, eid, lines[:mid], deadline, spool)
        b = _post(client, eid, lines[mid:], deadline, spool)
        return a[0] + b[0], a[1] + b[1]


def _send(
    client: PlatformClient, eid: str, lines: list[bytes], deadline: float, spool: Spool
) -> tuple[int, int]:
    sent = rejected = 0
    batch: list[bytes] = []
    size = 0
    for line in [*lines, b""]:
        full = len(batch) >= BATCH_SAMPLES or size + len(line) > MAX_REQUEST_BYTES // 2
        if batch and (not line or full):
            a, r = _post(client, eid, batch, deadline, spool)
            sent, rejected, batch, size = sent + a, rejected + r, [], 0
        if line:
            batch.append(line)
            size += len(line)
    return sent, rejected


def _materialize(
    client: PlatformClient, directory: Path, run_dir: Path | None, state: RunState, deadline: float
) -> tuple[Path, RunState]:
    """Create the evaluation of an offline run (once: the create carries the run's key)."""
    pending = state.pending_create
    assert pending is not None
    created = create_evaluation(
        client,
        name=state.name,
        environments=pending.environments,
        model=pending.model,
        config=state.config,
        team_id=pending.team_id,
        key=pending.key,
        deadline=deadline,
        framework=pending.framework,
    )
    eid = str(created["evaluation_id"])
    new = state.model_copy(
        update={
            "evaluation_id": eid,
            "viewer_url": created.get("viewer_url"),
            "create_key": pending.key,
            "pending_create": None,
            "local_ids": [*state.local_ids, state.evaluation_id],
        }
    )
    target = spool_dir(run_dir if run_dir is not None else directory.parent.parent, eid)
    new.save(target)
    # Keep the offline spool's lines with the evaluation, then retire the offline state.
    old = Spool(directory)
    if old.size and not (target / "spool.jsonl").exists():
        Spool(target).append(list(old.lines()))
    old.close()
    retire_state(directory)
    log.info("created evaluation %s for offline run %s", eid, state.evaluation_id)
    return target, new


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
    if state.phase == "open" and _process_alive(state.pid):
        raise ConfigError(
            f"evaluation {state.evaluation_id} is still being uploaded by process {state.pid}; "
            "wait for it to finish, or stop it, before syncing"
        )
    deadline = time.monotonic() + timeout
    client = PlatformClient(api_url or state.api_url, settings_key)
    try:
        try:
            if state.pending_create is not None:
                directory, state = _materialize(client, directory, run_dir, state, deadline)
            if state.reopen_pending:
                reopen_evaluation(client, state.evaluation_id, deadline=deadline)
                state.reopen_pending = False
                state.save(directory)
        except PlatformError as e:
            state.save(directory)
            return SyncReport(state.evaluation_id, state.viewer_url, 0, 0, -1, f"not synced: {e}")
        eid = state.evaluation_id
        spool = Spool(directory)
        try:
            lines, records, recovered = _logged(spool, run_dir, state, sole=sole)
            sent, pending, action = _deliver(client, state, lines, records, spool, deadline)
        finally:
            state.save(directory)
            spool.close(discard_if_drained=False)
    finally:
        client.close()
    return SyncReport(eid, state.viewer_url, recovered, sent, pending, action)


def _logged(
    spool: Spool, run_dir: Path | None, state: RunState, *, sole: bool
) -> tuple[dict[str, bytes], dict[str, dict[str, Any]], int]:
    """Everything this run logged: the spool's lines and the traces' records.

    Returns (sample id -> line, sample id -> trace record, lines recovered from the traces).
    """
    lines: dict[str, bytes] = {}
    for line in spool.lines():
        try:
            lines.setdefault(str(json.loads(line)["sample_id"]), line)
        except (ValueError, KeyError, TypeError):
            continue
    records: dict[str, dict[str, Any]] = {}
    recovered = 0
    if run_dir is not None:
        ids = {state.evaluation_id, *state.local_ids}
        for record in _trace_records(run_dir, ids, sole=sole):
            records[str(record["id"])] = record
        for sid, record in records.items():
            if sid not in lines:
                try:
                    lines[sid] = record_to_line(record)
                except Exception as e:  # one malformed record must not stop the rest
                    log.warning("record %s cannot be turned into a sample: %r", sid, e)
                    continue
                recovered += 1
    return lines, records, recovered


def _deliver(
    client: PlatformClient,
    state: RunState,
    lines: dict[str, bytes],
    records: dict[str, dict[str, Any]],
    spool: Spool,
    deadline: float,
) -> tuple[int, int, str]:
    """Send what the server lacks, then close the run. Returns (sent, pending, action)."""
    eid = state.evaluation_id
    sent = pending = 0
    try:
        held = server_sample_ids(client, eid, deadline=deadline)
        missing = [line for sid, line in lines.items() if sid not in held]
        if state.phase != "finished" and missing:
            sent, rejected = _send(client, eid, missing, deadline, spool)
            held.update(lines)
            missing = []
            if rejected:
                log.warning("%d sample(s) refused for good (rejected.jsonl)", rejected)
        pending = len(missing) if state.phase != "finished" else 0
        action = _close(client, state, records, held, deadline)
    except PlatformError as e:
        pending = max(pending, len(lines) - sent) if state.phase != "finished" else 0
        action = f"not closed: {e}"
        if isinstance(e, APIError) and e.status_code == 409:
            action = f"not closed: the evaluation was closed on the platform ({e})"
    return sent, pending, action


def _close(
    client: PlatformClient,
    state: RunState,
    records: dict[str, dict[str, Any]],
    held: set[str],
    deadline: float,
) -> str:
    """Close the evaluation as its process would have (see the module docstring)."""
    if state.phase == "finish_pending" and state.pending_finish is not None:
        pf = state.pending_finish
        return settle(
            client, state, status=pf.status, error=pf.error, summary=pf.summary, deadline=deadline
        )
    if state.phase == "open" and state.attached:
        return "samples sent; status left to the launcher"
    if state.phase == "open":
        # The process died before finish(): finalize a complete run, else it crashed.
        done, expected = len(held), state.expected_samples
        status: RunStatus = "failed"
        of = f" of {expected}" if expected is not None else ""
        error: str | None = (
            f"crashed: the eval process stopped; the platform holds {done}{of} episodes"
        )
        if expected is not None and done >= expected:
            status, error = "completed", None
        return settle(
            client,
            state,
            status=status,
            error=error,
            summary=summarize(r for sid, r in records.items() if sid in held),
            deadline=deadline,
        )
    return "nothing to close"


def sync_run_dir(
    path: Path, *, api_url: str | None = None, api_key: str | None = None, timeout: float = 120.0
) -> list[SyncReport]:
    """Send everything a run directory (or one spool directory) holds that the platform lacks.

    Raises:
        ConfigError: no platform state under `path`, no API key, or the run is still uploading.
    """
    if (path / STATE_FILE).is_file():
        dirs, run_dir = [path], None
    else:
        dirs, run_dir = spool_dirs(path), path
    if not dirs:
        raise ConfigError(
            f"{path} holds no platform state (no platform/*/run.json): it was run with --no-push "
            "or without an API key; run it again with PROCTOR_API_KEY set to upload it"
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
