"""A newcomer's mistakes, each through the CLI: one sentence naming the fix (exit 2), never a
traceback, and nothing created or sent on the way. The commands run in this process
(`cli_in_process`: what they print, log and store is the point, not how a process starts);
`proctor` runs the real CLI as a subprocess for the modules that need one."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import Finished, cli_in_process
from tests.support.platform import Platform
from tests.support.procs import PROCTOR, free_port


def proctor(
    *args: str, home: Path, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PROCTOR_")}
    return subprocess.run(
        [*PROCTOR, *args],
        env={**base, "HOME": str(home), **(env or {})},
        cwd=home,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def refused(result: Finished, *says: str) -> str:
    """The one line a refusal prints; asserts exit 2 and no traceback."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for text in says:
        assert text in lines[0]
    return lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ["server", "--port", "99999"],
        ["quickstart", "--port", "99999"],
        ["quickstart", "--model-port", "70000"],
        ["demo-model", "--port", "65536"],
    ],
    ids=["server", "quickstart", "quickstart-model", "demo-model"],
)
def test_a_port_out_of_range_is_one_line(tmp_path: Path, args: list[str]) -> None:
    refused(cli_in_process(*args, home=tmp_path), args[1], "is not a TCP port (0-65535)")
    assert not (tmp_path / ".proctor").exists()


def test_a_database_proctor_cannot_use_is_one_line(tmp_path: Path) -> None:
    result = cli_in_process("server", home=tmp_path, env={"PROCTOR_DATABASE_URL": "mysql://x"})
    refused(result, "PROCTOR_DATABASE_URL", "SQLite", "PostgreSQL", "not mysql")


def test_a_csv_row_with_fewer_cells_than_the_header_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "qa.csv"
    data.write_text("question,answer\n1+1,2\n2+2\n")
    result = cli_in_process(
        "eval", "dataset", "--env-args", f'{{"path": "{data}"}}', "--no-push", home=tmp_path
    )
    refused(result, f"{data} row 3 has 1 cells, fewer than the header's 2 columns")
    assert not (tmp_path / "outputs").exists()


def test_a_mistyped_sampling_parameter_gets_did_you_mean(tmp_path: Path) -> None:
    (tmp_path / "run.toml").write_text("[sampling]\ntemprature = 0.7\n")
    typo = cli_in_process("eval", "reverse-text", "@", "run.toml", "--dry-run", home=tmp_path)
    refused(typo, "'temprature'", "did you mean temperature?")
    # A parameter proctor does not model still passes through to the endpoint.
    (tmp_path / "run.toml").write_text("[sampling]\ntemperature = 0.7\ntop_k = 5\n")
    fine = cli_in_process("eval", "reverse-text", "@", "run.toml", "--dry-run", home=tmp_path)
    assert fine.returncode == 0, fine.stderr
    assert "top_k = 5" in fine.stdout


def test_keys_create_refuses_a_data_dir_without_a_database(tmp_path: Path) -> None:
    typo = tmp_path / "proctr-data"
    result = cli_in_process(
        "keys", "create", "--name", "me", "--data-dir", str(typo), home=tmp_path
    )
    refused(result, f"no proctor database in {typo}", "--data-dir", "server migrate")
    assert not typo.exists()
    # The default data dir of a first setup (the README's first command) is still made.
    first = cli_in_process("keys", "create", "--name", "me", "--admin", home=tmp_path)
    assert first.returncode == 0, first.stderr
    assert (tmp_path / ".proctor" / "proctor.db").is_file()


@pytest.mark.parametrize("where", ["../../escaped", "/tmp/escaped-absolute"])
def test_a_run_dir_outside_the_output_dir_is_refused(tmp_path: Path, where: str) -> None:
    home = tmp_path / "a" / "b"
    home.mkdir(parents=True)
    result = cli_in_process(
        "eval", "reverse-text", "-n", "1", "--no-push", "--run.dir", where, home=home
    )
    refused(result, "--run.dir must name a directory inside -o", repr(where))
    assert not (tmp_path / "escaped").exists() and not Path("/tmp/escaped-absolute").exists()


# -- advice that can work (#25 item 7) ---------------------------------------------------


def test_a_mistyped_scheme_is_corrected_not_prefixed(tmp_path: Path) -> None:
    result = cli_in_process(
        "eval",
        "reverse-text",
        "-n",
        "1",
        "--no-push",
        "--client.base-url",
        "htp://127.0.0.1:9/v1",
        home=tmp_path,
    )
    line = refused(result, "pass e.g. http://127.0.0.1:9/v1")
    assert "http://htp://" not in line


def test_resume_of_a_missing_run_dir_names_the_setting_that_chose_it(tmp_path: Path) -> None:
    result = cli_in_process(
        "eval",
        "reverse-text",
        "-n",
        "1",
        "--no-push",
        "--run.dir",
        "nope",
        "--resume",
        home=tmp_path,
    )
    line = refused(result, "nothing to resume in outputs/nope", "pass the --run.dir of")
    assert "--run.name" not in line


def test_sync_with_the_platform_still_down_counts_nothing_as_minus_one(
    demo_model: str, tmp_path: Path
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    env = {"PROCTOR_API_URL": dead, "PROCTOR_API_KEY": "pk_test"}
    args = ["eval", "reverse-text", "-n", "2", "--run.name", "r", "--client.base-url", demo_model]
    ran = cli_in_process(*args, home=tmp_path, env=env)
    assert ran.returncode == 75, ran.stderr  # kept offline for a later sync
    assert "opened offline" in ran.stderr and "at None" not in ran.stderr
    synced = cli_in_process("runs", "sync", "outputs/r", "--timeout", "2", home=tmp_path, env=env)
    assert synced.returncode != 0
    assert "still unsent" not in synced.stdout and "nothing sent" in synced.stdout, synced.stdout
    assert "Traceback" not in synced.stderr


def test_hosted_refusals_speak_cli_not_http(platform: Platform, tmp_path: Path) -> None:
    env = {"PROCTOR_API_URL": platform.url, "PROCTOR_API_KEY": platform.api_key}
    typo = cli_in_process("hosted", "run", "revers-text", "-m", "demo", home=tmp_path, env=env)
    line = refused(typo, "no environment 'revers-text'", "did you mean reverse-text?")
    assert "/environmentshub" not in line and "HTTP" not in line

    started = cli_in_process(
        "hosted", "run", "reverse-text", "-m", "demo", "-n", "1", home=tmp_path, env=env
    )
    assert started.returncode == 0, started.stderr
    evaluation_id = started.stdout.split()[0]
    cli_in_process("hosted", "cancel", evaluation_id, home=tmp_path, env=env)  # cancelled, or ended
    again = cli_in_process("hosted", "cancel", evaluation_id, home=tmp_path, env=env)
    assert again.returncode == 1, again.stderr
    line = again.stderr.strip()
    assert f"evaluation {evaluation_id} has already ended (" in line, line
    assert "nothing to cancel" in line and len(line.splitlines()) == 1
    assert "HTTP" not in line and "PATCH" not in line
