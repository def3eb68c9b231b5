"""Fuzz every operation of the server's OpenAPI document with schemathesis.

The app runs in-process (ASGI) on a freshly migrated database of each backend, called with
the bootstrap admin key. Requests are generated from the published schema, valid and
invalid alike; whatever arrives, the server must never answer 5xx and every answer must be
a JSON object (or an empty 204). Half of the generated evaluation ids are swapped for a
real evaluation's id, so the fuzzer reaches past "unknown id" into the record's rules.
The in-server launcher is off: a fuzzed hosted evaluation must not start a sandbox.
"""

from __future__ import annotations

import json
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from proctor.server.app import create_app
from proctor.server.settings import Settings
from proctor.server.setup import prepare_database
from tests.conftest import BOOTSTRAP_KEY
from tests.server.conftest import make_settings

AUTH = {"Authorization": f"Bearer {BOOTSTRAP_KEY}"}
MAX_EXAMPLES = 25


@pytest.fixture
def fuzz_app(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FastAPI]:
    """The app on a migrated database, with one evaluation that holds a few samples."""
    monkeypatch.setenv("PROCTOR_HOSTED_IN_SERVER", "false")
    app = create_app(make_settings(db_url, tmp_path), prepare=False)
    prepare_database(app.state.settings, app.state.db)
    # Requests without `with` skip the lifespan, which schemathesis starts itself.
    client = TestClient(app)
    created = client.post(
        "/api/v1/evaluations/",
        json={"name": "seed", "environments": [], "tags": [], "metadata": {"k": 1}},
        headers=AUTH,
    )
    assert created.status_code == 201, created.text
    seed_id = created.json()["evaluation_id"]
    samples = [{"sample_id": f"s{i}", "reward": i / 3} for i in range(4)]
    posted = client.post(
        f"/api/v1/evaluations/{seed_id}/samples", json={"samples": samples}, headers=AUTH
    )
    assert posted.status_code == 200, posted.text
    app.state.fuzz_seed_id = seed_id
    yield app
    app.state.db.dispose()


def _operations() -> list[tuple[str, str]]:
    """(method, path) of every operation the app publishes; no database is touched."""
    # The engine connects lazily, so this file is never created.
    unused = Path(tempfile.gettempdir()) / "proctor-openapi-unused.db"
    settings = Settings(  # type: ignore[call-arg]
        PROCTOR_DATABASE_URL=f"sqlite:///{unused}", data_dir=unused.parent
    )
    app = create_app(settings, prepare=False)
    paths: dict[str, dict[str, Any]] = app.openapi()["paths"]
    return [(method.upper(), path) for path, ops in paths.items() for method in ops]


def _aim_at_seed(case: Any, seed_id: str) -> None:
    """Point about half the cases at the seeded evaluation (deterministically per case)."""
    params = case.path_parameters or {}
    generated = params.get("evaluation_id")
    if isinstance(generated, str) and zlib.crc32(generated.encode()) % 2 == 0:
        params["evaluation_id"] = seed_id


def _check(case: Any, seed_id: str) -> None:
    _aim_at_seed(case, seed_id)
    response = case.call(headers=AUTH)
    where = f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:300]}"
    assert response.status_code < 500, where
    if response.status_code == 204:
        assert not response.content, where
        return
    content_type = response.headers.get("content-type", [""])[0]
    assert content_type.startswith("application/json"), where
    assert isinstance(json.loads(response.content), dict), where


# schemathesis' own pytest loaders do not support pytest 9 yet, so each operation is one
# parametrised test that runs Hypothesis over that operation's valid and invalid cases.
@pytest.mark.parametrize(("method", "path"), _operations(), ids=lambda v: str(v))
def test_no_server_error_and_json_objects(fuzz_app: FastAPI, method: str, path: str) -> None:
    operation = schemathesis.openapi.from_asgi("/openapi.json", fuzz_app)[path][method]
    strategy = st.one_of(
        operation.as_strategy(GenerationMode.POSITIVE),
        operation.as_strategy(GenerationMode.NEGATIVE),
    )
    seed_id = fuzz_app.state.fuzz_seed_id

    @given(case=strategy)
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    def fuzz(case: Any) -> None:
        _check(case, seed_id)

    fuzz()


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def test_every_schema_reference_resolves(fuzz_app: FastAPI) -> None:
    # A dangling `$ref` in a request body left schema-driven clients unable to build one.
    document = fuzz_app.openapi()
    components = set(document["components"]["schemas"])
    refs = set(_refs(document))
    assert refs, "the document should reference its component schemas"
    assert {ref.removeprefix("#/components/schemas/") for ref in refs} <= components
