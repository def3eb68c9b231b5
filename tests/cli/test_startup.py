"""`proctor COMMAND --help` answers without importing the heavy libraries the command uses.

Each command imports its machinery only after its flags parse, so help and usage errors
stay instant. Checked in a fresh interpreter, by the modules it loaded (not by time).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from proctor.cli.main import COMMANDS
from tests.eval.helpers import cli_env, start_demo_model

HEAVY = ("sqlalchemy", "aiohttp", "fastapi", "uvicorn", "openai", "rich", "ray", "pydantic")

# `eval` builds its flags from a pydantic model, so it needs pydantic to say --help; so do
# the commands that take eval's flags (`hosted run`, `quickstart`).
ALLOWED = {"eval": {"pydantic", "rich"}, "hosted": {"pydantic"}, "quickstart": {"pydantic"}}

PROBE = """
import sys
from proctor.cli.main import main
try:
    main([sys.argv[1], "--help"])
except SystemExit:
    pass
print(" ".join(sorted(m for m in sys.argv[2:] if m in sys.modules)), file=sys.stderr)
"""


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_does_not_import_heavy_libraries(command: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, command, *HEAVY],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    loaded = set(result.stderr.split()) - ALLOWED.get(command, set())
    assert not loaded, f"`proctor {command} --help` imported {sorted(loaded)}"


RUN_PROBE = """
import sys
from proctor.cli.main import main
try:
    main(sys.argv[2:])
except SystemExit:
    pass
print("LOADED " + " ".join(sorted(m for m in sys.argv[1].split(",") if m in sys.modules)))
"""

# What a local `proctor eval` never needs: the openai SDK (chat goes over aiohttp in
# proctor.models.http, with proctor's own errors), the runs SDK and its httpx (nothing is
# pushed), tenacity (no retry happened), truststore (no https), rich (--no-rich), the
# server's libraries.
NOT_NEEDED = ("openai", "httpx", "httpx2", "tenacity", "truststore", "rich", "proctor.runs",
              "sqlalchemy", "fastapi", "uvicorn")  # fmt: skip


@pytest.mark.e2e
def test_a_local_eval_imports_only_what_it_uses(tmp_path: Path) -> None:
    url, demo = start_demo_model(tmp_path)
    argv = [sys.executable, "-c", RUN_PROBE, ",".join(NOT_NEEDED), "eval", "reverse-text",
            "-n", "3", "--no-push", "--no-rich", "-o", str(tmp_path / "out"),
            "--client.base-url", url]  # fmt: skip
    try:
        result = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env=cli_env(),
        )
    finally:
        demo.stop()
    assert "completed: 3/3 episodes" in result.stdout, result.stderr
    loaded = result.stdout.split("LOADED")[-1].split()
    assert not loaded, f"a local `proctor eval` imported {loaded}"
