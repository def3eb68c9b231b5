"""Fixtures of the server suite: a migrated database per test, on SQLite and PostgreSQL.

`db_url` is parametrised: every test using it runs on a fresh SQLite file and, when
`PROCTOR_TEST_POSTGRES_URL` is set, on a fresh PostgreSQL database created for the test,
both copied from a template migrated once per process (`tests/support/databases.py`).
`api` drives the app in-process through FastAPI's TestClient with the bootstrap admin key.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from proctor.server.app import create_app
from proctor.server.auth import service as auth
from proctor.server.db.models import Team
from proctor.server.db.session import Database
from proctor.server.settings import Settings
from tests.support.databases import BACKENDS, fresh_database
from tests.support.platform import BOOTSTRAP_KEY

PUBLIC_URL = "http://proctor.test"


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """URL of a migrated database of the parametrised backend, dropped after the test."""
    with fresh_database(request.param, tmp_path) as url:
        yield url


@dataclass
class Api:
    """An in-process app with helpers to make keys and call it."""

    client: TestClient
    db: Database
    settings: Settings

    def headers(self, key: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key or BOOTSTRAP_KEY}"}

    def request(self, method: str, path: str, key: str | None = None, **kw: Any) -> Any:
        headers = {**self.headers(key), **kw.pop("headers", {})}
        return self.client.request(method, f"/api/v1{path}", headers=headers, **kw)

    def get(self, path: str, key: str | None = None, **kw: Any) -> Any:
        return self.request("GET", path, key, **kw)

    def post(self, path: str, key: str | None = None, **kw: Any) -> Any:
        return self.request("POST", path, key, **kw)

    def put(self, path: str, key: str | None = None, **kw: Any) -> Any:
        return self.request("PUT", path, key, **kw)

    def key(
        self,
        name: str,
        *,
        user: str | None = None,
        team: str | None = None,
        evaluation: str | None = None,
        admin: bool = False,
    ) -> str:
        """Create a key through the service and return its secret."""
        with self.db.write() as session:
            if team is not None and session.get(Team, team) is None:
                auth.create_team(session, team)
            created = auth.create_key(
                session,
                name=name,
                user_name=user,
                team_id=team,
                is_admin=admin,
                evaluation_id=evaluation,
            )
        return created.secret

    def create(self, key: str | None = None, **fields: Any) -> str:
        """Create an evaluation and return its id."""
        body = {"name": "eval", "environments": [], "tags": [], **fields}
        response = self.post("/evaluations/", key, json=body)
        assert response.status_code == 201, response.text
        return str(response.json()["evaluation_id"])


def make_settings(db_url: str, data_dir: Path, **overrides: Any) -> Settings:
    """Settings for an in-process app on `db_url`."""
    return Settings(
        PROCTOR_DATABASE_URL=db_url,  # type: ignore[call-arg]
        data_dir=data_dir,
        bootstrap_key=BOOTSTRAP_KEY,
        public_url=PUBLIC_URL,
        **overrides,
    )


@pytest.fixture
def api(db_url: str, tmp_path: Path) -> Iterator[Api]:
    """The app on a freshly migrated database, with the bootstrap admin key."""
    settings = make_settings(db_url, tmp_path)
    app = create_app(settings)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield Api(client, app.state.db, settings)
