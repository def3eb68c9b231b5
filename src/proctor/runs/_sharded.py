"""An evaluation written in shards: created once, filled by many processes, closed once.

A batch system (SLURM array jobs, Ray tasks) runs N `proctor eval ... --shard I/N
--run.attach ID` processes; none of them closes the evaluation. Whoever submitted them
creates it first (`create_sharded`) with the number of samples the whole run makes, and
closes it at the end (`finalize_sharded`), which refuses while a sample is missing.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from proctor.contract import Sample
from proctor.errors import PlatformError
from proctor.runs._client import PlatformClient
from proctor.runs._evaluations import create_evaluation
from proctor.runs._summary import SummaryAccumulator

EXPECTED_KEY = "expected_samples"
"""Where a sharded evaluation's metadata keeps the number of samples the whole run makes."""

CALL_TIMEOUT_S = 30.0
"""How long each step rides out transient platform failures."""

PAGE = 1000


def create_sharded(
    client: PlatformClient,
    *,
    name: str,
    environment: str,
    model: str,
    config: Mapping[str, Any],
    expected_samples: int,
    team_id: str | None = None,
) -> dict[str, Any]:
    """Create the evaluation the shards attach to; its metadata records `expected_samples`.

    Raises:
        PlatformError: the platform refused or stayed unreachable.
    """
    return create_evaluation(
        client,
        name=name,
        environments=[environment],
        model=model,
        config={**config, EXPECTED_KEY: expected_samples},
        team_id=team_id,
        key=uuid.uuid4().hex,
        deadline=time.monotonic() + CALL_TIMEOUT_S,
    )


def finalize_sharded(
    client: PlatformClient, evaluation_id: str, *, expected_samples: int | None = None
) -> dict[str, Any]:
    """Close a sharded evaluation once it holds every sample; return its summary metrics.

    The count checked is `expected_samples`, else the one its creation recorded.

    Raises:
        PlatformError: a sample is missing (the message gives the counts), the evaluation
            records no expected count and none was given, or the platform refused.
    """
    path = f"/evaluations/{evaluation_id}"
    deadline = time.monotonic() + CALL_TIMEOUT_S
    record = client.call_until("GET", path, deadline=deadline)
    expected = expected_samples
    if expected is None:
        expected = (record.get("metadata") or {}).get(EXPECTED_KEY)
    if not isinstance(expected, int) or isinstance(expected, bool):
        raise PlatformError(
            f"evaluation {evaluation_id} records no expected sample count; "
            "pass the number the whole run makes with --expect N"
        )
    summary, held = _summary_of_stored(client, evaluation_id)
    if held != expected:
        raise PlatformError(
            f"evaluation {evaluation_id} holds {held} of {expected} samples; run the shards "
            "that did not finish again (what is stored is skipped), then finalize"
        )
    client.call_until("POST", f"{path}/finalize", json_body={"metrics": summary}, deadline=deadline)
    return summary


def summarize_samples(samples: Iterable[Mapping[str, Any]]) -> tuple[dict[str, Any], int]:
    """The run summary of stored samples (wire form), as a finished run writes it, and how
    many there are: what closes a sharded evaluation, here or in the hosted launcher."""
    acc = SummaryAccumulator()
    for sample in samples:
        acc.add(_as_record(sample))
    return acc.summary(), acc.episodes


def _summary_of_stored(client: PlatformClient, evaluation_id: str) -> tuple[dict[str, Any], int]:
    """The summary of every stored sample (as a run writes it) and how many there are."""

    def pages() -> Iterator[Mapping[str, Any]]:
        page = 1
        while True:
            answer = client.call_until(
                "GET",
                f"/evaluations/{evaluation_id}/samples?page={page}&limit={PAGE}",
                deadline=time.monotonic() + CALL_TIMEOUT_S,
            )
            yield from answer.get("samples") or []
            if not answer.get("has_more"):
                return
            page += 1

    return summarize_samples(pages())


def _as_record(sample: Mapping[str, Any]) -> dict[str, Any]:
    """A stored sample in the shape the summary reads: its reward functions' raw scores are
    the top-level keys the contract does not name."""
    rewards = {k: v for k, v in sample.items() if k not in Sample.model_fields}
    return {**sample, "rewards": rewards}
