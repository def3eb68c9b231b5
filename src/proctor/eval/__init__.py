"""The evaluation engine: config, scheduler, run directory, resume, progress view.

from proctor.eval import EvalConfig, run_eval

result = run_eval(EvalConfig(env="arithmetic", num_examples=10, push=False))
print(result.status, result.stats.mean_reward, result.run_dir)
"""

from proctor.eval.args import parse_eval_args
from proctor.eval.config import EvalConfig, RunConfig
from proctor.eval.progress import LogProgress, ProgressView, RichProgress
from proctor.eval.runner import EvalResult, run_eval
from proctor.eval.stats import RunStats

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
