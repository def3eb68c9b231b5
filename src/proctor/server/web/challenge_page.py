"""The page where a signed-in user approves a `prime login` (`/dashboard/tokens/challenge`).

`prime login` opens `{frontend}/dashboard/tokens/challenge?code=...`; signing in first goes
through `/login` and back. The page says who the new key will act as and what it may do, and
approving (or denying) is a POST that carries a token bound to the session cookie and the code,
on top of the dashboard's origin guard (`web.guard`), so no other site can approve for the user.
"""

from __future__ import annotations

import hashlib
import hmac
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Form, Query, Request, Response
from pydantic import BaseModel, ConfigDict
from sqlalchemy.orm import Session

from proctor.server.auth import challenges
from proctor.server.auth import service as auth_service
from proctor.server.auth.schemas import Principal
from proctor.server.db.base import as_utc, iso_utc, utcnow
from proctor.server.deps import ReadSession, SettingsDep, WriteSession
from proctor.server.errors import Forbidden
from proctor.server.settings import Settings
from proctor.server.web import session as web_session
from proctor.server.web.routes import PageRoute, render

router = APIRouter(route_class=PageRoute, include_in_schema=False)

PATH = "/dashboard/tokens/challenge"


class ChallengePage(BaseModel):
    """What the approval page shows."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: str | None
    user: str
    teams: list[str]
    admin_session: bool
    expires_at: str | None
    minutes_left: int | None
    limits: dict[str, int]
    decided: str | None
    """`approved` or `denied` once the form was sent; None while it asks."""
    csrf: str


def _csrf(request: Request, settings: Settings, code: str) -> str:
    cookie = request.cookies.get(web_session.COOKIE_NAME, "")
    secret = web_session.session_secret(settings)
    return hmac.new(secret, f"challenge:{cookie}:{code}".encode(), hashlib.sha256).hexdigest()


def _page(
    request: Request,
    settings: Settings,
    principal: Principal,
    session: Session,
    code: str | None,
    *,
    expires_at: datetime | None = None,
    limits: dict[str, int] | None = None,
    decided: str | None = None,
) -> ChallengePage:
    left = None
    if expires_at is not None:
        left = max(0, int(((as_utc(expires_at) or utcnow()) - utcnow()).total_seconds() // 60))
    return ChallengePage(
        code=code,
        user=principal.user_name,
        teams=[team.name for team, _ in auth_service.teams_of(session, principal)],
        admin_session=principal.is_admin,
        expires_at=iso_utc(expires_at) if expires_at else None,
        minutes_left=left,
        limits=dict(limits or {}),
        decided=decided,
        csrf=_csrf(request, settings, code) if code else "",
    )


@router.get(PATH)
def challenge_form(
    request: Request,
    session: ReadSession,
    settings: SettingsDep,
    code: Annotated[str | None, Query(max_length=16)] = None,
) -> Response:
    """Ask the signed-in user to approve the code `prime login` printed."""
    principal = web_session.current_principal(request, session, settings)
    code = (code or "").strip().upper() or None
    if code is None:
        page = _page(request, settings, principal, session, None)
    else:
        challenge = challenges.pending(session, code)
        page = _page(
            request,
            settings,
            principal,
            session,
            code,
            expires_at=challenge.expires_at,
            limits=challenge.limits,
        )
    return render(request, "challenge.html", page, principal)


@router.post(PATH)
def challenge_decide(
    request: Request,
    session: WriteSession,
    settings: SettingsDep,
    code: Annotated[str, Form(min_length=1, max_length=16)],
    csrf: Annotated[str, Form(max_length=128)] = "",
    decision: Annotated[str, Form(max_length=8)] = "approve",
) -> Response:
    """Approve (or deny) the code for the signed-in user."""
    principal = web_session.current_principal(request, session, settings)
    code = code.strip().upper()
    if not hmac.compare_digest(csrf, _csrf(request, settings, code)):
        raise Forbidden(
            "This approval did not come from the approval page; open the link `prime login` "
            "printed and approve it there.",
            code="csrf_failed",
        )
    challenge = challenges.decide(session, principal, code, approve=decision != "deny")
    page = _page(
        request,
        settings,
        principal,
        session,
        code,
        expires_at=challenge.expires_at,
        limits=challenge.limits,
        decided="denied" if decision == "deny" else "approved",
    )
    return render(request, "challenge.html", page, principal)
