"""Model clients: the `ChatClient` contract and its OpenAI-compatible implementation.

Environments import only the contract (`proctor.models.types`), so the client and its
settings load lazily: `proctor envs list` should not pay for pydantic, tenacity or openai.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from proctor.models.types import ChatClient, Completion, TokenUsage

if TYPE_CHECKING:
    from proctor.models.config import ClientConfig, SamplingConfig
    from proctor.models.openai_client import OpenAIChatClient

_LAZY = {
    "ClientConfig": "proctor.models.config",
    "SamplingConfig": "proctor.models.config",
    "OpenAIChatClient": "proctor.models.openai_client",
}

__all__ = [
    "ChatClient",
    "ClientConfig",
    "Completion",
    "OpenAIChatClient",
    "SamplingConfig",
    "TokenUsage",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'proctor.models' has no attribute {name!r}")
