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
) -> T:
    """Call `condition` until it returns something truthy, and return that.

    Raises:
        TimeoutError: `condition` stayed falsy for `timeout` seconds; the message names `what`
            (a callable is asked then, so it can show the state the wait last saw).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            described = what() if callable(what) else what
            raise TimeoutError(f"{described} did not hold within {timeout:g}s")
        time.sleep(interval)
