"""`POST /traces`: not implemented; clients fall back to `/evaluations/{id}/samples`.

It answers 403 `service_not_enabled` (after checking the key), also to keys scoped to one
evaluation: a 404 or `scope_denied` would make clients drop the records instead.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from proctor.server.auth.dependencies import CurrentPrincipal
from proctor.server.errors import error_body

router = APIRouter(tags=["traces"])


@router.post("/traces", status_code=403)
def upload_traces(_principal: CurrentPrincipal) -> JSONResponse:
    """Refuse trace uploads; send the same records to `/evaluations/{id}/samples`."""
    message = (
        "The traces service is not enabled on this platform; "
        "send the records to /evaluations/{id}/samples instead."
    )
    return JSONResponse(error_body("service_not_enabled", message), status_code=403)
