"""The public traces client's read surface (prime-traces 0.0.10, in-process, and the `prime
traces` commands of the prime CLI 0.18.0) against a real server: an episode with its traces
aggregate, an episode's traces, runs list/get/search, a trace's nodes; team-isolated, paged,
and unsupported filters answered 400 naming the supported ones."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from prime_traces import TracesClient
from prime_traces.exceptions import APIError
from tests.e2e.test_hub import PRIME_BIN, make_key, prime_env
from tests.server.test_traces import episode, jsonl, upload
from tests.support.platform import Platform

pytestmark = pytest.mark.e2e


def traced_episode(episode_id: str, run_id: str, idx: int, score: float) -> dict[str, Any]:
    record = episode(episode_id, run_id, idx, score)
    nodes = record["traces"][0]["nodes"]
    nodes[1]["message"]["content"] = f"The answer to question {idx} is {idx + 2}."
    return record


def prime_traces(platform: Platform, key: str, home: Path, *args: str) -> str:
    env = prime_env(platform, key, home, PRIME_TRACES_URL=platform.url, COLUMNS="250")
    done = subprocess.run(
        [PRIME_BIN, "traces", *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_traces_read_surface_with_the_public_client(platform: Platform, tmp_path: Path) -> None:
    alice = make_key(platform, "alice", team="blue")
    bob = make_key(platform, "bob", team="red")
    with platform.client(alice) as api:
        run_id = api.post(
            "/evaluations/", json={"name": "traced", "environments": [], "tags": []}
        ).json()["evaluation_id"]
        records = [traced_episode(f"ep-{i}", run_id, i, [1.0, 0.0, 0.5][i]) for i in range(3)]
        assert upload(api, jsonl(records)).status_code == 201

    with TracesClient(api_key=alice, base_url=platform.url, team_id="") as client:
        detail = client.get_episode("ep-1")
        assert detail.traces.trace_count == 1 and detail.traces.agent_names == ["agent"]
        assert detail.traces.total_tokens == 14 and detail.traces.any_trace_error is False
        members = client.list_episode_traces("ep-1")
        assert [t.trace_id for t in members.items] == ["ep-1-t0"]

        nodes = client.list_nodes("ep-2-t0")
        assert [(n.node_idx, n.parent_idx, n.message.role) for n in nodes.items] == [
            (0, None, "user"),
            (1, 0, "assistant"),
        ]
        assert nodes.partial_index is False
        first = client.list_nodes("ep-2-t0", limit=1)
        rest = client.list_nodes("ep-2-t0", limit=1, cursor=first.next_cursor)
        assert [n.node_idx for n in first.items + rest.items] == [0, 1]
        assert rest.next_cursor is None
        assert [n.node_idx for n in client.list_nodes("ep-2-t0", role=["assistant"]).items] == [1]

        runs = client.list_runs()
        assert [r.run_id for r in runs.items] == [run_id]
        run = client.get_run(run_id)
        assert run.trace_count == 3 and run.episode_count == 3 and run.avg_reward == 1.0
        assert run.environment_ids == ["echo"] and run.model_ids == ["demo/scripted"]

        found = client.search("The answer to question", run_id=run_id, limit=2)
        assert [m.trace_id for m in found.items] == ["ep-0-t0", "ep-1-t0"]
        assert found.coverage is not None and found.coverage.examined_traces == 3
        match = found.items[0]
        assert match.excerpt[match.match_start - match.excerpt_start :].startswith("The answer")
        more = client.search(
            "The answer to question", run_id=run_id, limit=2, cursor=found.next_cursor
        )
        assert [m.trace_id for m in more.items] == ["ep-2-t0"] and more.next_cursor is None
        assert client.search("is 3.", run_id=run_id, role="assistant").items[0].node_idx == 1
        assert client.search("is 3.", run_id=run_id, role="user").items == []

        with pytest.raises(APIError) as refused:
            client.search("The answer", run_id=run_id, run_step=2)
        assert "use only query, field, role" in str(refused.value)
        with pytest.raises(APIError) as refused:
            client.list_runs(created_after="2026-01-01T00:00:00Z")
        assert "run_type, created_by, limit, cursor" in str(refused.value)

    # Another team sees none of it.
    with TracesClient(api_key=bob, base_url=platform.url, team_id="") as client:
        assert client.list_runs().items == []
        for read in (
            lambda: client.get_episode("ep-1"),
            lambda: client.list_episode_traces("ep-1"),
            lambda: client.list_nodes("ep-2-t0"),
            lambda: client.get_run(run_id),
            lambda: client.search("The answer", run_id=run_id),
        ):
            with pytest.raises(APIError) as hidden:
                read()
            assert getattr(hidden.value, "status_code", 404) == 404, hidden.value

    # The prime CLI's commands over the same reads.
    home = tmp_path / "home"
    shown = prime_traces(platform, alice, home, "get", "--episodes", "ep-1", "-o", "json")
    assert '"trace_count": 1' in shown and "ep-1" in shown
    listed = prime_traces(platform, alice, home, "list", "--runs", "-o", "json")
    assert run_id in listed
    one = prime_traces(platform, alice, home, "get", "--runs", run_id, "-o", "json")
    assert '"trace_count": 3' in one
    hits = prime_traces(
        platform, alice, home, "search", "question 2", "--run-id", run_id, "-o", "json"
    )
    assert "ep-2-t0" in hits and "ep-0-t0" not in hits
    with httpx.Client(base_url=f"{platform.url}/api/v1", timeout=30) as raw:
        hidden = raw.get(f"/runs/{run_id}", headers={"Authorization": f"Bearer {bob}"})
        assert hidden.status_code == 404 and hidden.json()["error"]["code"] == "run_not_found"
