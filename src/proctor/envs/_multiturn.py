"""The multi-turn driver: the model talks with a scripted user until the user stops."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from proctor.envs._environment import Environment
from proctor.envs._episode import COMPLETED, MAX_TURNS, Episode
from proctor.envs._task import Task
from proctor.models.types import ChatClient

UserReply = str | dict[str, Any] | None
ScriptedUser = Callable[[list[dict[str, Any]], Task], UserReply | Awaitable[UserReply]]
"""`user(messages, task)` returns the next user message (text or chat dict), or None to stop."""


class MultiTurnEnv(Environment):
    """Alternates model turns with a scripted user's replies.

    After each model turn, `user(messages, task)` (sync or async) sees the conversation so
    far and returns the next user message, or None to end the conversation (stop condition
    `completed`). After `max_turns` model turns the conversation is cut off (`max_turns`,
    `is_truncated`). Subclasses may override `next_user_message` instead of passing `user`.

    Args:
        user: The scripted user.
        max_turns: Most model turns in one conversation.
        **kwargs: `name`, `taskset`, `rubric`, `system_prompt`, `description` as for
            `Environment`.
    """

    def __init__(self, *, user: ScriptedUser | None = None, max_turns: int = 10, **kwargs: Any):
        super().__init__(**kwargs)
        if max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        self.user = user
        self.max_turns = max_turns
        self._user_is_async = user is not None and inspect.iscoroutinefunction(user)

    async def next_user_message(self, messages: list[dict[str, Any]], task: Task) -> UserReply:
        """The scripted user's next message, or None when the conversation is over."""
        if self.user is None:
            return None
        reply = self.user(messages, task)
        if self._user_is_async:
            reply = await reply  # type: ignore[misc]
        return reply  # type: ignore[return-value]

    async def converse(self, task: Task, client: ChatClient, episode: Episode) -> None:
        while True:
            await self.ask_model(client, episode)
            reply = await self.next_user_message(episode.messages, task)
            if reply is None:
                episode.stop_condition = COMPLETED
                episode.is_completed = True
                return
            if episode.num_turns >= self.max_turns:
                episode.stop_condition = MAX_TURNS
                episode.is_truncated = True
                return
            if isinstance(reply, str):
                reply = {"role": "user", "content": reply}
            episode.messages.append(reply)
