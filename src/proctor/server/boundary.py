"""What the database can hold, checked before it is asked: the server's one input boundary.

Every value a request carries ends up in a URL parameter, a JSON body or a query to the
database. The rules PostgreSQL would enforce with an error (and SQLite not at all) are
checked here, the same on both backends, and answered 422 naming the field:

- **URL**: no NUL character in any path or query parameter (`check_url`, a dependency of
  every route, so routes added later are covered without doing anything).
- **JSON**: no non-finite number and no lone surrogate half (`"\\ud800"`) anywhere in a body
  (`request_body` for the bodies it parses, `check_json_body` for those FastAPI parses),
  answered 422 naming the field; the database net below refuses such text too.
- **Database**: every value bound to a query is checked against the column type it is
  compared with or written to (`guard_engine`, a listener on every engine): no NUL in text,
  no integer outside its column's 16/32/64-bit range, and no longer text stored than a
  `String(n)` holds. This is the net under every endpoint, present and future; the message names the
  column.
- **Types**: `NoNul`, `Int32`, `Int64` and `page_max` let request models say the same limits
  up front, so the OpenAPI schema publishes them and the error names the request's field.
  The fuzz test (tests/server/test_fuzz_openapi.py) fails when a schema admits what the net
  refuses, so the two cannot drift apart silently.

JSON documents stored as sent (`metadata`, sample records) may hold any JSON: the database
stores them as escaped text, where a NUL or a large integer is harmless.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, Field
from sqlalchemy import BigInteger, Engine, Integer, SmallInteger, String, event
from sqlalchemy.engine.interfaces import ExecutionContext
from sqlalchemy.sql.elements import BindParameter
from starlette.requests import Request

from proctor.server.errors import InvalidInput
from proctor.server.request_body import (
    STRICT_DECODER,
    NonFiniteNumber,
    bad_value_message,
    check_text,
    encodable,
    non_finite_path,
)

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
ID_MAX_LENGTH = 64
"""Record ids are `String(64)` columns."""
# Published on every string parameter and field: PostgreSQL text cannot hold U+0000.
NO_NUL_PATTERN = r"^[^\x00]*$"
NUL = "\x00"


def nul_message(field: str) -> str:
    """The sentence for a NUL character in `field`."""
    return f"{field} contains a NUL character (\\u0000), which cannot be stored; remove it."


def _no_nul(value: str) -> str:
    if NUL in value:
        raise ValueError("text may not contain a NUL character (\\u0000); remove it")
    return value


NoNul = AfterValidator(_no_nul)
"""For request strings: `Annotated[str, Field(max_length=N), NoNul]` for a `String(N)` column.

The OpenAPI document publishes `NO_NUL_PATTERN` on every request string (`openapi.py`).
"""


Int32 = Annotated[int, Field(ge=INT32_MIN, le=INT32_MAX)]
"""An integer an `Integer` column holds."""
Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]
"""An integer a `BigInteger` column holds."""


def page_max(limit_max: int) -> int:
    """The largest page number whose window (page x limit) stays a 32-bit row position."""
    return INT32_MAX // limit_max


async def check_url(request: Request) -> None:
    """Refuse a NUL character in any path or query parameter (a dependency of every route)."""
    for name, value in request.path_params.items():
        if isinstance(value, str) and NUL in value:
            raise InvalidInput(nul_message(f"Path parameter {name!r}"), loc=("path", name))
    for name, value in request.query_params.multi_items():
        if NUL in name or NUL in value:
            raise InvalidInput(nul_message(f"Query parameter {name!r}"), loc=("query", name))


async def check_json_body(request: Request) -> None:
    """Refuse (422 naming the field) a non-finite number or a lone surrogate half in a JSON
    body FastAPI parsed itself (a dependency of every route): its parser accepts `NaN`,
    `Infinity` and `1e309`, and pydantic passes them and `"\\ud800"` on. Bodies read
    through `body_deps` are checked by `request_body` as they are parsed."""
    route = request.scope.get("route")
    if getattr(route, "body_field", None) is None:
        return
    if "json" not in request.headers.get("content-type", ""):
        return
    body = await request.body()  # already read (and cached) by FastAPI for this route
    try:
        text = body.decode("utf-8")
        value = STRICT_DECODER.decode(text)
    except NonFiniteNumber:
        path = non_finite_path(body.decode("utf-8"))
        raise InvalidInput(
            bad_value_message("The body", path, "non_finite"),
            code="non_finite_number",
            loc=("body", path),
        ) from None
    except (ValueError, RecursionError):
        return  # FastAPI answers malformed JSON itself
    check_text(text, value)


def _int_bits(type_: Any) -> int | None:
    if isinstance(type_, BigInteger):
        return 64
    if isinstance(type_, SmallInteger):
        return 16
    if isinstance(type_, Integer):
        return 32
    return None


def _column_name(bind: BindParameter[Any]) -> str:
    # Anonymous binds (`evaluations.id = :id_1`) remember the column they were made for.
    return str(getattr(bind, "_orig_key", None) or bind.key).strip("%()0123456789 ")


def _check_value(bind: BindParameter[Any], value: Any, *, writes: bool) -> None:
    if isinstance(value, list | tuple):  # an expanding IN (...)
        for item in value:
            _check_value(bind, item, writes=writes)
        return
    type_ = bind.type
    if isinstance(value, str):
        if NUL in value:
            raise InvalidInput(nul_message(repr(_column_name(bind))))
        if not value.isascii() and not encodable(value):
            raise InvalidInput(
                f"{_column_name(bind)!r} holds a lone surrogate (half of a UTF-16 pair, not "
                "text); send valid UTF-8 text, e.g. with the half replaced by U+FFFD."
            )
        # Only stored text must fit: a longer value compared with a column matches nothing.
        length = getattr(type_, "length", None) if writes and isinstance(type_, String) else None
        if length is not None and len(value) > length:
            raise InvalidInput(
                f"{_column_name(bind)!r} holds at most {length} characters, not {len(value)}; "
                "send a shorter value."
            )
    elif isinstance(value, int) and not isinstance(value, bool):
        bits = _int_bits(type_)
        if bits is not None and not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
            raise InvalidInput(
                f"{_column_name(bind)!r} must be between {-(2 ** (bits - 1))} and "
                f"{2 ** (bits - 1) - 1}, not {value}; send a number in that range."
            )


def check_parameters(
    binds: Mapping[str, BindParameter[Any]],
    parameters: Iterable[Mapping[str, Any]],
    *,
    writes: bool,
) -> None:
    """Raise `InvalidInput` for a bound value its column type cannot hold.

    Args:
        binds: The statement's bind parameters by name (they carry the column types).
        parameters: The values of each row by bind name.
        writes: The statement stores the values (INSERT/UPDATE), so text lengths count.
    """
    for row in parameters:
        for name, value in row.items():
            bind = binds.get(name)
            if bind is not None and value is not None:
                _check_value(bind, value, writes=writes)


def guard_engine(engine: Engine) -> None:
    """Check every statement's bound values against their column types before it runs."""

    @event.listens_for(engine, "before_cursor_execute")
    def _before(
        _conn: Any,
        _cursor: Any,
        _statement: str,
        _parameters: Any,
        context: ExecutionContext | None,
        _executemany: bool,
    ) -> None:
        binds = getattr(getattr(context, "compiled", None), "binds", None)  # None for DDL
        # A batched INSERT runs one cursor call per batch; its values are checked once.
        if not binds or getattr(context, "_proctor_checked", False):
            return
        context._proctor_checked = True  # type: ignore[union-attr]
        writes = bool(getattr(context, "isinsert", False) or getattr(context, "isupdate", False))
        check_parameters(binds, getattr(context, "compiled_parameters", None) or (), writes=writes)
