"""HTTP routes of evaluations and their samples (thin: parse, call the service, render).

Create and list are served at both `/evaluations/` and `/evaluations`, and samples at both
`.../samples` and `.../samples/`, so no client is ever redirected (one uploader does not
follow redirects). Records are rendered as JSON text so `metadata` is returned verbatim.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Header, Query, Response

from proctor.server.auth.dependencies import CurrentPrincipal
from proctor.server.body_deps import JsonBody, RawBody, body_schema, validate
from proctor.server.boundary import INT32_MAX, page_max
from proctor.server.deps import DatabaseDep, ReadSession, SettingsDep, WriteSession
from proctor.server.environments.access import hub_ref_of
from proctor.server.errors import InvalidInput
from proctor.server.evaluations import removal, render, samples, service, stats
from proctor.server.evaluations.schemas import (
    Comparison,
    CreatedEvaluation,
    CreateEvaluation,
    EvaluationDeleted,
    EvaluationList,
    EvaluationRecord,
    EvaluationStats,
    Finalized,
    FinalizeEvaluation,
    ReopenedEvaluation,
    SampleIdsPage,
    SamplesAppended,
    SamplesBody,
    SamplesPage,
    UpdateEvaluation,
)
from proctor.server.openapi import errors
from proctor.server.request_body import parse_json_object

router = APIRouter(prefix="/evaluations", tags=["evaluations"])


def _json(text: str, status_code: int = 200) -> Response:
    return Response(
        content=text.encode("utf-8"), status_code=status_code, media_type="application/json"
    )


@router.post(
    "/",
    status_code=201,
    response_model=CreatedEvaluation,
    openapi_extra=body_schema(CreateEvaluation),
)
def create_evaluation(
    principal: CurrentPrincipal,
    body: JsonBody,
    session: WriteSession,
    settings: SettingsDep,
    idempotency_key: Annotated[
        str | None, Header(alias="Idempotency-Key", min_length=1, max_length=200)
    ] = None,
) -> CreatedEvaluation:
    """Create an evaluation (status RUNNING); a replayed Idempotency-Key returns the first."""
    payload = validate(CreateEvaluation, body.value)
    if idempotency_key is not None and "\x00" in idempotency_key:
        raise InvalidInput("The Idempotency-Key header may not contain NUL; send another key.")
    evaluation = service.create_evaluation(
        session,
        principal,
        payload,
        metadata_raw=body.raw.get("metadata"),
        create_key=idempotency_key,
    )
    return CreatedEvaluation(
        evaluation_id=evaluation.id,
        id=evaluation.id,
        name=evaluation.name,
        status=evaluation.status,
        viewer_url=render.viewer_url(settings.resolved_public_url(), evaluation.id),
    )


router.add_api_route(
    "",
    create_evaluation,
    methods=["POST"],
    status_code=201,
    response_model=CreatedEvaluation,
    include_in_schema=False,
)


LIST_LIMIT_MAX = 500
"""Page sizes above this are clamped, not refused (what public clients expect)."""


@router.get("/", response_model=EvaluationList)
def list_evaluations(
    principal: CurrentPrincipal,
    session: ReadSession,
    settings: SettingsDep,
    skip: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
    limit: Annotated[int, Query(ge=1, le=2**31 - 1)] = 50,
    team_id: Annotated[str | None, Query(max_length=200)] = None,
    environment_name: Annotated[str | None, Query(max_length=400)] = None,
    suite_id: Annotated[str | None, Query(max_length=200)] = None,
    status: Annotated[str | None, Query(max_length=16)] = None,
) -> Response:
    """The evaluations this key sees, newest first (`limit` over 500 reads as 500)."""
    limit = min(limit, LIST_LIMIT_MAX)
    evaluations, total = service.list_evaluations(
        session,
        principal,
        skip=skip,
        limit=limit,
        team_id=team_id,
        environment_name=hub_ref_of(environment_name, settings),
        suite_id=suite_id,
        status=status,
    )
    return _json(
        render.render_list(evaluations, total, skip, limit, settings.resolved_public_url())
    )


router.add_api_route(
    "", list_evaluations, methods=["GET"], response_model=EvaluationList, include_in_schema=False
)


@router.get("/compare", response_model=Comparison, responses=errors(400, 404))
def compare_evaluations(
    principal: CurrentPrincipal,
    session: ReadSession,
    ids: Annotated[str, Query(max_length=2000)],
    pass_threshold: Annotated[float | None, Query(ge=-1e9, le=1e9)] = None,
    show: Annotated[str | None, Query(max_length=16)] = None,
    sort: Annotated[str | None, Query(max_length=16)] = None,
    start: Annotated[int, Query(ge=0, le=INT32_MAX)] = 0,
    limit: Annotated[int, Query(ge=1, le=stats.COMPARE_EXAMPLES_MAX)] = 100,
) -> Comparison:
    """Statistics of 2 to 6 comparable evaluations at one pass mark, and candidate (2nd)
    against baseline (1st), paired; 400 `not_comparable` for evaluations of different
    environments, versions or env_args, or with no example in common; 404 for an id this
    key cannot see. With `show` or
    `sort`, also a page of the examples (`examples`), filtered and sorted over all of them
    as the compare page lists them."""
    evaluations = [service.get_visible(session, principal, i) for i in stats.parse_ids(ids)]
    answer = stats.compare(session, evaluations, threshold=pass_threshold)
    if show is not None or sort is not None:
        answer["examples"] = stats.compared_examples(
            session,
            evaluations,
            order=sort or "example",
            show=show or "all",
            start=start,
            limit=limit,
        )
    return Comparison.model_validate(answer)


@router.get("/{evaluation_id}/stats", response_model=EvaluationStats)
def evaluation_stats(
    evaluation_id: str,
    principal: CurrentPrincipal,
    session: ReadSession,
    pass_threshold: Annotated[float | None, Query(ge=-1e9, le=1e9)] = None,
) -> EvaluationStats:
    """Mean over scored samples with its clustered SE and 95% interval, and pass@k."""
    evaluation = service.get_visible(session, principal, evaluation_id)
    return EvaluationStats.model_validate(
        stats.evaluation_stats(session, evaluation, threshold=pass_threshold)
    )


@router.get("/{evaluation_id}", response_model=EvaluationRecord)
def get_evaluation(
    evaluation_id: str, principal: CurrentPrincipal, session: ReadSession, settings: SettingsDep
) -> Response:
    """One evaluation record."""
    evaluation = service.get_visible(session, principal, evaluation_id)
    return _json(render.render_record(evaluation, settings.resolved_public_url()))


@router.put(
    "/{evaluation_id}",
    response_model=EvaluationRecord,
    responses=errors(409),
    openapi_extra=body_schema(UpdateEvaluation, required=False),
)
def update_evaluation(
    evaluation_id: str,
    principal: CurrentPrincipal,
    body: JsonBody,
    session: WriteSession,
    settings: SettingsDep,
) -> Response:
    """Change some fields; `status` may be FAILED or CANCELLED (409 on a terminal run)."""
    payload = validate(UpdateEvaluation, body.value)
    evaluation = service.update_evaluation(
        session, principal, evaluation_id, payload, metadata_raw=body.raw.get("metadata")
    )
    session.flush()
    return _json(render.render_record(evaluation, settings.resolved_public_url()))


@router.delete("/{evaluation_id}", response_model=EvaluationDeleted, responses=errors(403, 409))
def delete_evaluation(
    evaluation_id: str, principal: CurrentPrincipal, session: WriteSession
) -> EvaluationDeleted:
    """Delete the evaluation with its samples (its owner, a team admin or a platform admin)."""
    name = removal.delete_evaluation(session, principal, evaluation_id)
    return EvaluationDeleted(evaluation_id=evaluation_id, name=name)


def append_samples(
    evaluation_id: str, principal: CurrentPrincipal, body: RawBody, db: DatabaseDep
) -> SamplesAppended:
    """Append samples; a replayed `sample_id` is stored once and counts as success."""
    principal.require_evaluation(evaluation_id)
    parsed = parse_json_object(body, split_array="samples")
    with db.write() as session:
        result = samples.append_samples(session, principal, evaluation_id, parsed)
    return SamplesAppended(
        evaluation_id=evaluation_id,
        received=result.received,
        inserted=result.inserted,
        duplicates=result.duplicates,
        total_samples=result.total_samples,
    )


router.add_api_route(
    "/{evaluation_id}/samples",
    append_samples,
    methods=["POST"],
    response_model=SamplesAppended,
    responses=errors(409),
    openapi_extra=body_schema(SamplesBody),
)
router.add_api_route(
    "/{evaluation_id}/samples/",
    append_samples,
    methods=["POST"],
    response_model=SamplesAppended,
    include_in_schema=False,
)


@router.get("/{evaluation_id}/samples", response_model=SamplesPage)
def list_samples(
    evaluation_id: str,
    principal: CurrentPrincipal,
    session: ReadSession,
    page: Annotated[int, Query(ge=1, le=page_max(samples.PAGE_LIMIT_MAX))] = 1,
    limit: Annotated[int, Query(ge=1, le=2**31 - 1)] = 100,
) -> Response:
    """One page of samples, each exactly as it was sent (`limit` is clamped to 1000)."""
    limit = min(limit, samples.PAGE_LIMIT_MAX)
    rows, total = samples.samples_page(session, principal, evaluation_id, page=page, limit=limit)
    return _json(render.render_samples_page(rows, total, page, limit))


@router.post(
    "/{evaluation_id}/finalize",
    response_model=Finalized,
    responses=errors(409),
    openapi_extra=body_schema(FinalizeEvaluation, required=False),
)
def finalize_evaluation(
    evaluation_id: str,
    principal: CurrentPrincipal,
    body: JsonBody,
    session: WriteSession,
    settings: SettingsDep,
    db: DatabaseDep,
    background: BackgroundTasks,
) -> Finalized:
    """Finalize: PROCESSING now, COMPLETED once the statistics task has run."""
    payload = validate(FinalizeEvaluation, body.value)
    evaluation = service.finalize(session, principal, evaluation_id, payload.metrics)
    if evaluation.status == "PROCESSING":
        background.add_task(service.complete_statistics, db, evaluation_id)
    return Finalized(
        evaluation_id=evaluation.id,
        status=evaluation.status,
        viewer_url=render.viewer_url(settings.resolved_public_url(), evaluation.id),
        message="Finalized; statistics are computed in the background.",
    )


@router.get("/{evaluation_id}/sample_ids", response_model=SampleIdsPage)
def list_sample_ids(
    evaluation_id: str,
    principal: CurrentPrincipal,
    session: ReadSession,
    after: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
    limit: Annotated[int, Query(ge=1, le=samples.ID_PAGE_LIMIT_MAX)] = 10_000,
) -> SampleIdsPage:
    """The ids of the samples stored, in arrival order (extension: `proctor runs sync`)."""
    ids, next_after, total = samples.sample_ids_page(
        session, principal, evaluation_id, after=after, limit=limit
    )
    return SampleIdsPage(sample_ids=ids, next_after=next_after, total=total)


@router.post("/{evaluation_id}/reopen", response_model=ReopenedEvaluation, responses=errors(409))
def reopen_evaluation(
    evaluation_id: str, principal: CurrentPrincipal, session: WriteSession
) -> ReopenedEvaluation:
    """RUNNING again for a resumed run (extension); 409 when COMPLETED or launcher-owned."""
    evaluation = service.reopen(session, principal, evaluation_id)
    return ReopenedEvaluation(
        evaluation_id=evaluation.id, status=evaluation.status, attempts=evaluation.attempts
    )
