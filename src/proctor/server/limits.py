"""A request-size cap for every route, enforced before any body is parsed.

Requests declaring a `Content-Length` over the cap answer 413 at once; bodies without one
(chunked) are counted as they stream in and refused when they pass the cap.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proctor.server.errors import PayloadTooLarge, error_body
from proctor.server.settings import Settings

_UPLOAD_PATH = "/environmentshub/uploads/"
_TRACES_PATH = "/api/v1/traces"


def too_large(max_bytes: int) -> PayloadTooLarge:
    """The error for a body over `max_bytes`."""
    return PayloadTooLarge(
        f"The request body exceeds the {max_bytes} byte limit; send the data in smaller batches."
    )


class BodySizeLimit:
    """ASGI middleware refusing request bodies larger than `settings.max_request_bytes`."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        max_bytes = self.settings.max_request_bytes
        if _UPLOAD_PATH in scope.get("path", ""):
            # Package uploads have their own cap (the endpoint enforces it as they stream).
            max_bytes = max(max_bytes, self.settings.hub_max_artifact_bytes)
        elif scope.get("path") == _TRACES_PATH:
            # Trace uploads have their own cap, on the uncompressed JSONL (the endpoint's).
            max_bytes = max(max_bytes, self.settings.traces_max_upload_bytes + 1024 * 1024)
        declared = _content_length(scope)
        if declared is not None and declared > max_bytes:
            await _answer_413(send, max_bytes)
            return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > max_bytes:
                    # A ServerError: the app's handler answers it with the 413 envelope.
                    raise too_large(max_bytes)
            return message

        await self.app(scope, limited_receive, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() else None
    return None


async def _answer_413(send: Send, max_bytes: int) -> None:
    error = too_large(max_bytes)
    body = json.dumps(error_body(error.code, error.message)).encode()
    headers: list[Any] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})
