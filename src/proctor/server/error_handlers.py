"""Every error, expected or not, answered with the JSON envelope; request ids for the log.

Unexpected exceptions are caught by `ServerErrors`, a middleware inside Starlette's own
`ServerErrorMiddleware`. Starlette's handler for `Exception` answers and then re-raises, so
uvicorn logged the error a second time and closed the connection, and the client's next
request on that keep-alive connection was reset. `ServerErrors` answers the 500 itself and
does not re-raise: the connection stays usable and the error is logged once, with the id the
response carries in `X-Request-ID`.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proctor.server.errors import InvalidInput, ServerError, describe_invalid, dotted, error_body
from proctor.server.request_body import undecodable_message

logger = logging.getLogger(__name__)

REQUEST_ID_HEADER = "x-request-id"
# A client's own id is kept when it is short and plain (it ends up in log lines).
_CLIENT_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")


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
    return describe_invalid(
        errors,
        where=lambda loc: dotted(loc, skip=("body",)) or "body",
        sentence="Invalid value for {where}: {problem}; fix it and send again.",
    )


def invalid_body(code: str, message: str, loc: tuple[str | int, ...] = ()) -> dict[str, Any]:
    """The 422 envelope: `detail` is always a list of `{loc, msg, type}`, as FastAPI's."""
    return error_body(code, message, [{"loc": list(loc), "msg": message, "type": code}])


def request_id(request: Request) -> str:
    """The id of this request (set by `ServerErrors`; also in the `X-Request-ID` header)."""
    return str(request.scope.get("state", {}).get("request_id", "-"))


class ServerErrors:
    """ASGI middleware: a request id for every request, and a 500 envelope for any crash.

    `headers` are added to every response that does not set them itself (the security
    headers of `web.headers`: added here, the outermost layer, they reach the 500 too).
    """

    def __init__(self, app: ASGIApp, headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
        self.app = app
        self.headers = list(headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = _incoming_request_id(scope) or uuid.uuid4().hex[:16]
        scope.setdefault("state", {})["request_id"] = rid
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = list(message.get("headers", []))
                present = {name for name, _ in headers}
                headers += [(k, v) for k, v in self.headers if k not in present]
                headers.append((REQUEST_ID_HEADER.encode(), rid.encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception as exc:
            # Once: the traceback for the operator, the request id to find it by.
            logger.error(
                "request %s failed: %s %s",
                rid,
                scope.get("method"),
                scope.get("path"),
                exc_info=exc,
            )
            if started:  # a body was on its way (a stream, or a background task): nothing to add
                return
            message = (
                f"The server failed on this request (request id {rid}); its log has the cause."
            )
            body = json.dumps(error_body("internal_error", message)).encode()
            headers = [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ]
            await send_with_id({"type": "http.response.start", "status": 500, "headers": headers})
            await send({"type": "http.response.body", "body": body})


def _incoming_request_id(scope: Scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == REQUEST_ID_HEADER.encode():
            text = value.decode("latin-1")
            return text if _CLIENT_REQUEST_ID.fullmatch(text) else None
    return None


def install_error_handlers(
    app: FastAPI, *, not_found_page: Callable[[Request], Response | None] | None = None
) -> None:
    """Register handlers so that every error answers the JSON envelope.

    Call `app.add_middleware(ServerErrors)` last (outermost) as well, for unexpected errors.
    `not_found_page` may answer an unknown path itself (the dashboard's HTML 404 page for a
    browser); when it returns None the envelope is sent.
    """

    @app.exception_handler(InvalidInput)
    async def _invalid_input(_: Request, exc: InvalidInput) -> JSONResponse:
        return JSONResponse(invalid_body(exc.code, exc.message, exc.loc), status_code=422)

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
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 400 and isinstance(exc.__cause__, ValueError):
            # FastAPI could not decode a JSON body, e.g. an integer literal past Python's
            # 4300-digit limit: the same 422 as any other undecodable body.
            message = undecodable_message(exc.__cause__)
            return JSONResponse(invalid_body("invalid_json", message, ("body",)), status_code=422)
        if exc.status_code == 404 and not_found_page is not None:
            page = not_found_page(request)
            if page is not None:
                return page
        if exc.status_code == 404:
            message = "No such route; see /openapi.json for the API."
        elif exc.status_code == 405:
            message = "This method is not allowed on this route; see /openapi.json."
        else:
            message = str(exc.detail)
        headers = getattr(exc, "headers", None)
        if exc.status_code == 405:
            headers = {**(headers or {}), "Allow": ", ".join(_allowed_methods(request))}
        return JSONResponse(
            error_body(_http_code(exc.status_code), message),
            status_code=exc.status_code,
            headers=headers,
        )


def _allowed_methods(request: Request) -> list[str]:
    # Starlette's `Allow` names the methods of the first route on the path only; one path is
    # often served by several routes (GET and POST `/evaluations/`).
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches(request.scope)
        if match != Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    return sorted(methods)
