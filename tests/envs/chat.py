"""Chat clients for environment tests: a scripted in-test one and a thin OpenAI adapter."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from openai import AsyncOpenAI

from proctor.errors import ModelError
from proctor.models.types import Completion, TokenUsage

Reply = dict[str, Any] | str | Exception
Script = Callable[[list[dict[str, Any]], list[dict[str, Any]] | None], Reply]


class ScriptedClient:
    """Answers from a list of replies (or a function of the conversation); records requests."""

    def __init__(self, replies: list[Reply] | Script, *, finish_reason: str = "stop") -> None:
        self.replies = replies
        self.finish_reason = finish_reason
        self.requests: list[tuple[list[dict[str, Any]], list[dict[str, Any]] | None]] = []

    async def complete(
        self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None
    ) -> Completion:
        self.requests.append((list(messages), tools))
        if callable(self.replies):
            reply = self.replies(messages, tools)
        else:
            reply = self.replies[len(self.requests) - 1]
        if isinstance(reply, Exception):
            raise reply
        message = {"role": "assistant", "content": reply} if isinstance(reply, str) else reply
        return Completion(
            message=message,
            usage=TokenUsage(prompt_tokens=10, completion_tokens=5),
            finish_reason=self.finish_reason,
            latency_s=0.01,
        )


class HangingClient:
    """Never answers: for cancellation tests."""

    async def complete(
        self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None
    ) -> Completion:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")


class OpenAIAdapter:
    """The minimal `ChatClient` over `openai.AsyncOpenAI` (no retries: errors surface)."""

    def __init__(
        self, base_url: str, *, model: str = "demo", temperature: float | None = None
    ) -> None:
        self.model = model
        self.temperature = temperature
        self._client = AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)

    async def complete(
        self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None
    ) -> Completion:
        extra: dict[str, Any] = {"tools": tools} if tools else {}
        if self.temperature is not None:
            extra["temperature"] = self.temperature
        try:
            response = await self._client.chat.completions.create(
                model=self.model, messages=messages, **extra
            )
        except Exception as e:
            raise ModelError(str(e), status_code=getattr(e, "status_code", None)) from e
        choice = response.choices[0]
        usage = response.usage
        return Completion(
            message=choice.message.model_dump(exclude_none=True),
            usage=TokenUsage(usage.prompt_tokens, usage.completion_tokens)
            if usage
            else TokenUsage(),
            finish_reason=choice.finish_reason,
        )

    async def close(self) -> None:
        await self._client.close()
