"""The evaluation's lifecycle on the wire: create, check an attach, close.

Sequences (platform-api.md; the same calls the public client makes):

- create: `POST /environmentshub/resolve` per environment, then `POST /evaluations/`;
- attach: `GET /evaluations/{id}` (exists, readable, still open), then an empty
  `POST /evaluations/{id}/samples` (this key may write) — nothing is created;
- close, created run: `PUT {metadata, metrics}`, then `POST /finalize {"metrics"}` when
  completed, else `PUT {"status": "FAILED"|"CANCELLED", "error_message"}` (409 = already closed);
- close, attached run: `PUT {metrics}` (never metadata), then finalize when completed; a
  failure status is the launcher's to set.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from proctor.contract import ERROR_MESSAGE_MAX, FAILURE_STATUS, UNATTACHABLE_STATUSES
from proctor.errors import APIError, AttachError, PlatformError
from proctor.runs._client import PlatformClient, PlatformUnreachable

log = logging.getLogger(__name__)


def create_evaluation(
    client: PlatformClient,
    *,
    name: str,
    environments: Sequence[str],
    model: str,
    config: Mapping[str, Any] | None,
    team_id: str | None,
) -> dict[str, Any]:
    """Create an evaluation; return the platform's answer (`evaluation_id`, `viewer_url`).

    Raises:
        PlatformError: the platform refused or could not be reached (message names the fix).
    """
    team = {"team_id": team_id} if team_id else {}
    try:
        refs = []
        for env in environments:
            answer = client.call(
                "POST", "/environmentshub/resolve", json_body={"name": env, **team}
            )
            env_id = (answer.get("data") or answer).get("id")
            if not env_id:
                raise PlatformError(f"the platform resolved environment {env!r} without an id")
            refs.append({"id": str(env_id)})
        body: dict[str, Any] = {
            "name": name,
            "environments": refs,
            "tags": [],
            "model_name": model,
            "dataset": environments[0] if environments else None,
            "framework": "proctor",
            "metadata": dict(config or {}),
            **team,
        }
        created = client.call(
            "POST",
            "/evaluations/",
            json_body={k: v for k, v in body.items() if v is not None},
            replayable=False,
        )
    except PlatformUnreachable as e:
        raise PlatformError(
            f"cannot create an evaluation: the platform at {client.api_url} is unreachable "
            "(check PROCTOR_API_URL and that the server is running)"
        ) from e
    except APIError as e:
        hint = (
            "set PROCTOR_API_KEY to a valid key"
            if e.status_code in (401, 403)
            else "see the platform's log"
        )
        raise PlatformError(f"cannot create an evaluation ({e}); {hint}") from e
    if not created.get("evaluation_id"):
        raise PlatformError("the platform created an evaluation but sent no evaluation_id")
    return created


def check_attachable(client: PlatformClient, evaluation_id: str) -> dict[str, Any]:
    """Return the evaluation's record when this key can attach to it and it is still open.

    Raises:
        AttachError: unknown id, closed evaluation, key without access, platform unreachable.
    """
    where = f"the platform at {client.api_url}"
    prefix = f"cannot attach to evaluation {evaluation_id}"
    try:
        record = client.call("GET", f"/evaluations/{evaluation_id}", attempts=3)
        status = str(record.get("status") or "").upper()
        if status in UNATTACHABLE_STATUSES:
            raise AttachError(
                f"{prefix}: it is already {status} and takes no more samples; "
                "start a new run without --run.attach"
            )
        # The write check: an empty batch stores nothing, but needs write access.
        client.call(
            "POST", f"/evaluations/{evaluation_id}/samples", json_body={"samples": []}, attempts=3
        )
    except PlatformUnreachable as e:
        raise AttachError(
            f"{prefix}: {where} is unreachable; check PROCTOR_API_URL and that the server is up"
        ) from e
    except APIError as e:
        if e.status_code == 404:
            msg = (
                f"{where} has no evaluation with this id that this key can see; "
                "check the id ($EVALUATION_ID) and PROCTOR_API_KEY"
            )
        elif e.status_code == 401:
            msg = (
                f"{where} rejected the API key; set PROCTOR_API_KEY to the key for this evaluation"
            )
        elif e.status_code == 403:
            msg = "this API key may not write to it; set PROCTOR_API_KEY to the key minted for it"
        elif e.status_code == 409:
            msg = "it is already closed; start a new run without --run.attach"
        else:
            msg = f"{e}; check the platform's log"
        raise AttachError(f"{prefix}: {msg}") from e
    return record


def close_evaluation(
    client: PlatformClient,
    evaluation_id: str,
    *,
    attached: bool,
    status: str,
    error: str | None,
    summary: Mapping[str, Any],
    metadata: Mapping[str, Any] | None,
) -> str:
    """Write the summary and close the evaluation as the rules say; return what was done.

    Raises:
        PlatformError: a call failed (after retries of transient failures).
    """
    path = f"/evaluations/{evaluation_id}"
    update: dict[str, Any] = {"metrics": dict(summary)}
    if not attached:
        update = {"metadata": dict(metadata or {}), **update}
    client.call("PUT", path, json_body=update)
    if status == "completed":
        try:
            client.call("POST", f"{path}/finalize", json_body={"metrics": dict(summary)})
        except APIError as e:
            if e.status_code != 409:
                raise
            # Closed (FAILED/CANCELLED/TIMEOUT) by its launcher meanwhile: its call, not ours.
            log.warning("evaluation %s was closed by someone else before finalize", evaluation_id)
            return "already closed by someone else; not finalized"
        return "finalized"
    if attached:
        return "summary written; status left to the launcher"
    wire_status = FAILURE_STATUS[status]
    message = (error or status)[:ERROR_MESSAGE_MAX]
    try:
        client.call("PUT", path, json_body={"status": wire_status, "error_message": message})
    except APIError as e:
        if e.status_code != 409:
            raise
        log.info("evaluation %s was already closed", evaluation_id)
        return "already closed"
    return f"marked {wire_status}"
