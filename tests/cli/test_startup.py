"""`proctor COMMAND --help` answers without importing the heavy libraries the command uses.

Each command imports its machinery only after its flags parse, so help and usage errors
stay instant. Checked in a fresh interpreter, by the modules it loaded (not by time).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from proctor.cli.main import COMMANDS

HEAVY = ("sqlalchemy", "aiohttp", "fastapi", "uvicorn", "openai", "rich", "ray", "pydantic")

# `eval` builds its flags from a pydantic model, so it needs pydantic to say --help.
ALLOWED = {"eval": {"pydantic", "rich"}}

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
