"""A thin OpenAI chat client for environment tests (the scripted one is `proctor.testing`'s)."""

from __future__ import annotations

from typing import Any

from openai import AsyncOpenAI

from proctor.errors import ModelError
from proctor.models.types import Completion, TokenUsage


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
