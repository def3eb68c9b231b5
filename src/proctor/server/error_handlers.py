"""Exception handlers that answer every error, expected or not, with the JSON envelope."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from proctor.server.errors import ServerError, error_body

logger = logging.getLogger(__name__)


def _http_code(status: int) -> str:
    return {
        400: "bad_request",
        401: "unauthenticated",
        403: "forbidden",
        404: "not_found",
        405: "method_not_allowed",
        413: "payload_too_large",
        415: "unsupported_media_type",
        422: "invalid_input",
    }.get(status, "http_error")


def _describe_validation(errors: list[Any]) -> str:
    """One sentence out of FastAPI's list of validation errors."""
    if not errors:
        return "The request is invalid; check it against /openapi.json."
    first = errors[0]
    where = ".".join(str(part) for part in first.get("loc", ()) if part != "body") or "body"
    return f"Invalid value for {where}: {first.get('msg', 'invalid')}; fix it and send again."


def install_error_handlers(app: FastAPI) -> None:
    """Register handlers so that every error, expected or not, answers the JSON envelope."""

    @app.exception_handler(ServerError)
    async def _server_error(_: Request, exc: ServerError) -> JSONResponse:
        return JSONResponse(
            error_body(exc.code, exc.message), status_code=exc.status_code, headers=exc.headers
        )

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{k: v for k, v in e.items() if k in {"loc", "msg", "type"}} for e in exc.errors()]
        message = _describe_validation(errors)
        return JSONResponse(error_body("invalid_input", message, errors), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            message = "No such route; see /openapi.json for the API."
        elif exc.status_code == 405:
            message = "This method is not allowed on this route; see /openapi.json."
        else:
            message = str(exc.detail)
        return JSONResponse(
            error_body(_http_code(exc.status_code), message),
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # Log the traceback for the operator; the client gets the envelope, never the trace.
        logger.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        return JSONResponse(
            error_body(
                "internal_error", "The server failed on this request; its log has the cause."
            ),
            status_code=500,
        )
