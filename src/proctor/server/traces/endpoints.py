"""HTTP routes of the traces service (thin: read the parts, call the service, answer).

`POST /traces` takes the public traces protocol's multipart upload
(`reference/public-clients.md` §7); the reads follow the public client's shapes (pages
`{items, next_cursor}`, `?raw=true` for a record's document).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request, Response
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException

from proctor.server.auth.dependencies import CurrentPrincipal
from proctor.server.deps import DatabaseDep, ReadSession, SettingsDep
from proctor.server.errors import BadRequest
from proctor.server.openapi import errors
from proctor.server.teams import check_team
from proctor.server.traces import reads, service
from proctor.server.traces.schemas import (
    EpisodeDetail,
    EpisodeListPage,
    RunListPage,
    RunStepList,
    RunSummary,
    TraceListPage,
    TraceNodePage,
    TraceSearchPage,
    TraceSummary,
    UploadReceipt,
    upload_request_schema,
)
from proctor.server.traces.upload import Parts, read_upload

RunType = Literal["eval", "train", "unknown"]
"""The run types prime-traces' `list_runs` may filter on; every stored run is an `eval`."""

router = APIRouter(tags=["traces"])

PAGE_LIMIT_MAX = 100
"""Page sizes above this are clamped, not refused."""


async def _read(value: str | UploadFile) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else await value.read()


async def upload_parts(request: Request) -> AsyncIterator[Parts]:
    """The upload's parts and headers (the multipart parser is python-multipart's)."""
    try:
        form = await request.form(max_files=8, max_fields=8)
    except HTTPException as e:  # Starlette's answer to a malformed multipart body
        raise BadRequest(
            f"The body is not valid multipart/form-data ({e.detail}); send the metadata and "
            "traces parts.",
            code="malformed_encoding",
        ) from None
    try:
        traces = form.getlist("traces")
        encoding = next(
            (t.headers.get("content-encoding") for t in traces if isinstance(t, UploadFile)),
            None,
        )
        yield Parts(
            metadata=[
                v if isinstance(v, str) else await v.read() for v in form.getlist("metadata")
            ],
            traces=[await _read(t) for t in traces],
            traces_encoding=encoding,
            idempotency_key=request.headers.get("idempotency-key"),
            line_format=request.headers.get("x-prime-line-format"),
        )
    finally:
        await form.close()


@router.post(
    "/traces",
    status_code=201,
    response_model=UploadReceipt,
    responses=errors(400, 404, 409),
    openapi_extra=upload_request_schema(),
)
async def upload_traces(
    request: Request,
    principal: CurrentPrincipal,
    parts: Annotated[Parts, Depends(upload_parts, scope="function")],
    db: DatabaseDep,
    settings: SettingsDep,
) -> UploadReceipt:
    """Store a batch of trace or episode records against their evaluations (`run.id`);
    a replay of the same bytes answers the same receipt and stores nothing again."""
    team_id = request.headers.get("x-prime-team-id")

    def commit() -> str:
        upload = read_upload(
            parts,
            max_bytes=settings.traces_max_upload_bytes,
            max_line_bytes=settings.traces_max_line_bytes,
        )
        with db.write() as session:
            check_team(session, principal, team_id)
            return service.commit_upload(session, principal, upload)

    return UploadReceipt(upload_id=await run_in_threadpool(commit))


def _cursor(value: str | None) -> int | None:
    # The query's pattern allows digits only (up to 18: within every id column).
    return None if value is None else int(value)


def _only_filters(request: Request, *names: str) -> None:
    """Refuse a filter this server does not implement, rather than ignore it."""
    unknown = sorted(set(request.query_params) - set(names))
    if unknown:
        raise BadRequest(
            f"This server does not filter by {', '.join(unknown)[:200]}; "
            f"use only {', '.join(names)}.",
            code="invalid_filter",
        )


def _json(text: str) -> Response:
    return Response(content=text.encode("utf-8"), media_type="application/json")


RunId = Annotated[str | None, Query(max_length=64, description="An evaluation id.")]
EpisodeId = Annotated[str | None, Query(max_length=200)]
Limit = Annotated[int, Query(ge=1, le=2**31 - 1)]
Cursor = Annotated[str | None, Query(pattern=r"^[0-9]{1,18}$", description="A next_cursor.")]
Raw = Annotated[bool, Query(description="Answer the record's document as it was sent.")]


@router.get("/traces", response_model=TraceListPage, responses=errors(400, 404))
def list_traces(
    request: Request,
    principal: CurrentPrincipal,
    session: ReadSession,
    run_id: RunId = None,
    episode_id: EpisodeId = None,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> TraceListPage:
    """Traces this key may read, newest first (`limit` over 100 reads as 100)."""
    _only_filters(request, "run_id", "episode_id", "limit", "cursor")
    items, next_cursor = service.list_records(
        session,
        principal,
        kind="trace",
        run_id=run_id,
        episode_id=episode_id,
        cursor=_cursor(cursor),
        limit=min(limit, PAGE_LIMIT_MAX),
    )
    return TraceListPage.model_validate({"items": items, "next_cursor": next_cursor})


@router.get("/traces/{trace_id}", response_model=TraceSummary | dict[str, Any])
def get_trace(
    trace_id: str, principal: CurrentPrincipal, session: ReadSession, raw: Raw = False
) -> Any:
    """One trace's summary, or with `raw=true` its document."""
    row = service.get_record(session, principal, "trace", trace_id)
    if raw:
        return _json(service.raw_document(session, row))
    return TraceSummary.model_validate(service.summary(row))


@router.get("/episodes", response_model=EpisodeListPage, responses=errors(400, 404))
def list_episodes(
    request: Request,
    principal: CurrentPrincipal,
    session: ReadSession,
    run_id: RunId = None,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> EpisodeListPage:
    """Episodes this key may read, newest first (`limit` over 100 reads as 100)."""
    _only_filters(request, "run_id", "limit", "cursor")
    items, next_cursor = service.list_records(
        session,
        principal,
        kind="episode",
        run_id=run_id,
        episode_id=None,
        cursor=_cursor(cursor),
        limit=min(limit, PAGE_LIMIT_MAX),
    )
    return EpisodeListPage.model_validate({"items": items, "next_cursor": next_cursor})


@router.get("/episodes/{episode_id}", response_model=EpisodeDetail | dict[str, Any])
def get_episode(
    episode_id: str, principal: CurrentPrincipal, session: ReadSession, raw: Raw = False
) -> Any:
    """One episode's summary with its member-trace aggregate, or with `raw=true` its line
    as sent."""
    if raw:
        row = service.get_record(session, principal, "episode", episode_id)
        return _json(service.raw_document(session, row))
    return EpisodeDetail.model_validate(reads.episode_detail(session, principal, episode_id))


@router.get(
    "/episodes/{episode_id}/traces", response_model=TraceListPage, responses=errors(400, 404)
)
def list_episode_traces(
    episode_id: str,
    request: Request,
    principal: CurrentPrincipal,
    session: ReadSession,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> TraceListPage:
    """An episode's member traces, newest first (`limit` over 100 reads as 100)."""
    _only_filters(request, "limit", "cursor")
    items, next_cursor = reads.episode_traces(
        session, principal, episode_id, cursor=_cursor(cursor), limit=min(limit, PAGE_LIMIT_MAX)
    )
    return TraceListPage.model_validate({"items": items, "next_cursor": next_cursor})


@router.get("/traces/{trace_id}/nodes", response_model=TraceNodePage, responses=errors(400, 404))
def list_trace_nodes(
    trace_id: str,
    request: Request,
    principal: CurrentPrincipal,
    session: ReadSession,
    role: Annotated[list[str] | None, Query(max_length=20)] = None,
    sampled: bool | None = None,
    after: Annotated[int | None, Query(ge=-1, le=2**31 - 1)] = None,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> TraceNodePage:
    """A trace's message nodes in step order (`limit` over 100 reads as 100)."""
    _only_filters(request, "role", "sampled", "after", "limit", "cursor")
    page = reads.trace_nodes(
        session,
        principal,
        trace_id,
        roles=role or [],
        sampled=sampled,
        after=after,
        cursor=_cursor(cursor),
        limit=min(limit, PAGE_LIMIT_MAX),
    )
    return TraceNodePage.model_validate(page)


@router.get("/runs", response_model=RunListPage, responses=errors(400))
def list_runs(
    request: Request,
    principal: CurrentPrincipal,
    session: ReadSession,
    run_type: Annotated[list[RunType] | None, Query(max_length=10)] = None,
    created_by: Annotated[list[str] | None, Query(max_length=100)] = None,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> RunListPage:
    """Runs (evaluations with traces) this key may read, most recently ingested first;
    `run_type` keeps runs of those types (prime-traces' `eval`, `train`, `unknown`)."""
    _only_filters(request, "run_type", "created_by", "limit", "cursor")
    items, next_cursor = reads.list_runs(
        session,
        principal,
        run_types=run_type or [],
        created_by=created_by or [],
        cursor=_cursor(cursor),
        limit=min(limit, PAGE_LIMIT_MAX),
    )
    return RunListPage.model_validate({"items": items, "next_cursor": next_cursor})


@router.get("/runs/{run_id}", response_model=RunSummary, responses=errors(404))
def get_run(run_id: str, principal: CurrentPrincipal, session: ReadSession) -> RunSummary:
    """One run's totals over its traces."""
    return RunSummary.model_validate(reads.run_summary(session, principal, run_id))


@router.get("/runs/{run_id}/steps", response_model=RunStepList, responses=errors(404))
def get_run_steps(run_id: str, principal: CurrentPrincipal, session: ReadSession) -> RunStepList:
    """A run's training steps (an evaluation has none)."""
    return RunStepList.model_validate(reads.run_steps(session, principal, run_id))


@router.get("/runs/{run_id}/search", response_model=TraceSearchPage, responses=errors(400, 404))
def search_run(
    run_id: str,
    request: Request,
    principal: CurrentPrincipal,
    session: ReadSession,
    query: Annotated[
        str, Query(min_length=3, max_length=256, pattern=r"^[^\x00]*[^\x00\s][^\x00]*$")
    ],
    field: Literal["content", "reasoning_content", "tool_calls"] = "content",
    role: Annotated[str | None, Query(max_length=32)] = None,
    has_error: bool | None = None,
    reward_min: float | None = None,
    reward_max: float | None = None,
    limit: Limit = 50,
    cursor: Cursor = None,
) -> TraceSearchPage:
    """Literal, case-sensitive matches in one field of a run's message nodes (one per node)."""
    _only_filters(
        request,
        "query",
        "field",
        "role",
        "has_error",
        "reward_min",
        "reward_max",
        "limit",
        "cursor",
    )
    page = reads.search_run(
        session,
        principal,
        run_id,
        query=query,
        field=field,
        role=role,
        has_error=has_error,
        reward_min=reward_min,
        reward_max=reward_max,
        cursor=_cursor(cursor),
        limit=min(limit, PAGE_LIMIT_MAX),
    )
    return TraceSearchPage.model_validate(page)
