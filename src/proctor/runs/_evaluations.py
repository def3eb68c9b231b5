"""The evaluation's lifecycle on the wire: create, check an attach, close.

Sequences (platform-api.md; the same calls the public client makes):

- create: `POST /environmentshub/resolve` per environment, then `POST /evaluations/`;
- attach: `GET /evaluations/{id}` (exists, readable, still open), then an empty
  `POST /evaluations/{id}/samples` (this key may write) — nothing is created;
- close, created run: `PUT {metadata, metrics}`, then `POST /finalize {"metrics"}` when
  completed, else `PUT {"status": "FAILED"|"CANCELLED", "error_message"}` (409 = already closed);
- close, attached run: `PUT {metrics}` (never metadata), then finalize when completed; a
  failure status is the launcher's to set;
- reopen (a resumed run, proctor extension): `POST /evaluations/{id}/reopen`.

Create (with an Idempotency-Key), reopen and close are safe to replay, so each is retried
under the upload policy (transient failures, with backoff) until its deadline; so are the
attach's two calls (a GET, and a POST that stores nothing), for `ATTACH_WAIT_S`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from proctor.contract import ERROR_MESSAGE_MAX, FAILURE_STATUS, UNATTACHABLE_STATUSES
from proctor.errors import APIError, AttachError, PlatformError
from proctor.runs._client import PlatformClient, PlatformUnreachable, is_transient

log = logging.getLogger(__name__)

CREATE_TIMEOUT_S = 5.0
"""How long opening a run rides out an outage before the run goes on offline."""
ATTACH_WAIT_S = 20.0
"""How long an attach rides out an outage (a platform server restarting) before it fails:
an attached run has no offline mode, and a launcher's shard that fails to attach spends
one of its attempts."""


def create_evaluation(
    client: PlatformClient,
    *,
    name: str,
    environments: Sequence[str],
    model: str,
    config: Mapping[str, Any] | None,
    team_id: str | None,
    key: str,
    deadline: float | None = None,
    framework: str = "proctor",
) -> dict[str, Any]:
    """Create an evaluation; return the platform's answer (`evaluation_id`, `viewer_url`).

    `key` is sent as the Idempotency-Key: a retry, or a later `proctor runs sync` of the same
    run directory, gets the evaluation the first create made. `framework` says what ran the
    environments (`proctor` for its own, `verifiers` for a verifiers environment): the hub
    resolves a bare name to a proctor built-in only for `proctor`.

    Raises:
        PlatformUnreachable: no answer, or only transient ones, until `deadline` (the run
            can go on offline and be synced later).
        PlatformError: the platform refused (message names the fix).
    """
    team = {"team_id": team_id} if team_id else {}
    until = deadline if deadline is not None else time.monotonic() + CREATE_TIMEOUT_S
    try:
        refs = []
        for env in environments:
            answer = client.call_until(
                "POST",
                "/environmentshub/resolve",
                json_body={"name": env, "framework": framework, **team},
                deadline=until,
            )
            env_id = (answer.get("data") or answer).get("id")
            if not env_id:
                raise PlatformError(f"the platform resolved environment {env!r} without an id")
            # `name@version` says which version ran; the platform records it (`ref`).
            version = env.partition("@")[2].strip()
            refs.append({"id": str(env_id), **({"version": version} if version else {})})
        body: dict[str, Any] = {
            "name": name,
            "environments": refs,
            "tags": [],
            "model_name": model,
            "dataset": environments[0].partition("@")[0] if environments else None,
            "framework": framework,
            "metadata": dict(config or {}),
            **team,
        }
        created = client.call_until(
            "POST",
            "/evaluations/",
            json_body={k: v for k, v in body.items() if v is not None},
            headers={"Idempotency-Key": key},
            deadline=until,
        )
    except PlatformError as e:
        if is_transient(e):
            raise PlatformUnreachable(
                f"cannot create an evaluation: no answer from the platform at {client.api_url}",
                connected=True,
            ) from e
        if not isinstance(e, APIError):
            raise
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
    deadline = time.monotonic() + ATTACH_WAIT_S
    try:
        record = client.call_until("GET", f"/evaluations/{evaluation_id}", deadline=deadline)
        status = str(record.get("status") or "").upper()
        if status in UNATTACHABLE_STATUSES:
            raise AttachError(
                f"{prefix}: it is already {status} and takes no more samples; "
                "start a new run without --run.attach"
            )
        # The write check: an empty batch stores nothing, but needs write access.
        client.call_until(
            "POST",
            f"/evaluations/{evaluation_id}/samples",
            json_body={"samples": []},
            deadline=deadline,
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


def reopen_evaluation(client: PlatformClient, evaluation_id: str, *, deadline: float) -> int:
    """Take back an evaluation an earlier attempt of this run left or closed; return attempts.

    Raises:
        APIError: 409 when it is COMPLETED, TIMEOUT or a launcher's (start a new one).
        PlatformError: unreachable until `deadline`, or another refusal.
    """
    answer = client.call_until("POST", f"/evaluations/{evaluation_id}/reopen", deadline=deadline)
    return int(answer.get("attempts") or 0)


def close_evaluation(
    client: PlatformClient,
    evaluation_id: str,
    *,
    attached: bool,
    status: str,
    error: str | None,
    summary: Mapping[str, Any],
    metadata: Mapping[str, Any] | None,
    deadline: float,
) -> str:
    """Write the summary and close the evaluation as the rules say; return what was done.

    Raises:
        APIError: 409 `evaluation_closed`: the platform closed it first (a cancel won the
            race, or it was finalized with other content); nothing a sync can change.
        PlatformError: a call was refused, or failed until `deadline`.
    """
    path = f"/evaluations/{evaluation_id}"
    update: dict[str, Any] = {"metrics": dict(summary)}
    if not attached:
        update = {"metadata": dict(metadata or {}), **update}
    client.call_until("PUT", path, json_body=update, deadline=deadline)
    if status == "completed":
        # A 409 (closed: cancelled meanwhile, or finalized with other metrics) propagates: the
        # run did not finalize, and its caller says so and exits non-zero.
        client.call_until(
            "POST", f"{path}/finalize", json_body={"metrics": dict(summary)}, deadline=deadline
        )
        return "finalized"
    if attached:
        return "summary written; status left to the launcher"
    wire_status = FAILURE_STATUS[status]
    message = (error or status)[:ERROR_MESSAGE_MAX]
    try:
        client.call_until(
            "PUT",
            path,
            json_body={"status": wire_status, "error_message": message},
            deadline=deadline,
        )
    except APIError as e:
        if e.status_code != 409:
            raise
        log.info("evaluation %s was already closed", evaluation_id)
        return "already closed"
    return f"marked {wire_status}"
