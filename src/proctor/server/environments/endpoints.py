"""HTTP routes of the environments hub: thin wrappers over `service`, `access`, `versions`,
`publishing` and `shapes`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import FileResponse
from starlette.concurrency import run_in_threadpool

from proctor.server.auth.dependencies import CurrentPrincipal
from proctor.server.deps import DatabaseDep, ReadSession, SettingsDep, WriteSession
from proctor.server.environments import (
    access,
    artifacts,
    downloads,
    publishing,
    repository,
    service,
    shapes,
)
from proctor.server.environments import versions as env_versions
from proctor.server.environments.schemas import (
    VISIBILITY_PATTERN,
    Done,
    EnvironmentList,
    EnvironmentResponse,
    FinalizeResponse,
    LookupRequest,
    ResolveRequest,
    SortBy,
    SortOrder,
    StatusResponse,
    UploadSlotResponse,
    VersionList,
    VersionListResponse,
    VersionRequest,
    WheelRequest,
)
from proctor.server.openapi import errors

router = APIRouter(prefix="/environmentshub", tags=["environments"])

# Path parameters fit the columns they are looked up in.
Owner = Annotated[str, Path(max_length=200)]
Name = Annotated[str, Path(max_length=200)]
Ref = Annotated[str, Path(max_length=200)]
Id = Annotated[str, Path(max_length=64)]

LIST_LIMIT_MAX = 100
"""Page sizes above this are clamped, not refused (what public clients expect)."""


def _api_base(request: Request) -> str:
    # The origin and prefix this client reached the API at, for the upload URLs it gets.
    return str(request.url).split("/environmentshub", 1)[0]


@router.post("/resolve", response_model=EnvironmentResponse, responses=errors(403, 404))
def resolve(
    body: ResolveRequest, principal: CurrentPrincipal, session: WriteSession, settings: SettingsDep
) -> EnvironmentResponse:
    """Get an environment by name (bare names: own, team, platform), or create it as yours."""
    env, created = service.resolve(session, principal, body, settings)
    return EnvironmentResponse(data=shapes.to_out(session, env, created=created))


@router.post("/lookup", response_model=EnvironmentResponse, responses=errors(404))
def lookup(
    body: LookupRequest, principal: CurrentPrincipal, session: ReadSession
) -> EnvironmentResponse:
    """An environment by id."""
    env = access.lookup(session, principal, body.id)
    return EnvironmentResponse(data=shapes.to_out(session, env))


@router.get("/", response_model=EnvironmentList)
def list_environments(
    principal: CurrentPrincipal,
    session: ReadSession,
    settings: SettingsDep,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
    limit: Annotated[int, Query(ge=1, le=2**31 - 1)] = 20,
    owner: Annotated[str | None, Query(max_length=200)] = None,
    visibility: Annotated[str | None, Query(pattern=VISIBILITY_PATTERN)] = None,
    search: Annotated[str | None, Query(max_length=100)] = None,
    tags: Annotated[list[str] | None, Query(max_length=20)] = None,
    sort_by: SortBy = "created_at",
    sort_order: SortOrder = "desc",
    include_teams: bool = True,
    mine_only: bool = False,
    starred_only: bool = False,
) -> EnvironmentList:
    """The environments the platform can run that this key sees (installed and pushed)."""
    principal.require_unscoped()
    limit = min(limit, LIST_LIMIT_MAX)
    if starred_only:  # the hub has no stars: nothing is starred
        return EnvironmentList(data=[], total_count=0, offset=offset, limit=limit)
    rows, total = repository.page(
        session,
        principal,
        offset=offset,
        limit=limit,
        owner=access.hub_owner_of(owner, settings) if owner else None,
        visibility=visibility.upper() if visibility else None,
        search=search,
        tags=tags or [],
        mine_only=mine_only,
        include_teams=include_teams,
        sort_by=sort_by,
        descending=sort_order == "desc",
    )
    return EnvironmentList(
        data=[shapes.listed(env) for env in rows], total_count=total, offset=offset, limit=limit
    )


@router.get("/{owner}/{name}/status", response_model=StatusResponse, responses=errors(404))
def status(
    owner: Owner,
    name: Name,
    principal: CurrentPrincipal,
    session: ReadSession,
    settings: SettingsDep,
) -> StatusResponse:
    """An environment with its latest version."""
    env = access.find(session, principal, owner, name, settings)
    return StatusResponse(data=shapes.status(env, session))


@router.get("/{owner}/{name}/versions", response_model=VersionListResponse, responses=errors(404))
def versions(
    owner: Owner,
    name: Name,
    principal: CurrentPrincipal,
    session: ReadSession,
    settings: SettingsDep,
) -> VersionListResponse:
    """The published versions, newest first."""
    env = access.find(session, principal, owner, name, settings)
    return VersionListResponse(data=VersionList(versions=shapes.version_rows(session, env)))


@router.get("/{owner}/{name}/@{version}", response_model=EnvironmentResponse, responses=errors(404))
def version(
    owner: Owner,
    name: Name,
    version: Ref,
    principal: CurrentPrincipal,
    session: ReadSession,
    settings: SettingsDep,
    request: Request,
) -> EnvironmentResponse:
    """An environment at a version: `@latest`, `@<semantic version>` or `@<content hash>`,
    with download URLs of its wheel and source signed for this key."""
    env = access.find(session, principal, owner, name, settings)
    shown = env_versions.version_of(session, env, version)
    out = shapes.to_out(session, env, shown)
    if shown is not None:
        base = _api_base(request)
        out.wheel_url = downloads.url(base, settings, principal, shown, "wheel")
        out.package_url = downloads.url(base, settings, principal, shown, "source")
    return EnvironmentResponse(data=out)


@router.get(
    "/downloads/{version_id}/{kind}/{filename}",
    response_class=FileResponse,
    responses=errors(403, 404),
)
def download(
    version_id: Id,
    kind: Annotated[str, Path(max_length=16)],
    filename: Annotated[str, Path(max_length=300)],
    session: ReadSession,
    settings: SettingsDep,
    expires: Annotated[int, Query(ge=0, le=2**62)],
    key: Annotated[str, Query(max_length=64)],
    sig: Annotated[str, Query(max_length=100)],
) -> FileResponse:
    """A version's wheel or source archive, by the signed URL `@version` handed out."""
    found = downloads.check(
        session, settings, version_id, kind, expires=expires, key_id=key, signature=sig
    )
    return FileResponse(found.path, media_type=found.media_type, filename=found.filename)


@router.delete("/{owner}/{name}/@{content_hash}", response_model=Done, responses=errors(403, 404))
def delete_version(
    owner: Owner,
    name: Name,
    content_hash: Ref,
    principal: CurrentPrincipal,
    session: WriteSession,
    settings: SettingsDep,
) -> Done:
    """Delete one version (by its content hash, 8 characters or more)."""
    env = access.find(session, principal, owner, name, settings)
    return Done(
        message=env_versions.delete_version(session, principal, env, content_hash, settings)
    )


@router.delete("/{owner}/{name}", response_model=Done, responses=errors(403, 404))
def delete_environment(
    owner: Owner,
    name: Name,
    principal: CurrentPrincipal,
    session: WriteSession,
    settings: SettingsDep,
) -> Done:
    """Delete an environment with its versions and stored packages."""
    env = access.find(session, principal, owner, name, settings)
    return Done(message=env_versions.delete_environment(session, principal, env, settings))


@router.post(
    "/{env_id}/wheels", response_model=UploadSlotResponse, responses=errors(403, 404, 409, 413)
)
def prepare_wheel(
    env_id: Id,
    body: WheelRequest,
    principal: CurrentPrincipal,
    session: WriteSession,
    settings: SettingsDep,
    request: Request,
) -> UploadSlotResponse:
    """Announce a wheel; answers the URL to PUT it to (null: already published)."""
    slot = publishing.prepare_wheel(session, principal, env_id, body, settings, _api_base(request))
    return UploadSlotResponse(data=slot)


@router.post(
    "/{env_id}/wheels/{wheel_id}/finalize", response_model=Done, responses=errors(403, 404, 409)
)
def finalize_wheel(
    env_id: Id,
    wheel_id: Id,
    principal: CurrentPrincipal,
    db: DatabaseDep,
    settings: SettingsDep,
) -> Done:
    """Check the uploaded wheel (read outside any write transaction)."""
    return Done(message=publishing.finalize_wheel(db, principal, env_id, wheel_id, settings))


@router.post(
    "/{env_id}/versions", response_model=UploadSlotResponse, responses=errors(403, 404, 409)
)
def prepare_version(
    env_id: Id,
    body: VersionRequest,
    principal: CurrentPrincipal,
    session: WriteSession,
    request: Request,
) -> UploadSlotResponse:
    """Announce the version (and its source archive); answers where to PUT the source."""
    slot = publishing.prepare_version(session, principal, env_id, body, _api_base(request))
    return UploadSlotResponse(data=slot)


@router.post(
    "/{env_id}/versions/{version_id}/finalize",
    response_model=FinalizeResponse,
    responses=errors(403, 404, 409),
)
def finalize_version(
    env_id: Id, version_id: Id, principal: CurrentPrincipal, session: WriteSession
) -> FinalizeResponse:
    """Publish the version: it becomes the environment's latest."""
    finalized = publishing.finalize_version(session, principal, env_id, version_id)
    return FinalizeResponse(data=finalized)


@router.put(
    "/uploads/{version_id}/{kind}/{secret}", response_model=Done, responses=errors(403, 413)
)
async def upload(
    version_id: Id,
    kind: Annotated[str, Path(max_length=16)],
    secret: Annotated[str, Path(max_length=200)],
    request: Request,
    settings: SettingsDep,
) -> Done:
    """Receive a package's bytes (the URL's secret authorises it, like a presigned URL)."""
    db = request.app.state.db

    def target() -> publishing.UploadTarget:
        with db.read() as session:
            return publishing.upload_target(session, version_id, kind, secret, settings)

    found = await run_in_threadpool(target)
    if found.path is None:
        async for _ in request.stream():  # already published: the same bytes again
            pass
        return Done(message="already published")
    await artifacts.receive(
        request.stream(),
        found.path,
        sha256=found.sha256,
        size=found.size,
        cap=settings.hub_max_artifact_bytes,
    )

    def record() -> None:
        with db.write() as session:
            publishing.record_upload(session, found)

    await run_in_threadpool(record)
    return Done(message="uploaded")
