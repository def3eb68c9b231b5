"""`PROCTOR_EVAL_*` variables as a source of eval's settings: each source, their precedence,
a bad value and an unknown variable named in one sentence, and `proctor config eval` naming
the variable a setting came from."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from proctor.errors import ConfigError
from proctor.eval.args import parse_eval_args, parse_eval_args_with_sources
from proctor.runs import ClientSettings
from proctor.server.hosted.settings import LauncherSettings
from proctor.server.settings import Settings
from tests.support.cli import cli_in_process


@pytest.fixture(autouse=True)
def _no_eval_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the variables a test sets (the suite's own environment holds none, but a
    developer's shell might)."""
    for name in [n for n in os.environ if n.upper().startswith("PROCTOR_EVAL_")]:
        monkeypatch.delenv(name)
    monkeypatch.delenv("PROCTOR_MODEL_BASE_URL", raising=False)


def test_every_kind_of_setting_comes_from_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    variables = {
        "PROCTOR_EVAL_ENV": "arithmetic",
        "PROCTOR_EVAL_NUM_EXAMPLES": "5",
        "PROCTOR_EVAL_MODEL": "gpt-x",
        "PROCTOR_EVAL_PUSH": "false",
        "PROCTOR_EVAL_ENV_ARGS": '{"Seed": 3, "words": ["a"]}',
        "PROCTOR_EVAL_CLIENT__BASE_URL": "http://10.0.0.5:8001/v1",
        "PROCTOR_EVAL_CLIENT__HEADERS": '{"X-Team": "a"}',
        "PROCTOR_EVAL_SAMPLING__TEMPERATURE": "0.5",
        "PROCTOR_EVAL_SAMPLING__STOP": '["\\n\\n"]',
        "PROCTOR_EVAL_RUN__NAME": "from-env",
        "PROCTOR_EVAL_VERBOSE": "",  # empty: no setting
    }
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    config, sources = parse_eval_args_with_sources([])
    assert (config.env, config.num_examples, config.model) == ("arithmetic", 5, "gpt-x")
    assert config.push is False and config.verbose is False
    assert config.env_args == {"Seed": 3, "words": ["a"]}  # JSON, keys as given
    assert config.client.base_url == "http://10.0.0.5:8001/v1"
    assert config.client.headers == {"X-Team": "a"}
    assert config.sampling.temperature == 0.5 and config.sampling.stop == ["\n\n"]
    assert config.run.name == "from-env"
    assert sources["client.base_url"] == "environment PROCTOR_EVAL_CLIENT__BASE_URL"
    assert sources["env"] == "environment PROCTOR_EVAL_ENV"
    assert "verbose" not in sources


def test_flags_win_over_variables_and_variables_over_the_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "run.toml"
    path.write_text(
        'env = "arithmetic"\nnum_examples = 10\nrollouts_per_example = 2\nmodel = "file"\n'
        "[sampling]\ntemperature = 0.1\ntop_p = 0.5\n"
    )
    monkeypatch.setenv("PROCTOR_EVAL_NUM_EXAMPLES", "20")
    monkeypatch.setenv("PROCTOR_EVAL_MODEL", "env")
    monkeypatch.setenv("PROCTOR_EVAL_SAMPLING__TEMPERATURE", "0.2")
    config, sources = parse_eval_args_with_sources(["@", str(path), "-n", "30"])
    assert config.num_examples == 30  # flag > variable > file
    assert config.model == "env" and config.sampling.temperature == 0.2  # variable > file
    assert config.rollouts_per_example == 2 and config.sampling.top_p == 0.5  # the file's
    assert config.max_concurrent == 128  # the default
    assert sources == {
        "env": f"file {path}",
        "num_examples": "flag -n/--num-examples",
        "rollouts_per_example": f"file {path}",
        "model": "environment PROCTOR_EVAL_MODEL",
        "sampling.temperature": "environment PROCTOR_EVAL_SAMPLING__TEMPERATURE",
        "sampling.top_p": f"file {path}",
    }
    # A variable is not the default of `client.base_url`'s older variable, nor the reverse.
    monkeypatch.setenv("PROCTOR_MODEL_BASE_URL", "http://10.0.0.9:8001/v1")
    assert parse_eval_args(["arithmetic"]).client.base_url == "http://10.0.0.9:8001/v1"
    monkeypatch.setenv("PROCTOR_EVAL_CLIENT__BASE_URL", "http://10.0.0.5:8001/v1")
    assert parse_eval_args(["arithmetic"]).client.base_url == "http://10.0.0.5:8001/v1"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        (
            "PROCTOR_EVAL_NUM_EXAMPLES",
            "abc",
            "PROCTOR_EVAL_NUM_EXAMPLES must be a whole number (got 'abc'); fix or unset the "
            "variable",
        ),
        (
            "PROCTOR_EVAL_MAX_CONCURRENT",
            "0",
            "PROCTOR_EVAL_MAX_CONCURRENT must be at least 1 (got 0); fix or unset the variable",
        ),
        (
            "PROCTOR_EVAL_PUSH",
            "maybe",
            "PROCTOR_EVAL_PUSH must be true or false (got 'maybe'); fix or unset the variable",
        ),
        (
            "PROCTOR_EVAL_SAMPLING__TEMPERATURE",
            "-1",
            "PROCTOR_EVAL_SAMPLING__TEMPERATURE must be at least 0.0 (got -1); fix or unset the "
            "variable",
        ),
        (
            "PROCTOR_EVAL_ENV_ARGS",
            "{seed: 3}",
            'PROCTOR_EVAL_ENV_ARGS must be JSON, e.g. PROCTOR_EVAL_ENV_ARGS=\'{"key": '
            "\"value\"}' (got '{seed: 3}'); fix or unset it",
        ),
        (
            "PROCTOR_EVAL_RUN__DIR",
            "/abs",
            "PROCTOR_EVAL_RUN__DIR must name a directory inside -o (a relative path without "
            "'..'), not '/abs'; fix or unset the variable",
        ),
    ],
)
def test_a_bad_value_names_its_variable_and_the_fix(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, message: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as refused:
        parse_eval_args(["arithmetic"])
    assert str(refused.value) == message


def test_a_bad_header_variable_is_named_without_its_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROCTOR_EVAL_CLIENT__HEADERS", "Authorization: Bearer sk-0123456789")
    with pytest.raises(ConfigError) as refused:
        parse_eval_args(["arithmetic"])
    assert str(refused.value) == (
        "PROCTOR_EVAL_CLIENT__HEADERS must be JSON, e.g. "
        'PROCTOR_EVAL_CLIENT__HEADERS=\'{"key": "value"}\'; fix or unset it'
    )


def test_a_flag_over_a_bad_variable_wins_and_a_flags_value_is_named_by_its_flag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PROCTOR_EVAL_NUM_EXAMPLES", "abc")
    assert parse_eval_args(["arithmetic", "-n", "2"]).num_examples == 2
    with pytest.raises(
        ConfigError, match=r"^-n/--num-examples must be a whole number \(got 'x'\)$"
    ):
        parse_eval_args(["arithmetic", "-n", "x"])


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "PROCTOR_EVAL_NUM_EXAMPLE",
            "unknown variable PROCTOR_EVAL_NUM_EXAMPLE; did you mean PROCTOR_EVAL_NUM_EXAMPLES "
            "(num_examples)?",
        ),
        (
            "PROCTOR_EVAL_CLIENT_BASE_URL",
            "unknown variable PROCTOR_EVAL_CLIENT_BASE_URL; did you mean "
            "PROCTOR_EVAL_CLIENT__BASE_URL (client.base_url)?",
        ),
        (
            "PROCTOR_EVAL_QWERTYUIOP",
            "unknown variable PROCTOR_EVAL_QWERTYUIOP: no eval setting has it; unset it (each "
            "setting's variable is PROCTOR_EVAL_ and its name, e.g. PROCTOR_EVAL_CLIENT__BASE_URL "
            "for --client.base-url)",
        ),
        (
            "proctor_eval_model",
            "proctor_eval_model is spelled PROCTOR_EVAL_MODEL (eval's variables are upper case); "
            "rename it",
        ),
        (
            "PROCTOR_EVAL_CLIENT",
            "PROCTOR_EVAL_CLIENT names a whole section; give each of its settings its own "
            "variable, e.g. PROCTOR_EVAL_CLIENT__BASE_URL",
        ),
        (
            "PROCTOR_EVAL_SAMPLING__TOP_K",
            "PROCTOR_EVAL_SAMPLING__TOP_K is no setting of its own: only sampling's named "
            "settings have variables; put top_k in the [sampling] table of an @ file, or unset it",
        ),
        (
            "PROCTOR_EVAL_RUN__ID",
            "PROCTOR_EVAL_RUN__ID cannot be set: the engine sets run.id itself; unset it",
        ),
    ],
)
def test_an_unknown_variable_is_an_error_naming_the_nearest(
    monkeypatch: pytest.MonkeyPatch, name: str, message: str
) -> None:
    monkeypatch.setenv(name, "3")
    with pytest.raises(ConfigError) as refused:
        parse_eval_args(["arithmetic"])
    assert str(refused.value) == message
    # Even empty, and even when a flag gives the setting: a typo is never ignored.
    monkeypatch.setenv(name, "")
    with pytest.raises(ConfigError):
        parse_eval_args(["arithmetic", "-n", "2"])


def test_other_parts_variables_are_no_eval_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    # The runs SDK's, the server's and the launcher's variables share `PROCTOR_`, not the
    # eval's prefix: none is read as, or refused as, an eval setting.
    for name in ("PROCTOR_API_KEY", "PROCTOR_HOSTED_MAX_SANDBOXES", "PROCTOR_PORT"):
        monkeypatch.setenv(name, "3")
    monkeypatch.setenv("PROCTOR_CLIENT_HEADERS", '{"X-A": "b"}')  # a sandbox's headers_var
    config, sources = parse_eval_args_with_sources(["arithmetic"])
    assert sources == {"env": "argument"} and config.client.headers == {}
    # And no other settings class reads a variable of eval's prefix.
    for settings in (ClientSettings, Settings, LauncherSettings):
        prefix = str(settings.model_config.get("env_prefix", ""))
        names = [f"{prefix}{name}".upper() for name in settings.model_fields]
        assert not [n for n in names if n.startswith("PROCTOR_EVAL_")], settings


def test_proctor_config_eval_names_the_variable(tmp_path: Path) -> None:
    (tmp_path / "run.toml").write_text("rollouts_per_example = 2\nnum_examples = 9\n")
    env = {
        "PROCTOR_EVAL_NUM_EXAMPLES": "4",
        "PROCTOR_EVAL_CLIENT__TIMEOUT": "30",
        "PROCTOR_EVAL_CLIENT__HEADERS": '{"Authorization": "Bearer sk-0123456789abcdef"}',
    }
    ran = cli_in_process(
        "config", "--json", "eval", "reverse-text", "@", "run.toml", "-c", "8",
        home=tmp_path, env=env,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    rows = {r["name"]: (r["value"], r["source"]) for s in json.loads(ran.stdout) for r in s["rows"]}
    assert rows["num_examples"] == ("4", "environment PROCTOR_EVAL_NUM_EXAMPLES")
    assert rows["client.timeout"] == ("30.0", "environment PROCTOR_EVAL_CLIENT__TIMEOUT")
    assert rows["rollouts_per_example"] == ("2", "file run.toml")
    assert rows["max_concurrent"] == ("8", "flag -c/--max-concurrent")
    assert rows["client.headers"][1] == "environment PROCTOR_EVAL_CLIENT__HEADERS"
    assert "sk-0123456789abcdef" not in ran.stdout  # a credential header is masked

    typo = cli_in_process(
        "config", "eval", "reverse-text", home=tmp_path, env={"PROCTOR_EVAL_MODLE": "m"}
    )
    assert typo.returncode == 2
    assert "did you mean PROCTOR_EVAL_MODEL (model)?" in typo.stderr


def test_proctor_config_hosted_names_the_variables_a_sandbox_will_not_see(
    tmp_path: Path,
) -> None:
    env = {"PROCTOR_EVAL_NUM_EXAMPLES": "4", "PROCTOR_EVAL_OUTPUT_DIR": "elsewhere"}
    ran = cli_in_process(
        "config", "--json", "hosted", "reverse-text", "-m", "demo", "-r", "2",
        home=tmp_path, env=env,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    rows = {r["name"]: (r["value"], r["source"]) for s in json.loads(ran.stdout) for r in s["rows"]}
    assert "num_examples" not in rows  # nothing of this shell's variables is sent
    assert rows["rollouts_per_example"] == ("2", "flag -r/--rollouts-per-example")
    notes = [line for line in ran.stderr.splitlines() if line.startswith("note:")]
    assert (
        "note: this shell's PROCTOR_EVAL_NUM_EXAMPLES is not sent: a hosted run's sandbox reads "
        "only its eval.toml and flags; pass -n/--num-examples"
    ) in notes
    assert any("PROCTOR_EVAL_OUTPUT_DIR" in n and "does not take it" in n for n in notes)
