"""Fixtures of the dashboard tests: the app in-process on a migrated database, seeded.

`db_url` comes from the server suite, so these run on SQLite and, in CI, on PostgreSQL too.
`seed()` creates two users' evaluations through the real API: alice's own, one of her
team's, and one of bob's team she must never see.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from proctor.server.app import create_app
from tests.server.conftest import Api, db_url, make_settings

__all__ = ["db_url"]


def tool_sample(example_id: int, rollout: int, reward: float, **extra: Any) -> dict[str, Any]:
    """A sample shaped like the runs SDK sends it, with a tool call in its completion."""
    return {
        "sample_id": f"s-{example_id}-{rollout}",
        "example_id": example_id,
        "rollout_number": rollout,
        "task": {"index": example_id, "prompt": f"What is {example_id} + 2?"},
        "prompt": [
            {"role": "system", "content": "Use the calculator."},
            {"role": "user", "content": f"What is {example_id} + 2?"},
        ],
        "completion": [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{example_id}_{rollout}",
                        "type": "function",
                        "function": {"name": "add", "arguments": f'{{"a": {example_id}, "b": 2}}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"call_{example_id}_{rollout}", "content": "7"},
            {"role": "assistant", "content": f"The answer is {example_id + 2}."},
        ],
        "answer": str(example_id + 2),
        "reward": reward,
        "correct_answer": reward,
        "metrics": {"num_tool_calls": 1},
        "timing": {"generation_ms": 120.5, "scoring_ms": 1.5},
        "token_usage": {"prompt_tokens": 31, "completion_tokens": 12},
        "error": None,
        "num_turns": 2,
        **extra,
    }


@dataclass
class Seeded:
    """Ids and keys of the seeded data."""

    alice_key: str
    bob_key: str
    own: str
    team: str
    other: str
    second: str
    ids: dict[str, str] = field(default_factory=dict)


@dataclass
class Web:
    """The in-process app plus the API helpers of the server suite."""

    api: Api
    client: TestClient

    def login(self, key: str) -> None:
        response = self.client.post(
            "/login", data={"api_key": key, "next": "/evaluations"}, follow_redirects=False
        )
        assert response.status_code == 303, response.text

    def seed(self) -> Seeded:
        api = self.api
        alice = api.key("alice-key", user="alice", team="blue")
        bob = api.key("bob-key", user="bob", team="red")
        resolved = api.post("/environmentshub/resolve", alice, json={"name": "tool-calc"})
        assert resolved.status_code == 200, resolved.text
        env = [{"id": resolved.json()["data"]["id"]}]
        own = api.create(
            alice, name="alice-calc", model_name="demo-a", environments=env, dataset="tool-calc"
        )
        rewards = {(e, r): 1.0 if (e + r) % 3 else 0.0 for e in range(5) for r in range(1, 5)}
        samples = [tool_sample(e, r, w) for (e, r), w in rewards.items()]
        samples[-1]["error"] = {"type": "ModelError", "message": "the model timed out"}
        posted = api.post(f"/evaluations/{own}/samples", alice, json={"samples": samples})
        assert posted.status_code == 200, posted.text
        done = api.post(
            f"/evaluations/{own}/finalize",
            alice,
            json={"metrics": {"avg_reward": 0.65, "avg_metrics": {"correct_answer": 0.65}}},
        )
        assert done.status_code == 200, done.text
        second = api.create(
            alice, name="alice-calc-b", model_name="demo-b", environments=env, dataset="tool-calc"
        )
        samples_b = [tool_sample(e, 1, 1.0 if e < 3 else 0.5) for e in range(5)]
        assert api.post(
            f"/evaluations/{second}/samples", alice, json={"samples": samples_b}
        ).is_success
        team = api.create(alice, name="blue-team-run", team_id="blue", model_name="demo-a")
        other = api.create(bob, name="red-secret-run", team_id="red", model_name="demo-a")
        return Seeded(alice, bob, own, team, other, second)


@pytest.fixture
def web(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Web]:
    """The app in-process (TestClient), on a freshly migrated database, with no launcher."""
    # Hosted runs stay PENDING: the tests play the sandbox's part themselves.
    monkeypatch.setenv("PROCTOR_HOSTED_IN_SERVER", "false")
    settings = make_settings(db_url, tmp_path)
    app = create_app(settings)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield Web(Api(client, app.state.db, settings), client)
