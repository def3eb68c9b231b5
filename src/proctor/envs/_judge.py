"""A judge model as a reward: ask another model to grade the reply, parse its verdict.

`judge_reward(template)` builds a reward function that fills `template` with the task's
question, reference answer and the model's reply, sends it to the run's judge model and
parses a score from the judge's reply (by default `GRADE: C|P|I` -> 1.0 / 0.5 / 0.0). The
judge is any OpenAI-compatible endpoint: `proctor eval` builds it from `--judge.*` (by default
the evaluated model's own endpoint) and hands it to every scoring function that names a
`judge` argument. Each call is recorded in the episode's trajectory (`type: "judge"`: the
prompt, the raw reply, the score and the latency). A judge that fails (an HTTP error after
its retries, or a reply without a score) makes the episode errored at stage `scoring`.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from proctor.envs._scoring import ScoreFunction, as_score_function
from proctor.errors import JudgeError, ModelError
from proctor.models.types import ChatClient

JUDGE_TEMPLATE = """You are grading a response to a question against a reference answer.

[Question]
{question}

[Reference answer]
{answer}

[Response]
{response}

Does the response give the reference answer? Ignore style; judge only correctness. Reply \
with one sentence of reasoning, then a last line that is exactly one of: GRADE: C (correct), \
GRADE: P (partially correct), GRADE: I (incorrect)."""
"""The default judge prompt; fields: `{question}`, `{answer}`, `{response}`, `{info[...]}`."""

GRADES = {"C": 1.0, "P": 0.5, "I": 0.0}
_GRADE = re.compile(r"GRADE\s*:\s*\**\s*([CPI])\b", re.IGNORECASE)


def parse_grade(reply: str) -> float:
    """The last `GRADE: C|P|I` of a judge's reply as 1.0 / 0.5 / 0.0.

    Raises:
        ValueError: the reply holds no grade.
    """
    found = _GRADE.findall(reply)
    if not found:
        raise ValueError("no 'GRADE: C|P|I' line")
    return GRADES[found[-1].upper()]


@dataclass(frozen=True, slots=True)
class JudgeReply:
    """What the judge said."""

    text: str
    latency_s: float


class Judge:
    """A judge model: a chat client and a bound on the calls in flight.

    Args:
        client: The endpoint (any `ChatClient`; it retries transient failures itself).
        model: The judge's model name, recorded with each judgement.
        max_concurrent: Judge calls in flight at once, across all episodes.
    """

    DEFAULT_TEMPLATE = JUDGE_TEMPLATE
    """The default judge prompt (what `judge_reward()` asks)."""

    def __init__(self, client: ChatClient, *, model: str = "", max_concurrent: int = 32) -> None:
        if max_concurrent < 1:
            raise ValueError("max_concurrent must be at least 1")
        self.client = client
        self.model = model
        self.max_concurrent = max_concurrent
        self._slots: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None

    async def ask(self, prompt: str) -> JudgeReply:
        """Send one user message to the judge and return its reply.

        Raises:
            ModelError: the request failed for good.
        """
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots[0] is not loop:
            self._slots = (loop, asyncio.Semaphore(self.max_concurrent))
        async with self._slots[1]:
            started = time.perf_counter()
            completion = await self.client.complete([{"role": "user", "content": prompt}])
        content = completion.message.get("content")
        return JudgeReply(
            text=content if isinstance(content, str) else "",
            latency_s=(completion.latency_s or time.perf_counter() - started),
        )

    async def aclose(self) -> None:
        """Close the client's connections, when it has any to close."""
        close = getattr(self.client, "aclose", None)
        if close is not None:
            await close()


def _question(prompt: list[dict[str, Any]]) -> str:
    """The text of the last user message the rollout started from."""
    for message in reversed(prompt):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return "".join(p.get("text", "") for p in content if isinstance(p, dict))
            return content or ""
    return ""


def judge_reward(
    template: str = JUDGE_TEMPLATE,
    *,
    parse: Callable[[str], float] = parse_grade,
    name: str = "judge",
    weight: float = 1.0,
    judge: Judge | None = None,
) -> ScoreFunction:
    """A reward function graded by a judge model.

    Args:
        template: The judge's prompt, a `str.format` template with `{question}` (the task's
            last user message), `{answer}` (its reference answer), `{response}` (the
            model's last reply) and `{info[key]}` fields; double literal braces.
        parse: Turns the judge's reply into a score; raising means "no score in it".
        name: The reward's name (as recorded on the episode).
        weight: Its weight in the episode's reward.
        judge: A fixed judge; by default the run's (`--judge.*`).
    """
    fixed = judge

    async def score(
        prompt: list[dict[str, Any]],
        response: str,
        answer: Any,
        info: dict[str, Any],
        episode: Any,
        judge: Judge | None = None,
    ) -> float:
        the_judge = fixed or judge
        if the_judge is None:
            raise JudgeError(
                f"reward {name} needs a judge model and none is configured; run it with "
                "proctor eval (--judge.model, --judge.base-url) or set the environment's judge"
            )
        text = template.format(
            question=_question(prompt),
            answer="" if answer is None else answer,
            response=response,
            info=info,
        )
        event: dict[str, Any] = {"type": "judge", "name": name, "model": the_judge.model}
        event["prompt"] = text
        episode.trajectory.append(event)
        started = time.perf_counter()
        try:
            reply = await the_judge.ask(text)
        except ModelError as e:
            event.update(reply=None, score=None, latency_s=time.perf_counter() - started)
            event["error"] = str(e)
            raise JudgeError(f"the judge model failed: {e}") from e
        event.update(reply=reply.text, latency_s=reply.latency_s)
        try:
            value = float(parse(reply.text))
        except Exception as e:
            event["score"] = None
            raise JudgeError(f"the judge's reply holds no score ({e}): {reply.text[:200]!r}") from e
        event["score"] = value
        return value

    score.__name__ = name
    return as_score_function(score, kind="reward", weight=weight, name=name)
