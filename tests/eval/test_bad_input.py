"""Every bad input: one clear line naming the fix, the right exit code, nothing written over."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from proctor.cli.main import main
from tests.eval.helpers import read_traces, run_eval
from tests.support.procs import free_port

CASES = [
    (["reverse-text", "--bogus"], 2, "unrecognized arguments: --bogus"),
    (["reverse-text", "-n", "0"], 2, "-n/--num-examples must be at least 1 (got 0)"),
    (["reverse-text", "-c", "lots"], 2, "-c/--max-concurrent must be a whole number"),
    (["reverse-text", "--sampling.temperature", "-1"], 2, "--sampling.temperature must be at"),
    (["reverse-text", "--client.headers", "x"], 2, "--client.headers: expected JSON"),
    (["reverse-text", "--resume", "--clean"], 2, "--resume and --clean contradict"),
    (["reverse-text", "--serve"], 2, "--serve"),
    (["alphabet-sort"], 2, "pass -n N"),
    (["no-such-env"], 2, "no-such-env"),
    ([], 2, "name the environment to evaluate"),
    (["reverse-text", "@", "missing.toml"], 2, "config file missing.toml does not exist"),
    (["reverse-text", "--resume", "--run.name", "never-ran"], 2, "nothing to resume"),
]


def assert_one_clean_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    assert lines[0].startswith("proctor eval: ")
    return lines[0]


@pytest.mark.parametrize(("args", "code", "message"), CASES)
def test_bad_input_is_one_line(
    args: list[str],
    code: int,
    message: str,
    demo_model: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # In process through the console script's `main` (these fail before any I/O, and a
    # subprocess per case would cost a second of start-up each).
    monkeypatch.chdir(tmp_path)
    code_seen = main(["eval", *args, "--client.base-url", demo_model, "-o", "out"])
    assert code_seen == code
    assert message in assert_one_clean_line(capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def test_unreachable_endpoint_fails_fast(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    result = run_eval(
        "reverse-text", "-n", "3", "--client.base-url", url, "-o", "out", cwd=tmp_path
    )
    assert result.returncode == 1
    line = assert_one_clean_line(result.stderr)
    assert (
        line == f"proctor eval: cannot reach the model at {url}: start it or pass --client.base-url"
    )
    assert not (tmp_path / "out").exists()


def test_existing_results_are_not_written_over(demo_model: str, tmp_path: Path) -> None:
    args = ("reverse-text", "-n", "3", "--no-push", "-o", "out", "--run.name", "r")
    first = run_eval(*args, "--client.base-url", demo_model, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    run_dir = tmp_path / "out" / "r"
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in run_dir.rglob("*.*")}

    again = run_eval(*args, "--client.base-url", demo_model, cwd=tmp_path)
    assert again.returncode == 2
    assert "already holds results; pass --resume" in assert_one_clean_line(again.stderr)
    after = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in run_dir.rglob("*.*")}
    assert after == before

    clean = run_eval(*args, "--clean", "-n", "2", "--client.base-url", demo_model, cwd=tmp_path)
    assert clean.returncode == 0, clean.stderr
    assert len(read_traces(run_dir)) == 2


def test_a_run_dir_of_empty_folders_holds_no_results(demo_model: str, tmp_path: Path) -> None:
    """E.g. a mount point made ready for the spool (`<run dir>/platform`) before the run."""
    (tmp_path / "out" / "r" / "platform").mkdir(parents=True)
    args = ("reverse-text", "-n", "2", "--no-push", "-o", "out", "--run.name", "r")
    done = run_eval(*args, "--client.base-url", demo_model, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert len(read_traces(tmp_path / "out" / "r")) == 2


def test_resume_with_other_settings_is_refused(demo_model: str, tmp_path: Path) -> None:
    args = ("reverse-text", "--no-push", "-o", "out", "--run.name", "r")
    assert run_eval(*args, "-n", "3", "--client.base-url", demo_model, cwd=tmp_path).returncode == 0
    result = run_eval(*args, "-n", "4", "--resume", "--client.base-url", demo_model, cwd=tmp_path)
    assert result.returncode == 2
    assert "different settings (num_examples)" in assert_one_clean_line(result.stderr)
    assert len(read_traces(tmp_path / "out" / "r")) == 3
