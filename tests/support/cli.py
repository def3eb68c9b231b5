"""The CLI in this process: `proctor ARGS` as `proctor.cli.main.main(argv)`, with a HOME, a
working directory and `PROCTOR_*` variables of its own and its output captured, for tests where
a process is not the point (what a command prints and stores, not how it starts or exits)."""

from __future__ import annotations

import io
import logging
import os
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


class Finished(Protocol):
    """What a finished command returned and printed, run here (`Ran`) or in a process of its
    own (the standard library's completed process)."""

    returncode: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class Ran:
    """What a command run in this process returned and printed."""

    returncode: int
    stdout: str
    stderr: str


def cli_in_process(*args: str, home: Path, env: dict[str, str] | None = None) -> Ran:
    """Run `proctor *args` in this process, as `HOME=home` in `home`, with no `PROCTOR_*`
    variable but those of `env`; the environment, working directory and logging are restored
    after. Log lines reach `stderr` as in a process of its own (pytest's handlers are set
    aside, so the command's `logging.basicConfig` takes effect)."""
    from proctor.cli.main import main

    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    out, err = io.StringIO(), io.StringIO()
    try:
        root.handlers = []
        for name in [name for name in os.environ if name.startswith("PROCTOR_")]:
            del os.environ[name]
        os.environ.update({"HOME": str(home), **(env or {})})
        os.chdir(home)
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exit_:  # argparse's --help and usage errors
                code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
    finally:
        root.handlers = saved_handlers
        root.setLevel(saved_level)
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return Ran(code, out.getvalue(), err.getvalue())
