"""The contract between environments and model clients.

Environments drive conversations through a `ChatClient`; the engine provides the
OpenAI-compatible implementation. Messages and tools are plain OpenAI chat dicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(slots=True)
class TokenUsage:
    """Tokens one or more requests consumed."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, other: TokenUsage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens

    def to_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }


@dataclass(slots=True)
class Completion:
    """One assistant turn returned by the model."""

    message: dict[str, Any]
    """The assistant message as an OpenAI chat dict (`role`, `content`, maybe `tool_calls`)."""
    usage: TokenUsage = field(default_factory=TokenUsage)
    finish_reason: str | None = None
    latency_s: float = 0.0
    """Wall time of the request, retries included."""


class ChatClient(Protocol):
    """What an environment needs from a model: one chat completion per call.

    Implementations retry transient failures themselves and raise
    `proctor.errors.ModelError` once a request has failed for good.
    """

    async def complete(
        self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None
    ) -> Completion: ...
