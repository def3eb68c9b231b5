"""`/user/whoami` and `/user/teams`: who the key belongs to, for clients that ask."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from proctor.server.auth import service
from proctor.server.auth.dependencies import CurrentPrincipal
from proctor.server.auth.schemas import TeamOut, TeamsResponse, WhoAmI, WhoAmIResponse
from proctor.server.db.models import Team
from proctor.server.deps import ReadSession

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
