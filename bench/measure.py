"""What several bench scripts measure with: nearest-rank percentiles, the times the server
stored as POSIX seconds, and one hosted evaluation run to its end on a server of their own
(SQLite in its data dir, the bootstrap key)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from tests.support.procs import PROCTOR


def percentile(values: Sequence[float], q: float) -> float:
    """The `q` quantile of `values` by nearest rank (0.5: a median, 0.99: p99)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def stored_time(text: str | None) -> float | None:
    """A time the server stored (ISO 8601, UTC when it names no zone) as POSIX seconds."""
    if text is None:
        return None
    value = datetime.fromisoformat(text)
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()


def push(url: str, key: str, folder: Path, *flags: str) -> None:
    """`proctor envs push FOLDER FLAGS` to the server at `url` as `key`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCTOR_")}
    env.update(PROCTOR_API_URL=url, PROCTOR_API_KEY=key)
    done = subprocess.run(
        [*PROCTOR, "envs", "push", str(folder), *flags], env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"push failed: {done.stdout}{done.stderr}")


@dataclass(frozen=True)
class HostedEnd:
    """A hosted evaluation the launcher has closed: the server's times, in POSIX seconds."""

    created: float
    running: float
    """When the launcher started its sandbox."""
    first_sample: float | None
    """When its first sample was stored (None: it stored none)."""
    closed: float
    """When the launcher closed its sandbox."""
    log: str
    """The sandbox's log."""


_END = (
    "SELECT e.created_at, h.started_at, (SELECT MIN(s.created_at) FROM samples s "
    "WHERE s.evaluation_id = e.id), h.ended_at, e.status, h.log_path FROM evaluations e "
    "JOIN hosted_evaluations h ON h.evaluation_id = e.id WHERE e.id = ?"
)


def run_hosted(
    client: httpx.Client,
    data_dir: Path,
    ref: str,
    eval_config: dict[str, Any],
    *,
    timeout: float,
) -> HostedEnd:
    """Run `ref` hosted against the demo model until the launcher closes it, which must be
    COMPLETED; its times are read from the server's SQLite file in `data_dir`."""
    body = {"environment_ids": [ref], "inference_model": "demo", "eval_config": eval_config}
    answer = client.post("/hosted-evaluations", json=body)
    answer.raise_for_status()
    evaluation_id = answer.json()["evaluation_id"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with sqlite3.connect(data_dir / "proctor.db", timeout=30) as conn:
            row = conn.execute(_END, (evaluation_id,)).fetchone()
        if row[3] is not None:
            log = Path(row[5]).read_text() if row[5] else ""
            if row[4] != "COMPLETED":
                raise RuntimeError(f"hosted run of {ref} ended {row[4]}:\n{log[-3000:]}")
            created, running, first, closed = (stored_time(v) for v in row[:4])
            assert created is not None and running is not None and closed is not None
            return HostedEnd(created, running, first, closed, log)
        time.sleep(0.2)
    raise RuntimeError(f"hosted run of {ref} did not end in {timeout:.0f} s")
