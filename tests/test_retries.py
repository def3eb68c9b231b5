"""Retries written once (`proctor.retries`): the backoff formula, the Retry-After parser and
the one loop the model client, the judge and the runs SDK share."""

from __future__ import annotations

import asyncio
import time

import pytest

from proctor.errors import HTTPStatusError, RetryableAPIError
from proctor.retries import RetryPolicy, backoff, parse_retry_after


def test_backoff_doubles_with_jitter_and_is_capped() -> None:
    for _ in range(50):
        assert 0.5 <= backoff(1, base=1.0, cap=4.0) <= 1.0
        assert 1.0 <= backoff(2, base=1.0, cap=4.0) <= 2.0
        assert 2.0 <= backoff(5, base=1.0, cap=4.0) <= 4.0


def test_retry_after_forms() -> None:
    assert parse_retry_after({"retry-after": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "250"}) == 0.25
    assert parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


def test_retry_after_longer_than_backoff_wins_up_to_the_cap() -> None:
    policy = RetryPolicy(retry_if=lambda e: True, base_delay=0.01, max_delay=2.0)
    model = HTTPStatusError("slow down", status_code=429, retry_after=1.5)
    assert policy.delay(1, model) == 1.5
    assert policy.delay(1, HTTPStatusError("x", status_code=429, retry_after=60)) == 2.0
    # The platform's own error carries Retry-After the same way, under its own cap.
    runs = RetryPolicy(retry_if=lambda e: True, base_delay=0.01, max_delay=2, max_retry_after=60)
    platform = RetryableAPIError("busy", status_code=503, code=None, retry_after=30)
    assert runs.delay(1, platform) == 30


class Flaky:
    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise ConnectionError(f"attempt {self.calls}")
        return "ok"


def test_the_loop_retries_what_the_predicate_allows_then_wraps_the_last_error() -> None:
    policy = RetryPolicy(retry_if=lambda e: isinstance(e, ConnectionError), max_retries=2,
                         base_delay=0.001, max_delay=0.01)  # fmt: skip
    assert policy.call(Flaky(2)) == "ok"
    flaky = Flaky(5)
    with pytest.raises(RuntimeError, match=r"3 attempts: attempt 3"):
        policy.call(flaky, wrap=lambda e, n: RuntimeError(f"{n} attempts: {e}"))
    assert flaky.calls == 3
    never = RetryPolicy(retry_if=lambda e: False, max_retries=5, base_delay=0.001)
    refused = Flaky(1)
    with pytest.raises(ConnectionError):
        never.call(refused)
    assert refused.calls == 1


def test_a_deadline_stops_the_loop_before_a_wait_that_would_pass_it() -> None:
    policy = RetryPolicy(retry_if=lambda e: True, max_retries=None, base_delay=0.05, max_delay=0.05)
    flaky = Flaky(1000)
    with pytest.raises(ConnectionError):
        policy.call(flaky, deadline=time.monotonic() + 0.5)
    assert 2 <= flaky.calls < 1000


def test_the_async_loop_is_the_same_loop() -> None:
    policy = RetryPolicy(retry_if=lambda e: True, max_retries=3, base_delay=0.001, max_delay=0.01)
    flaky = Flaky(2)
    seen: list[str] = []

    async def attempt() -> str:
        return flaky()

    result = asyncio.run(policy.acall(attempt, on_retry=lambda e, wait: seen.append(str(e))))
    assert result == "ok" and seen == ["attempt 1", "attempt 2"]


class Aborted(Exception):
    pass


def test_a_sleep_that_raises_ends_the_loop_with_its_error() -> None:
    # The runs SDK's uploader waits with an abortable sleep: an abort during a retry's wait
    # ends the loop at once, instead of the next attempt.
    policy = RetryPolicy(retry_if=lambda e: True, max_retries=None, base_delay=0.001)
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 3:
            raise Aborted

    flaky = Flaky(1000)
    with pytest.raises(Aborted):
        policy.call(flaky, sleep=sleep)
    assert flaky.calls == 3 and len(waits) == 3
