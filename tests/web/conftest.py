"""Fixtures of the dashboard tests: the app in-process on a migrated database, seeded, and
for the browser tests a real `proctor server` seeded the same way (one per module), with
Debian's chromium.

`db_url` comes from the server suite, so these run on SQLite and, in CI, on PostgreSQL too.
`seed()` creates two users' evaluations through the real API: alice's own, one of her
team's, and one of bob's team she must never see; `seeded_platform` does the same on a real
server (alice's own run has tool calls and four rollouts per example).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from playwright.sync_api import Browser, Page, expect, sync_playwright

from proctor.server.app import create_app
from proctor.server.db.models import HostedEvaluation
from tests.server.conftest import Api, db_url, make_settings
from tests.support.cli import cli_in_process
from tests.support.databases import BACKENDS, fresh_database
from tests.support.platform import Platform, start_platform
from tests.support.tools import tool

CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"

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
        body = {"name": "tool-calc", "framework": "proctor"}
        resolved = api.post("/environmentshub/resolve", alice, json=body)
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

    def hosted(self, key: str, *, num_examples: int, rollouts_per_example: int) -> str:
        """A hosted evaluation of tool-calc; it stays PENDING (no launcher runs)."""
        created = self.api.post(
            "/hosted-evaluations",
            key,
            json={
                "environment_ids": ["tool-calc"],
                "inference_model": "demo",
                "eval_config": {
                    "num_examples": num_examples,
                    "rollouts_per_example": rollouts_per_example,
                },
            },
        )
        assert created.status_code == 200, created.text
        return str(created.json()["evaluation_id"])

    def play_sandbox(self, hosted_id: str, log: Path) -> None:
        """Play the sandbox's part: a local-backend handle whose log file is `log`."""
        with self.api.db.write() as session:
            row = session.get(HostedEvaluation, hosted_id)
            assert row is not None
            row.sandbox_handle, row.log_path = "4242", str(log)


@contextlib.contextmanager
def _serve_in_process(db_url: str, data_dir: Path) -> Iterator[Web]:
    """The app in-process (TestClient) on `db_url`, with no launcher: hosted runs stay
    PENDING, and the tests play the sandbox's part themselves."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROCTOR_HOSTED_IN_SERVER", "false")
        settings = make_settings(db_url, data_dir)
        app = create_app(settings)
        with TestClient(app, raise_server_exceptions=False) as client:
            yield Web(Api(client, app.state.db, settings), client)


@pytest.fixture
def web(db_url: str, tmp_path: Path) -> Iterator[Web]:
    """The app in-process, on a freshly migrated database, with no launcher."""
    with _serve_in_process(db_url, tmp_path) as served:
        yield served


@dataclass
class SeededWeb:
    """A module's app, seeded once (see `seeded_web`)."""

    web: Web
    seeded: Seeded


@pytest.fixture(scope="module", params=BACKENDS)
def module_web(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Web]:
    """The app in-process like `web`, on a database of each backend, shared by the module's
    tests: they only read what the module's fixtures seeded once; a test that changes what
    others read (revokes a key, adds an evaluation) makes a key or user of its own."""
    data_dir = tmp_path_factory.mktemp("web")
    with fresh_database(request.param, data_dir) as url, _serve_in_process(url, data_dir) as served:
        yield served


@pytest.fixture(scope="module")
def seeded_web(module_web: Web) -> SeededWeb:
    """`module_web` with `seed()`'s data, seeded once for the module; `fresh_web` clears the
    cookies between tests."""
    return SeededWeb(module_web, module_web.seed())


@pytest.fixture
def fresh_web(seeded_web: SeededWeb) -> Iterator[SeededWeb]:
    """The module's seeded app, signed out (no cookie) at the start of the test."""
    seeded_web.web.client.cookies.clear()
    yield seeded_web
    seeded_web.web.client.cookies.clear()


# -- the browser tests' real server and browser ---------------------------------------------------
#
# One `proctor server` per worker serves every browser module; each module seeds users and
# teams of its own on it (so its lists hold only its own evaluations) and has one chromium
# (module-scoped: xdist's `--dist loadgroup` keeps the module on one worker, see
# tests/support/tiers.py); each test gets a fresh browser context. Tests only read the seeded
# evaluations: one that changes an evaluation makes its own (`running_evaluation`), so the
# order of the tests never matters. The browser is not session-scoped: a live sync Playwright
# marks the worker's thread as running an event loop, and asyncio tests after it would fail.


def _cli(platform: Platform, *args: str) -> str:
    """`proctor ARGS --data-dir DIR` run in this process (what it stores is the point here)."""
    home = platform.data_dir.parent / "home"
    home.mkdir(exist_ok=True)
    done = cli_in_process(*args, "--data-dir", str(platform.data_dir), home=home)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _key(platform: Platform, name: str, team: str) -> str:
    _cli(platform, "teams", "create", team)
    return _cli(platform, "keys", "create", "--name", name, "--team", team).split()[0]


def running_evaluation(platform: Platform, key: str, name: str) -> str:
    """A new RUNNING evaluation like the seeded `alice-calc-b`: six examples, one rollout each,
    rewards 0.5 + 0.1 x example; for a test that changes what it shows."""
    with platform.client(key) as api:
        body = {"name": "tool-calc", "framework": "proctor"}
        env = api.post("/environmentshub/resolve", json=body).json()["data"]
        created = api.post(
            "/evaluations/",
            json={"name": name, "model_name": "demo-b", "environments": [{"id": env["id"]}]},
        )
        assert created.status_code == 201, created.text
        evaluation_id = str(created.json()["evaluation_id"])
        samples = [tool_sample(e, 1, 0.5 + 0.1 * e) for e in range(6)]
        posted = api.post(f"/evaluations/{evaluation_id}/samples", json={"samples": samples})
        assert posted.status_code == 200, posted.text
    return evaluation_id


def _seed(platform: Platform, key: str, bob_key: str, teams: tuple[str, str]) -> dict[str, str]:
    blue, red = teams
    with platform.client(key) as api:
        body = {"name": "tool-calc", "framework": "proctor"}
        env = api.post("/environmentshub/resolve", json=body).json()["data"]
        ids: dict[str, str] = {}
        for name, model in (("alice-calc", "demo-a"), ("alice-calc-b", "demo-b")):
            created = api.post(
                "/evaluations/",
                json={"name": name, "model_name": model, "environments": [{"id": env["id"]}]},
            )
            assert created.status_code == 201, created.text
            ids[name] = created.json()["evaluation_id"]
        samples = [
            tool_sample(e, r, 1.0 if (e + r) % 3 else 0.0) for e in range(6) for r in range(1, 5)
        ]
        samples[5]["error"] = {"type": "ModelError", "message": "the model timed out"}
        assert api.post(f"/evaluations/{ids['alice-calc']}/samples", json={"samples": samples})
        summary = {"avg_reward": 0.7, "avg_metrics": {"correct_answer": 0.7}}
        assert api.post(f"/evaluations/{ids['alice-calc']}/finalize", json={"metrics": summary})
        other = [tool_sample(e, 1, 0.5 + 0.1 * e) for e in range(6)]
        assert api.post(f"/evaluations/{ids['alice-calc-b']}/samples", json={"samples": other})
        team = api.post("/evaluations/", json={"name": "blue-team-run", "team_id": blue})
        ids["blue-team-run"] = team.json()["evaluation_id"]
    with platform.client(bob_key) as bob:
        red = bob.post("/evaluations/", json={"name": "red-secret-run", "team_id": red})
        assert red.status_code == 201, red.text
        ids["red-secret-run"] = red.json()["evaluation_id"]
    return ids


@dataclass
class SeededPlatform:
    """A real server seeded through its API: alice's key and the evaluations' ids by name."""

    platform: Platform
    alice_key: str
    ids: dict[str, str]


@pytest.fixture(scope="session")
def browser_platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    """The worker's `proctor server` for the browser modules (no launcher: a test that needs a
    hosted run plays the sandbox's part)."""
    data_dir = tmp_path_factory.mktemp("browser") / "platform"
    data_dir.mkdir()
    platform = start_platform(data_dir, extra_env={"PROCTOR_HOSTED_IN_SERVER": "false"})
    try:
        yield platform
    finally:
        platform.process.stop()


_MODULES = itertools.count(1)


@pytest.fixture(scope="module")
def seeded_platform(browser_platform: Platform) -> SeededPlatform:
    """The module's users on the worker's server: alice (team blue-N) and bob (team red-N),
    their keys made by the CLI, their evaluations posted through the API."""
    n = next(_MODULES)
    teams = (f"blue-{n}", f"red-{n}")
    alice = _key(browser_platform, f"alice-{n}", teams[0])
    bob = _key(browser_platform, f"bob-{n}", teams[1])
    return SeededPlatform(browser_platform, alice, _seed(browser_platform, alice, bob, teams))


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless Debian chromium (never a downloaded browser), one for the module."""
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=tool(CHROMIUM), headless=True, args=["--no-sandbox"]
        )
        yield chromium
        chromium.close()


def signed_in(browser: Browser, platform: Platform, key: str, **options: Any) -> Page:
    """A page of a new browser context, signed in with `key` (`options`: the context's)."""
    context = browser.new_context(**options)
    page = context.new_page()
    page.goto(f"{platform.url}/login")
    page.fill("#api_key", key)
    page.click("button[type=submit] >> text=Sign in")
    expect(page).to_have_url(f"{platform.url}/evaluations")
    return page


def shot(page: Page, name: str) -> None:
    """A full-page screenshot into `test-artifacts/screenshots/`."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
