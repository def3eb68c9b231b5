"""When and how long to retry a model request: exponential backoff, jitter, `Retry-After`."""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from proctor.errors import ModelError

if TYPE_CHECKING:
    from tenacity import RetryCallState

logger = logging.getLogger(__name__)

T = TypeVar("T")

RETRYABLE_STATUS = frozenset({408, 409, 429}) | frozenset(range(500, 600))
"""Statuses worth another try: timeouts, conflicts, rate limits, server errors."""


def is_retryable(error: BaseException) -> bool:
    """Whether a failed request may succeed when sent again."""
    import openai

    if isinstance(error, openai.APIConnectionError):  # includes timeouts
        return True
    if isinstance(error, openai.APIStatusError):
        return error.status_code in RETRYABLE_STATUS
    return False


def retry_after_seconds(error: BaseException) -> float | None:
    """The server's requested wait from `retry-after-ms` / `Retry-After`, if any."""
    response = getattr(error, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    if (ms := headers.get("retry-after-ms")) is not None:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


class RetryPolicy:
    """Retries after a first failure: `max_retries` more attempts with growing, jittered waits.

    The first attempt is made by the caller without any retry machinery (the common case
    costs nothing); only once it failed does tenacity take over.
    """

    def __init__(self, *, max_retries: int, base_delay: float, max_delay: float) -> None:
        self.max_retries = max_retries
        self.base_delay = base_delay
        self.max_delay = max_delay

    def delay(self, retry_number: int, error: BaseException | None) -> float:
        """Seconds to wait before retry `retry_number` (1-based) after `error`."""
        ceiling = min(self.max_delay, self.base_delay * 2 ** (retry_number - 1))
        # "Equal jitter": at least half the backoff, so a burst of 429s spreads out.
        wait = random.uniform(ceiling / 2, ceiling)
        if error is not None and (asked := retry_after_seconds(error)) is not None:
            wait = max(wait, min(asked, self.max_delay))
        return wait

    async def run(
        self,
        attempt: Callable[[], Awaitable[T]],
        first_error: BaseException,
        wrap: Callable[..., ModelError],
    ) -> T:
        """Retry `attempt` after `first_error`; raise `wrap(error, attempts=k)` when spent."""
        # Imported here: a run whose requests all succeed never needs it.
        from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt

        def wait(state: RetryCallState) -> float:
            outcome = state.outcome
            error = outcome.exception() if outcome is not None else None
            return self.delay(state.attempt_number + 1, error)

        def log_retry(state: RetryCallState) -> None:
            outcome = state.outcome
            error = outcome.exception() if outcome is not None else None
            logger.debug("model request failed (%s); retrying", _describe(error))

        first_wait = self.delay(1, first_error)
        logger.debug(
            "model request failed (%s); retrying in %.2fs", _describe(first_error), first_wait
        )
        await asyncio.sleep(first_wait)
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.max_retries),
            wait=wait,
            retry=retry_if_exception(is_retryable),
            before_sleep=log_retry,
            sleep=asyncio.sleep,
            reraise=True,
        )
        attempts = 1
        try:
            async for try_ in retrying:
                with try_:
                    attempts += 1
                    return await attempt()
        except Exception as e:
            raise wrap(e, attempts=attempts) from e
        raise AssertionError("unreachable: tenacity either returns or raises")  # pragma: no cover


def _describe(error: Any) -> str:
    status = getattr(error, "status_code", None)
    return f"HTTP {status}" if status is not None else type(error).__name__
