"""The dashboard's routes: sign-in, the evaluations list, an evaluation, a sample, compare.

Every page answers HTML, or its JSON twin with `?format=json` (or `Accept: application/json`),
both from the same page model, built whole by one call in `views` (or `compare`). Pages use
`PageRoute`, which turns domain errors into an HTML error page (404 for unknown ids, 400 for
bad query parameters) and a missing session into a 303 to `/login?next=...`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse
from fastapi.routing import APIRoute
from fastapi.templating import Jinja2Templates
from pydantic import BaseModel

from proctor.server.auth.schemas import Principal
from proctor.server.boundary import INT64_MAX, INT64_MIN, page_max
from proctor.server.deps import ReadSession, SettingsDep, WriteSession
from proctor.server.environments.access import hub_ref_of
from proctor.server.errors import BadRequest, NotVisible, ServerError, error_body
from proctor.server.traces import service as traces
from proctor.server.web import compare as compare_pages
from proctor.server.web import markdown, views
from proctor.server.web import session as web_session
from proctor.server.web.filters import install_filters
from proctor.server.web.pages import ListFilters

logger = logging.getLogger(__name__)

HERE = Path(__file__).parent
STATIC_FILES = frozenset({"dashboard.css", "dashboard.js", "favicon.svg"})

templates = Jinja2Templates(directory=HERE / "templates")
install_filters(templates.env)


def wants_json(request: Request) -> bool:
    """Whether the client asked for the page's JSON twin."""
    if request.query_params.get("format") == "json":
        return True
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/html" not in accept


def _validation_message(exc: RequestValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return "A query parameter is invalid; fix the URL."
    first = errors[0]
    name = str(first.get("loc", ("", "parameter"))[-1])
    return f"Query parameter {name!r} is invalid: {first.get('msg', 'invalid')}; fix the URL."


def error_page(request: Request, status: int, code: str, message: str) -> Response:
    """The error as a page (or as the API's JSON envelope for a JSON request)."""
    if wants_json(request):
        return JSONResponse(error_body(code, message), status_code=status)
    return templates.TemplateResponse(
        request,
        "error.html",
        {"status": status, "message": message, "user": getattr(request.state, "user_name", None)},
        status_code=status,
    )


class PageRoute(APIRoute):
    """A route whose errors are pages: redirects to sign-in, 404 and 400 pages."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def page_handler(request: Request) -> Response:
            started = time.perf_counter()
            response = await _page_or_error(request)
            # Server time of the page (dependencies, queries, rendering) for browsers' dev
            # tools and bench/dashboard.py.
            elapsed_ms = (time.perf_counter() - started) * 1000
            response.headers["Server-Timing"] = f"app;dur={elapsed_ms:.1f}"
            return response

        async def _page_or_error(request: Request) -> Response:
            try:
                return await handler(request)
            except web_session.LoginRequired as exc:
                if wants_json(request):
                    return JSONResponse(error_body(exc.code, exc.message), status_code=401)
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)
            except ServerError as exc:
                return error_page(request, exc.status_code, exc.code, exc.message)
            except RequestValidationError as exc:
                return error_page(request, 400, "invalid_query", _validation_message(exc))

        return page_handler


router = APIRouter(route_class=PageRoute, include_in_schema=False)


def render(request: Request, template: str, page: BaseModel, principal: Principal) -> Response:
    """The page, or its JSON twin: the same model either way."""
    if request.query_params.get("format") not in (None, "json", "html"):
        raise BadRequest("Query parameter 'format' must be json or html; fix the URL.")
    if wants_json(request):
        return Response(page.model_dump_json(), media_type="application/json")
    # The template reads the model's fields (top level only: nested models stay models).
    context = {name: getattr(page, name) for name in type(page).model_fields}
    context.update(user=principal.user_name, page_url=request.url)
    return templates.TemplateResponse(request, template, context)


def _safe_next(target: str | None) -> str:
    # Only same-site paths: an absolute or protocol-relative URL would be an open redirect.
    if not target or not target.startswith("/") or target.startswith(("//", "/\\")):
        return "/evaluations"
    return target


def _text(value: str | None) -> str | None:
    return value.strip() or None if value is not None else None


def _flag(name: str, value: str | None) -> bool | None:
    text = (value or "").strip().lower()
    if text in ("", "any"):
        return None
    if text in ("yes", "true", "1"):
        return True
    if text in ("no", "false", "0"):
        return False
    raise BadRequest(f"Query parameter {name!r} must be yes or no, not {value!r}; fix the URL.")


def _integer(name: str, value: str | None) -> int | None:
    text = (value or "").strip()
    if not text:
        return None
    try:
        number = int(text)
    except ValueError:
        number = None
    if number is None or not INT64_MIN <= number <= INT64_MAX:  # what the columns hold
        raise BadRequest(
            f"Query parameter {name!r} must be an integer (64-bit), not {value!r}; fix the URL."
        )
    return number


def _threshold(value: str | None) -> float | None:
    text = (value or "").strip()
    if not text:
        return None  # the evaluation's default (its best reward)
    try:
        number = float(text)
    except ValueError:
        number = float("nan")
    if not number == number or not -1e9 < number < 1e9:  # NaN or absurd
        raise BadRequest(
            f"Query parameter 'pass_threshold' must be a number, not {value!r}; fix the URL."
        )
    return number


LIMIT_MAX = 500
Limit = Annotated[int, Query(ge=1, le=LIMIT_MAX)]
Page = Annotated[int, Query(ge=1, le=page_max(LIMIT_MAX))]


@router.get("/favicon.ico")
def favicon() -> Response:
    """Browsers ask for it at the root; it is the SVG icon the pages also link."""
    return FileResponse(
        HERE / "static" / "favicon.svg",
        media_type="image/svg+xml",
        headers={"Cache-Control": "max-age=86400"},
    )


@router.get("/static/highlight.css")
def highlight_css() -> Response:
    """Pygments' rules for highlighted code in transcripts (generated once)."""
    return Response(
        markdown.stylesheet(), media_type="text/css", headers={"Cache-Control": "max-age=3600"}
    )


@router.get("/static/{name}")
def static(name: str) -> Response:
    """The dashboard's stylesheet, script and icon (shipped in the package)."""
    if name not in STATIC_FILES:
        raise NotVisible("There is no such static file; check the URL.")
    return FileResponse(HERE / "static" / name, headers={"Cache-Control": "max-age=3600"})


@router.get("/login")
def login_form(request: Request, next: str | None = None) -> Response:
    """The sign-in form."""
    return templates.TemplateResponse(
        request, "login.html", {"next": _safe_next(next), "error": None, "user": None}
    )


@router.post("/login")
def login(
    request: Request,
    session: WriteSession,
    settings: SettingsDep,
    api_key: Annotated[str, Form(max_length=500)] = "",
    next: Annotated[str, Form(max_length=2000)] = "/evaluations",
) -> Response:
    """Check the key; on success set the session cookie and go to `next`."""
    try:
        principal = web_session.sign_in(session, api_key)
    except ServerError as exc:
        return templates.TemplateResponse(
            request,
            "login.html",
            {"next": _safe_next(next), "error": exc.message, "user": None},
            status_code=401,
        )
    session_id = web_session.open_session(session, principal)
    response = RedirectResponse(_safe_next(next), status_code=303)
    web_session.set_session_cookie(response, request, settings, session_id)
    logger.info("dashboard sign-in by user %s (key %s)", principal.user_name, principal.key_id)
    return response


@router.get("/logout")
def logout_form(request: Request) -> Response:
    """A sign-out button (signing out is a POST, like every state change)."""
    return templates.TemplateResponse(request, "logout.html", {"user": None})


@router.post("/logout")
def logout(request: Request, session: WriteSession, settings: SettingsDep) -> Response:
    """Revoke the session, clear its cookie and go to the sign-in form."""
    web_session.revoke_session(session, request, settings)
    response = RedirectResponse("/login", status_code=303)
    web_session.clear_session_cookie(response, request, settings)
    return response


@router.get("/")
def home(request: Request) -> Response:
    """The dashboard's home is the evaluations list."""
    query = f"?{request.url.query}" if request.url.query else ""
    return RedirectResponse(f"/evaluations{query}", status_code=303)


@router.get("/evaluations")
def evaluations_list(
    request: Request,
    session: ReadSession,
    settings: SettingsDep,
    skip: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
    limit: Limit = 25,
    status: Annotated[str | None, Query(max_length=16)] = None,
    environment: Annotated[str | None, Query(max_length=400)] = None,
    model: Annotated[str | None, Query(max_length=512)] = None,
    hosted: Annotated[str | None, Query(max_length=8)] = None,
    tag: Annotated[str | None, Query(max_length=200)] = None,
    q: Annotated[str | None, Query(max_length=200)] = None,
    sort: Annotated[str | None, Query(max_length=16)] = None,
) -> Response:
    """The evaluations the signed-in key sees, newest first (or sorted by any column),
    filtered by status, environment, model, hosted, tag and text, and paged."""
    principal = web_session.current_principal(request, session, settings)
    filters = ListFilters(
        status=_text(status),
        environment=hub_ref_of(_text(environment), settings),
        model=_text(model),
        hosted=_flag("hosted", hosted),
        tag=_text(tag),
        search=_text(q),
        sort=_text(sort) or "-created",
    )
    page = views.evaluation_list(
        session,
        principal,
        filters,
        skip=skip,
        limit=limit,
        public_url=settings.resolved_public_url(),
    )
    return render(request, "list.html", page, principal)


def _samples_query(
    page: Page = 1,
    limit: Limit = 50,
    sort: Annotated[str | None, Query(max_length=16)] = None,
    errored: Annotated[str | None, Query(max_length=8)] = None,
    example: Annotated[str | None, Query(max_length=24)] = None,
) -> views.SamplesQuery:
    """The sample table's query parameters, shared by the evaluation and samples pages."""
    return views.SamplesQuery(
        page=page,
        limit=limit,
        sort=_text(sort) or "seq",
        errored=_flag("errored", errored),
        example=_integer("example", example),
    )


SamplesQueryDep = Annotated[views.SamplesQuery, Depends(_samples_query)]


@router.get("/evaluations/{evaluation_id}")
def evaluation(
    request: Request,
    evaluation_id: str,
    session: ReadSession,
    settings: SettingsDep,
    query: SamplesQueryDep,
    pass_threshold: Annotated[str | None, Query(max_length=24)] = None,
    logs_from: Annotated[int, Query(ge=0, le=1 << 40)] = 0,
) -> Response:
    """An evaluation: header, metrics, reward histogram, pass@k, hosted logs, samples."""
    principal = web_session.current_principal(request, session, settings)
    page = views.evaluation_page(
        session,
        principal,
        evaluation_id,
        query,
        public_url=settings.resolved_public_url(),
        app=request.app,
        pass_threshold=_threshold(pass_threshold),
        logs_from=logs_from,
    )
    return render(request, "evaluation.html", page, principal)


def _confirmed_principal(
    request: Request,
    session: WriteSession,
    settings: SettingsDep,
    confirm: Annotated[str, Form(max_length=8)] = "",
) -> Principal:
    """The signed-in key behind one of the page's destructive buttons, once the button's
    confirmation step has posted `confirm=yes`."""
    principal = web_session.current_principal(request, session, settings)
    if confirm != "yes":
        raise BadRequest("This needs the confirmation; use the button on the page.")
    return principal


ConfirmedPrincipal = Annotated[Principal, Depends(_confirmed_principal)]


@router.post("/evaluations/{evaluation_id}/cancel")
def cancel(evaluation_id: str, session: WriteSession, principal: ConfirmedPrincipal) -> Response:
    """Cancel a hosted evaluation (the page's button, after its confirmation step)."""
    views.cancel_hosted(session, principal, evaluation_id)
    return RedirectResponse(f"/evaluations/{quote(evaluation_id, safe='')}", status_code=303)


@router.post("/evaluations/{evaluation_id}/rename")
def rename(
    request: Request,
    evaluation_id: str,
    session: WriteSession,
    settings: SettingsDep,
    name: Annotated[str, Form(min_length=1, max_length=500)],
) -> Response:
    """Rename the evaluation (the page's rename form)."""
    principal = web_session.current_principal(request, session, settings)
    views.rename(session, principal, evaluation_id, name.strip() or name)
    return RedirectResponse(f"/evaluations/{quote(evaluation_id, safe='')}", status_code=303)


@router.post("/evaluations/{evaluation_id}/delete")
def delete(evaluation_id: str, session: WriteSession, principal: ConfirmedPrincipal) -> Response:
    """Delete the evaluation (the page's button, after its confirmation step)."""
    views.delete(session, principal, evaluation_id)
    return RedirectResponse("/", status_code=303)


@router.get("/dashboard/evaluations/{evaluation_id}")
def dashboard_evaluation(evaluation_id: str) -> Response:
    """The link public clients print (`{frontend}/dashboard/evaluations/{id}`): this page."""
    return RedirectResponse(f"/evaluations/{quote(evaluation_id, safe='')}", status_code=307)


@router.get("/evaluations/{evaluation_id}/samples")
def samples(
    request: Request,
    evaluation_id: str,
    session: ReadSession,
    settings: SettingsDep,
    query: SamplesQueryDep,
) -> Response:
    """A page of an evaluation's samples: sortable by reward, filterable."""
    principal = web_session.current_principal(request, session, settings)
    page = views.samples_page(
        session,
        principal,
        evaluation_id,
        query,
        settings.resolved_public_url(),
    )
    return render(request, "samples.html", page, principal)


def _listing(
    query: SamplesQueryDep,
    at: Annotated[str | None, Query(max_length=24)] = None,
) -> views.SampleListing | None:
    """The samples table a sample page was opened from (its sort and filter, and `at`, the
    sample's position in it), which previous and next follow; None without `at`."""
    position = _integer("at", at)
    if position is None:
        return None
    if position < 0:
        raise BadRequest("Query parameter 'at' must be 0 or more; fix the URL.")
    return views.SampleListing(query=query, at=position)


ListingDep = Annotated[views.SampleListing | None, Depends(_listing)]


@router.get("/evaluations/{evaluation_id}/sample")
def sample_by_query(
    request: Request,
    evaluation_id: str,
    session: ReadSession,
    settings: SettingsDep,
    id: Annotated[str, Query(min_length=1, max_length=200)],
    listing: ListingDep,
) -> Response:
    """One sample named in the query (`?id=`), so any id works, with `/` or `..` in it."""
    return sample(request, evaluation_id, id, session, settings, listing)


@router.get("/evaluations/{evaluation_id}/samples/{sample_id}")
def sample(
    request: Request,
    evaluation_id: str,
    sample_id: str,
    session: ReadSession,
    settings: SettingsDep,
    listing: ListingDep,
) -> Response:
    """One sample: transcript, rewards, metrics, timing, token usage, error; previous and
    next follow the samples table it was opened from (`sort`, `errored`, `example`, `at`)."""
    principal = web_session.current_principal(request, session, settings)
    page = views.sample_page(
        session, principal, evaluation_id, sample_id, settings.resolved_public_url(), listing
    )
    return render(request, "sample.html", page, principal)


@router.get("/evaluations/{evaluation_id}/traces/{trace_id}")
def trace_document(
    request: Request, evaluation_id: str, trace_id: str, session: ReadSession, settings: SettingsDep
) -> Response:
    """A trace of the evaluation as it was uploaded (JSON), linked from its sample's page."""
    principal = web_session.current_principal(request, session, settings)
    document = traces.trace_document(session, principal, evaluation_id, trace_id)
    return Response(content=document.encode("utf-8"), media_type="application/json")


@router.get("/compare")
def compare(
    request: Request,
    session: ReadSession,
    settings: SettingsDep,
    ids: Annotated[str, Query(max_length=2000)] = "",
    pick: Annotated[list[str] | None, Query(max_length=200)] = None,
    baseline: Annotated[str | None, Query(max_length=200)] = None,
    sort: Annotated[str, Query(max_length=16)] = "example",
    show: Annotated[str, Query(max_length=16)] = "all",
    start: Annotated[str | None, Query(max_length=24)] = None,
    pass_threshold: Annotated[str | None, Query(max_length=24)] = None,
    limit: Limit = 100,
) -> Response:
    """Comparable evaluations side by side, with per-example rewards filtered (`show`) and
    sorted over all examples; the baseline is `baseline`, else the first of `ids`, else the
    oldest picked."""
    principal = web_session.current_principal(request, session, settings)
    # `pick` comes from the list's checkboxes; normalise to one `ids` list for the links.
    ids = ",".join([part.strip() for part in ids.split(",") if part.strip()] + (pick or []))
    evaluations = compare_pages.order_ids(
        session, principal, ids, _text(baseline), by_age=bool(pick) and not _text(baseline)
    )
    offset = _integer("start", start) or 0
    if offset < 0:
        raise BadRequest("Query parameter 'start' must be 0 or more; fix the URL.")
    page = compare_pages.compare_page(
        session,
        principal,
        evaluations,
        sort=sort,
        show=show,
        start=offset,
        limit=limit,
        pass_threshold=_threshold(pass_threshold),
        public_url=settings.resolved_public_url(),
    )
    return render(request, "compare.html", page, principal)


@router.get("/compare/example")
def compare_example(
    request: Request,
    session: ReadSession,
    settings: SettingsDep,
    ids: Annotated[str, Query(max_length=2000)] = "",
    example: Annotated[str | None, Query(max_length=24)] = None,
) -> Response:
    """One example's transcripts in each evaluation, side by side."""
    principal = web_session.current_principal(request, session, settings)
    example_id = _integer("example", example)
    if example_id is None:
        raise BadRequest("Query parameter 'example' is required: the example id to show.")
    page = compare_pages.example_side_by_side(
        session, principal, ids, example_id, settings.resolved_public_url()
    )
    return render(request, "compare_example.html", page, principal)


def not_found_page(request: Request) -> Response | None:
    """The HTML 404 page for an unknown path asked for by a browser (None otherwise: API
    clients and scripts get the JSON envelope)."""
    accept = request.headers.get("accept", "")
    if request.url.path.startswith("/api/") or "text/html" not in accept:
        return None
    return error_page(request, 404, "not_found", "There is no such page; check the address.")
