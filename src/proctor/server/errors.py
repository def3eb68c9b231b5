"""Domain errors carrying their HTTP status and a snake-case code.

`proctor.server.error_handlers` renders them (kept apart so CLI commands using the services do
not import the web stack). Every error body has the shape
`{"error": {"code": str, "message": str}, "detail": ...}`: some clients read `error.code`,
others `detail`. Texts avoid "404", "429" and "not found"
unless that is what happened, because one public client matches on them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from proctor.errors import ProctorError


class ServerError(ProctorError):
    """Base of errors the API answers with a 4xx; carries the status and a snake-case code."""

    status_code: int = 400
    code: str = "bad_request"

    def __init__(
        self, message: str, *, code: str | None = None, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.headers = headers


class BadRequest(ServerError):
    """The request is malformed in a way validation does not describe."""


class Unauthenticated(ServerError):
    """No key, or a key that is unknown or revoked."""

    status_code = 401
    code = "unauthenticated"


class Forbidden(ServerError):
    """The key is valid but may not do this."""

    status_code = 403
    code = "forbidden"


class ScopeDenied(Forbidden):
    """A key scoped to one evaluation tried to reach anything else."""

    code = "scope_denied"


class NotVisible(ServerError):
    """The resource does not exist, or this key may not see it (the two are not told apart)."""

    status_code = 404
    code = "not_found"


class Conflict(ServerError):
    """The resource's state forbids the change (e.g. a status change on a closed run)."""

    status_code = 409
    code = "conflict"


class PayloadTooLarge(ServerError):
    """The request body is larger than the server accepts."""

    status_code = 413
    code = "payload_too_large"


class InvalidInput(ServerError):
    """The body parsed but a field has a wrong type or value; `loc` says where, if known."""

    status_code = 422
    code = "invalid_input"

    def __init__(
        self, message: str, *, code: str | None = None, loc: tuple[str | int, ...] = ()
    ) -> None:
        super().__init__(message, code=code)
        self.loc = loc


class TooManyRequests(ServerError):
    """The caller is over a rate limit; `Retry-After` says when to try again."""

    status_code = 429
    code = "rate_limited"


class LoginRequired(ServerError):
    """A page was requested without a valid session; the dashboard redirects to sign-in."""

    status_code = 401
    code = "login_required"


def error_body(code: str, message: str, detail: Any = None) -> dict[str, Any]:
    """The JSON error envelope; `detail` defaults to the message."""
    return {
        "error": {"code": code, "message": message},
        "detail": message if detail is None else detail,
    }


def describe_invalid(
    errors: Sequence[Mapping[str, Any]], *, where: Callable[[tuple[Any, ...]], str], sentence: str
) -> str:
    """One sentence for the first validation problem of a body, a query or the settings.

    `sentence` has `{where}` (the location, as `where` names it for its reader) and
    `{problem}` (pydantic's message, which never repeats the value: no secret is echoed).
    """
    first = errors[0]
    return sentence.format(
        where=where(tuple(first.get("loc", ()))), problem=first.get("msg", "invalid")
    )


def dotted(loc: tuple[Any, ...], *, skip: tuple[str, ...] = ()) -> str:
    """`("body", "eval_config", "num_examples")` -> `eval_config.num_examples` (skipping `skip`)."""
    return ".".join(str(part) for part in loc if part not in skip)
