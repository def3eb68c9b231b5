"""Rules of evaluations: who sees what, status changes, finalize and the statistics task.

A key sees its user's evaluations, those of its user's teams and public ones (admins see
all); anything else answers 404 without telling whether it exists. A key scoped to one
evaluation may reach only that one (403 `scope_denied` elsewhere). `COMPLETED` only comes
from finalize; `PUT` may set `FAILED` or `CANCELLED`. Status changes follow the one table,
`proctor.contract.TRANSITIONS`, applied by `transition`. Closed means closed: once a run is
finalized or ended, its samples, statistics, metrics and timestamps never change (409
`evaluation_closed`); only name, description and tags stay editable. A new name, like a
delete, is for the evaluation's owner, an admin of its team or a platform admin.
"""

from __future__ import annotations

import json
import logging
import math
from datetime import datetime
from typing import Any

from sqlalchemy import func
from sqlalchemy.orm import Session

from proctor.contract import (
    ERROR_MESSAGE_MAX,
    EVENT_OF_STATUS,
    OPEN_STATUSES,
    SETTABLE_STATUSES,
    TERMINAL_STATUSES,
    TRANSITIONS,
    Event,
    Status,
)
from proctor.server.auth import repository as auth_repository
from proctor.server.auth.schemas import Principal
from proctor.server.db.base import utcnow
from proctor.server.db.models import Evaluation, SampleRow
from proctor.server.db.session import Database
from proctor.server.environments import repository as environments
from proctor.server.environments import service as environment_service
from proctor.server.errors import Conflict, Forbidden, InvalidInput, NotVisible
from proctor.server.evaluations import repository, stats, tallies
from proctor.server.evaluations.schemas import CreateEvaluation, UpdateEvaluation
from proctor.server.teams import check_team

logger = logging.getLogger(__name__)


def transition(
    session: Session,
    evaluation: Evaluation | str,
    event: Event,
    *,
    now: datetime | None = None,
    error_message: str | None = None,
) -> bool:
    """Apply one event of `proctor.contract.TRANSITIONS`: the one place any status changes
    (PUT, finalize, a reopen, the statistics task, a cancel, the launcher).

    The change is one conditional UPDATE (`... WHERE status IN <the event's from-statuses>`),
    so of two racing events exactly one wins on either database; returns whether this one
    did. Every change writes the same: `status` and `updated_at`, `started_at` on START,
    `completed_at` on reaching a terminal status (kept when already set), and
    `error_message` (capped) when given. A loaded `Evaluation` is updated in place too.

    A REOPEN (a resumed run taking its evaluation back) clears `completed_at` and
    `error_message`, keeps `started_at` and counts one more attempt.
    """
    allowed, target = TRANSITIONS[event]
    row = evaluation if isinstance(evaluation, Evaluation) else None
    evaluation_id = evaluation.id if isinstance(evaluation, Evaluation) else evaluation
    if row is not None and row.status not in allowed:
        return False
    now = now or utcnow()
    values: dict[str, Any] = {"status": str(target), "updated_at": now}
    if event == Event.REOPEN:
        values.update(completed_at=None, error_message=None, attempts=Evaluation.attempts + 1)
    elif event == Event.START:
        values["started_at"] = now
    if target in TERMINAL_STATUSES:
        values["completed_at"] = func.coalesce(Evaluation.completed_at, now)
    if error_message is not None:
        values["error_message"] = _cap(error_message)
    if not repository.update_status(session, evaluation_id, values, only_from=allowed):
        return False
    if row is not None:
        session.refresh(row, attribute_names=sorted(values))
    return True


def can_write(principal: Principal, evaluation: Evaluation) -> bool:
    """Whether the principal may change the evaluation (public ones are read-only to others)."""
    return (
        principal.is_admin
        or evaluation.user_id == principal.user_id
        or (evaluation.team_id is not None and evaluation.team_id in principal.team_ids)
    )


TEAM_ADMIN_ROLES = frozenset({"admin", "owner"})
"""Team roles that may rename and delete the team's evaluations."""


def may_manage(session: Session, principal: Principal, evaluation: Evaluation) -> bool:
    """Whether the principal may rename the evaluation (and, unscoped, delete it): its owner,
    an admin of its team or a platform admin. A key scoped to the evaluation acts as its owner."""
    if principal.is_admin or evaluation.user_id == principal.user_id:
        return True
    if evaluation.team_id is None:
        return False
    member = auth_repository.membership(session, evaluation.team_id, principal.user_id)
    return member is not None and member.role in TEAM_ADMIN_ROLES


def _unknown(evaluation_id: str) -> NotVisible:
    return NotVisible(
        f"No evaluation with id {evaluation_id!r} is visible to this key; check the id and key."
    )


def get_visible(
    session: Session,
    principal: Principal,
    evaluation_id: str,
    *,
    write: bool = False,
    for_update: bool = False,
) -> Evaluation:
    """The evaluation if the principal may read it (or, with `write`, change it).

    Raises:
        ScopeDenied: A scoped key asked for another evaluation.
        NotVisible: It does not exist or is not visible to this key.
        Forbidden: It is visible (public) but not writable by this key.
    """
    principal.require_evaluation(evaluation_id)
    evaluation = repository.get_readable(session, principal, evaluation_id, for_update=for_update)
    if evaluation is None:
        raise _unknown(evaluation_id)
    if write and not can_write(principal, evaluation):
        raise Forbidden("This evaluation is public but belongs to someone else; it is read-only.")
    return evaluation


def _environment_fields(session: Session, refs: list[dict[str, Any]]) -> dict[str, list[Any]]:
    ids = [str(ref["id"]) for ref in refs]
    names = environments.names_by_ids(session, ids)
    for ref in refs:
        # What ran, as the hub names it (`owner/name@version`); the server's word, not the
        # client's.
        ref.pop("ref", None)
        if (ran := environment_service.ran_ref(session, ref)) is not None:
            ref["ref"] = ran
    return {
        "environments": refs,
        "environment_ids": ids,
        "environment_names": [names[i] for i in ids if i in names],
    }


def create_evaluation(
    session: Session,
    principal: Principal,
    payload: CreateEvaluation,
    *,
    metadata_raw: str | None = None,
    status: str = "RUNNING",
    is_hosted: bool = False,
    create_key: str | None = None,
) -> Evaluation:
    """Create an evaluation owned by the principal's user (and team, if `team_id` is set).

    Args:
        session: A write session.
        principal: Who creates it.
        payload: The validated create body.
        metadata_raw: The exact JSON text of `metadata` as sent; defaults to the payload's
            `metadata` re-encoded (or `{}`).
        status: Initial status: `RUNNING`, or `PENDING` for a hosted run not started yet.
        is_hosted: Whether the hosted launcher runs it.
        create_key: The request's Idempotency-Key: a create replayed with it (a client that
            lost the answer, or `proctor runs sync` run twice) returns the first evaluation.
    """
    principal.require_unscoped()
    team_id = check_team(session, principal, payload.team_id)
    if create_key is not None:
        earlier = repository.find_created(session, principal.user_id, create_key)
        if earlier is not None:
            return earlier
    if metadata_raw is None or payload.metadata is None:
        metadata_raw = "{}" if payload.metadata is None else _encode(payload.metadata)
    now = utcnow()
    evaluation = Evaluation(
        name=payload.name,
        status=status,
        model_name=payload.model_name,
        dataset=payload.dataset,
        framework=payload.framework,
        task_type=payload.task_type,
        description=payload.description,
        tags=list(payload.tags),
        metadata_raw=metadata_raw,
        metrics=payload.metrics or {},
        run_id=payload.run_id,
        suite_id=payload.suite_id,
        is_hosted=is_hosted,
        is_public=bool(payload.is_public),
        team_id=team_id,
        user_id=principal.user_id,
        created_at=now,
        updated_at=now,
        started_at=now if status == "RUNNING" else None,
        create_key=create_key,
        **_environment_fields(session, [ref.model_dump() for ref in payload.environments]),
    )
    evaluation = repository.add(session, evaluation)
    logger.info("created evaluation %s (%s)", evaluation.id, evaluation.name)
    return evaluation


def _encode(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def list_evaluations(
    session: Session,
    principal: Principal,
    *,
    skip: int,
    limit: int,
    team_id: str | None = None,
    environment_name: str | None = None,
    suite_id: str | None = None,
    status: str | None = None,
    model_name: str | None = None,
    is_hosted: bool | None = None,
    tag: str | None = None,
    search: str | None = None,
    order: repository.EvaluationOrder = "created",
    descending: bool = True,
) -> tuple[list[Evaluation], int]:
    """A page of the evaluations the principal sees, newest first (or by `order`), and
    the total."""
    principal.require_unscoped()
    team = check_team(session, principal, team_id)
    return repository.list_visible(
        session,
        principal,
        skip=skip,
        limit=limit,
        team_id=team,
        environment_name=environment_name,
        suite_id=suite_id,
        status=status,
        model_name=model_name,
        is_hosted=is_hosted,
        tag=tag,
        search=search,
        order=order,
        descending=descending,
    )


def update_evaluation(
    session: Session,
    principal: Principal,
    evaluation_id: str,
    payload: UpdateEvaluation,
    *,
    metadata_raw: str | None = None,
) -> Evaluation:
    """Apply a partial update; `metadata`/`metrics` replace whole documents.

    Closed means closed: once the run left RUNNING (finalized, failed, cancelled, timed out)
    only name, description and tags change; a value equal to the stored one is no change.
    A new name follows `may_manage` (a `name` equal to the stored one is no rename).

    Raises:
        InvalidInput: `status` is not FAILED or CANCELLED, or a non-nullable field is null.
        Forbidden: A new name from a key that is not the owner's, a team admin's or a
            platform admin's.
        Conflict: The run is closed and the update would change its result or status, or a
            finalize won the race against this status change (`evaluation_closed`).
    """
    fields = payload.model_fields_set
    if "status" in fields:
        if payload.status == "COMPLETED":
            raise InvalidInput(
                "status COMPLETED is set only by POST /evaluations/{id}/finalize; "
                "call finalize, or send FAILED or CANCELLED.",
                code="invalid_status",
            )
        if payload.status not in SETTABLE_STATUSES:
            raise InvalidInput(
                f"status may only be FAILED or CANCELLED, not {payload.status!r}; "
                "send one of those.",
                code="invalid_status",
            )
    if "name" in fields and payload.name is None:
        raise InvalidInput("name may not be null; send a non-empty name or leave it out.")
    evaluation = get_visible(session, principal, evaluation_id, write=True, for_update=True)
    if "name" in fields and payload.name != evaluation.name:
        _require_rename(session, principal, evaluation)
    if evaluation.status not in OPEN_STATUSES:
        _refuse_closed_changes(evaluation, payload, fields)
    now = utcnow()
    if "status" in fields and payload.status is not None and payload.status != evaluation.status:
        event = EVENT_OF_STATUS[Status(payload.status)]
        if not transition(session, evaluation, event, now=now):
            raise _closed(evaluation, "status")
    for name in ("name", "description", "model_name", "dataset", "framework", "task_type"):
        if name in fields:
            setattr(evaluation, name, getattr(payload, name))
    if "tags" in fields:
        evaluation.tags = list(payload.tags or [])
    if "metadata" in fields:
        if payload.metadata is None:
            evaluation.metadata_raw = "{}"
        else:
            evaluation.metadata_raw = metadata_raw or _encode(payload.metadata)
    if "metrics" in fields:
        evaluation.metrics = payload.metrics or {}
    if "error_message" in fields:
        evaluation.error_message = _cap(payload.error_message)
    if session.is_modified(evaluation):  # a PUT of the stored values changes nothing
        evaluation.updated_at = now
    return evaluation


def _require_rename(session: Session, principal: Principal, evaluation: Evaluation) -> None:
    if not may_manage(session, principal, evaluation):
        raise Forbidden(
            f"only the owner of evaluation {evaluation.id}, an admin of its team or a platform "
            "admin may rename it; ask one of them, or send the name it has"
        )


# What a closed evaluation keeps editable; every other field is part of its result.
_EDITABLE_WHEN_CLOSED = frozenset({"name", "description", "tags"})


def _closed(evaluation: Evaluation, refused: str) -> Conflict:
    return Conflict(
        f"Evaluation {evaluation.id} is {evaluation.status} and closed: its {refused} cannot "
        "change (only name, description and tags can); start a new run instead.",
        code="evaluation_closed",
    )


def _refuse_closed_changes(
    evaluation: Evaluation, payload: UpdateEvaluation, fields: set[str]
) -> None:
    """Refuse (409) a PUT that would change a closed evaluation's result; values equal to the
    stored ones are no change (a client retrying its own PUT succeeds)."""
    stored: dict[str, Any] = {
        "status": evaluation.status,
        "model_name": evaluation.model_name,
        "dataset": evaluation.dataset,
        "framework": evaluation.framework,
        "task_type": evaluation.task_type,
        "metrics": evaluation.metrics or {},
        "metadata": json.loads(evaluation.metadata_raw or "{}"),
        "error_message": evaluation.error_message,
    }
    sent: dict[str, Any] = {
        "metrics": payload.metrics or {},
        "metadata": payload.metadata or {},
        "error_message": _cap(payload.error_message),
    }
    changed = [
        name
        for name in sorted(fields - _EDITABLE_WHEN_CLOSED)
        if name in stored and sent.get(name, getattr(payload, name, None)) != stored[name]
    ]
    if changed:
        raise _closed(evaluation, ", ".join(changed))


def _cap(message: str | None) -> str | None:
    # Clients truncate to 4096 themselves and document that the server caps it too.
    return None if message is None else message[:ERROR_MESSAGE_MAX]


def finalize(
    session: Session, principal: Principal, evaluation_id: str, metrics: dict[str, Any] | None
) -> Evaluation:
    """Move the run to PROCESSING (the statistics task then completes it).

    Finalizing a PROCESSING or COMPLETED run again with the same content (no metrics, `{}`,
    or the stored ones) succeeds and changes nothing: `finalized_at` stays. Closed means
    closed: other metrics are refused, as is any finalize of a FAILED, CANCELLED or TIMEOUT
    run, or of one a cancel won the race against.

    Raises:
        Conflict: The run is closed (`evaluation_closed`).
    """
    evaluation = get_visible(session, principal, evaluation_id, write=True, for_update=True)
    if evaluation.status in (Status.PROCESSING, Status.COMPLETED):
        if metrics and metrics != (evaluation.metrics or {}):
            raise _closed(evaluation, "metrics")
        return evaluation
    if not mark_finalized(session, evaluation, metrics):
        raise Conflict(
            f"Evaluation {evaluation_id} is {evaluation.status} and cannot be finalized; "
            "its samples stay as they are.",
            code="evaluation_closed",
        )
    return evaluation


def mark_finalized(
    session: Session, evaluation: Evaluation, metrics: dict[str, Any] | None
) -> bool:
    """Apply FINALIZE (PROCESSING, with the run's summary `metrics`); whether this call did.

    The one finalize rule for a run's own `finalize` and the launcher closing a sharded
    evaluation; `complete_statistics` then completes it.
    """
    now = utcnow()
    if not transition(session, evaluation, Event.FINALIZE, now=now):
        return False
    if metrics:
        evaluation.metrics = metrics
    evaluation.finalized_at = now
    evaluation.updated_at = now
    return True


def reopen(session: Session, principal: Principal, evaluation_id: str) -> Evaluation:
    """A resumed run takes its evaluation back: RUNNING again, one more attempt (extension).

    Only the run's own closings are undone (`Event.REOPEN`): RUNNING (its process crashed),
    FAILED or CANCELLED. A COMPLETED, PROCESSING or TIMEOUT evaluation, and any a launcher
    owns, stays as it is.

    Raises:
        Conflict: The evaluation cannot be reopened.
    """
    evaluation = get_visible(session, principal, evaluation_id, write=True, for_update=True)
    if evaluation.is_hosted:
        raise Conflict(
            f"Evaluation {evaluation_id} belongs to the hosted launcher; it cannot be reopened. "
            "Start a new run instead.",
            code="evaluation_closed",
        )
    status = evaluation.status
    if not transition(session, evaluation, Event.REOPEN):
        raise Conflict(
            f"Evaluation {evaluation_id} is {status} and cannot be reopened; "
            "start a new run instead.",
            code="evaluation_closed",
        )
    logger.info("evaluation %s reopened (attempt %d)", evaluation_id, evaluation.attempts)
    return evaluation


def complete_statistics(db: Database, evaluation_id: str) -> bool:
    """The statistics task: compute the summary of a PROCESSING run and mark it COMPLETED.

    The sample counters are maintained as samples arrive, so this is O(1). Returns whether
    the run was completed (False if it left PROCESSING meanwhile, e.g. was cancelled).
    """
    with db.write() as session:
        evaluation = repository.get(session, evaluation_id, for_update=True)
        if evaluation is None or evaluation.status != "PROCESSING":
            return False
        mean = evaluation.reward_sum / evaluation.reward_count if evaluation.reward_count else None
        # Rewards near the float limit overflow their sum: no mean rather than an infinite one.
        evaluation.avg_score = mean if mean is not None and math.isfinite(mean) else None
        transition(session, evaluation, Event.COMPLETE)
    logger.info("evaluation %s completed", evaluation_id)
    # Compute the statistics of the finished run now, so no reader waits for them.
    try:
        with db.read() as session:
            completed = repository.get(session, evaluation_id)
            if completed is not None:
                stats.warm(session, completed)
    except Exception:  # a cache miss later is slower, not wrong: never fail completion
        logger.warning("could not precompute the statistics of %s", evaluation_id, exc_info=True)
    return True


def complete_pending_statistics(db: Database) -> int:
    """Complete every run left PROCESSING (e.g. by a crash); returns how many."""
    with db.read() as session:
        ids = repository.ids_with_status(session, "PROCESSING")
    return sum(complete_statistics(db, evaluation_id) for evaluation_id in ids)


def complete_stranded_statistics(db: Database, finalized_before: datetime) -> int:
    """Complete the runs still PROCESSING that were finalized before `finalized_before`: the
    server that took their finalize died before its statistics task ran (with several
    servers, no restart may come to do it). Returns how many."""
    with db.read() as session:
        ids = repository.processing_before(session, finalized_before)
    return sum(complete_statistics(db, evaluation_id) for evaluation_id in ids)


# Dashboard reads: each checks visibility like the API, then runs one repository query.


def get_sample(
    session: Session, principal: Principal, evaluation_id: str, sample_id: str
) -> tuple[Evaluation, SampleRow]:
    """The evaluation and one of its samples, if the principal may read them.

    Raises:
        NotVisible: The evaluation is not visible to this key, or has no such sample.
    """
    evaluation = get_visible(session, principal, evaluation_id)
    sample = repository.get_sample(session, evaluation_id, sample_id)
    if sample is None:
        raise NotVisible(
            f"Evaluation {evaluation_id} has no sample {sample_id!r}; check the sample id."
        )
    return evaluation, sample


def list_sample_rows(
    session: Session,
    evaluation: Evaluation,
    *,
    limit: int,
    offset: int = 0,
    order: repository.SampleOrder = "seq",
    errored: bool | None = None,
    example_id: int | None = None,
) -> list[SampleRow]:
    """A filtered, ordered slice of the samples of an evaluation already checked visible."""
    return repository.sample_rows(
        session,
        evaluation.id,
        limit=limit,
        offset=offset,
        order=order,
        errored=errored,
        example_id=example_id,
    )


def example_sample_keys(
    session: Session, evaluation: Evaluation, example_id: int, *, limit: int
) -> list[tuple[str, int | None, float | None, bool]]:
    """`(sample_id, rollout_number, reward, has_error)` of one example's samples of an
    evaluation already checked visible, in rollout order."""
    return repository.sample_keys(session, evaluation.id, example_id=example_id, limit=limit)


def reward_histogram(session: Session, evaluation: Evaluation, *, edges: list[float]) -> list[int]:
    """Reward counts per bin `[edges[i], edges[i+1])` of an evaluation already checked visible.

    The running tallies answer for the bars of [0, 1]; other edges are counted afresh.
    """
    kept = tallies.load(evaluation.tallies)
    if kept is not None and edges == tallies.UNIT_EDGES:
        return list(kept.bins)
    return repository.reward_histogram(session, evaluation.id, edges=edges)


def count_errored(session: Session, evaluation: Evaluation) -> int:
    """How many samples of an evaluation already checked visible errored."""
    kept = tallies.load(evaluation.tallies)
    if kept is not None:
        return kept.errored
    return repository.count_errored(session, evaluation.id)


def errored_examples(session: Session, evaluation: Evaluation) -> int:
    """How many examples of an evaluation already checked visible errored in every rollout."""
    kept = tallies.load(evaluation.tallies)
    if kept is not None:
        return kept.errored_examples
    return repository.errored_examples(session, evaluation.id)


def example_shapes(
    session: Session, evaluation: Evaluation, *, threshold: float, low: float, width: float
) -> list[tuple[int, int, int, int, float]]:
    """Examples counted by (rollouts, passes, mean-reward bucket); see the repository.

    The running tallies answer at their mark on [0, 1]; anything else is counted afresh.
    """
    kept = tallies.load(evaluation.tallies)
    if kept is not None and kept.mark == threshold and (low, width) == (0.0, tallies.UNIT_WIDTH):
        return tallies.example_shapes(stats.shape_rows(session, evaluation))
    return repository.example_shapes(
        session, evaluation.id, threshold=threshold, low=low, width=width
    )


def example_means(
    session: Session, evaluations: list[Evaluation], *, after: int | None, limit: int
) -> list[tuple[int, str, float | None, int]]:
    """Mean reward per example and evaluation for the first `limit` example ids above `after`.

    The page is over the example ids any of the (already visible) evaluations has.
    """
    ids: set[int] = set()
    for evaluation in evaluations:
        ids.update(repository.example_ids_after(session, evaluation.id, after=after, limit=limit))
    page = sorted(ids)[:limit]
    return repository.example_means(session, [e.id for e in evaluations], page)
