"""The event loop an evaluation runs on, in the runner and in each worker process.

uvloop when it is installed (less CPU per request). An environment that starts processes
per rollout (`spawns_processes`, e.g. a verifiers harness program each) runs on asyncio's
own loop instead, whose subprocesses are vforked, where uvloop forks the whole runner
(about 16 ms of CPU against 0.4 ms per process for a runner of a few hundred MB;
`bench/results/verifiers_eval.md`).

asyncio's loop here also ends, before it closes, every subprocess an environment left
running: on Ctrl-C a rollout is cancelled while its program runs, and the transport it
leaves would otherwise be collected after the loop closed, printing "Exception ignored
... Event loop is closed" with a traceback at the user instead of the one interrupted line.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def spawns_processes(env: object) -> bool:
    """Whether an environment starts processes per rollout (its `spawns_processes`, e.g. a
    verifiers harness program each): it then runs on asyncio's loop (`run(stdlib=True)`)."""
    return bool(getattr(env, "spawns_processes", False))


_REAP_SECONDS = 2.0
"""How long a closing loop waits for the subprocesses it killed to be reaped."""


class SubprocessClosingLoop(asyncio.SelectorEventLoop):
    """asyncio's loop, which kills and reaps the subprocesses still open when it closes."""

    def __init__(self) -> None:
        super().__init__()
        self._subprocesses: weakref.WeakSet[asyncio.BaseTransport] = weakref.WeakSet()

    async def _make_subprocess_transport(self, *args: Any, **kwargs: Any) -> Any:
        transport = await super()._make_subprocess_transport(*args, **kwargs)  # type: ignore[misc]
        self._subprocesses.add(transport)
        return transport

    def close(self) -> None:
        try:
            if not self.is_running() and not self.is_closed():
                self._end_subprocesses()
        finally:
            super().close()

    def _end_subprocesses(self) -> None:
        """Close (which kills a running child) every open subprocess transport, then run the
        loop until every child is reaped, or for at most `_REAP_SECONDS`."""
        transports: list[Any] = list(self._subprocesses)
        for transport in transports:
            transport.close()
        deadline = time.monotonic() + _REAP_SECONDS
        while time.monotonic() < deadline:
            if all(t.get_returncode() is not None for t in transports):
                break
            self.run_until_complete(asyncio.sleep(0.02))
        self.run_until_complete(asyncio.sleep(0))  # the transports' last callbacks


def run(coro: Coroutine[Any, Any, T], *, stdlib: bool) -> T:
    """Run `coro` to its end on uvloop, or on asyncio's loop when `stdlib` or without
    uvloop; Ctrl-C cancels it and raises KeyboardInterrupt, as `asyncio.run` does."""
    loop_factory: Any = SubprocessClosingLoop
    if not stdlib:
        try:
            import uvloop
        except ImportError:  # uvloop is optional: the default loop is only slower
            pass
        else:
            loop_factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(coro)
