"""The published OpenAPI document, made to say what the server does.

FastAPI documents only the success answer and its own 422 shape (`HTTPValidationError`), which
is not the body the server sends. `install_openapi` rewrites the generated document once:

- the error envelope (`ErrorBody`) and the 422 envelope (`ValidationErrorBody`, whose
  `detail` is always a list) replace FastAPI's validation schemas;
- every API operation documents the errors every operation can answer (401 and 403 from the
  key, 422 from validation, 500 should the server fail), 404 where the path names a record,
  413 where it takes a body; routes add their own (409, 400, ...) with `responses=errors(...)`;
- every string a request may carry is published with the boundary's no-NUL `pattern`
  (see `proctor.server.boundary`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from proctor.server.boundary import NO_NUL_PATTERN

ERROR_REF = {"$ref": "#/components/schemas/ErrorBody"}
VALIDATION_REF = {"$ref": "#/components/schemas/ValidationErrorBody"}

_ERROR_SCHEMAS: dict[str, Any] = {
    "ErrorCode": {
        "type": "object",
        "required": ["code", "message"],
        "properties": {
            "code": {"type": "string", "description": "A snake-case code, e.g. `not_found`."},
            "message": {"type": "string", "description": "One sentence naming the fix."},
        },
    },
    "ErrorBody": {
        "type": "object",
        "description": "Every error answer: the code and sentence, and the sentence again.",
        "required": ["error", "detail"],
        "properties": {
            "error": {"$ref": "#/components/schemas/ErrorCode"},
            "detail": {"type": "string"},
        },
    },
    "ValidationIssue": {
        "type": "object",
        "required": ["loc", "msg", "type"],
        "properties": {
            "loc": {
                "type": "array",
                "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                "description": "Where: `body`, `query` or `path`, then the field.",
            },
            "msg": {"type": "string"},
            "type": {"type": "string"},
        },
    },
    "ValidationErrorBody": {
        "type": "object",
        "description": "A 422: the error, and in `detail` each invalid field (FastAPI's form).",
        "required": ["error", "detail"],
        "properties": {
            "error": {"$ref": "#/components/schemas/ErrorCode"},
            "detail": {"type": "array", "items": {"$ref": "#/components/schemas/ValidationIssue"}},
        },
    },
}

_DESCRIPTIONS = {
    400: "The request is malformed in a way the message names.",
    401: "No API key, or one that is unknown or revoked.",
    403: "The key may not do this (another team, or a key scoped to one evaluation).",
    404: "No such record, or this key may not see it.",
    409: "The record's state forbids this (e.g. a closed evaluation).",
    413: "The request body is over the size limit.",
    422: "A parameter or a body field is invalid; `detail` lists them.",
    429: "Over a rate limit; `Retry-After` says when to try again.",
    500: "The server failed; its log has the cause under the `X-Request-ID` of the answer.",
}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route that can answer these error statuses (with the envelope)."""
    return {status: {"description": _DESCRIPTIONS.get(status, "An error.")} for status in statuses}


def _response(status: int) -> dict[str, Any]:
    schema = VALIDATION_REF if status == 422 else ERROR_REF
    return {
        "description": _DESCRIPTIONS.get(status, "An error."),
        "content": {"application/json": {"schema": schema}},
    }


def _schemas_of(node: Any, components: dict[str, Any], seen: set[str]) -> Iterator[dict[str, Any]]:
    """Every schema object under `node`, following `$ref`s into `components` once each."""
    if isinstance(node, list):
        for item in node:
            yield from _schemas_of(item, components, seen)
        return
    if not isinstance(node, dict):
        return
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
        name = ref.rsplit("/", 1)[1]
        if name not in seen and name in components:
            seen.add(name)
            yield from _schemas_of(components[name], components, seen)
        return
    yield node
    for key, value in node.items():
        if key in {"properties", "patternProperties", "$defs"} and isinstance(value, dict):
            for sub in value.values():
                yield from _schemas_of(sub, components, seen)
        elif key not in {"enum", "const", "default", "examples", "example", "required"}:
            yield from _schemas_of(value, components, seen)


def _forbid_nul(schema: dict[str, Any]) -> None:
    if schema.get("type") == "string" and not {"pattern", "enum", "const", "format"} & set(schema):
        schema["pattern"] = NO_NUL_PATTERN


def make_truthful(document: dict[str, Any], *, api_prefix: str) -> dict[str, Any]:
    """Rewrite a FastAPI-generated document in place (see the module docstring)."""
    components = document.setdefault("components", {}).setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    components.update(_ERROR_SCHEMAS)
    for path, operations in document.get("paths", {}).items():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            statuses = {500}
            if path.startswith(api_prefix):
                statuses |= {401, 403, 422}
                if "{" in path:
                    statuses.add(404)
                if "requestBody" in operation:
                    statuses.add(413)
            if operation.get("parameters") or "requestBody" in operation:
                statuses.add(422)
            statuses |= {int(code) for code in responses if code.isdigit() and int(code) >= 400}
            for status in sorted(statuses):
                responses[str(status)] = {**responses.get(str(status), {}), **_response(status)}
            request_parts = [p.get("schema") for p in operation.get("parameters", [])]
            request_parts.append(operation.get("requestBody"))
            for schema in _schemas_of(request_parts, components, set()):
                _forbid_nul(schema)
    return document


def install_openapi(app: FastAPI, *, api_prefix: str) -> None:
    """Serve the rewritten document at `/openapi.json` (built once, on first request)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            app.openapi_schema = make_truthful(document, api_prefix=api_prefix)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
