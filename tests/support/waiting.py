"""The one way a test waits: poll a condition until it holds, within a bounded deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T | None],
    *,
    timeout: float = 30.0,
    interval: float = 0.05,
    what: str = "the condition",
) -> T:
    """Call `condition` until it returns something truthy, and return that.

    Raises:
        TimeoutError: `condition` stayed falsy for `timeout` seconds; the message names `what`.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not hold within {timeout:g}s")
        time.sleep(interval)
