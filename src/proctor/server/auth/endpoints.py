"""`/user/whoami` and `/user/teams`: who the key belongs to, for clients that ask."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from proctor.server.auth import challenges, service
from proctor.server.auth.dependencies import CurrentPrincipal, key_from_headers
from proctor.server.auth.schemas import (
    ChallengeOut,
    ChallengeRequest,
    ChallengeStatus,
    TeamOut,
    TeamsResponse,
    WhoAmI,
    WhoAmIResponse,
)
from proctor.server.db.base import as_utc
from proctor.server.db.models import Team
from proctor.server.deps import ReadSession, SettingsDep, WriteSession
from proctor.server.openapi import errors

router = APIRouter(tags=["user"])


TEAMS_LIMIT_MAX = 100
"""Page sizes above this are clamped, not refused."""


def _team_out(team: Team, role: str) -> TeamOut:
    return TeamOut(
        id=team.id,
        teamId=team.id,
        slug=team.id,
        name=team.name,
        role=role,
        createdAt=team.created_at,
    )


@router.get("/user/whoami", response_model=WhoAmIResponse)
def whoami(principal: CurrentPrincipal, session: ReadSession) -> WhoAmIResponse:
    """The key's user and teams."""
    principal.require_unscoped()
    teams = [_team_out(t, role) for t, role in service.teams_of(session, principal)]
    return WhoAmIResponse(
        data=WhoAmI(
            id=principal.user_id,
            slug=principal.user_name,
            name=principal.user_name,
            is_admin=principal.is_admin,
            teams=teams,
        )
    )


@router.get("/user/teams", response_model=TeamsResponse)
def teams(
    principal: CurrentPrincipal,
    session: ReadSession,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
    limit: Annotated[int, Query(ge=1, le=2**31 - 1)] = 100,
) -> TeamsResponse:
    """The teams of the key's user, with the user's role in each (one page)."""
    principal.require_unscoped()
    limit = min(limit, TEAMS_LIMIT_MAX)
    found = service.teams_of(session, principal)
    page = [_team_out(t, role) for t, role in found[offset : offset + limit]]
    return TeamsResponse(data=page, total_count=len(found), offset=offset, limit=limit)


@router.post(
    "/auth_challenge/generate",
    response_model=ChallengeOut,
    responses=errors(422, 429),
    tags=["auth"],
)
def generate_challenge(
    body: ChallengeRequest, request: Request, session: WriteSession, settings: SettingsDep
) -> ChallengeOut:
    """Start a `prime login` (no key needed): a code to approve in the dashboard and a token
    to poll with. Rate-limited per client address."""
    address = request.client.host if request.client else "unknown"
    challenge, token = challenges.generate(session, body.encryptionPublicKey, body.limits, address)
    public = settings.resolved_public_url() or str(request.base_url).rstrip("/")
    return ChallengeOut(
        challenge=challenge.code,
        status_auth_token=token,
        expires_at=as_utc(challenge.expires_at) or challenge.expires_at,
        approve_url=f"{public}/dashboard/tokens/challenge?code={challenge.code}",
    )


@router.get(
    "/auth_challenge/status",
    response_model=ChallengeStatus,
    responses=errors(404, 429),
    tags=["auth"],
)
def challenge_status(
    request: Request,
    session: WriteSession,
    challenge: Annotated[str, Query(min_length=1, max_length=16)],
) -> ChallengeStatus:
    """Poll a challenge with `Authorization: Bearer <status_auth_token>`: pending, then once
    the new key encrypted to the CLI's public key; 404 once expired, denied or collected."""
    result = challenges.collect(session, challenge, key_from_headers(request))
    return ChallengeStatus(status="pending" if result is None else "approved", result=result)
