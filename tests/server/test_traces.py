"""`POST /api/v1/traces` and its reads, over HTTP against a real `proctor server` process.

One server per backend (SQLite, and PostgreSQL with `PROCTOR_TEST_POSTGRES_URL`) serves the
module, with small caps so the size rejections are cheap to reach. Each test makes its own
evaluations. Records follow the wire form of verifiers' `Episode.to_record()`.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from proctor.server.auth import service as auth
from proctor.server.db.models import Team
from proctor.server.db.session import Database
from tests.support.databases import BACKENDS, platform_on
from tests.support.platform import Platform

pytestmark = pytest.mark.e2e

MAX_UPLOAD = 200_000
MAX_LINE = 50_000


@pytest.fixture(scope="module", params=BACKENDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Platform]:
    tmp = tmp_path_factory.mktemp(f"traces-{request.param}")
    limits = {
        "PROCTOR_TRACES_MAX_UPLOAD_BYTES": str(MAX_UPLOAD),
        "PROCTOR_TRACES_MAX_LINE_BYTES": str(MAX_LINE),
        "PROCTOR_HOSTED_IN_SERVER": "false",
    }
    with platform_on(request.param, tmp, extra_env=limits) as platform:
        yield platform


def _db(platform: Platform) -> Database:
    return Database(platform.database_url or f"sqlite:///{platform.data_dir / 'proctor.db'}")


def _user_key(platform: Platform, name: str, *, team: str | None = None) -> str:
    """A key of a new user (a member of `team`, created if needed)."""
    db = _db(platform)
    try:
        with db.write() as session:
            if team is not None and session.get(Team, team) is None:
                auth.create_team(session, team)
            return auth.create_key(session, name=name, user_name=name, team_id=team).secret
    finally:
        db.dispose()


def _scoped_key(platform: Platform, evaluation_id: str, owner_id: str) -> str:
    db = _db(platform)
    try:
        with db.write() as session:
            return auth.mint_scoped_key(session, evaluation_id, owner_id)
    finally:
        db.dispose()


def _evaluation(client: httpx.Client, **fields: Any) -> str:
    body = {"name": "traced", "environments": [], "tags": [], **fields}
    response = client.post("/evaluations/", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["evaluation_id"])


def trace_record(
    trace_id: str, run_id: str, idx: int, score: float, **extra: Any
) -> dict[str, Any]:
    """A trace as verifiers records it: a message graph, calls, weighted rewards."""
    return {
        "version": 1,
        "id": trace_id,
        "task": {"type": "Task", "data": {"idx": idx, "question": f"q{idx}"}, "key": f"t{idx}"},
        "agent": {"config": {}, "name": "agent", "trainable": True},
        "tools": [],
        "nodes": [
            {"parent": None, "message": {"role": "user", "content": f"q{idx}"}, "sampled": False},
            {"parent": 0, "message": {"role": "assistant", "content": "a"}, "sampled": True},
        ],
        "calls": [
            {
                "node": 1,
                "model": "demo/scripted",
                "finish_reason": "stop",
                "usage": {"prompt_tokens": 10, "completion_tokens": 4},
                "time": {"start": 1.0, "end": 1.5},
            }
        ],
        "rewards": {"exact": {"score": score, "weight": 2.0}},
        "metrics": {"turns": 1.0},
        "info": {},
        "is_completed": True,
        "ok": True,
        "stop_condition": "agent_completed",
        "errors": [],
        "timing": {
            "start": 1_700_000_000.0,
            "agent": {"start": 1_700_000_000.0, "end": 1_700_000_002.5},
        },
        "run": {"id": run_id, "type": "eval"},
        **extra,
    }


def episode(episode_id: str, run_id: str, idx: int, score: float) -> dict[str, Any]:
    return {
        "id": episode_id,
        "env": {"id": "echo"},
        "task": {"type": "Task", "data": {"idx": idx}},
        "run": {"id": run_id, "type": "eval"},
        "ok": True,
        "traces": [trace_record(f"{episode_id}-t0", run_id, idx, score)],
    }


def jsonl(records: list[dict[str, Any]]) -> bytes:
    return b"".join(
        json.dumps(r, ensure_ascii=False, separators=(",", ":")).encode() + b"\n" for r in records
    )


def upload(
    client: httpx.Client,
    body: bytes,
    *,
    episodes: bool = True,
    compress: bool = True,
    key: str | None = None,
    metadata: Any = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    """POST /traces exactly as the public traces client builds it."""
    meta = {"schema_version": 1, "context": {"source": "test"}} if metadata is None else metadata
    part: tuple[Any, ...] = (
        (
            "traces.jsonl",
            gzip.compress(body, mtime=0),
            "application/x-ndjson",
            {"Content-Encoding": "gzip"},
        )
        if compress
        else ("traces.jsonl", body, "application/x-ndjson")
    )
    sent = {"Idempotency-Key": key or "sha256:" + hashlib.sha256(body).hexdigest()}
    if episodes:
        sent["X-Prime-Line-Format"] = "episode"
    sent.update(headers or {})
    meta_bytes = meta if isinstance(meta, bytes) else json.dumps(meta).encode()
    return client.post(
        "/traces",
        headers=sent,
        files={"metadata": (None, meta_bytes, "application/json"), "traces": part},
    )


def _error(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code, response.text


def _samples(client: httpx.Client, eid: str) -> list[dict[str, Any]]:
    page = client.get(f"/evaluations/{eid}/samples", params={"limit": 1000})
    assert page.status_code == 200, page.text
    return list(page.json()["samples"])


def test_episodes_land_as_records_and_samples_and_a_replay_stores_nothing(
    server: Platform,
) -> None:
    with server.client() as client:
        eid = _evaluation(client)
        records = [episode(f"ep-{i}", eid, i // 2, [1.0, 0.5, 0.0, 0.25][i]) for i in range(4)]
        body = jsonl(records)
        first = upload(client, body)
        assert first.status_code == 201, first.text
        digest = hashlib.sha256(body).hexdigest()
        assert first.json() == {"upload_id": digest, "status": "committed"}
        # The same bytes again (a lost answer retried), uncompressed this time: same receipt.
        again = upload(client, body, compress=False)
        assert again.status_code == 201 and again.json() == first.json()

        samples = _samples(client, eid)
        assert [s["sample_id"] for s in samples] == [f"ep-{i}" for i in range(4)]
        first_sample = samples[0]
        assert first_sample["episode_id"] == "ep-0"
        assert first_sample["example_id"] == 0
        assert [s["rollout_number"] for s in samples] == [1, 2, 1, 2]
        assert first_sample["reward"] == 2.0  # score x weight
        assert first_sample["exact"] == 1.0  # the raw score, flattened
        assert first_sample["completion"][-1] == {"role": "assistant", "content": "a"}
        assert first_sample["trajectory"][0]["num_output_tokens"] == 4
        assert first_sample["token_usage"] == {"prompt_tokens": 10, "completion_tokens": 4}
        assert first_sample["info"]["native_wrapper"] == records[0]
        record = client.get(f"/evaluations/{eid}").json()
        assert record["total_samples"] == 4

        traces = client.get("/traces", params={"run_id": eid})
        assert traces.status_code == 200, traces.text
        items = traces.json()["items"]
        assert {t["trace_id"] for t in items} == {f"ep-{i}-t0" for i in range(4)}
        assert traces.json()["next_cursor"] is None
        one = client.get("/traces/ep-1-t0").json()
        assert one["episode_id"] == "ep-1" and one["run_id"] == eid
        assert one["upload_id"] == digest and one["score"]["reward"] == 1.0
        assert one["model"]["id"] == "demo/scripted" and one["duration_ms"] == 2500
        assert one["context"] == {"source": "test"}
        raw = client.get("/traces/ep-1-t0", params={"raw": "true"})
        assert raw.json() == records[1]["traces"][0]
        assert client.get("/episodes/ep-2", params={"raw": "true"}).json() == records[2]
        assert (
            client.get("/episodes", params={"run_id": eid}).json()["items"][0]["trace_count"] == 1
        )

        # Pages follow next_cursor to the end.
        seen, cursor = [], None
        while True:
            params: dict[str, Any] = {"run_id": eid, "limit": 3}
            if cursor:
                params["cursor"] = cursor
            page = client.get("/traces", params=params).json()
            seen += [t["trace_id"] for t in page["items"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert sorted(seen) == sorted(t["trace_id"] for t in items)
        _error(client.get("/traces", params={"cursor": "x"}), 422, "invalid_input")
        _error(client.get("/traces", params={"has_error": "true"}), 400, "invalid_filter")

        # Re-batched records already stored (other bytes, same ids) add nothing either.
        rebatched = upload(client, jsonl(records[1:3]))
        assert rebatched.status_code == 201, rebatched.text
        assert len(_samples(client, eid)) == 4
        finalized = client.post(f"/evaluations/{eid}/finalize", json={"metrics": {}})
        assert finalized.status_code == 200, finalized.text


def test_bare_traces_are_stored_and_readable_without_samples(server: Platform) -> None:
    with server.client() as client:
        eid = _evaluation(client)
        body = jsonl([trace_record(f"bare-{i}", eid, i, 1.0) for i in range(3)])
        response = upload(client, body, episodes=False)
        assert response.status_code == 201, response.text
        assert _samples(client, eid) == []
        listed = client.get("/traces", params={"run_id": eid}).json()["items"]
        assert {t["trace_id"] for t in listed} == {"bare-0", "bare-1", "bare-2"}
        assert all(t["episode_id"] is None for t in listed)
        assert (
            client.get("/traces/bare-2", params={"raw": "true"}).text
            == body.decode().splitlines()[2]
        )


def test_v0_sample_rows_logged_as_records_become_samples_as_sent(server: Platform) -> None:
    with server.client() as client:
        eid = _evaluation(client)
        rows = [
            {
                "sample_id": f"row-{i}",
                "example_id": i,
                "reward": 0.5,
                "run": {"id": eid, "type": "eval"},
            }
            for i in range(2)
        ]
        assert upload(client, jsonl(rows), episodes=False).status_code == 201
        samples = _samples(client, eid)
        assert samples == [{k: v for k, v in r.items() if k != "run"} for r in rows]


def test_rejections_name_the_protocol_code(server: Platform) -> None:
    with server.client() as client:
        eid = _evaluation(client)
        body = jsonl([episode("bad-0", eid, 0, 1.0)])
        _error(upload(client, body, key="sha256:" + "0" * 64), 400, "digest_mismatch")
        _error(upload(client, body, key="md5:abc"), 400, "invalid_idempotency_key")
        _error(
            upload(client, body, headers={"Idempotency-Key": ""}), 400, "invalid_idempotency_key"
        )
        _error(
            upload(client, body, metadata={"schema_version": 2}), 400, "unsupported_schema_version"
        )
        _error(upload(client, body, metadata={"context": {}}), 400, "invalid_metadata")
        _error(upload(client, body, metadata=b"not json"), 400, "invalid_metadata")
        _error(
            upload(client, body, metadata={"schema_version": 1, "context": {"a": 1}}),
            400,
            "invalid_metadata",
        )
        _error(upload(client, body, episodes=False), 400, "line_format_mismatch")
        bare = jsonl([trace_record("t-1", eid, 0, 1.0)])
        _error(upload(client, bare), 400, "line_format_mismatch")
        _error(upload(client, b'{"id": "x"'), 400, "invalid_trace")
        _error(upload(client, b'{"id":"x","traces":[]}\n'), 400, "invalid_trace")  # no run.id
        _error(upload(client, b"\xff\xfe\n"), 400, "malformed_encoding")
        twice = jsonl([episode("dup", eid, 0, 1.0), episode("dup", eid, 1, 1.0)])
        _error(upload(client, twice), 400, "duplicate_episode_id")
        long_id = jsonl([episode("e" * 201, eid, 0, 1.0)])
        _error(upload(client, long_id), 400, "episode_id_too_long")
        # A part that claims gzip but is not, and one in an encoding the server does not speak.
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        broken = client.post(
            "/traces",
            headers={"Idempotency-Key": digest, "X-Prime-Line-Format": "episode"},
            files={
                "metadata": (None, b'{"schema_version":1}', "application/json"),
                "traces": ("t.jsonl", body, "application/x-ndjson", {"Content-Encoding": "gzip"}),
            },
        )
        _error(broken, 400, "malformed_encoding")
        brotli = client.post(
            "/traces",
            headers={"Idempotency-Key": digest, "X-Prime-Line-Format": "episode"},
            files={
                "metadata": (None, b'{"schema_version":1}', "application/json"),
                "traces": ("t.jsonl", body, "application/x-ndjson", {"Content-Encoding": "br"}),
            },
        )
        _error(brotli, 400, "malformed_encoding")
        not_multipart = client.post("/traces", headers={"Idempotency-Key": digest}, json={})
        _error(not_multipart, 400, "invalid_metadata")
        # The caps are on the uncompressed bytes (gzip does not get around them).
        big_line = jsonl([{**episode("big", eid, 0, 1.0), "pad": "x" * MAX_LINE}])
        _error(upload(client, big_line), 400, "trace_too_large")
        many = jsonl([{**episode(f"m{i}", eid, 0, 1.0), "pad": "x" * 30_000} for i in range(8)])
        _error(upload(client, many), 400, "upload_too_large")
        _error(
            upload(client, jsonl([episode("gone", "no-such-run", 0, 1.0)])), 404, "run_not_found"
        )
        # Nothing of any refused upload was stored.
        assert _samples(client, eid) == []
        assert client.get("/traces", params={"run_id": eid}).json()["items"] == []


def test_a_closed_evaluation_takes_no_new_records_but_replays_succeed(server: Platform) -> None:
    with server.client() as client:
        eid = _evaluation(client)
        body = jsonl([episode("c-0", eid, 0, 1.0)])
        assert upload(client, body).status_code == 201
        assert client.post(f"/evaluations/{eid}/finalize", json={"metrics": {}}).status_code == 200
        assert upload(client, body).status_code == 201  # the same bytes: a replay
        _error(upload(client, jsonl([episode("c-1", eid, 0, 1.0)])), 409, "evaluation_closed")
        failed = _evaluation(client)
        assert client.put(f"/evaluations/{failed}", json={"status": "FAILED"}).status_code == 200
        _error(upload(client, jsonl([episode("f-0", failed, 0, 1.0)])), 409, "evaluation_closed")
        assert [s["sample_id"] for s in _samples(client, eid)] == ["c-0"]


def test_teams_are_isolated_and_scoped_keys_write_only_their_evaluation(
    server: Platform, tmp_path: Path
) -> None:
    suffix = tmp_path.name[-12:]
    alice = _user_key(server, f"alice-{suffix}", team=f"lab-{suffix}")
    mallory = _user_key(server, f"mallory-{suffix}")
    with server.client(alice) as client:
        mine = _evaluation(client)
        other = _evaluation(client)
        owner = client.get(f"/evaluations/{mine}").json()["user_id"]
        assert upload(client, jsonl([episode("a-0", mine, 0, 1.0)])).status_code == 201
        team_header = {"X-Prime-Team-ID": f"lab-{suffix}"}
        assert (
            upload(client, jsonl([episode("a-1", mine, 0, 1.0)]), headers=team_header).status_code
            == 201
        )
        stranger = {"X-Prime-Team-ID": "not-my-team"}
        assert (
            upload(client, jsonl([episode("a-2", mine, 0, 1.0)]), headers=stranger).status_code
            == 403
        )
    with server.client(mallory) as client:
        # Another user can neither write nor read alice's evaluation, nor tell it exists.
        _error(upload(client, jsonl([episode("m-0", mine, 0, 1.0)])), 404, "run_not_found")
        _error(client.get("/traces", params={"run_id": mine}), 404, "run_not_found")
        _error(client.get("/traces/a-0-t0"), 404, "trace_not_found")
        assert client.get("/traces").json()["items"] == []
    scoped = _scoped_key(server, mine, owner)
    with server.client(scoped) as client:
        assert upload(client, jsonl([episode("s-0", mine, 0, 1.0)])).status_code == 201
        _error(upload(client, jsonl([episode("s-1", other, 0, 1.0)])), 403, "forbidden")
        assert {t["run_id"] for t in client.get("/traces").json()["items"]} == {mine}


def test_one_upload_may_write_several_evaluations_and_racing_twins_store_once(
    server: Platform,
) -> None:
    with server.client() as client:
        first, second = _evaluation(client), _evaluation(client)
        records = [episode(f"two-{i}", [first, second][i % 2], i, 1.0) for i in range(4)]
        body = jsonl(records)

        def send(_: int) -> httpx.Response:
            with server.client() as own:
                return upload(own, body)

        # The same upload sent four times at once (a client retrying on a slow answer).
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(send, range(4)))
        assert [a.status_code for a in answers] == [201] * 4, [a.text for a in answers]
        assert len({a.json()["upload_id"] for a in answers}) == 1
        assert [s["sample_id"] for s in _samples(client, first)] == ["two-0", "two-2"]
        assert [s["sample_id"] for s in _samples(client, second)] == ["two-1", "two-3"]
        assert client.get(f"/evaluations/{first}").json()["total_samples"] == 2
