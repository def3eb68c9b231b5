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
    """Validate a parsed body, turning failures into FastAPI's 422 validation error."""
    try:
        return model.model_validate(value)
    except ValidationError as e:
        errors = [{**err, "loc": ("body", *err["loc"])} for err in e.errors()]
        raise RequestValidationError(errors) from None


def body_schema(model: type[BaseModel]) -> dict[str, Any]:
    """`openapi_extra` declaring `model` as the JSON request body of a route."""
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    schema.pop("$defs", None)
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": schema}},
        }
    }


JsonBody = Annotated[JsonObjectBody, Depends(json_object_body)]
RawBody = Annotated[bytes, Depends(raw_body)]
