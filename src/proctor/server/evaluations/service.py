"""Rules of evaluations: who sees what, status changes, finalize and the statistics task.

A key sees its user's evaluations, those of its user's teams and public ones (admins see
all); anything else answers 404 without telling whether it exists. A key scoped to one
evaluation may reach only that one (403 `scope_denied` elsewhere). `COMPLETED` only comes
from finalize; `PUT` may set `FAILED` or `CANCELLED`; any status change on a terminal run
answers 409.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Collection
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from proctor.contract import (
    CLOSED_STATUSES,
    ERROR_MESSAGE_MAX,
    REOPENABLE_STATUSES,
    SETTABLE_STATUSES,
    TERMINAL_STATUSES,
    Status,
)
from proctor.server.auth.schemas import Principal
from proctor.server.db.base import utcnow
from proctor.server.db.models import Evaluation, Sample
from proctor.server.db.session import Database
from proctor.server.environments import repository as environments
from proctor.server.errors import Conflict, Forbidden, InvalidInput, NotVisible
from proctor.server.evaluations import repository, stats
from proctor.server.evaluations.schemas import CreateEvaluation, UpdateEvaluation
from proctor.server.teams import check_team

logger = logging.getLogger(__name__)


def transition(
    session: Session,
    evaluation: Evaluation | str,
    status: str,
    *,
    now: datetime | None = None,
    error_message: str | None = None,
    only_from: Collection[str] | None = None,
    reopen: bool = False,
) -> bool:
    """Change an evaluation's status: the one place any status changes (PUT, finalize, a reopen,
    the statistics task, a cancel, the launcher).

    Every change writes the same: `status` and `updated_at`, `started_at` on RUNNING,
    `completed_at` on a terminal status, and `error_message` (capped) when given. It happens
    only from `only_from`, by default from any status that is not terminal; returns whether
    it happened. A loaded `Evaluation` (locked by the caller) changes in place; an id changes
    with one conditional UPDATE, without loading the row (the launcher's way).

    A `reopen` (a resumed run taking its evaluation back) clears `completed_at` and
    `error_message`, keeps `started_at` and counts one more attempt.
    """
    now = now or utcnow()
    values: dict[str, object] = {"status": str(status), "updated_at": now}
    if reopen:
        attempts = (
            evaluation.attempts + 1
            if isinstance(evaluation, Evaluation)
            else Evaluation.attempts + 1
        )
        values.update(completed_at=None, error_message=None, attempts=attempts)
    elif status == Status.RUNNING:
        values["started_at"] = now
    if status in TERMINAL_STATUSES:
        values["completed_at"] = now
    if error_message is not None:
        values["error_message"] = _cap(error_message)
    if not isinstance(evaluation, Evaluation):
        return repository.update_status(session, evaluation, values, only_from=only_from)
    current = evaluation.status
    if (current not in only_from) if only_from is not None else (current in TERMINAL_STATUSES):
        return False
    for name, value in values.items():
        setattr(evaluation, name, value)
    return True


def can_write(principal: Principal, evaluation: Evaluation) -> bool:
    """Whether the principal may change the evaluation (public ones are read-only to others)."""
    return (
        principal.is_admin
        or evaluation.user_id == principal.user_id
        or (evaluation.team_id is not None and evaluation.team_id in principal.team_ids)
    )


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
    repository.add(session, evaluation)
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
) -> tuple[list[Evaluation], int]:
    """A page of the evaluations the principal sees, newest first, and the total."""
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

    Raises:
        InvalidInput: `status` is not FAILED or CANCELLED, or a non-nullable field is null.
        Conflict: `status` was sent for a run that is already terminal.
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
    if "status" in fields and evaluation.status in TERMINAL_STATUSES:
        raise Conflict(
            f"Evaluation {evaluation_id} is already {evaluation.status}; its status cannot change.",
            code="evaluation_closed",
        )
    now = utcnow()
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
    if "status" in fields and payload.status is not None:
        transition(session, evaluation, payload.status, now=now)
    evaluation.updated_at = now
    return evaluation


def _cap(message: str | None) -> str | None:
    # Clients truncate to 4096 themselves and document that the server caps it too.
    return None if message is None else message[:ERROR_MESSAGE_MAX]


def finalize(
    session: Session, principal: Principal, evaluation_id: str, metrics: dict[str, Any] | None
) -> Evaluation:
    """Move the run to PROCESSING (the statistics task then completes it).

    Finalizing a PROCESSING or COMPLETED run again succeeds; non-empty `metrics` replace the
    stored document (an empty one keeps it, since clients send `{}` when they have none).

    Raises:
        Conflict: The run is FAILED, CANCELLED or TIMEOUT.
    """
    evaluation = get_visible(session, principal, evaluation_id, write=True, for_update=True)
    if evaluation.status in CLOSED_STATUSES:
        raise Conflict(
            f"Evaluation {evaluation_id} is {evaluation.status} and cannot be finalized.",
            code="evaluation_closed",
        )
    now = utcnow()
    if metrics:
        evaluation.metrics = metrics
    transition(session, evaluation, Status.PROCESSING, now=now)  # a COMPLETED run stays so
    evaluation.finalized_at = now
    evaluation.updated_at = now
    return evaluation


def reopen(session: Session, principal: Principal, evaluation_id: str) -> Evaluation:
    """A resumed run takes its evaluation back: RUNNING again, one more attempt (extension).

    Only the run's own closings are undone: RUNNING (its process crashed), FAILED or
    CANCELLED. A COMPLETED, PROCESSING or TIMEOUT evaluation, and any a launcher owns, stays
    as it is.

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
    if evaluation.status not in REOPENABLE_STATUSES:
        raise Conflict(
            f"Evaluation {evaluation_id} is {evaluation.status} and cannot be reopened; "
            "start a new run instead.",
            code="evaluation_closed",
        )
    transition(session, evaluation, Status.RUNNING, only_from=REOPENABLE_STATUSES, reopen=True)
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
        transition(session, evaluation, Status.COMPLETED, only_from=(Status.PROCESSING,))
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


# Dashboard reads: each checks visibility like the API, then runs one repository query.


def get_sample(
    session: Session, principal: Principal, evaluation_id: str, sample_id: str
) -> tuple[Evaluation, Sample]:
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
) -> list[Sample]:
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


def reward_histogram(session: Session, evaluation: Evaluation, *, edges: list[float]) -> list[int]:
    """Reward counts per bin `[edges[i], edges[i+1])` of an evaluation already checked visible."""
    return repository.reward_histogram(session, evaluation.id, edges=edges)


def count_errored(session: Session, evaluation: Evaluation) -> int:
    """How many samples of an evaluation already checked visible errored."""
    return repository.count_errored(session, evaluation.id)


def example_shapes(
    session: Session, evaluation: Evaluation, *, threshold: float, low: float, width: float
) -> list[tuple[int, int, int, int, float]]:
    """Examples counted by (rollouts, passes, mean-reward bucket); see the repository."""
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
