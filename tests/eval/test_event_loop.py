"""The event loop an evaluation runs on: uvloop, or asyncio's own for an environment that
starts processes, which ends the processes a cancelled rollout left before it closes."""

from __future__ import annotations

import asyncio
import gc
import sys
import time

import psutil
import pytest

from proctor.eval import event_loop
from tests.support import tools

_left: list[asyncio.subprocess.Process] = []
"""Processes an "environment" keeps after its rollout was cancelled, as a harness may."""


async def _spawn_then_fail() -> None:
    # asyncio's child watcher holds the transport until the child exits, then drops it;
    # a child that outlives the loop by a second made the traceback, after the loop closed.
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "import time; time.sleep(1)",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    _left.append(process)
    raise KeyboardInterrupt  # what Ctrl-C raises out of `asyncio.Runner.run`


def test_asyncios_loop_kills_and_reaps_a_process_left_running_so_nothing_prints_later(
    capfd: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(KeyboardInterrupt):
        event_loop.run(_spawn_then_fail(), stdlib=True)
    process = _left.pop()
    assert process.returncode is not None  # killed and reaped before the loop closed
    assert not psutil.pid_exists(process.pid)
    del process
    time.sleep(1.5)  # past the child's own end: no watcher thread is left to wake
    gc.collect()  # the transport's __del__, after the loop closed
    err = capfd.readouterr().err
    assert "Event loop is closed" not in err, err
    assert "is closed" not in err, err  # asyncio's "Loop ... that handles pid ... is closed"


async def _which_loop() -> type:
    return type(asyncio.get_running_loop())


def test_the_loop_is_uvloop_unless_the_environment_spawns_processes() -> None:
    uvloop = tools.package("uvloop")  # a dependency wherever it installs (not on Windows)
    assert event_loop.run(_which_loop(), stdlib=False) is uvloop.Loop
    assert issubclass(event_loop.run(_which_loop(), stdlib=True), asyncio.SelectorEventLoop)
