"""Test doubles for users' own tests: a scripted chat client that stands in for a model.

    from proctor.testing import ScriptedClient

    client = ScriptedClient(["Amy, Bob, Zed"])          # one reply per model call
    episode = await env.rollout(task, client)           # or run_eval(config, client=client)
    assert client.requests[0][0][-1]["role"] == "user"  # what the model was sent

A reply is a string (the assistant's text), a whole assistant message dict (e.g. with
`tool_calls`), or an exception to raise (a `proctor.errors.ModelError` fails the rollout as
a real endpoint would). Instead of a list, pass a function of `(messages, tools)`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from proctor.models.types import Completion, TokenUsage

Reply = dict[str, Any] | str | Exception
"""What the scripted model answers to one call."""
Script = Callable[[list[dict[str, Any]], list[dict[str, Any]] | None], Reply]
"""A reply computed from the conversation and the tools offered."""

__all__ = ["HangingClient", "Reply", "Script", "ScriptedClient"]


class ScriptedClient:
    """Answers from a list of replies (or a function of the conversation); records requests.

    Args:
        replies: the replies in call order, or a function returning each one.
        finish_reason: the `finish_reason` every completion reports.
    """

    def __init__(self, replies: list[Reply] | Script, *, finish_reason: str = "stop") -> None:
        self.replies = replies
        self.finish_reason = finish_reason
        self.requests: list[tuple[list[dict[str, Any]], list[dict[str, Any]] | None]] = []
        """Each call's `(messages, tools)`, in order."""

    async def complete(
        self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None
    ) -> Completion:
        """The next scripted reply as a completion (10 prompt and 5 completion tokens)."""
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
    """Never answers: for tests of cancellation and timeouts."""

    async def complete(
        self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None
    ) -> Completion:
        """Wait (until cancelled)."""
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")
