"""`proctor eval ENV [flags] [@ file.toml]`: parse, then hand over to `proctor.eval.run_eval`."""

from __future__ import annotations

import logging
import sys

from proctor.cli import _terminal as terminal
from proctor.cli._logging import log_formatter
from proctor.eval.args import build_parser, parse_eval_args
from proctor.eval.config import EvalConfig
from proctor.eval.progress import LogProgress, ProgressView, RichProgress
from proctor.eval.runner import EvalResult, run_eval
from proctor.stats import headline
from proctor.toml_io import dump_toml


def run(argv: list[str]) -> int:
    """Run `proctor eval`; returns the exit code (0 done, 1 failed, 2 usage, 75 done but not
    all on the platform yet, 130 interrupted)."""
    if any(arg in ("-h", "--help") for arg in argv):
        build_parser().print_help()
        return 0
    config = parse_eval_args(argv)
    if config.dry_run:
        print(dump_toml(config.resolved().saved_form()), end="")
        return 0
    view, handler = _configure_output(config)
    try:
        result = run_eval(config, view=view)
    finally:
        logging.getLogger("proctor").removeHandler(handler)
    print(format_summary(result))
    if result.sync_command is not None:
        print(
            "proctor eval: the platform does not hold every sample of this run yet (see the "
            "warning above); nothing is lost: upload the rest, with the right "
            f"PROCTOR_API_KEY, by: {result.sync_command}",
            file=sys.stderr,
        )
    if config.shard is not None and result.status == "completed" and result.sync_command is None:
        print(
            f"proctor eval: shard {config.shard} done ({result.stats.done} episodes); the "
            f"evaluation stays open until `proctor evals finalize {result.run_id}` closes it",
            file=sys.stderr,
        )
    if result.status == "failed":
        print(f"proctor eval: the run failed: {result.error}", file=sys.stderr)
    elif result.status == "cancelled":
        print(
            f"proctor eval: interrupted; finished episodes kept in {result.run_dir.absolute()}",
            file=sys.stderr,
        )
    return result.exit_code


def _configure_output(config: EvalConfig) -> tuple[ProgressView, logging.Handler]:
    """Pick the view and route proctor's log records to stderr (the handler is returned)."""
    root = logging.getLogger("proctor")
    root.setLevel(logging.DEBUG if config.verbose else logging.INFO)
    live = config.rich and sys.stderr.isatty()
    if live:
        from rich.highlighter import NullHighlighter
        from rich.logging import RichHandler

        view = RichProgress(terminal.raw(sys.stderr))  # draws with escape sequences
        # Printed above the live view, as plain lines of the one format (no rich columns).
        handler: logging.Handler = RichHandler(
            console=view.console,
            show_time=False,
            show_level=False,
            show_path=False,
            highlighter=NullHighlighter(),
        )
        handler.setFormatter(log_formatter())
        # The live view shows progress; the terminal only gets what needs attention.
        handler.setLevel(logging.DEBUG if config.verbose else logging.WARNING)
        root.addHandler(handler)
        return view, handler
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(log_formatter())
    handler.setLevel(logging.DEBUG if config.verbose else logging.INFO)
    root.addHandler(handler)
    return LogProgress(), handler


def format_summary(result: EvalResult) -> str:
    """The closing lines: rewards, error rate, tokens, wall time, where the run lives."""
    s = result.stats
    lines = [
        f"run {result.run_name} {result.status}: {s.done}/{s.total} episodes, "
        f"mean reward {headline(s.estimate())}, error rate {s.error_rate:.1%} ({s.errors}), "
        f"tokens {s.prompt_tokens} prompt + {s.completion_tokens} completion, "
        f"wall {s.elapsed_s:.1f}s",
    ]
    for name, mean in sorted(s.reward_means().items()):
        lines.append(f"  {name}: {mean:.4f}")
    # Absolute: a hosted run's relative path would point into the sandbox's work folder.
    lines.append(f"  results: {result.run_dir.absolute()}")
    if result.url:
        lines.append(f"  evaluation: {result.url}")
    return "\n".join(lines)
