"""The one rule about `team_id` in request bodies, shared by every domain."""

from __future__ import annotations

from sqlalchemy.orm import Session

from proctor.server.auth import repository
from proctor.server.auth.schemas import Principal
from proctor.server.errors import Forbidden


def check_team(session: Session, principal: Principal, team_id: str | None) -> str | None:
    """The team a request acts for, or None for personal (`team_id` absent or empty).

    Raises:
        Forbidden: The team does not exist or the key's user is not a member (admins may
            act for any existing team).
    """
    if team_id is None or not team_id.strip():
        return None
    if team_id in principal.team_ids:
        return team_id
    if principal.is_admin and repository.team_by_id(session, team_id) is not None:
        return team_id
    raise Forbidden(
        f"This key's user is not a member of team {team_id!r}; "
        f"add it with `proctor teams add-member {team_id} USER`.",
        code="team_forbidden",
    )
