"""`/user/whoami` and `/user/teams`: who the key belongs to, for clients that ask."""

from __future__ import annotations

from fastapi import APIRouter

from proctor.server.auth import service
from proctor.server.auth.dependencies import CurrentPrincipal
from proctor.server.auth.schemas import TeamOut, TeamsResponse, WhoAmI, WhoAmIResponse
from proctor.server.db.models import Team
from proctor.server.deps import ReadSession

router = APIRouter(tags=["user"])


def _team_out(team: Team) -> TeamOut:
    return TeamOut(id=team.id, teamId=team.id, slug=team.id, name=team.name)


@router.get("/user/whoami", response_model=WhoAmIResponse)
def whoami(principal: CurrentPrincipal, session: ReadSession) -> WhoAmIResponse:
    """The key's user and teams."""
    principal.require_unscoped()
    teams = [_team_out(t) for t in service.teams_of(session, principal)]
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
def teams(principal: CurrentPrincipal, session: ReadSession) -> TeamsResponse:
    """The teams of the key's user."""
    principal.require_unscoped()
    return TeamsResponse(data=[_team_out(t) for t in service.teams_of(session, principal)])
