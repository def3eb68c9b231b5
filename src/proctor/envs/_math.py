"""Math answers compared as mathematics, with Hugging Face's math-verify.

`verify_math(response, answer)` extracts the final answer from a reply (a `\\boxed{}` first,
else the last LaTeX or plain expression) and compares it with the reference answer the way a
grader would: `\\frac{1}{2}`, `0.5` and `2/4` are equal, `\\sqrt{72}` equals `6\\sqrt{2}`,
`{2, 3}` equals `x = 3 or x = 2`, `35 \\text{ cm}^2` equals `35`. The `math_answer` reward
runs it in a worker thread under a timeout: sympy is pure Python and can take very long on a
pathological expression, and the event loop must keep serving the other rollouts.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import Any

from proctor.envs._scoring import reward

TIMEOUT_S = 10.0
"""Longest one comparison may take before the score is an error rather than a guess."""

WORKERS = 2
"""Comparisons at once (sympy holds the GIL: more threads would not make them faster)."""

_executor: ThreadPoolExecutor | None = None
_slots: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None


@lru_cache(maxsize=1)
def _math_verify() -> Any:
    """math-verify, imported on first use (about a second: sympy and its LaTeX grammar)."""
    import math_verify

    # Its own timeouts use SIGALRM, which only works on the main thread; ours is the
    # asyncio timeout around the worker thread, so its "timeout disabled" warning is noise.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    return math_verify


@lru_cache(maxsize=1)
def _warmed_up() -> bool:
    """Import math-verify and have it read and compare once: its first use loads sympy and
    builds its grammars (seconds on a busy machine), which no comparison's timeout counts."""
    verify_math("$1$", "1")
    return True


@lru_cache(maxsize=4096)
def _parse_reference(answer: str) -> Any:
    mv = _math_verify()
    text = answer if "$" in answer or "\\(" in answer else f"${answer}$"
    parsed = mv.parse(text, parsing_timeout=None)
    # A parse that found no expression gives back only the text it matched.
    if not any(not isinstance(p, str) for p in parsed):
        raise ValueError(f"the reference answer {answer!r} could not be read as mathematics")
    return parsed


def verify_math(response: str, answer: str) -> bool:
    """True when the final answer in `response` equals `answer` mathematically (blocking).

    Raises:
        ValueError: `answer` cannot be read as mathematics (a broken reference).
    """
    mv = _math_verify()
    gold = _parse_reference(str(answer))
    predicted = mv.parse(response, parsing_timeout=None)
    if not predicted:
        return False
    return bool(mv.verify(gold, predicted, timeout_seconds=None))


async def verify_math_async(response: str, answer: str, *, timeout_s: float = TIMEOUT_S) -> bool:
    """`verify_math` in a worker thread, bounded by `timeout_s` of its own running time
    (math-verify's first use, loading sympy, is not counted).

    Raises:
        TimeoutError: the comparison took longer (the thread is abandoned, not killed).
        ValueError: `answer` cannot be read as mathematics.
    """
    global _executor, _slots
    loop = asyncio.get_running_loop()
    if _slots is None or _slots[0] is not loop:
        _slots = (loop, asyncio.Semaphore(WORKERS))
    # Queue here, not in the pool: the timeout must count the comparison, not the wait.
    async with _slots[1]:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="math-verify")
        executor = _executor
        await loop.run_in_executor(executor, _warmed_up)  # (once; outside the timeout)
        job = loop.run_in_executor(executor, verify_math, response, str(answer))
        try:
            return await asyncio.wait_for(job, timeout_s)
        except TimeoutError:
            # The stuck thread cannot be stopped; later comparisons get a fresh pool.
            if _executor is executor:
                _executor = None
                executor.shutdown(wait=False)
            raise TimeoutError(f"comparing the answer took more than {timeout_s:g}s") from None


@reward(name="math_answer")
async def math_answer(response: str, answer: str) -> float:
    """1.0 when the reply's final answer equals the reference mathematically, else 0.0."""
    return 1.0 if await verify_math_async(response, answer) else 0.0
