"""The run's judge model: built from `--judge.*` for an environment whose rubric asks for one."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from proctor.envs import Environment, Judge
    from proctor.eval.config import EvalConfig


def open_judge(env: Environment, config: EvalConfig) -> Judge | None:
    """Give `env` the `--judge.*` model when its rubric asks for one; returns it (to close).

    The judge defaults to the evaluated model's endpoint and name. Each worker process
    (`-w`) opens its own, so `--judge.max-concurrent` bounds each process.
    """
    from proctor.envs import Judge
    from proctor.models.openai_client import OpenAIChatClient

    judge = config.judge
    if not env.wants_judge or env.judge is not None:
        return None
    model = judge.model or config.model
    client = OpenAIChatClient(
        model=model,
        client=judge.client_config(config.client),
        sampling=judge.sampling(),
        max_connections=judge.max_concurrent,
    )
    env.judge = Judge(client, model=model, max_concurrent=judge.max_concurrent)
    return env.judge
