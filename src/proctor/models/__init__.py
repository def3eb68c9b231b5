"""Model clients: the `ChatClient` contract and its OpenAI-compatible implementation."""

from proctor.models.types import ChatClient, Completion, TokenUsage

__all__ = ["ChatClient", "Completion", "TokenUsage"]
