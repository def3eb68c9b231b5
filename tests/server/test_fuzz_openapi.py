"""Fuzz every operation of the published OpenAPI document with schemathesis, all checks on.

A real `proctor server` process runs on a fresh SQLite file and, when
`PROCTOR_TEST_POSTGRES_URL` is set, on a fresh PostgreSQL database; `schemathesis run` (the
CLI, in its own process) fuzzes each over HTTP with the bootstrap admin key: its examples,
coverage (boundary values: one past each maxLength, maximum and minimum, NUL characters,
wrong types), fuzzing and stateful phases, valid and invalid requests. The run must find
nothing: no 5xx, no undocumented status code, no answer off its schema, no schema-valid
request refused and no invalid one accepted. The two backends' runs start together in
parallel processes; each test waits for its own. The seed is fixed, so a failure reproduces
with the command printed in the output.

`tests/server/schemathesis.toml` holds the run's configuration (the key is read from the
environment, never from the command line) and the one rule JSON Schema cannot state.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from proctor.server.app import create_app
from proctor.server.settings import Settings
from tests.support.databases import BACKENDS, fresh_database
from tests.support.platform import BOOTSTRAP_KEY, Platform, postgres_url, start_platform

pytestmark = pytest.mark.e2e

# Test cases per operation and phase; with the coverage phase's boundary values this reaches
# NUL bytes, one-past-the-limit lengths and integers, and huge page windows on every operation.
MAX_EXAMPLES = 50
SEED = 15
CONFIG = Path(__file__).with_name("schemathesis.toml")


@dataclass
class FuzzRun:
    """One backend's server and the schemathesis process fuzzing it."""

    platform: Platform
    process: subprocess.Popen[bytes]
    output: Path

    def wait(self) -> tuple[int, str]:
        code = self.process.wait(timeout=900)
        return code, self.output.read_text(errors="replace")


def _start_run(backend: str, tmp: Path, stack: ExitStack) -> FuzzRun:
    database_url = stack.enter_context(fresh_database(backend, tmp))
    platform = start_platform(
        tmp,
        database_url=database_url,
        extra_env={"PROCTOR_HOSTED_IN_SERVER": "false"},  # a fuzzed hosted eval starts nothing
    )
    stack.callback(platform.process.stop)
    output = tmp / "schemathesis.txt"
    args = [
        str(Path(sys.executable).with_name("schemathesis")),
        "--config-file",
        str(CONFIG),
        "run",
        f"{platform.url}/openapi.json",
        "--checks",
        "all",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        str(SEED),
        "--workers",
        "1",  # hypothesis' source inspection is not thread-safe on CPython 3.11
        "--generation-database",
        "none",
        "--request-timeout",
        "60",
        "--no-color",
    ]
    env = {**os.environ, "FUZZ_API_KEY": BOOTSTRAP_KEY}
    with output.open("wb") as sink:
        process = subprocess.Popen(args, stdout=sink, stderr=subprocess.STDOUT, cwd=tmp, env=env)
    stack.callback(lambda: process.poll() is None and process.kill())
    return FuzzRun(platform, process, output)


@pytest.fixture(scope="module")
def fuzz_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, FuzzRun]]:
    """The runs of every backend a selected test fuzzes, all started at once."""
    wanted = {
        item.callspec.params["backend"]
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_the_openapi_fuzz_run_finds_nothing"
        and (item.callspec.params["backend"] != "postgres" or postgres_url() is not None)
    }
    with ExitStack() as stack:
        yield {
            backend: _start_run(backend, tmp_path_factory.mktemp(f"fuzz-{backend}"), stack)
            for backend in sorted(wanted)
        }


@cache
def _document() -> dict[str, Any]:
    """The app's OpenAPI document, built once per process (read-only to every caller); no
    database is touched (the engine connects lazily)."""
    unused = Path("/nonexistent/proctor-openapi")
    settings = Settings(  # type: ignore[call-arg]
        PROCTOR_DATABASE_URL=f"sqlite:///{unused}/p.db", data_dir=unused
    )
    return create_app(settings, prepare=False).openapi()


def _operations() -> int:
    return sum(len(operations) for operations in _document()["paths"].values())


@pytest.mark.timeout(900)
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_openapi_fuzz_run_finds_nothing(fuzz_runs: dict[str, FuzzRun], backend: str) -> None:
    code, output = fuzz_runs[backend].wait()
    summary = output[output.rfind("=== SUMMARY") :] if "=== SUMMARY" in output else output
    assert code == 0, f"schemathesis found failures on {backend}:\n{output[-20000:]}"
    count = _operations()
    assert f"Selected: {count}/{count}" in summary and f"Tested: {count}" in summary, summary
    generated = re.search(r"(\d+) generated", summary)
    assert generated and int(generated.group(1)) >= 10 * count, summary
    # Not one unexpected error on the server's side either (it logs each with its request id).
    server_log = fuzz_runs[backend].platform.process.output()
    assert not re.search(r"request \w+ failed|Traceback", server_log), server_log[-5000:]


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


def test_every_reference_resolves_and_422_has_one_shape() -> None:
    document = _document()
    components = document["components"]["schemas"]
    # A dangling `$ref` in a request body left schema-driven clients unable to build one.
    assert {ref.removeprefix("#/components/schemas/") for ref in _refs(document)} <= set(components)
    assert "HTTPValidationError" not in components
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                if int(status) < 400:
                    continue
                schema = response["content"]["application/json"]["schema"]["$ref"]
                expected = "ValidationErrorBody" if status == "422" else "ErrorBody"
                assert schema.endswith(expected), (method, path, status)
            if path.startswith("/api/v1/"):
                assert {"401", "422", "500"} <= set(operation["responses"]), (method, path)
