"""The dashboard's environment pages: the hub's environments, and one environment with its
versions, its evaluations and how to run it.

Reachable at the paths the public CLI prints after a push
(`{frontend}/dashboard/environments/{owner}/{name}`, a redirect here). Each page reads
through the hub's own rules (`environments.access`, `environments.repository`), so the
dashboard shows exactly the environments the signed-in key sees through the API, and its
evaluations come from the evaluations service, with the same visibility.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import RedirectResponse
from pydantic import BaseModel, ConfigDict
from sqlalchemy.orm import Session

from proctor.server.auth.schemas import Principal
from proctor.server.db.base import iso_utc
from proctor.server.deps import ReadSession, SettingsDep
from proctor.server.environments import access, repository, versions
from proctor.server.evaluations import service as evaluations
from proctor.server.settings import Settings
from proctor.server.web import session as web_session
from proctor.server.web.pages import EvaluationRow
from proctor.server.web.routes import PageRoute, render
from proctor.server.web.views import evaluation_row

router = APIRouter(route_class=PageRoute, include_in_schema=False)

LIST_LIMIT = 100
EVALUATIONS_SHOWN = 50


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EnvironmentRow(_Model):
    """One environment in the list."""

    owner: str
    name: str
    owner_type: str
    """`platform` (installed with the server), `team` or `user`."""
    visibility: str
    description: str | None
    latest_version: str | None
    updated_at: str | None
    url: str


class EnvironmentListPage(_Model):
    environments: list[EnvironmentRow]
    total: int
    skip: int
    limit: int


class VersionLine(_Model):
    """One published version."""

    version: str
    semantic_version: str | None
    content_hash: str
    wheel_filename: str | None
    wheel_sha256: str | None
    has_source: bool
    published_at: str | None
    latest: bool


class EnvironmentPage(_Model):
    owner: str
    name: str
    ref: str
    """`owner/name` as the public CLI and `proctor hosted run` take it."""
    owner_type: str
    visibility: str
    team_id: str | None
    description: str | None
    tags: list[str]
    entry_points: list[str]
    versions: list[VersionLine]
    evaluations: list[EvaluationRow]
    evaluations_total: int
    run_commands: list[str]


def _owner_type(kind: str, team_id: str | None) -> str:
    return "platform" if kind == "installed" else "team" if team_id else "user"


def _page_url(owner: str, name: str) -> str:
    return f"/environments/{quote(owner, safe='')}/{quote(name, safe='')}"


def environment_list(
    session: Session, principal: Principal, *, skip: int, limit: int
) -> EnvironmentListPage:
    """The environments the key sees, most recently updated first."""
    rows, total = repository.page(
        session,
        principal,
        offset=skip,
        limit=limit,
        owner=None,
        visibility=None,
        search=None,
        tags=[],
        mine_only=False,
        include_teams=True,
        sort_by="updated_at",
        descending=True,
    )
    return EnvironmentListPage(
        environments=[
            EnvironmentRow(
                owner=env.owner,
                name=env.name,
                owner_type=_owner_type(env.kind, env.team_id),
                visibility=env.visibility,
                description=env.description,
                latest_version=env.latest_semantic_version
                or (env.latest_content_hash or "")[:8]
                or None,
                updated_at=iso_utc(env.updated_at or env.created_at),
                url=_page_url(env.owner, env.name),
            )
            for env in rows
        ],
        total=total,
        skip=skip,
        limit=limit,
    )


def environment_page(
    session: Session, principal: Principal, owner: str, name: str, settings: Settings
) -> EnvironmentPage:
    """One environment: versions with their hashes, its evaluations, how to run it."""
    env = access.find(session, principal, owner, name, settings)
    latest = versions.latest(session, env)
    published = repository.versions_of(session, env.id)
    ref = f"{env.owner}/{env.name}"
    found, total = evaluations.list_evaluations(
        session, principal, skip=0, limit=EVALUATIONS_SHOWN, environment_name=ref
    )
    public_url = settings.resolved_public_url()
    details = dict(latest.details or {}) if latest is not None else {}
    commands = [
        f"prime eval run {ref} --hosted -m MODEL",
        f"proctor hosted run {ref} -m MODEL",
    ]
    if env.kind == "installed":
        commands.append(f"proctor eval {env.name} -m MODEL")
    else:
        commands += [f"prime env install {ref}", f"prime env pull {ref}"]
    return EnvironmentPage(
        owner=env.owner,
        name=env.name,
        ref=ref,
        owner_type=_owner_type(env.kind, env.team_id),
        visibility=env.visibility,
        team_id=env.team_id,
        description=env.description,
        tags=[str(t) for t in env.tags or []],
        entry_points=[str(n) for n in details.get("entry_points") or []],
        versions=[
            VersionLine(
                version=versions.label(v),
                semantic_version=v.semantic_version,
                content_hash=v.content_hash,
                wheel_filename=v.wheel_filename,
                wheel_sha256=v.wheel_sha256,
                has_source=bool(v.source_path),
                published_at=iso_utc(v.finalized_at or v.created_at),
                latest=latest is not None and v.id == latest.id,
            )
            for v in published
        ],
        evaluations=[evaluation_row(e, public_url, session) for e in found],
        evaluations_total=total,
        run_commands=commands,
    )


@router.get("/environments")
def environments_list(
    request: Request,
    session: ReadSession,
    settings: SettingsDep,
    skip: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
    limit: Annotated[int, Query(ge=1, le=LIST_LIMIT)] = 50,
) -> Response:
    """The hub's environments this key sees."""
    principal = web_session.current_principal(request, session, settings)
    page = environment_list(session, principal, skip=skip, limit=limit)
    return render(request, "environments.html", page, principal)


@router.get("/environments/{owner}/{name}")
def environment(
    request: Request, owner: str, name: str, session: ReadSession, settings: SettingsDep
) -> Response:
    """One environment of the hub."""
    principal = web_session.current_principal(request, session, settings)
    page = environment_page(session, principal, owner, name, settings)
    return render(request, "environment.html", page, principal)


@router.get("/dashboard/environments")
def dashboard_environments() -> Response:
    """The public CLI's frontend path for the hub: this dashboard's list."""
    return RedirectResponse("/environments", status_code=307)


@router.get("/dashboard/environments/{owner}/{name}")
def dashboard_environment(owner: str, name: str) -> Response:
    """The link `prime env push` prints: this environment's page."""
    return RedirectResponse(_page_url(owner, name), status_code=307)
