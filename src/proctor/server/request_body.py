"""Reading JSON request bodies: a size cap before parsing, strict numbers, and raw spans.

Bodies are parsed once with the stdlib decoder. Non-finite numbers (`NaN`, `Infinity`, or a
literal that overflows a float) and lone surrogate halves (`"\\ud800"`, which no database
text column can hold and no response can encode) are rejected, naming the field. Besides
the parsed object, the parser keeps the exact text of each top-level value, so a field such
as `metadata` can be stored and returned byte for byte, and (for one named array key) the
exact text of each element, so a sample is stored as sent without re-encoding.
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from proctor.server import limits
from proctor.server.errors import InvalidInput

_WS = re.compile(r"[ \t\n\r]*")


class _NonFinite(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _NonFinite(name)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NonFinite(text)
    return value


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_parse_float)
STRICT_DECODER = _DECODER
"""The decoder of every body: the stdlib's, refusing NaN, Infinity and overflowing floats
(it raises `NonFiniteNumber`, a `ValueError`)."""
NonFiniteNumber = _NonFinite


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_BAD_NUMBER = object()
_LENIENT_DECODER = json.JSONDecoder(
    parse_constant=lambda _name: _BAD_NUMBER,
    parse_float=lambda text: _BAD_NUMBER if not math.isfinite(float(text)) else float(text),
)


def encodable(text: str) -> bool:
    """Whether `text` is valid Unicode text (UTF-8 can encode it: no lone surrogate half)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _printable(name: str) -> str:
    # A field name is echoed in the error: never with the half it may itself hold.
    return name.encode("utf-8", "backslashreplace").decode("utf-8")


def find_bad_value(value: Any, path: str = "") -> tuple[str, str] | None:
    """The path of the first value JSON cannot carry to the database and back, and what is
    wrong with it: a string (or key) holding a lone surrogate half (`"\\ud800"`, what a
    model cut mid-emoji returns; UTF-8 cannot encode it), or a non-finite number."""
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack:
        here, item = stack.pop()
        if isinstance(item, str):
            if not encodable(item):
                return here or "the body", "surrogate"
        elif item is _BAD_NUMBER or (isinstance(item, float) and not math.isfinite(item)):
            return here or "the body", "non_finite"
        elif isinstance(item, dict):
            for key, child in reversed(item.items()):
                name = f"{here}.{_printable(str(key))}" if here else _printable(str(key))
                if isinstance(key, str) and not encodable(key):
                    return name, "surrogate"
                stack.append((name, child))
        elif isinstance(item, list):
            stack.extend((f"{here}[{i}]", child) for i, child in reversed(list(enumerate(item))))
    return None


def bad_value_message(where: str, path: str, problem: str) -> str:
    """The sentence for a value `find_bad_value` found at `path` of `where`."""
    if problem == "surrogate":
        return (
            f"{where} field '{path}' holds a lone surrogate (half of a UTF-16 pair, not "
            "text); send valid UTF-8 text, e.g. with the half replaced by U+FFFD."
        )
    return f"{where} field '{path}' is NaN or Infinity; send a finite number or null."


def check_text(text: str, value: Any, *, where: str = "The body") -> None:
    """Refuse (422 naming the field) a lone surrogate in the parsed `value` of `text`; only
    a body with a `\\uD8..`-`\\uDF..` escape is walked (a surrogate half has no other way
    into valid UTF-8 JSON)."""
    if not _SURROGATE_ESCAPE.search(text):
        return
    found = find_bad_value(value)
    if found is not None:
        raise InvalidInput(
            bad_value_message(where, *found), code="invalid_text", loc=("body", found[0])
        )


def non_finite_path(text: str) -> str:
    """Where the first non-finite number of a JSON `text` the strict decoder refused is."""
    try:
        value = _LENIENT_DECODER.decode(text.strip())
    except (ValueError, RecursionError):
        return "the body"
    found = find_bad_value(value)
    return found[0] if found is not None else "the body"


@dataclass
class JsonObjectBody:
    """A parsed JSON object with the raw text of its top-level values."""

    value: dict[str, Any]
    raw: dict[str, str] = field(default_factory=dict)
    items_raw: list[str] | None = None
    """Raw text of each element of the split array key, when it was an array."""


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The request body, refusing (413) anything over `max_bytes` before reading it all."""
    too_large = limits.too_large(max_bytes)
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def _skip_ws(text: str, pos: int) -> int:
    match = _WS.match(text, pos)
    assert match is not None  # the pattern matches the empty string
    return match.end()


def _invalid(message: str) -> InvalidInput:
    return InvalidInput(message, code="invalid_json", loc=("body",))


def undecodable_message(error: ValueError) -> str:
    """The sentence for a body the JSON decoder refused with `error`."""
    if "digits" in str(error):
        return (
            f"The body has an integer literal longer than {sys.get_int_max_str_digits()} digits; "
            "send a smaller number, or the number as a string."
        )
    return f"The body is not valid JSON ({error}); send a JSON object."


def _decode_value(text: str, pos: int) -> tuple[Any, int]:
    try:
        return _DECODER.raw_decode(text, pos)
    except _NonFinite as e:
        path = non_finite_path(text)
        raise InvalidInput(
            f"The body field '{path}' is the non-finite number {e}; send a finite number or "
            "null instead of NaN or Infinity.",
            code="non_finite_number",
            loc=("body", path),
        ) from None
    except (json.JSONDecodeError, RecursionError) as e:
        raise _invalid(f"The body is not valid JSON ({e}); send a JSON object.") from None
    except ValueError as e:  # an integer literal past Python's digit limit
        raise _invalid(undecodable_message(e)) from None


def _scan_array(text: str, pos: int) -> tuple[list[Any], list[str], int]:
    """Parse the array starting at `text[pos] == "["`; values, raw texts and the end index."""
    values: list[Any] = []
    raws: list[str] = []
    pos = _skip_ws(text, pos + 1)
    if text.startswith("]", pos):
        return values, raws, pos + 1
    while True:
        pos = _skip_ws(text, pos)
        value, end = _decode_value(text, pos)
        values.append(value)
        raws.append(text[pos:end])
        pos = _skip_ws(text, end)
        if text.startswith(",", pos):
            pos += 1
        elif text.startswith("]", pos):
            return values, raws, pos + 1
        else:
            raise _invalid(
                "The body is not valid JSON (an array is not closed); send a JSON object."
            )


def parse_json_object(body: bytes, *, split_array: str | None = None) -> JsonObjectBody:
    """Parse `body` as one JSON object, keeping the raw text of each top-level value.

    Args:
        body: The request body.
        split_array: A top-level key whose array elements' raw texts are kept too.

    Raises:
        InvalidInput: The body is not UTF-8 JSON, not an object, or has a non-finite number.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise _invalid("The body is not UTF-8 text; send UTF-8 encoded JSON.") from None
    pos = _skip_ws(text, 0)
    if not text.startswith("{", pos):
        if pos >= len(text):
            raise _invalid("The request body is empty; send a JSON object.")
        _decode_value(text, pos)  # reports malformed JSON first
        raise _invalid("The body must be a JSON object, not another JSON value.")
    result = JsonObjectBody(value={})
    pos = _skip_ws(text, pos + 1)
    if text.startswith("}", pos):
        pos += 1
    else:
        while True:
            if not text.startswith('"', pos):
                raise _invalid(
                    "The body is not valid JSON (expected a quoted key); send a JSON object."
                )
            key, pos = _decode_value(text, pos)
            pos = _skip_ws(text, pos)
            if not text.startswith(":", pos):
                raise _invalid("The body is not valid JSON (expected ':'); send a JSON object.")
            pos = _skip_ws(text, pos + 1)
            start = pos
            if key == split_array and text.startswith("[", pos):
                value, raws, pos = _scan_array(text, pos)
                result.items_raw = raws
            else:
                value, pos = _decode_value(text, pos)
                if key == split_array:
                    result.items_raw = None
            result.value[key] = value
            result.raw[key] = text[start:pos]
            pos = _skip_ws(text, pos)
            if text.startswith(",", pos):
                pos = _skip_ws(text, pos + 1)
            elif text.startswith("}", pos):
                pos += 1
                break
            else:
                raise _invalid(
                    "The body is not valid JSON (an object is not closed); send a JSON object."
                )
    if _skip_ws(text, pos) != len(text):
        raise _invalid("The body has extra data after the JSON object; send exactly one object.")
    check_text(text, result.value)
    return result


async def read_json_object(
    request: Request, max_bytes: int, *, split_array: str | None = None
) -> JsonObjectBody:
    """Read and parse the request body as one JSON object (see `parse_json_object`)."""
    return parse_json_object(await read_body(request, max_bytes), split_array=split_array)
