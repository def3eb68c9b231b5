"""How a run gets its evaluation: attach, reopen on resume, create, or go on offline.

One run directory, one evaluation: a resumed run takes back the evaluation its earlier
attempt created (reopen), or creates it with the earlier attempt's Idempotency-Key when
that attempt ran offline. A platform that stays unreachable, or refuses to create the evaluation (a
mistyped or revoked key, 401/403, a certificate, DNS), makes the run go on offline (when it
has a run directory to keep its records in), so no paid model call is lost: `proctor runs
sync` creates or reopens the evaluation later, with the key set then (`proctor.runs._sync`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proctor.contract import FINALIZED_STATUSES
from proctor.errors import APIError, NothingToResume, PlatformError
from proctor.runs._client import PlatformClient, PlatformUnreachable, is_transient
from proctor.runs._evaluations import check_attachable, create_evaluation, reopen_evaluation
from proctor.runs._state import PendingCreate, RunState

log = logging.getLogger(__name__)

REOPEN_WAIT_S = 5.0
"""How long a resumed run tries to reopen its evaluation before it goes on offline."""


@dataclass(frozen=True)
class Wanted:
    """The evaluation a run asks for: what a created one is made of, and where."""

    name: str
    environments: Sequence[str]
    model: str
    config: Mapping[str, Any] | None
    team_id: str | None
    api_url: str
    expected_samples: int | None
    framework: str = "proctor"


def open_state(
    client: PlatformClient,
    wanted: Wanted,
    *,
    attach_id: str | None,
    previous: RunState | None,
    can_go_offline: bool,
    shard: str | None = None,
) -> tuple[RunState, bool]:
    """The run's state and whether it is offline; the client is closed if this raises.

    Raises:
        AttachError: `attach_id` given and the evaluation cannot be attached to.
        PlatformError: the evaluation could not be created or resumed.
    """
    try:
        if attach_id is not None:
            return attach(client, attach_id, wanted, shard=shard), False
        return open_own(client, previous, wanted, can_go_offline=can_go_offline)
    except BaseException:
        client.close()
        raise


def attach(
    client: PlatformClient, evaluation_id: str, wanted: Wanted, *, shard: str | None = None
) -> RunState:
    """The state of a run attached to an evaluation created elsewhere (e.g. by a launcher);
    `shard` (`I/N`) when it writes one slice of it beside other processes."""
    record = check_attachable(client, evaluation_id)
    return RunState(
        evaluation_id=evaluation_id,
        api_url=wanted.api_url,
        attached=True,
        name=wanted.name,
        viewer_url=record.get("viewer_url"),
        expected_samples=wanted.expected_samples,
        shard=shard,
    )


def open_own(
    client: PlatformClient,
    previous: RunState | None,
    wanted: Wanted,
    *,
    can_go_offline: bool,
) -> tuple[RunState, bool]:
    """The state of a run that owns its evaluation: reopened, created, or offline."""
    if previous is not None and previous.pending_create is None:
        return _resume(client, previous, wanted, can_go_offline=can_go_offline)
    return _create(client, previous, wanted, can_go_offline=can_go_offline)


def _resume(
    client: PlatformClient, previous: RunState, wanted: Wanted, *, can_go_offline: bool
) -> tuple[RunState, bool]:
    """Reopen the evaluation the earlier attempt created; a COMPLETED one is the whole run
    (nothing to resume), another closed one (TIMEOUT) gets a successor.

    Raises:
        NothingToResume: the platform holds the evaluation as COMPLETED, whatever the
            earlier attempt recorded (it may have died before the finalize's answer came).
    """
    try:
        attempts = reopen_evaluation(
            client, previous.evaluation_id, deadline=time.monotonic() + REOPEN_WAIT_S
        )
    except PlatformError as e:
        if isinstance(e, APIError) and e.status_code == 409:
            _refuse_if_completed(client, previous)
            log.warning(
                "evaluation %s takes no more samples (%s); resuming into a new evaluation",
                previous.evaluation_id,
                e,
            )
            return _create(client, None, wanted, can_go_offline=can_go_offline)
        if not is_transient(e) and not _refused_key(e):
            raise PlatformError(f"cannot resume evaluation {previous.evaluation_id} ({e})") from e
        if not can_go_offline:
            raise
        _warn_offline(e)
        state = previous.model_copy(
            update={"phase": "open", "pending_finish": None, "reopen_pending": True}
        )
        return state, True
    log.info("resuming evaluation %s (attempt %d)", previous.evaluation_id, attempts)
    state = previous.model_copy(
        update={
            "phase": "open",
            "pending_finish": None,
            "final_status": None,
            "config": dict(wanted.config or {}),
            "expected_samples": wanted.expected_samples,
            "reopen_pending": False,
        }
    )
    return state, False


def _refuse_if_completed(client: PlatformClient, previous: RunState) -> None:
    """Raise `NothingToResume` when the platform holds the evaluation as COMPLETED."""
    try:
        record = client.call("GET", f"/evaluations/{previous.evaluation_id}", attempts=3)
    except PlatformError:
        return
    status = str(record.get("status") or "").upper()
    if status not in FINALIZED_STATUSES:  # PROCESSING: its statistics are being computed
        return
    where = record.get("viewer_url") or previous.viewer_url
    total = record.get("total_samples")
    held = f" with its {total} samples" if isinstance(total, int) else ""
    at = f" ({where})" if where else ""
    raise NothingToResume(
        f"nothing to resume: this run's evaluation {previous.evaluation_id} is already "
        f"{status}{held}{at}; start a new run to evaluate again"
    )


def _create(
    client: PlatformClient, previous: RunState | None, wanted: Wanted, *, can_go_offline: bool
) -> tuple[RunState, bool]:
    """Create the evaluation, with the earlier offline attempt's key when there is one."""
    key = (
        previous.pending_create.key
        if previous is not None and previous.pending_create is not None
        else uuid.uuid4().hex
    )
    try:
        created = create_evaluation(
            client,
            name=wanted.name,
            environments=wanted.environments,
            model=wanted.model,
            config=wanted.config,
            team_id=wanted.team_id,
            key=key,
            framework=wanted.framework,
        )
    except PlatformError as e:
        # Whatever kept the evaluation from being created (down, a refused key, TLS, DNS),
        # the model calls about to be paid for are kept for a later sync.
        if not can_go_offline:
            if isinstance(e, PlatformUnreachable):
                raise PlatformError(str(e)) from e
            raise
        _warn_offline(e)
        return _offline(previous, wanted, key, reason=str(e)), True
    state = RunState(
        evaluation_id=str(created["evaluation_id"]),
        api_url=wanted.api_url,
        attached=False,
        name=wanted.name,
        viewer_url=created.get("viewer_url"),
        config=dict(wanted.config or {}),
        expected_samples=wanted.expected_samples,
        create_key=key,
        local_ids=[previous.evaluation_id] if previous is not None else [],
    )
    return state, False


def _refused_key(e: PlatformError) -> bool:
    """True when the platform refused the key (401/403): a sync with the right key succeeds."""
    return isinstance(e, APIError) and e.status_code in (401, 403)


def _offline(
    previous: RunState | None, wanted: Wanted, key: str, *, reason: str | None = None
) -> RunState:
    """The state of a run whose evaluation `proctor runs sync` creates later, with `key`."""
    pending = PendingCreate(
        reason=reason,
        key=key,
        environments=list(wanted.environments),
        model=wanted.model,
        team_id=wanted.team_id,
        framework=wanted.framework,
    )
    return RunState(
        evaluation_id=previous.evaluation_id if previous is not None else f"offline-{key[:16]}",
        api_url=wanted.api_url,
        attached=False,
        name=wanted.name,
        config=dict(wanted.config or {}),
        expected_samples=wanted.expected_samples,
        pending_create=pending,
    )


def _warn_offline(e: Exception) -> None:
    log.warning("%s; the run goes on offline: upload it later with `proctor runs sync`", e)
