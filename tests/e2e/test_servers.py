"""Several `proctor server` processes on one PostgreSQL: one platform, whichever answers.

Two real servers share a database and a data dir, behind a loopback balancer that sandboxes
report to. Writers spread over both see one set of evaluations; each hosted evaluation is
claimed and started once; a server SIGKILLed mid-run loses nothing, and the other adopts its
sandboxes once their claims expire. A second server on the same SQLite file is refused.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from tests.e2e.durability import demo_model
from tests.e2e.hosted_helpers import create_hosted
from tests.e2e.servers import LAUNCHER_ENV, Server, balanced_servers, hosted_rows
from tests.support.databases import fresh_database
from tests.support.procs import PROCTOR, free_port

pytestmark = pytest.mark.e2e

WRITERS = 20
BATCHES = 6
PER_BATCH = 5
HOSTED = 4
HOSTED_EXAMPLES = 24


def _send(servers: list[Server], turn: int, method: str, path: str, body: object) -> httpx.Response:
    """Send to the server whose turn it is; one that is down passes the request on (as a load
    balancer retries), and an unanswered write is sent again (writes are idempotent)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            with servers[turn % len(servers)].client() as client:
                answer = client.request(method, path, json=body)
            if answer.status_code < 500:
                return answer
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{method} {path} found no server within 60 s")
        turn += 1
        time.sleep(0.05)


def _writer(servers: list[Server], index: int, ids: list[str], errors: list[str]) -> None:
    """Create an evaluation, send each batch to one server and again to the other, finalize."""
    try:
        made = _send(servers, index, "POST", "/evaluations/", {"name": f"writer-{index}"})
        assert made.status_code == 201, made.text
        evaluation_id = ids[index] = str(made.json()["evaluation_id"])
        for batch in range(BATCHES):
            body = {
                "samples": [
                    {"sample_id": f"w{index}-b{batch}-s{i}", "reward": float(i % 2)}
                    for i in range(PER_BATCH)
                ]
            }
            for turn in (index + batch, index + batch + 1):
                sent = _send(servers, turn, "POST", f"/evaluations/{evaluation_id}/samples", body)
                assert sent.status_code == 200, sent.text
            time.sleep(0.2)
        done = _send(servers, index + 1, "POST", f"/evaluations/{evaluation_id}/finalize", {})
        assert done.status_code == 200, done.text
    except BaseException as e:  # reported by the test, not lost in a thread
        errors.append(f"writer {index}: {e!r}")


def _wait(condition: Callable[[], bool], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"not {what} within {timeout:g} s")


def _all_running(client: httpx.Client, ids: list[str]) -> bool:
    records = [client.get(f"/evaluations/{i}").json() for i in ids]
    return all(r["status"] == "RUNNING" and r["total_samples"] > 0 for r in records)


@pytest.mark.postgres
def test_two_servers_share_writers_claim_hosted_runs_once_and_survive_a_kill(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "platform"
    data_dir.mkdir()
    with (
        fresh_database("postgres", tmp_path) as url,
        balanced_servers(data_dir, url) as (servers, _),
        demo_model(tmp_path, latency_ms=300) as model,
    ):
        hosted = [
            create_hosted(
                servers[i % 2].client(),
                num_examples=HOSTED_EXAMPLES,
                rollouts_per_example=1,
                max_concurrent=1,
                api_base_url=model,
            )
            for i in range(HOSTED)
        ]
        with servers[0].client() as client:
            _wait(lambda: _all_running(client, hosted), "every hosted run under way", 90)
        ids = [""] * WRITERS
        errors: list[str] = []
        writers = [
            threading.Thread(target=_writer, args=(servers, i, ids, errors)) for i in range(WRITERS)
        ]
        for writer in writers:
            writer.start()
        # Mid-run: the server holding the first hosted evaluation dies; writers pass it over.
        time.sleep(0.5)
        claims = hosted_rows(url)
        victim = next(s for s in servers if s.holds(claims[hosted[0]]["launcher_id"]))
        survivor = servers[1] if victim is servers[0] else servers[0]
        victim.process.kill()
        # What the victim had not closed when it died is the survivor's to adopt (a run it
        # closed just before, under load, stays its own).
        orphans = [
            e
            for e, row in hosted_rows(url).items()
            if victim.holds(row["launcher_id"]) and row["ended_at"] is None
        ]
        for writer in writers:
            writer.join(120)
        assert not errors, errors
        assert not any(w.is_alive() for w in writers)
        _wait(
            lambda: all(row["ended_at"] is not None for row in hosted_rows(url).values()),
            "every hosted evaluation closed",
            150,
        )
        claims = hosted_rows(url)
        with survivor.client() as client:
            for evaluation_id in hosted:
                record = client.get(f"/evaluations/{evaluation_id}").json()
                assert record["status"] in ("PROCESSING", "COMPLETED"), record
                assert record["total_samples"] == HOSTED_EXAMPLES, record
                assert claims[evaluation_id]["attempt"] == 1  # claimed, and started, once
            for evaluation_id in orphans:  # adopted and closed by the survivor
                assert survivor.holds(claims[evaluation_id]["launcher_id"])
            for evaluation_id in ids:
                record = client.get(f"/evaluations/{evaluation_id}").json()
                assert record["status"] in ("PROCESSING", "COMPLETED"), record
                assert record["total_samples"] == BATCHES * PER_BATCH, record
                stored = client.get(f"/evaluations/{evaluation_id}/samples", params={"limit": 500})
                sample_ids = [s["sample_id"] for s in stored.json()["samples"]]
                assert len(sample_ids) == len(set(sample_ids)) == BATCHES * PER_BATCH
        assert not orphans or "adopts the sandbox" in survivor.process.output()


def test_a_second_server_on_the_same_sqlite_is_refused(tmp_path: Path) -> None:
    data_dir = tmp_path / "platform"
    data_dir.mkdir()
    first = Server(data_dir, "server-a", None).start()
    try:
        second = subprocess.run(
            [*PROCTOR, "server", "--port", str(free_port()), "--data-dir", str(data_dir)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, **LAUNCHER_ENV},
        )
        assert second.returncode != 0
        assert "Traceback" not in second.stderr
        message = second.stderr.strip().splitlines()[-1]
        assert f"pid {first.process.pid}" in message and "PostgreSQL" in message, message
        with first.client() as client:  # the first one serves on
            assert client.get("/evaluations/").status_code == 200
    finally:
        first.process.stop()
