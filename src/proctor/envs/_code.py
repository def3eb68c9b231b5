"""The code driver: the model writes Python, a sandbox runs it, the model sees the output.

Each reply's last fenced Python block runs in a fresh `Sandbox`; the output goes back to the
model as the next user message, until a reply holds no code (stop condition `completed`) or
`max_code_turns` blocks have run (`max_turns`, truncated). Every execution is recorded in the
episode's trajectory, so reward functions read results from there instead of running the code
again.
"""

from __future__ import annotations

from typing import Any

from proctor.envs._environment import Environment
from proctor.envs._episode import COMPLETED, MAX_TURNS, Episode
from proctor.envs._sandbox import ExecutionResult, Sandbox
from proctor.envs._scoring import extract_code
from proctor.envs._task import Task
from proctor.models.types import ChatClient


def feedback(result: ExecutionResult) -> str:
    """The user message telling the model what its code did."""
    if result.timed_out:
        status = "timed out (killed)"
    elif result.output_truncated:
        status = "wrote too much output (killed)"
    else:
        status = f"exit code {result.exit_code}"
    parts = [f"Your code ran: {status}."]
    if result.stdout:
        parts.append(f"stdout:\n```\n{result.stdout}\n```")
    if result.stderr:
        parts.append(f"stderr:\n```\n{result.stderr}\n```")
    return "\n\n".join(parts)


def executions(episode: Episode) -> list[dict[str, Any]]:
    """The sandbox executions recorded on an episode, in order."""
    return [event for event in episode.trajectory if event.get("type") == "sandbox"]


class CodeEnv(Environment):
    """The model's Python runs in a sandbox; its output is the next user message.

    Args:
        sandbox: Where code runs (default: `Sandbox()` with the default limits). Its
            availability is checked when the environment is built, so a machine without
            bubblewrap refuses the run before it starts.
        max_code_turns: Most code blocks run in one conversation.
        **kwargs: `name`, `taskset`, `rubric`, `system_prompt`, `description` as for
            `Environment`.

    Raises:
        SandboxUnavailable: code cannot be sandboxed here.
    """

    def __init__(
        self, *, sandbox: Sandbox | None = None, max_code_turns: int = 4, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        if max_code_turns < 1:
            raise ValueError("max_code_turns must be at least 1")
        self.sandbox = sandbox or Sandbox()
        self.sandbox.check()
        self.max_code_turns = max_code_turns

    async def converse(self, task: Task, client: ChatClient, episode: Episode) -> None:
        runs = 0
        while True:
            message = await self.ask_model(client, episode)
            code = extract_code(message.get("content") or "")
            if code is None:
                episode.stop_condition = COMPLETED
                episode.is_completed = True
                return
            if runs >= self.max_code_turns:
                episode.stop_condition = MAX_TURNS
                episode.is_truncated = True
                return
            runs += 1
            result = await self.sandbox.run_python(code)
            episode.trajectory.append({**result.to_record(), "turn": episode.num_turns})
            episode.messages.append({"role": "user", "content": feedback(result)})
