"""Environments: tasks, conversation drivers, reward functions and metrics.

    env = load_environment("alphabet-sort")
    tasks = env.taskset.select(10)
    episode = await env.rollout(tasks[0], client, episode_id="ep-1", rollout_number=1)

Build your own from the same parts the built-ins use (see `proctor.envs.builtin`): a
`Taskset` of `Task`s, a driver (`SingleTurnEnv`, `MultiTurnEnv`, `ToolEnv`, `CodeEnv`) and a
rubric of `@reward` / `@metric` functions; publish it under the `proctor.environments` entry
point. `Sandbox` runs model-written code isolated (bubblewrap).
"""

from proctor.envs._code import CodeEnv
from proctor.envs._environment import Environment, EnvironmentInfo, SingleTurnEnv
from proctor.envs._episode import Episode
from proctor.envs._judge import Judge, JudgeReply, judge_reward, parse_grade
from proctor.envs._math import math_answer, verify_math
from proctor.envs._multiturn import MultiTurnEnv, ScriptedUser
from proctor.envs._registry import list_environments, load_environment
from proctor.envs._sandbox import ExecutionResult, Sandbox, SandboxLimits
from proctor.envs._scoring import (
    ScoreFunction,
    extract_code,
    extract_tag,
    last_response,
    metric,
    reward,
)
from proctor.envs._task import Task, Taskset
from proctor.envs._tools import Tool, ToolCallError, ToolEnv

__all__ = [
    "CodeEnv",
    "Environment",
    "EnvironmentInfo",
    "Episode",
    "ExecutionResult",
    "Judge",
    "JudgeReply",
    "MultiTurnEnv",
    "Sandbox",
    "SandboxLimits",
    "ScoreFunction",
    "ScriptedUser",
    "SingleTurnEnv",
    "Task",
    "Taskset",
    "Tool",
    "ToolCallError",
    "ToolEnv",
    "extract_code",
    "extract_tag",
    "judge_reward",
    "last_response",
    "list_environments",
    "load_environment",
    "math_answer",
    "metric",
    "parse_grade",
    "reward",
    "verify_math",
]
