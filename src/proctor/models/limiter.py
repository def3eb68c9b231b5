"""Adaptive concurrency: how many model requests may be in flight, backing off on HTTP 429.

A provider that rate-limits answers the excess with 429s; retrying them at full concurrency
keeps hammering it and wastes a share of every second on refusals. The limiter runs
additive-increase / multiplicative-decrease (AIMD, as TCP does for congestion), paced by the
round-trip time (RTT, a moving average of successful requests' latencies):

- a 429 multiplies the limit by `decrease`, at most once per RTT: a refusal comes back at
  once, and the refusals of one window all say the same thing (the old limit was too high);
- a 429's `Retry-After` pauses every new request until it has passed, not just the one
  retried: the provider said when it will accept again, so sending before then is refused.
  When it has passed, one request goes first and each success lets one more follow (the
  cap doubles per round trip, as TCP's slow start), back up to the limit: a whole queue
  released the moment the provider frees one slot would be refused but for that one;
- after a decrease and a cool-down of one RTT (or the pause, if longer), each success adds
  `1 / limit`: about one more request in flight per round trip, up to `max_limit` (`-c`).

The limit never falls below `floor` (default 1 request per process: a provider may allow
fewer requests per second than one RTT's worth, and the pause then spaces the requests).
`acquire()` costs a clock read while below the limit (no await, no allocation), so a run
that is never rate limited pays next to nothing per request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable

logger = logging.getLogger(__name__)

INITIAL_RTT_S = 0.1
"""The round-trip estimate before the first success (the window of a first decrease)."""


class AdaptiveLimiter:
    """Caps the requests in flight at `limit`, which falls on 429s and climbs back after.

    Args:
        max_limit: The most requests in flight (the start and the ceiling).
        decrease: Factor applied to the limit on a 429 (at most once per round trip).
        floor: The least the limit falls to.
        adaptive: False keeps the limit at `max_limit` whatever happens (fixed concurrency,
            and `Retry-After` delays only the request retried).
        clock: Seconds, monotonic (tests pass a fake one).
    """

    def __init__(
        self,
        max_limit: int,
        *,
        decrease: float = 0.5,
        floor: float = 1.0,
        adaptive: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_limit < 1:
            raise ValueError("max_limit must be at least 1")
        self.max_limit = max_limit
        self.limit = float(max_limit)
        """The current cap (a float: increases come in fractions)."""
        self.floor = max(1.0, min(float(max_limit), floor))
        self.in_flight = 0
        self.peak_in_flight = 0
        """The most requests in flight at once (for tests and benchmarks)."""
        self.decreases = 0
        self.rtt = INITIAL_RTT_S
        """Moving average of successful requests' round trips: the window of a decrease."""
        self.paused_until = 0.0
        """No new request goes out before this time (a `Retry-After`)."""
        self._decrease = decrease
        self._adaptive = adaptive
        self._clock = clock
        self._last_decrease = -float("inf")
        self._cool_until = -float("inf")
        self._paused = False
        self._ramp: float | None = None
        """After a pause: the cap while it climbs back to the limit."""
        self._unpause: asyncio.TimerHandle | None = None
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._warned = False

    async def acquire(self) -> float:
        """Wait for a slot; returns the time it was taken (pass it to `release`)."""
        if self.in_flight >= self.limit or self._waiters or self._paused:
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
        return self._clock()

    def release(
        self, sent_at: float, *, rate_limited: bool = False, retry_after: float | None = None
    ) -> None:
        """Give the slot back, saying whether the endpoint refused the request with a 429.

        Args:
            sent_at: What `acquire` returned.
            rate_limited: The answer was a 429.
            retry_after: Its `Retry-After`, in seconds, if it had one.
        """
        self.in_flight -= 1
        if self._adaptive:
            now = self._clock()
            if rate_limited:
                if retry_after:
                    self.pause(retry_after)
                if now - self._last_decrease >= self.rtt:
                    self._lower(now)
            else:
                if self._ramp is not None:
                    self._ramp += 1.0
                    if self._ramp >= self.limit:
                        self._ramp = None
                self.rtt += (now - sent_at - self.rtt) * 0.125  # as TCP's smoothed RTT
                if self.limit < self.max_limit and now >= self._cool_until:
                    self.limit = min(float(self.max_limit), self.limit + 1.0 / self.limit)
        self._wake()

    def pause(self, seconds: float) -> None:
        """Send no new request for `seconds` (those in flight go on)."""
        now = self._clock()
        until = now + seconds
        if until <= self.paused_until:
            return
        self.paused_until = until
        self._cool_until = max(self._cool_until, until)
        self._paused = True
        if self._unpause is not None:
            self._unpause.cancel()
        self._unpause = asyncio.get_running_loop().call_later(seconds, self.resume)

    def resume(self) -> None:
        """End a pause (its timer calls this; tests may call it to skip the wait)."""
        self._paused = False
        self._ramp = 1.0
        self._unpause = None
        self._wake()

    @property
    def paused(self) -> bool:
        return self._paused

    def _lower(self, now: float) -> None:
        self.decreases += 1
        self._last_decrease = now
        self._cool_until = max(self._cool_until, now + self.rtt)
        cap = self.limit if self._ramp is None else min(self.limit, self._ramp)
        self.limit = max(self.floor, cap * self._decrease)
        self._ramp = None
        if not self._warned:
            self._warned = True
            logger.warning(
                "the model endpoint is rate limiting (HTTP 429): lowering the requests in "
                "flight below %d, climbing back when the 429s stop",
                self.max_limit,
            )
        logger.debug("rate limited: requests in flight now at most %d", int(self.limit))

    def _wake(self) -> None:
        if self._paused:
            return
        cap = self.limit if self._ramp is None else self._ramp
        while self._waiters and self.in_flight < cap:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.in_flight += 1
                waiter.set_result(None)
