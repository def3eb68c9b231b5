"""proctor: evaluate LLMs locally or hosted, and land every sample on one platform.

The top-level names are the ones a user of the library reaches for first:

    import proctor

    env = proctor.load_environment("alphabet-sort")
    run = proctor.runs.init(name="demo", environments=[env.name], model="demo", config={})

Everything else lives in its subpackage (`proctor.envs`, `proctor.eval`, `proctor.models`,
`proctor.runs`). Only the exception tree is imported eagerly; the rest loads on first use,
so `import proctor` (and every `proctor` command) stays cheap.
"""

import importlib as _importlib

from proctor.errors import (
    APIError,
    AttachError,
    ConfigError,
    EnvironmentNotFound,
    HTTPConnectionError,
    HTTPStatusError,
    HTTPTimeoutError,
    JudgeError,
    ModelError,
    NothingToResume,
    PlatformError,
    PlatformUnreachable,
    ProctorError,
    RetryableAPIError,
    RunDirError,
    SandboxError,
    SandboxUnavailable,
    ToolCallError,
    WorkerError,
)

# typing.TYPE_CHECKING without importing typing, which would be most of `import proctor`'s cost
TYPE_CHECKING = False
if TYPE_CHECKING:
    from proctor import runs
    from proctor.envs import (
        Environment,
        Episode,
        MultiTurnEnv,
        ScriptedUser,
        SingleTurnEnv,
        Task,
        Taskset,
        Tool,
        ToolEnv,
        list_environments,
        load_environment,
        metric,
        reward,
    )

    __version__: str
del TYPE_CHECKING

# name -> module it is re-exported from (imported on first access)
_LAZY = {
    "Environment": "proctor.envs",
    "Episode": "proctor.envs",
    "MultiTurnEnv": "proctor.envs",
    "ScriptedUser": "proctor.envs",
    "SingleTurnEnv": "proctor.envs",
    "Task": "proctor.envs",
    "Taskset": "proctor.envs",
    "Tool": "proctor.envs",
    "ToolEnv": "proctor.envs",
    "list_environments": "proctor.envs",
    "load_environment": "proctor.envs",
    "metric": "proctor.envs",
    "reward": "proctor.envs",
}

__all__ = [
    "APIError",
    "AttachError",
    "ConfigError",
    "Environment",
    "EnvironmentNotFound",
    "Episode",
    "HTTPConnectionError",
    "HTTPStatusError",
    "HTTPTimeoutError",
    "JudgeError",
    "ModelError",
    "MultiTurnEnv",
    "NothingToResume",
    "PlatformError",
    "PlatformUnreachable",
    "ProctorError",
    "RetryableAPIError",
    "RunDirError",
    "SandboxError",
    "SandboxUnavailable",
    "ScriptedUser",
    "SingleTurnEnv",
    "Task",
    "Taskset",
    "Tool",
    "ToolCallError",
    "ToolEnv",
    "WorkerError",
    "__version__",
    "list_environments",
    "load_environment",
    "metric",
    "reward",
    "runs",
]


def _read_version() -> str:
    # importlib.metadata costs ~50 ms to import, so it is only paid when someone asks.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("proctor")
    except PackageNotFoundError:  # running from a source tree without an install
        return "0.0.0"


def __getattr__(name: str) -> object:
    if name == "__version__":
        value: object = _read_version()
    elif name == "runs":
        value = _importlib.import_module("proctor.runs")
    elif name in _LAZY:
        value = getattr(_importlib.import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module 'proctor' has no attribute {name!r}")
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
