"""The one way a test waits: poll a condition until it holds, within a bounded deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T | None],
    *,
    timeout: float = 60.0,
    interval: float = 0.05,
    what: str | Callable[[], str] = "the condition",
    max_pause: float | None = None,
) -> T:
    """Call `condition` until it returns something truthy, and return that.

    Polls every `interval`; with `max_pause`, each pause is half as long again as the last,
    up to `max_pause`: a quick condition is still seen at once, and a minute's wait on a
    server (each poll a request, ~4 ms of CPU on both sides) does not poll it 10-20 times a
    second on a suite that is short of CPU. (Not for a wait that must catch a passing state,
    or that stops a run at a point: a long pause may let it run on.)

    Raises:
        TimeoutError: `condition` stayed falsy for `timeout` seconds; the message names `what`
            (a callable is asked then, so it can show the state the wait last saw).
    """
    deadline = time.monotonic() + timeout
    pause, longest = interval, max(interval, max_pause or interval)
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            described = what() if callable(what) else what
            raise TimeoutError(f"{described} did not hold within {timeout:g}s")
        time.sleep(min(pause, max(deadline - time.monotonic(), 0.0)))
        pause = min(pause * 1.5, longest)
