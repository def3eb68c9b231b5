"""What a new user's first mistakes with `proctor eval` get: one line naming the fix.

A base URL without `/v1` or without a scheme, a run where every episode errored, a run
directory chosen by `--run.dir`, a mistyped TOML key; and the lines a run prints (one log
format on a terminal or not, an absolute results path).
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.eval.helpers import cli_env, read_traces, run_eval
from tests.eval.test_bad_input import assert_one_clean_line
from tests.support.procs import PROCTOR
from tests.support.terminal import run_on_a_terminal

LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR) proctor")


def test_a_base_url_without_v1_asks_did_you_mean(demo_model: str, tmp_path: Path) -> None:
    base = demo_model.removesuffix("/v1")
    result = run_eval(
        "reverse-text", "-n", "3", "--client.base-url", base, "-o", "out", cwd=tmp_path
    )
    assert result.returncode == 2
    assert assert_one_clean_line(result.stderr) == (
        f"proctor eval: the endpoint at {base} does not speak the OpenAI API "
        f"(GET /models answered HTTP 404); did you mean {demo_model}? "
        f"pass --client.base-url {demo_model}"
    )
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_a_url_that_is_no_api_is_refused(demo_model: str, tmp_path: Path) -> None:
    wrong = demo_model + "/chat"
    result = run_eval(
        "reverse-text", "-n", "3", "--client.base-url", wrong, "-o", "out", cwd=tmp_path
    )
    assert result.returncode == 2
    line = assert_one_clean_line(result.stderr)
    assert line.startswith(f"proctor eval: the endpoint at {wrong} does not speak the OpenAI API")
    assert "pass --client.base-url with its OpenAI-compatible base URL" in line
    assert not (tmp_path / "out").exists()


def test_a_url_without_a_scheme_names_the_fix(demo_model: str, tmp_path: Path) -> None:
    bare = demo_model.removeprefix("http://")
    result = run_eval(
        "reverse-text", "-n", "3", "--client.base-url", bare, "-o", "out", cwd=tmp_path
    )
    assert result.returncode == 2
    assert assert_one_clean_line(result.stderr) == (
        f"proctor eval: --client.base-url must start with http:// or https:// (got {bare!r}); "
        f"pass e.g. {demo_model}"
    )
    from_env = run_eval(
        "reverse-text", "-n", "3", "-o", "out", cwd=tmp_path, env={"PROCTOR_MODEL_BASE_URL": bare}
    )
    assert from_env.returncode == 2
    assert "PROCTOR_MODEL_BASE_URL must start with http://" in assert_one_clean_line(
        from_env.stderr
    )
    assert not (tmp_path / "out").exists()


def test_a_run_where_every_episode_errored_fails(broken_model: str, tmp_path: Path) -> None:
    result = run_eval(
        "reverse-text", "-n", "3", "--no-push", "-o", "out", "--run.name", "r",
        "--client.base-url", broken_model, "--client.max-retries", "0", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 1
    assert "run r failed: 3/3 episodes" in result.stdout
    line = assert_one_clean_line(
        "\n".join(x for x in result.stderr.splitlines() if x.startswith("proctor eval:"))
    )
    assert line.startswith(
        "proctor eval: the run failed: every episode failed; the first: "
        "model request failed with HTTP "
    )
    assert "Traceback" not in result.stderr
    assert len(read_traces(tmp_path / "out" / "r")) == 3  # the errored episodes are kept


def test_existing_results_hint_names_the_setting_that_chose_the_directory(
    demo_model: str, tmp_path: Path
) -> None:
    by_dir = ("reverse-text", "-n", "2", "--no-push", "-o", "out", "--run.dir", "d")
    first = run_eval(*by_dir, "--client.base-url", demo_model, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    # The results path printed is one the user can open from anywhere.
    assert f"  results: {tmp_path / 'out' / 'd'}\n" in first.stdout
    before = (tmp_path / "out" / "d" / "traces.jsonl").read_bytes()
    again = run_eval(*by_dir, "--run.name", "other", "--client.base-url", demo_model, cwd=tmp_path)
    assert again.returncode == 2
    assert assert_one_clean_line(again.stderr).endswith(
        "already holds results; pass --resume to continue that run, --clean to start it over, "
        "or choose another --run.dir"
    )
    assert (tmp_path / "out" / "d" / "traces.jsonl").read_bytes() == before

    by_name = ("reverse-text", "-n", "2", "--no-push", "-o", "out", "--run.name", "n")
    assert run_eval(*by_name, "--client.base-url", demo_model, cwd=tmp_path).returncode == 0
    again = run_eval(*by_name, "--client.base-url", demo_model, cwd=tmp_path)
    assert assert_one_clean_line(again.stderr).endswith("or choose another --run.name")


def test_a_mistyped_toml_key_gets_did_you_mean(tmp_path: Path) -> None:
    (tmp_path / "eval.toml").write_text('env = "reverse-text"\n[client]\nbase_ur = "x"\n')
    result = run_eval("@", "eval.toml", cwd=tmp_path)
    assert result.returncode == 2
    assert assert_one_clean_line(result.stderr) == (
        "proctor eval: unknown setting client.base_ur; did you mean client.base_url?"
    )
    flag = run_eval("reverse-text", "--num-exampels", "3", cwd=tmp_path)
    assert flag.returncode == 2
    assert "did you mean --num-examples?" in assert_one_clean_line(flag.stderr)


def test_log_lines_keep_one_format_on_a_terminal_or_not(demo_model: str, tmp_path: Path) -> None:
    # `-n` past the taskset's size warns: a log line both views print.
    args = ["reverse-text", "-n", "1001", "-c", "64", "--no-push", "-o", "out",
            "--client.base-url", demo_model]  # fmt: skip
    plain = run_eval(*args, "--run.name", "plain", cwd=tmp_path, timeout=180)
    assert plain.returncode == 0, plain.stderr
    warning = next(line for line in plain.stderr.splitlines() if "has only 1000 tasks" in line)
    assert LOG_LINE.match(warning) and " WARNING proctor.eval.runner: " in warning

    env = {**cli_env(), "COLUMNS": "250", "TERM": "xterm"}
    tty = run_on_a_terminal(
        [*PROCTOR, "eval", *args, "--run.name", "tty"], cwd=tmp_path, env=env, timeout=180
    )
    assert tty.returncode == 0
    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", tty.screen.decode(errors="replace"))
    shown = next(line for line in screen.splitlines() if "has only 1000 tasks" in line)
    assert LOG_LINE.match(shown.strip()) and " WARNING proctor.eval.runner: " in shown
