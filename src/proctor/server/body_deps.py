"""Dependencies that read JSON bodies through `request_body`, and a validation helper."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from proctor.server.deps import SettingsDep
from proctor.server.request_body import JsonObjectBody, parse_json_object, read_body

ModelT = TypeVar("ModelT", bound=BaseModel)


async def json_object_body(request: Request, settings: SettingsDep) -> JsonObjectBody:
    """The body parsed as one JSON object (an empty body reads as `{}`)."""
    body = await read_body(request, settings.max_request_bytes)
    if not body.strip():
        return JsonObjectBody(value={})
    return parse_json_object(body)


async def raw_body(request: Request, settings: SettingsDep) -> bytes:
    """The body as bytes, refused (413) past the size cap; parsed later, off the event loop."""
    return await read_body(request, settings.max_request_bytes)


def validate(model: type[ModelT], value: Any) -> ModelT:
    """Validate a parsed body, turning failures into FastAPI's 422 validation error.

    Strict: JSON says what it is, so `0` is no boolean and `"1"` no integer, as the schema says.
    """
    try:
        return model.model_validate(value, strict=True)
    except ValidationError as e:
        errors = [{**err, "loc": ("body", *err["loc"])} for err in e.errors()]
        raise RequestValidationError(errors) from None


def _inline_refs(node: Any, defs: dict[str, Any]) -> Any:
    """`node` with every `#/$defs/...` reference replaced by the definition it names."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            rest = {k: v for k, v in node.items() if k != "$ref"}
            return {**_inline_refs(defs[ref.rsplit("/", 1)[1]], defs), **_inline_refs(rest, defs)}
        return {k: _inline_refs(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline_refs(v, defs) for v in node]
    return node


def body_schema(model: type[BaseModel], *, required: bool = True) -> dict[str, Any]:
    """`openapi_extra` declaring `model` as the JSON request body of a route.

    Nested models are inlined: `openapi_extra` cannot add them to the document's
    `components`, so a `$ref` there would dangle and schema-driven clients could not
    build a body.
    """
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})
    return {
        "requestBody": {
            "required": required,
            "content": {"application/json": {"schema": _inline_refs(schema, defs)}},
        }
    }


JsonBody = Annotated[JsonObjectBody, Depends(json_object_body)]
RawBody = Annotated[bytes, Depends(raw_body)]
