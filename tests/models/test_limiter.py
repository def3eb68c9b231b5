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


async def test_limit_falls_once_per_round_and_climbs_back() -> None:
    limiter = AdaptiveLimiter(16)
    rounds = [await limiter.acquire() for _ in range(16)]
    assert limiter.in_flight == 16 and limiter.limit == 16
    # Every request of the round is refused: one decrease, not sixteen.
    for r in rounds:
        limiter.release(r, rate_limited=True)
    assert limiter.decreases == 1 and limiter.limit < 16
    # Sustained 429s on requests sent under the new limit keep lowering it, down to one.
    for _ in range(200):
        limiter.release(await limiter.acquire(), rate_limited=True)
    assert limiter.limit == 1
    # Successes raise it again, to the ceiling and no further.
    for _ in range(2000):
        limiter.release(await limiter.acquire())
    assert limiter.limit == 16


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
        limiter.release(await limiter.acquire(), rate_limited=True)
    assert limiter.limit == 8 and limiter.decreases == 0


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
