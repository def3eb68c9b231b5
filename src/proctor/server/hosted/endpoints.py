"""HTTP routes of hosted evaluations: thin wrappers over `service`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Query, Request

from proctor.sandboxes.command import MAX_SHARDS
from proctor.server.auth.dependencies import CurrentPrincipal
from proctor.server.deps import ReadSession, SettingsDep, WriteSession
from proctor.server.hosted import lifecycle, service
from proctor.server.hosted.schemas import (
    CancelledHostedEvaluation,
    CreatedHostedEvaluations,
    CreateHostedEvaluation,
    HostedLogs,
)
from proctor.server.openapi import errors

router = APIRouter(prefix="/hosted-evaluations", tags=["hosted"])


@router.post("", response_model=CreatedHostedEvaluations, responses=errors(400, 404))
def create(
    body: CreateHostedEvaluation,
    principal: CurrentPrincipal,
    session: WriteSession,
    settings: SettingsDep,
    request: Request,
    background: BackgroundTasks,
) -> CreatedHostedEvaluations:
    """Create one PENDING evaluation per environment for the launcher to run."""
    ids = service.create_hosted(session, principal, body, settings.hosted, settings)
    # Runs after the response, so after the commit: the launcher then sees the new rows.
    background.add_task(lifecycle.wake_launcher, request.app)
    return CreatedHostedEvaluations(evaluation_id=ids[0], evaluation_ids=ids)


@router.get("/{evaluation_id}/logs", response_model=HostedLogs)
def logs(
    evaluation_id: str,
    principal: CurrentPrincipal,
    session: ReadSession,
    settings: SettingsDep,
    shard: Annotated[int | None, Query(ge=0, le=MAX_SHARDS)] = None,
) -> HostedLogs:
    """The sandbox's output so far (a sharded run's: each shard's, or `shard`'s alone)."""
    text = service.read_logs(session, principal, evaluation_id, settings.hosted, shard=shard)
    return HostedLogs(logs=text, ended=service.has_ended(session, evaluation_id))


@router.patch(
    "/{evaluation_id}/cancel", response_model=CancelledHostedEvaluation, responses=errors(409)
)
def cancel(
    evaluation_id: str, principal: CurrentPrincipal, session: WriteSession
) -> CancelledHostedEvaluation:
    """Mark the evaluation CANCELLED; its launcher stops the sandbox."""
    return CancelledHostedEvaluation(message=service.cancel(session, principal, evaluation_id))
