"""Client side of hosted evaluations: submit, follow (status + live logs), cancel, list.

Talks HTTP to the platform named by `PROCTOR_API_URL` with `PROCTOR_API_KEY` (or
`~/.proctor/config.toml`), through the runs SDK's `PlatformClient`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from proctor.contract import TERMINAL_STATUSES
from proctor.errors import ConfigError, PlatformError, PlatformUnreachable, RetryableAPIError
from proctor.runs import PlatformClient, load_settings


def connect(api_url: str | None = None, api_key: str | None = None) -> PlatformClient:
    """A client for the configured platform.

    Raises:
        ConfigError: no API key is configured.
    """
    settings = load_settings(api_url=api_url, api_key=api_key)
    if settings.api_key is None:
        raise ConfigError(
            "No API key: set PROCTOR_API_KEY (or api_key in ~/.proctor/config.toml); "
            "`proctor quickstart` writes one for its local server."
        )
    return PlatformClient(settings.api_url, settings.api_key.get_secret_value())


def submit(
    client: PlatformClient,
    *,
    environment: str,
    model: str,
    eval_config: dict[str, Any],
    name: str | None = None,
    team_id: str | None = None,
) -> list[str]:
    """Create a hosted evaluation; returns the new evaluation ids."""
    body: dict[str, Any] = {
        "environment_ids": [environment],
        "inference_model": model,
        "eval_config": eval_config,
    }
    if name:
        body["name"] = name
    if team_id:
        body["team_id"] = team_id
    answer = client.call("POST", "/hosted-evaluations", json_body=body, replayable=False)
    return list(answer.get("evaluation_ids") or [answer["evaluation_id"]])


def get(client: PlatformClient, evaluation_id: str) -> dict[str, Any]:
    """The evaluation's record."""
    return client.call("GET", f"/evaluations/{evaluation_id}")


def stats(client: PlatformClient, evaluation_id: str) -> dict[str, Any]:
    """The evaluation's statistics (`GET /evaluations/{id}/stats`)."""
    return client.call("GET", f"/evaluations/{evaluation_id}/stats")


def compare(
    client: PlatformClient,
    evaluation_ids: list[str],
    pass_threshold: float | None = None,
    *,
    show: str | None = None,
    sort: str | None = None,
    limit: int | None = None,
) -> dict[str, Any]:
    """Statistics of the evaluations and the paired comparison of the first two (the
    platform refuses evaluations that do not compare, with the reason); with `show` or
    `sort`, also the first `limit` examples so filtered and sorted (`examples`)."""
    ids = ",".join(quote(i, safe="") for i in evaluation_ids)
    query = {"pass_threshold": pass_threshold, "show": show, "sort": sort}
    if show is not None or sort is not None:
        query["limit"] = limit
    extra = "".join(
        f"&{name}={quote(repr(value) if isinstance(value, float) else str(value), safe='')}"
        for name, value in query.items()
        if value is not None
    )
    return client.call("GET", f"/evaluations/compare?ids={ids}{extra}")


def logs(client: PlatformClient, evaluation_id: str, *, shard: int | None = None) -> str:
    """The sandbox's output so far."""
    return str(_logs_answer(client, evaluation_id, shard=shard).get("logs") or "")


def _logs_answer(
    client: PlatformClient, evaluation_id: str, *, shard: int | None = None
) -> dict[str, Any]:
    query = "" if shard is None else f"?shard={shard}"
    return client.call("GET", f"/hosted-evaluations/{evaluation_id}/logs{query}")


def shard_count(record: dict[str, Any]) -> int:
    """How many shards a hosted evaluation runs in (its metadata's `shards`; 1 if unsharded)."""
    shards = (record.get("metadata") or {}).get("shards")
    return shards if isinstance(shards, int) and shards > 1 else 1


class _ShardedLog:
    """The logs of a sharded run, followed shard by shard: whole new lines, each behind its
    shard's `[I/N] ` (the combined answer's headlines change, so it cannot be followed)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.printed = [""] * count

    def read(self, client: PlatformClient, evaluation_id: str) -> str:
        out = []
        for index in range(self.count):
            text = logs(client, evaluation_id, shard=index)
            added = new_text(self.printed[index], text)
            whole = added[: added.rfind("\n") + 1]
            if whole:
                self.printed[index] = text[: len(text) - len(added) + len(whole)]
                out += [f"[{index}/{self.count}] {line}\n" for line in whole.splitlines()]
        return "".join(out)


def cancel(client: PlatformClient, evaluation_id: str) -> str:
    """Cancel a hosted evaluation; returns the platform's message."""
    answer = client.call("PATCH", f"/hosted-evaluations/{evaluation_id}/cancel", replayable=False)
    return str(answer.get("message") or f"Evaluation {evaluation_id} cancelled.")


def rename(client: PlatformClient, evaluation_id: str, name: str) -> dict[str, Any]:
    """Give the evaluation another name (`PUT /evaluations/{id}`); returns its record."""
    return client.call("PUT", f"/evaluations/{evaluation_id}", json_body={"name": name})


def delete(client: PlatformClient, evaluation_id: str) -> str:
    """Delete the evaluation and its samples; returns the name it had."""
    answer = client.call("DELETE", f"/evaluations/{evaluation_id}", replayable=False)
    return str(answer.get("name") or "")


def list_evaluations(client: PlatformClient, *, limit: int = 20) -> list[dict[str, Any]]:
    """The newest evaluations visible to the key."""
    answer = client.call("GET", f"/evaluations/?skip=0&limit={limit}")
    return list(answer.get("evaluations") or [])


def new_text(printed: str, current: str) -> str:
    """What `current` (the whole log so far, or its tail) adds to what was already printed."""
    if current.startswith(printed):
        return current[len(printed) :]
    # The log was cut to its tail: find where the printed text's end sits in it.
    for size in (4096, 1024, 256, 64):
        anchor = printed[-size:]
        if len(anchor) == size and (at := current.rfind(anchor)) >= 0:
            return current[at + size :]
    return current


def follow(
    client: PlatformClient,
    evaluation_id: str,
    *,
    on_logs: Callable[[str], None],
    on_status: Callable[[dict[str, Any]], None] | None = None,
    poll_seconds: float = 1.0,
    outage_seconds: float = 120.0,
    close_seconds: float = 30.0,
) -> dict[str, Any]:
    """Stream the sandbox's logs and status changes until the evaluation ends.

    Args:
        outage_seconds: How long the platform may stay unreachable before following stops.
        close_seconds: How long, once the status is terminal, to wait for the launcher to
            close the run (the sandbox's last lines, a status overruled on its exit).

    Returns:
        The final record (terminal status).

    Raises:
        PlatformError: The platform stayed unreachable for `outage_seconds`.
    """
    printed = ""
    last_status = None
    last_answer = time.monotonic()
    sharded: _ShardedLog | None = None
    while True:
        try:
            record = get(client, evaluation_id)
            status = record.get("status")
            if status != last_status and status not in TERMINAL_STATUSES:
                last_status = status
                if on_status is not None:
                    on_status(record)
            if sharded is None and shard_count(record) > 1:
                sharded = _ShardedLog(shard_count(record))
            if sharded is not None:
                text = printed + sharded.read(client, evaluation_id)
            else:
                text = logs(client, evaluation_id)
        except (PlatformUnreachable, RetryableAPIError) as e:
            # A short outage of the platform pauses following; a long one ends it.
            if time.monotonic() - last_answer > outage_seconds:
                raise PlatformError(
                    f"The platform stopped answering while following {evaluation_id} ({e}); "
                    "check that it runs, then `proctor hosted logs --follow` again."
                ) from e
            time.sleep(poll_seconds)
            continue
        last_answer = time.monotonic()
        added = new_text(printed, text)
        if added:
            on_logs(added)
            printed = text
        if record.get("status") in TERMINAL_STATUSES:
            # A run finalizes before its sandbox prints its last lines and exits, and the
            # launcher may still overrule the status on that exit: read on until it closed
            # the run (a server without `ended` closes at once), then read the status again.
            deadline = time.monotonic() + close_seconds
            try:
                while True:
                    answer = _logs_answer(client, evaluation_id)
                    if sharded is not None:
                        added = sharded.read(client, evaluation_id)
                    else:
                        text = str(answer.get("logs") or "")
                        added, printed = new_text(printed, text), text
                    if added:
                        on_logs(added)
                    if answer.get("ended", True) or time.monotonic() > deadline:
                        break
                    time.sleep(poll_seconds)
                record = get(client, evaluation_id)
            except (PlatformUnreachable, RetryableAPIError):
                pass  # the status already read stands
            if on_status is not None:
                on_status(record)  # after the sandbox's last lines, so the status closes the log
            return record
        time.sleep(poll_seconds)
