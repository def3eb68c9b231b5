"""The evaluation engine: config, scheduler, run directory, resume, progress view.

from proctor.eval import EvalConfig, run_eval

result = run_eval(EvalConfig(env="arithmetic", num_examples=10, push=False))
print(result.status, result.stats.mean_reward, result.run_dir)

The names load on first use: the launcher reads `proctor.eval.config` (what a sandbox's
command line says) without loading the engine, as the import contracts in pyproject.toml
require.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from proctor.eval.args import parse_eval_args
    from proctor.eval.config import EvalConfig, RunConfig
    from proctor.eval.progress import LogProgress, ProgressView, RichProgress
    from proctor.eval.runner import EvalResult, run_eval
    from proctor.eval.stats import RunStats

_LAZY = {
    "EvalConfig": "proctor.eval.config",
    "EvalResult": "proctor.eval.runner",
    "LogProgress": "proctor.eval.progress",
    "ProgressView": "proctor.eval.progress",
    "RichProgress": "proctor.eval.progress",
    "RunConfig": "proctor.eval.config",
    "RunStats": "proctor.eval.stats",
    "parse_eval_args": "proctor.eval.args",
    "run_eval": "proctor.eval.runner",
}

__all__ = [
    "EvalConfig",
    "EvalResult",
    "LogProgress",
    "ProgressView",
    "RichProgress",
    "RunConfig",
    "RunStats",
    "parse_eval_args",
    "run_eval",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'proctor.eval' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
