"""Retries, written once: one backoff formula, one `Retry-After` parser, one retry loop.

The model client, the judge (a model client too) and the runs SDK's platform calls all
retry through `RetryPolicy`: the first attempt runs bare (the common case costs nothing),
and only after it failed with an error the caller's predicate calls transient does
tenacity take over, waiting `backoff()` between attempts, or longer when the server asked
for it (`Retry-After` on the error, capped at `max_delay`), until the attempts or the
deadline run out. Then the last error is raised (through `wrap`, when given).
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from tenacity import RetryCallState

logger = logging.getLogger(__name__)

T = TypeVar("T")

RETRYABLE_STATUS = frozenset({408, 409, 429}) | frozenset(range(500, 600))
"""Statuses worth another try: timeouts, conflicts, rate limits, server errors."""


def backoff(retry_number: int, *, base: float, cap: float) -> float:
    """Seconds before retry `retry_number` (1-based): `base * 2^(n-1)` capped at `cap`, with
    "equal jitter" (at least half of it, so a burst of failures spreads out)."""
    ceiling = min(cap, base * 2 ** max(0, retry_number - 1))
    return random.uniform(ceiling / 2, ceiling)


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """The wait a server asked for: `retry-after-ms`, else `Retry-After` (seconds or an HTTP
    date); None when absent or unreadable. Header names are matched case-insensitively when
    `headers` is a case-insensitive mapping (aiohttp's, httpx's); else give them lowercased."""
    if (ms := headers.get("retry-after-ms")) is not None:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, parsed.timestamp() - time.time()) if parsed else None


@dataclass
class RetryPolicy:
    """How a call is retried.

    Args:
        retry_if: Whether an error is worth another attempt.
        max_retries: Attempts after the first; None: no limit but the deadline.
        base_delay: First backoff, doubling each retry.
        max_delay: Longest backoff between attempts.
        max_retry_after: Longest wait a server's `Retry-After` may ask for (default:
            `max_delay`).
        what: Named in the debug log of each retry ("model request", "POST /evaluations").
    """

    retry_if: Callable[[BaseException], bool]
    max_retries: int | None = 5
    base_delay: float = 0.5
    max_delay: float = 30.0
    max_retry_after: float | None = None
    what: str = "request"

    def delay(self, retry_number: int, error: BaseException | None) -> float:
        """Seconds to wait before retry `retry_number` (1-based) after `error`."""
        wait = backoff(retry_number, base=self.base_delay, cap=self.max_delay)
        asked = getattr(error, "retry_after", None)
        if isinstance(asked, int | float):
            cap = self.max_delay if self.max_retry_after is None else self.max_retry_after
            wait = max(wait, min(float(asked), cap))
        return wait

    def _tenacity_args(
        self, deadline: float | None, on_retry: Callable[[BaseException, float], None] | None
    ) -> dict[str, Any]:
        from tenacity import retry_if_exception

        delays: dict[int, float] = {}

        def delay_of(state: RetryCallState) -> float:
            # The attempt before the first that tenacity makes was the bare one: +1.
            number = state.attempt_number + 1
            if number not in delays:
                outcome = state.outcome
                error = outcome.exception() if outcome is not None else None
                delays[number] = self.delay(number, error)
            return delays[number]

        def stop(state: RetryCallState) -> bool:
            if self.max_retries is not None and state.attempt_number >= self.max_retries:
                return True
            return deadline is not None and time.monotonic() + delay_of(state) >= deadline

        def before_sleep(state: RetryCallState) -> None:
            outcome = state.outcome
            error = outcome.exception() if outcome is not None else None
            if error is not None:
                self._report(error, delay_of(state), on_retry)

        return {
            "stop": stop,
            "wait": delay_of,
            "retry": retry_if_exception(self.retry_if),
            "before_sleep": before_sleep,
            "reraise": True,
        }

    def _report(
        self,
        error: BaseException,
        wait: float,
        on_retry: Callable[[BaseException, float], None] | None,
    ) -> None:
        logger.debug("%s failed (%s); retrying in %.2fs", self.what, describe(error), wait)
        if on_retry is not None:
            on_retry(error, wait)

    def _first_wait(
        self,
        error: BaseException,
        deadline: float | None,
        on_retry: Callable[[BaseException, float], None] | None,
    ) -> float | None:
        """The wait before the first retry, or None when `error` ends the call."""
        if not self.retry_if(error) or self.max_retries == 0:
            return None
        wait = self.delay(1, error)
        if deadline is not None and time.monotonic() + wait >= deadline:
            return None
        self._report(error, wait, on_retry)
        return wait

    async def acall(
        self,
        attempt: Callable[[], Awaitable[T]],
        *,
        wrap: Callable[[BaseException, int], BaseException] | None = None,
        deadline: float | None = None,
        on_retry: Callable[[BaseException, float], None] | None = None,
    ) -> T:
        """Await `attempt()` until it succeeds or the policy gives up; then raise the last
        error, or `wrap(error, attempts)` when given. `deadline` is on `time.monotonic()`."""
        try:
            return await attempt()
        except Exception as first:
            wait = self._first_wait(first, deadline, on_retry)
            if wait is None:
                if wrap is None:
                    raise
                raise wrap(first, 1) from first
            await asyncio.sleep(wait)
        from tenacity import AsyncRetrying

        attempts = 1
        try:
            async for try_ in AsyncRetrying(
                sleep=asyncio.sleep, **self._tenacity_args(deadline, on_retry)
            ):
                with try_:
                    attempts += 1
                    return await attempt()
        except Exception as e:
            if wrap is None:
                raise
            raise wrap(e, attempts) from e
        raise AssertionError("unreachable: tenacity returns or raises")  # pragma: no cover

    def call(
        self,
        attempt: Callable[[], T],
        *,
        wrap: Callable[[BaseException, int], BaseException] | None = None,
        deadline: float | None = None,
        on_retry: Callable[[BaseException, float], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> T:
        """`acall` for a blocking `attempt` (the runs SDK's platform calls). `sleep` waits
        between attempts; one that raises ends the loop with its error (the uploader's
        wait, which its abort cuts short)."""
        try:
            return attempt()
        except Exception as first:
            wait = self._first_wait(first, deadline, on_retry)
            if wait is None:
                if wrap is None:
                    raise
                raise wrap(first, 1) from first
            sleep(wait)
        from tenacity import Retrying

        attempts = 1
        try:
            for try_ in Retrying(sleep=sleep, **self._tenacity_args(deadline, on_retry)):
                with try_:
                    attempts += 1
                    return attempt()
        except Exception as e:
            if wrap is None:
                raise
            raise wrap(e, attempts) from e
        raise AssertionError("unreachable: tenacity returns or raises")  # pragma: no cover


def describe(error: BaseException) -> str:
    """`HTTP 429` for a status error, else the error's type."""
    status = getattr(error, "status_code", None)
    return f"HTTP {status}" if status is not None else type(error).__name__
