"""HTTP routes of the environments hub."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from proctor.server.auth.dependencies import CurrentPrincipal
from proctor.server.deps import ReadSession, WriteSession
from proctor.server.environments import service
from proctor.server.environments.schemas import EnvironmentResponse, LookupRequest, ResolveRequest
from proctor.server.openapi import errors

router = APIRouter(prefix="/environmentshub", tags=["environments"])


@router.post("/resolve", response_model=EnvironmentResponse)
def resolve(
    body: ResolveRequest, principal: CurrentPrincipal, session: WriteSession
) -> EnvironmentResponse:
    """Get or create an environment by name."""
    env = service.resolve(session, principal, body.name, body.team_id)
    return EnvironmentResponse(data=service.to_out(env))


@router.post("/lookup", response_model=EnvironmentResponse, responses=errors(404))
def lookup(
    body: LookupRequest, principal: CurrentPrincipal, session: ReadSession
) -> EnvironmentResponse:
    """An environment by id."""
    return EnvironmentResponse(data=service.to_out(service.lookup(session, principal, body.id)))


@router.get("/{owner}/{name}/@latest", response_model=EnvironmentResponse)
def latest(
    owner: Annotated[str, Path(max_length=200)],
    name: Annotated[str, Path(max_length=200)],
    principal: CurrentPrincipal,
    session: ReadSession,
) -> EnvironmentResponse:
    """An environment by `owner/name`, with its latest version."""
    return EnvironmentResponse(data=service.to_out(service.latest(session, principal, owner, name)))
