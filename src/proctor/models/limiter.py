"""Adaptive concurrency: how many model requests may be in flight, backing off on HTTP 429.

A provider that rate-limits answers the excess with 429s; retrying them at full concurrency
keeps hammering it and wastes a share of every second on refusals. The limiter runs
additive-increase / multiplicative-decrease (AIMD, as TCP does for congestion): a 429 on a
request sent under the current limit multiplies the limit by `decrease`; every success adds
`1 / limit`, about one more request in flight per round of `limit` answers. One decrease per
round: the 429s of requests already in flight when the limit fell say nothing new. The
limit never exceeds `max_limit` (the run's `-c`) nor falls below one.

`acquire()` costs nothing while below the limit (no await, no allocation), so a run that is
never rate limited pays a counter increment per request.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque

logger = logging.getLogger(__name__)


class AdaptiveLimiter:
    """Caps the requests in flight at `limit`, which falls on 429s and climbs back after.

    Args:
        max_limit: The most requests in flight (the start and the ceiling).
        decrease: Factor applied to the limit on a 429 (one decrease per round).
        adaptive: False keeps the limit at `max_limit` whatever happens (fixed concurrency).
    """

    def __init__(self, max_limit: int, *, decrease: float = 0.9, adaptive: bool = True) -> None:
        if max_limit < 1:
            raise ValueError("max_limit must be at least 1")
        self.max_limit = max_limit
        self.limit = float(max_limit)
        """The current cap (a float: increases come in fractions)."""
        self.in_flight = 0
        self.peak_in_flight = 0
        """The most requests in flight at once (for tests and benchmarks)."""
        self.decreases = 0
        self._decrease = decrease
        self._adaptive = adaptive
        self._round = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._warned = False

    async def acquire(self) -> int:
        """Wait for a slot; returns the round it was taken in (pass it to `release`)."""
        if self.in_flight >= self.limit or self._waiters:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self.in_flight -= 1  # handed a slot it will never use: pass it on
                    self._wake()
                elif waiter in self._waiters:
                    self._waiters.remove(waiter)
                raise
            # `_wake` counted this request in already.
        else:
            self.in_flight += 1
        if self.in_flight > self.peak_in_flight:
            self.peak_in_flight = self.in_flight
        return self._round

    def release(self, round_: int, *, rate_limited: bool = False) -> None:
        """Give the slot back, saying whether the endpoint refused the request with a 429."""
        self.in_flight -= 1
        if self._adaptive:
            if rate_limited:
                if round_ == self._round:
                    self._lower()
            elif self.limit < self.max_limit:
                self.limit = min(float(self.max_limit), self.limit + 1.0 / self.limit)
        self._wake()

    def _lower(self) -> None:
        self._round += 1
        self.decreases += 1
        self.limit = max(1.0, self.limit * self._decrease)
        if not self._warned:
            self._warned = True
            logger.warning(
                "the model endpoint is rate limiting (HTTP 429): lowering the requests in "
                "flight below %d, climbing back when the 429s stop",
                self.max_limit,
            )
        logger.debug("rate limited: requests in flight now at most %d", int(self.limit))

    def _wake(self) -> None:
        while self._waiters and self.in_flight < self.limit:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.in_flight += 1
                waiter.set_result(None)
