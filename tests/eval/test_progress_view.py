"""The live rich view on a terminal, plain log lines elsewhere."""

from __future__ import annotations

from pathlib import Path

from tests.eval.helpers import cli_env, run_eval
from tests.support.procs import PROCTOR
from tests.support.terminal import run_on_a_terminal


def test_rich_view_on_a_terminal(demo_model: str, tmp_path: Path) -> None:
    env = {**cli_env(), "COLUMNS": "160", "TERM": "xterm"}
    env.pop("NO_COLOR")
    run = run_on_a_terminal(
        [*PROCTOR, "eval", "arithmetic", "-n", "20", "--no-push", "-o", "out",
         "--client.base-url", demo_model],
        cwd=tmp_path, env=env, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0
    screen = run.screen.decode(errors="replace")
    assert "20/20" in screen and "rollouts/s" in screen and "reward" in screen
    assert "errors 0" in screen
    assert "INFO" not in screen  # routine log lines stay out of the live view
    assert b"completed: 20/20 episodes" in run.stdout


def test_plain_lines_off_a_terminal(demo_model: str, tmp_path: Path) -> None:
    result = run_eval(
        "arithmetic", "-n", "5", "--no-push", "-o", "out", "--client.base-url", demo_model,
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0
    assert "\x1b[" not in result.stderr
    assert "5/5 episodes" in result.stderr and "rollouts/s" in result.stderr
