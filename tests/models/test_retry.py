"""Backoff arithmetic: exponential, jittered, capped, Retry-After wins when longer."""

from __future__ import annotations

from typing import Any

from proctor.models.retry import RetryPolicy, retry_after_seconds


class FakeStatusError(Exception):
    def __init__(self, headers: dict[str, str]) -> None:
        self.response: Any = type("R", (), {"headers": headers})()


def test_backoff_doubles_with_jitter_and_is_capped() -> None:
    policy = RetryPolicy(max_retries=5, base_delay=1.0, max_delay=4.0)
    for _ in range(50):
        assert 0.5 <= policy.delay(1, None) <= 1.0
        assert 1.0 <= policy.delay(2, None) <= 2.0
        assert 2.0 <= policy.delay(5, None) <= 4.0


def test_retry_after_forms() -> None:
    assert retry_after_seconds(FakeStatusError({"retry-after": "3"})) == 3.0
    assert retry_after_seconds(FakeStatusError({"retry-after-ms": "250"})) == 0.25
    assert (
        retry_after_seconds(FakeStatusError({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}))
        == 0.0
    )
    assert retry_after_seconds(FakeStatusError({})) is None
    assert retry_after_seconds(ValueError()) is None


def test_retry_after_longer_than_backoff_wins_up_to_the_cap() -> None:
    policy = RetryPolicy(max_retries=5, base_delay=0.01, max_delay=2.0)
    assert policy.delay(1, FakeStatusError({"retry-after": "1.5"})) == 1.5
    assert policy.delay(1, FakeStatusError({"retry-after": "60"})) == 2.0
