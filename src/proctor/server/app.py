"""`create_app(settings)`: the FastAPI application of the platform.

Routers are collected from two lists so other packages can add theirs with one line:
`api_routers()` are mounted under `/api/v1`, `site_routers()` at the root (the dashboard).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import APIRouter, Depends, FastAPI
from starlette.concurrency import run_in_threadpool

from proctor import __version__
from proctor.server.boundary import check_json_body, check_url
from proctor.server.db.session import Database, make_session_factory
from proctor.server.error_handlers import ServerErrors, install_error_handlers
from proctor.server.hosted.lifecycle import start_launcher, stop_launcher
from proctor.server.limits import BodySizeLimit
from proctor.server.openapi import install_openapi
from proctor.server.settings import Settings
from proctor.server.setup import prepare_database

logger = logging.getLogger(__name__)

API_PREFIX = "/api/v1"


def api_routers() -> list[APIRouter]:
    """Routers of the REST API, mounted under `/api/v1`."""
    from proctor.server.auth.endpoints import router as auth_router
    from proctor.server.environments.endpoints import router as environments_router
    from proctor.server.evaluations.endpoints import router as evaluations_router
    from proctor.server.hosted.endpoints import router as hosted_router
    from proctor.server.traces.endpoints import router as traces_router

    return [auth_router, environments_router, evaluations_router, traces_router, hosted_router]


def site_routers() -> list[APIRouter]:
    """Routers mounted at the root (the web dashboard)."""
    from proctor.server.web import router as web_router  # pages and their static files

    return [web_router]


def create_app(settings: Settings | None = None, *, prepare: bool = True) -> FastAPI:
    """The platform app for `settings`.

    Args:
        settings: Server settings; read from the environment when omitted.
        prepare: On startup, apply migrations, create the bootstrap key and complete runs
            left PROCESSING. Turn off when the caller has done it.
    """
    settings = settings or Settings()
    db: Database = make_session_factory(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if prepare:
            await run_in_threadpool(prepare_database, settings, db)
        await run_in_threadpool(start_launcher, app, db, settings)  # off: PROCTOR_HOSTED_IN_SERVER
        yield
        await run_in_threadpool(stop_launcher, app)
        db.dispose()

    app = FastAPI(
        title="proctor platform",
        version=__version__,
        description="Evaluations, samples and hosted runs of proctor (see platform-api.md).",
        lifespan=lifespan,
        # Swagger UI and ReDoc load their scripts from a CDN; the platform stays offline and
        # serves the schema itself at /openapi.json.
        docs_url=None,
        redoc_url=None,
        # The input boundary for every route, including those added later.
        dependencies=[Depends(check_url), Depends(check_json_body)],
    )
    app.state.settings = settings
    app.state.db = db
    from proctor.server.web.guard import DashboardGuard
    from proctor.server.web.headers import SECURITY_HEADERS
    from proctor.server.web.routes import not_found_page

    install_error_handlers(app, not_found_page=not_found_page)
    install_openapi(app, api_prefix=API_PREFIX)
    app.add_middleware(DashboardGuard, settings=settings, api_prefix=API_PREFIX)
    app.add_middleware(BodySizeLimit, settings=settings)
    # Outermost: catches what everything inside it raises; every answer gets the headers.
    app.add_middleware(ServerErrors, headers=SECURITY_HEADERS)

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        """Liveness: answers without a key."""
        return {"status": "ok", "version": __version__}

    for router in api_routers():
        app.include_router(router, prefix=API_PREFIX)
    for router in site_routers():
        app.include_router(router)
    return app
