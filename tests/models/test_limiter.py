"""Adaptive concurrency: the requests in flight fall under 429s and climb back when they stop.

First the limiter on its own (a scripted sequence of answers), then the real client against
a rate-limited demo model over loopback HTTP, whose limit is lifted mid-way.
"""

from __future__ import annotations

import asyncio

import pytest

from proctor.demo.server import DemoModel, DemoModelConfig, start_server
from proctor.models.config import ClientConfig
from proctor.models.limiter import AdaptiveLimiter
from proctor.models.openai_client import OpenAIChatClient


class FakeClock:
    """Time that moves only when the test says so: the limiter's windows without timing."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_limit_falls_once_per_round_trip_and_climbs_back() -> None:
    clock = FakeClock()
    limiter = AdaptiveLimiter(16, clock=clock)
    # A few successes teach it the round trip (50 ms).
    for _ in range(40):
        sent = await limiter.acquire()
        clock.now += 0.05
        limiter.release(sent)
    assert abs(limiter.rtt - 0.05) < 0.01
    sent_at = [await limiter.acquire() for _ in range(16)]
    assert limiter.in_flight == 16 and limiter.limit == 16
    # Every request of the round is refused at once: one decrease, not sixteen.
    for sent in sent_at:
        limiter.release(sent, rate_limited=True)
    assert limiter.decreases == 1 and limiter.limit == 8
    # Immediate refusals of the requests sent right after say nothing new either.
    for _ in range(50):
        limiter.release(await limiter.acquire(), rate_limited=True)
    assert limiter.decreases == 1
    # Sustained 429s: one decrease per round trip, down to the floor.
    for _ in range(10):
        clock.now += 0.06
        limiter.release(await limiter.acquire(), rate_limited=True)
    assert limiter.limit == limiter.floor == 1
    assert limiter.decreases == 11  # one per window: 16 -> 8 -> 4 -> 2 -> 1, then the floor
    # Successes raise it again after the cool-down, to the ceiling and no further.
    for _ in range(2000):
        sent = await limiter.acquire()
        clock.now += 0.05
        limiter.release(sent)
    assert limiter.limit == 16


async def test_in_flight_falls_under_sustained_429s_and_recovers() -> None:
    """Many requests queued on the limiter, as a run's rollouts are: what is in flight."""
    clock = FakeClock()
    limiter = AdaptiveLimiter(32, clock=clock)
    refusing = True
    seen: list[int] = []

    async def request() -> None:
        sent = await limiter.acquire()
        seen.append(limiter.in_flight)
        await asyncio.sleep(0)  # the answer comes back on a later turn of the loop
        clock.now += 0.002
        limiter.release(sent, rate_limited=refusing)

    async def flood(n: int) -> None:
        pending = iter(range(n))

        async def worker() -> None:
            for _ in pending:
                await request()

        await asyncio.gather(*(worker() for _ in range(64)))

    await flood(3000)
    assert limiter.limit == 1 and max(seen[-500:]) == 1
    refusing = False
    seen.clear()
    await flood(6000)
    assert limiter.limit == 32 and max(seen[-500:]) == 32


async def test_retry_after_pauses_every_new_request() -> None:
    clock = FakeClock()
    limiter = AdaptiveLimiter(8, clock=clock)
    first, second = await limiter.acquire(), await limiter.acquire()
    limiter.release(first, rate_limited=True, retry_after=30.0)
    assert limiter.paused and limiter.paused_until == clock.now + 30
    # Below the limit, yet no new request goes out while the provider asked for a pause.
    waiting = asyncio.create_task(limiter.acquire())
    await asyncio.sleep(0)
    assert not waiting.done()
    limiter.release(second)  # a success during the pause does not end it
    await asyncio.sleep(0)
    assert not waiting.done() and limiter.in_flight == 0
    limiter.resume()  # what the pause's timer does when the 30 s are up
    await asyncio.sleep(0)
    assert waiting.done() and limiter.in_flight == 1


async def test_waiters_get_slots_as_the_limit_allows() -> None:
    limiter = AdaptiveLimiter(4)
    held = [await limiter.acquire() for _ in range(4)]
    waiting = [asyncio.create_task(limiter.acquire()) for _ in range(3)]
    await asyncio.sleep(0)
    assert not any(t.done() for t in waiting)
    waiting[0].cancel()  # a cancelled waiter must not swallow a slot
    await asyncio.sleep(0)
    limiter.release(held.pop())
    limiter.release(held.pop())
    await asyncio.sleep(0)
    assert waiting[1].done() and waiting[2].done()
    assert limiter.in_flight == 4 and limiter.peak_in_flight == 4


async def test_fixed_concurrency_ignores_429s() -> None:
    limiter = AdaptiveLimiter(8, adaptive=False)
    for _ in range(50):
        limiter.release(await limiter.acquire(), rate_limited=True, retry_after=30.0)
    assert limiter.limit == 8 and limiter.decreases == 0 and not limiter.paused


@pytest.mark.e2e
async def test_client_backs_off_under_a_rate_limit_and_recovers() -> None:
    """In-flight requests fall below -c while the endpoint refuses, return to -c after."""
    concurrency = 32
    model = DemoModel(DemoModelConfig(port=0, rate_limit=40))
    runner, url = await start_server(model.config, model=model)
    client = OpenAIChatClient(
        model="demo",
        client=ClientConfig(base_url=url, retry_base_delay=0.01, max_retries=50),
        max_connections=concurrency,
    )
    limiter = client.limiter
    in_flight_seen: list[int] = []

    async def hammer(requests: int) -> None:
        pending = iter(range(requests))

        async def worker() -> None:
            for _ in pending:
                await client.complete([{"role": "user", "content": "hello"}])
                in_flight_seen.append(limiter.in_flight)

        await asyncio.gather(*(worker() for _ in range(concurrency)))

    try:
        await hammer(120)  # every request succeeds in the end, the excess after retries
        assert model.bucket is not None and model.bucket.refused > 0
        assert limiter.decreases > 0
        lowered = limiter.limit
        assert lowered < concurrency / 2
        assert min(in_flight_seen[-40:]) < concurrency / 2
        model.bucket = None  # the provider lifts the limit: no more 429s
        await hammer(3000)
        assert limiter.limit == concurrency
        assert max(in_flight_seen[-100:]) > lowered
    finally:
        await client.aclose()
        await runner.cleanup()
