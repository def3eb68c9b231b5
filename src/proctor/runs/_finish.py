"""Closing a run's evaluation, one rule for `Run.finish()` and `proctor runs sync`.

A run is finalized (`COMPLETED`) only once the platform acknowledged every sample it logged;
the caller establishes that (the uploader drained, or sync checked the server's ids) and
then settles the run here, under the upload policy (transient failures retried until the
deadline). What was done is recorded in the run's state, so a later sync knows.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from proctor.errors import APIError, PlatformError
from proctor.runs._client import PlatformClient
from proctor.runs._evaluations import close_evaluation
from proctor.runs._state import PendingFinish, RunState, RunStatus

log = logging.getLogger(__name__)


def settle(
    client: PlatformClient,
    state: RunState,
    *,
    status: RunStatus,
    error: str | None,
    summary: Mapping[str, Any],
    deadline: float,
) -> str:
    """Close the evaluation as asked; on success the state says `finished`.

    Raises:
        APIError: 409: the evaluation was closed on the platform first (the state says
            `finished`: a replay would be refused again).
        PlatformError: the platform refused or stayed unreachable until `deadline`; the
            state then says `finish_pending` with this finish to replay.
    """
    if state.shard is not None:
        # One slice of many: whoever runs them all (a launcher, `proctor evals finalize`)
        # closes the evaluation once every slice is in.
        action = f"shard {state.shard} done; the evaluation stays open for the other shards"
        state.phase, state.final_status, state.pending_finish = "finished", action, None
        log.info("run %s: %s", state.evaluation_id, action)
        return action
    try:
        action = close_evaluation(
            client,
            state.evaluation_id,
            attached=state.attached,
            status=status,
            error=error,
            summary=summary,
            metadata=state.config,
            deadline=deadline,
        )
    except APIError as e:
        if e.status_code == 409:
            # Closed on the platform first: nothing is left for a sync to send.
            state.phase, state.final_status, state.pending_finish = "finished", "refused", None
        else:
            leave_pending(state, status=status, error=error, summary=summary)
        raise
    except PlatformError:
        leave_pending(state, status=status, error=error, summary=summary)
        raise
    state.phase, state.final_status, state.pending_finish = "finished", action, None
    log.info("run %s: %s", state.evaluation_id, action)
    return action


def leave_pending(
    state: RunState, *, status: RunStatus, error: str | None, summary: Mapping[str, Any]
) -> None:
    """Record a finish that `proctor runs sync` must complete."""
    state.phase = "finish_pending"
    state.pending_finish = PendingFinish(status=status, error=error, summary=dict(summary))
