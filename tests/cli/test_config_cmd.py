"""`proctor config` (#25): every effective setting, its value (secrets masked) and where it
was read; and `proctor hosted run` naming what this shell holds that the sandbox won't see.
The commands run in this process (`cli_in_process`): what they print is the point."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import cli_in_process
from tests.support.procs import free_port

SECRET = "pk_0123456789abcdefWXYZ"


def rows(stdout: str) -> dict[str, tuple[str, str]]:
    """{setting: (value, source)} over every section `--json` printed."""
    return {r["name"]: (r["value"], r["source"]) for s in json.loads(stdout) for r in s["rows"]}


def test_each_client_and_server_setting_names_its_source(tmp_path: Path) -> None:
    (tmp_path / ".proctor").mkdir()
    (tmp_path / ".proctor" / "config.toml").write_text('api_url = "http://10.0.0.7:8000"\n')
    env = {
        "PROCTOR_API_KEY": SECRET,
        "PROCTOR_DATABASE_URL": "postgresql://me:hunter2@db:5432/proctor",
        "PROCTOR_HOSTED_MAX_SANDBOXES": "3",
    }
    shown = cli_in_process("config", "--json", home=tmp_path, env=env)
    assert shown.returncode == 0, shown.stderr
    assert SECRET not in shown.stdout and "hunter2" not in shown.stdout
    got = rows(shown.stdout)
    config_file = tmp_path / ".proctor" / "config.toml"
    assert got["PROCTOR_API_URL"] == ("http://10.0.0.7:8000", f"config file {config_file}")
    assert got["PROCTOR_API_KEY"] == ("****WXYZ", "environment PROCTOR_API_KEY")
    assert got["PROCTOR_TEAM_ID"] == ("unset", "default")
    assert got["PROCTOR_DATABASE_URL"] == (
        "postgresql://me:****@db:5432/proctor",
        "environment PROCTOR_DATABASE_URL",
    )
    assert got["PROCTOR_PORT"] == ("8000", "default")
    assert got["PROCTOR_HOSTED_MAX_SANDBOXES"] == ("3", "environment PROCTOR_HOSTED_MAX_SANDBOXES")
    text = cli_in_process("config", "client", home=tmp_path, env=env)
    assert text.returncode == 0 and "[environment PROCTOR_API_KEY]" in text.stdout
    assert "PROCTOR_PORT" not in text.stdout  # one section only


def test_eval_settings_name_the_flag_the_file_the_shell_or_the_default(tmp_path: Path) -> None:
    (tmp_path / "run.toml").write_text("rollouts_per_example = 2\n[sampling]\ntemperature = 0.5\n")
    env = {"PROCTOR_MODEL_BASE_URL": "http://10.0.0.9:8001/v1", "OPENAI_API_KEY": SECRET}
    args = ["config", "--json", "eval", "reverse-text", "@", "run.toml", "-n", "3"]
    shown = cli_in_process(*args, home=tmp_path, env=env)
    assert shown.returncode == 0, shown.stderr
    got = rows(shown.stdout)
    assert got["env"] == ("reverse-text", "argument")
    assert got["num_examples"] == ("3", "flag -n/--num-examples")
    assert got["rollouts_per_example"] == ("2", "file run.toml")
    assert got["sampling.temperature"] == ("0.5", "file run.toml")
    assert got["max_concurrent"] == ("128", "default")
    assert got["client.base_url"] == (
        "http://10.0.0.9:8001/v1",
        "environment PROCTOR_MODEL_BASE_URL",
    )
    assert got["$OPENAI_API_KEY"] == ("****WXYZ", "environment OPENAI_API_KEY")
    assert SECRET not in shown.stdout
    typo = cli_in_process("config", "eval", "reverse-text", "--num-exampls", "3", home=tmp_path)
    assert typo.returncode == 2 and "did you mean --num-examples?" in typo.stderr


def test_a_hosted_run_says_what_the_sandbox_reads_and_what_this_shell_holds(
    tmp_path: Path,
) -> None:
    env = {"PROCTOR_MODEL_BASE_URL": "http://10.0.0.9:8001/v1", "OPENAI_API_KEY": SECRET}
    shown = cli_in_process("config", "--json", "hosted", "reverse-text", "-m", "demo", "-n", "2",
                           home=tmp_path, env=env)  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    got = rows(shown.stdout)
    assert got["num_examples"] == ("2", "flag -n/--num-examples")
    assert got["client.base_url"][1] == "read in the sandbox"
    assert got["$OPENAI_API_KEY"][1] == "read in the sandbox"
    assert "PROCTOR_MODEL_BASE_URL (http://10.0.0.9:8001/v1) is not sent" in shown.stderr

    # The help says so, and lists the spelling the errors recommend.
    help_text = " ".join(cli_in_process("hosted", "run", "--help", home=tmp_path).stdout.split())
    assert "(default: read in the sandbox: its $PROCTOR_MODEL_BASE_URL, else" in help_text
    assert "--api-base-url CLIENT.BASE_URL the same as --client.base-url" in help_text

    # `hosted run` names it before the evaluation is created (here: before it finds no platform).
    platform = {"PROCTOR_API_URL": f"http://127.0.0.1:{free_port()}", "PROCTOR_API_KEY": "pk_x"}
    started = cli_in_process("hosted", "run", "reverse-text", "-m", "demo", "-n", "1",
                             home=tmp_path, env={**env, **platform})  # fmt: skip
    assert started.returncode != 0
    notes = [ln for ln in started.stderr.splitlines() if "note:" in ln]
    assert any("PROCTOR_MODEL_BASE_URL" in n and "--client.base-url" in n for n in notes)
    assert any("--secret OPENAI_API_KEY" in n for n in notes)
    assert started.stderr.index("note:") < started.stderr.index("cannot connect")
    told = cli_in_process("hosted", "run", "reverse-text", "-m", "demo", "--client.base-url",
                          "http://10.0.0.9:8001/v1", "--secret", "OPENAI_API_KEY",
                          home=tmp_path, env={**env, **platform})  # fmt: skip
    assert "note:" not in told.stderr
