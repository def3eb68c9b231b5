"""Run verifiers' chat harness program in the environment a hosted launcher prepared.

In a confined sandbox, `PROCTOR_SANDBOX_HARNESS` names a read-only environment the launcher
built outside it from its harness index, once per content (`proctor.sandboxes.harness`).
verifiers' subprocess runtime keeps the interpreter of each harness program it prepared by
the program's path (`SubprocessRuntime.scripts_dir/<sha256 of its source>.py`): writing the
chat program there and recording that environment's interpreter for it makes verifiers run
the program as it always does, without preparing (installing and compiling) an environment
of its own in the sandbox. Anything that does not match (other requirements, another
verifiers' runtime) leaves verifiers to prepare its own, as outside a sandbox.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from proctor.envs.verifiers._harness_index import (
    REQUIREMENTS_FILE,
    chat_program,
    chat_program_requirements,
)

logger = logging.getLogger(__name__)

VARIABLE = "PROCTOR_SANDBOX_HARNESS"
"""The prepared environment's path, set by the confinement (`proctor.sandboxes.confine`)."""


def adopt_prepared_harness() -> Path | None:
    """Hand verifiers the prepared environment for its chat harness program; the
    interpreter it will run, or None where there is none to use."""
    root = os.environ.get(VARIABLE)
    if not root:
        return None
    prepared = Path(root)
    python = prepared / "bin" / "python"
    try:
        listed = (prepared / REQUIREMENTS_FILE).read_text().split()
    except OSError:
        return None
    if sorted(set(listed)) != chat_program_requirements() or not python.exists():
        logger.info("the prepared harness environment %s does not fit; not using it", prepared)
        return None
    from verifiers.v1.runtimes.subprocess import SubprocessRuntime

    interpreters = getattr(SubprocessRuntime, "_interpreters", None)
    if not isinstance(interpreters, dict):
        return None
    source = chat_program()
    digest = hashlib.sha256(source.encode()).hexdigest()
    path = f"{SubprocessRuntime.scripts_dir}/{digest}.py"  # as verifiers names it
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    partial = Path(f"{path}.{os.getpid()}.tmp")
    partial.write_bytes(source.encode())
    partial.replace(path)
    interpreters[path] = str(python)
    return python
