"""The sandbox command: the template filled with shell-quoted values, secrets kept out."""

from __future__ import annotations

import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from proctor.errors import ConfigError
from proctor.eval.args import parse_eval_args
from proctor.eval.config import EvalConfig
from proctor.sandboxes.command import (
    CONFIG_FILE,
    DEFAULT_COMMAND,
    HostedEvalConfig,
    build_command,
    eval_toml,
    sandbox_config,
    wire_config,
    wire_field,
)
from proctor.server.hosted.schemas import CreateHostedEvaluation


def _words(command: str) -> list[str]:
    return shlex.split(command)


def _sandbox_settings(config: HostedEvalConfig, **names: str) -> dict[str, Any]:
    where = {"environment": "e", "model": "m", **names}
    return tomllib.loads(eval_toml(config, **where))


def test_default_command_is_the_eval_cli_with_its_config_file_and_attach() -> None:
    config = HostedEvalConfig.model_validate(
        {
            "num_examples": 4,
            "rollouts_per_example": 2,
            "max_concurrent": 8,
            "sampling_args": {"temperature": 0.7, "max_tokens": 64},
            "env_args": {"level": "hard"},
            "api_base_url": "http://127.0.0.1:1/v1",
            "api_key_var": "MODEL_KEY",
            "headers": ["X-Team: a b"],
            "custom_secrets": {"MODEL_KEY": "sk-never-in-argv"},
            "verbose": True,
            "api_client_type": "openai_chat_completions",
            "allow_sandbox_access": True,
            "state_columns": [],
            "independent_scoring": False,
        }
    )
    command = build_command(
        DEFAULT_COMMAND, environment="alphabet-sort", model="m/x", config=config
    )
    words = _words(command)
    assert words[:3] == [sys.executable, "-m", "proctor.cli.main"]
    assert words[3:] == ["eval", "@", CONFIG_FILE, "--run.attach", "$EVALUATION_ID"]
    settings = _sandbox_settings(config, environment="alphabet-sort", model="m/x")
    assert settings == {
        "env": "alphabet-sort",
        "model": "m/x",
        "num_examples": 4,
        "rollouts_per_example": 2,
        "max_concurrent": 8,
        "sampling": {"temperature": 0.7, "max_tokens": 64},
        "env_args": {"level": "hard"},
        "client": {
            "base_url": "http://127.0.0.1:1/v1",
            "api_key_var": "MODEL_KEY",
            "headers_var": "PROCTOR_CLIENT_HEADERS",  # the values travel in the env
        },
        "verbose": True,
        "rich": False,
    }
    text = eval_toml(config, environment="alphabet-sort", model="m/x")
    for secret in ("sk-never-in-argv", "a b"):
        assert secret not in command and secret not in text


def test_a_shard_adds_its_slice_to_the_command_line() -> None:
    config = HostedEvalConfig(shards=3)
    words = _words(build_command(DEFAULT_COMMAND, environment="e", model="m", config=config))
    assert "--shard" not in words
    words = _words(
        build_command(DEFAULT_COMMAND, environment="e", model="m", config=config, shard="1/3")
    )
    assert words[3:] == [
        "eval",
        "@",
        CONFIG_FILE,
        "--shard",
        "1/3",
        "--run.attach",
        "$EVALUATION_ID",
    ]


def test_a_template_running_eval_without_its_config_file_is_refused() -> None:
    # The template of earlier releases: its {options} no longer carry the settings.
    old = "{proctor} eval {env} -m {model} {options} --no-rich --run.attach $EVALUATION_ID"
    with pytest.raises(ConfigError, match=r"put `@ \{config\}` after `eval`"):
        build_command(old, environment="e", model="m", config=HostedEvalConfig())
    link = "ln -sfn /data . && " + DEFAULT_COMMAND  # a template built on the default is fine
    assert "@ eval.toml" in build_command(
        link, environment="e", model="m", config=HostedEvalConfig()
    )


def test_all_examples_omits_n_and_expects_no_fixed_count() -> None:
    config = HostedEvalConfig(num_examples=-1, rollouts_per_example=3)
    settings = _sandbox_settings(config)
    assert "num_examples" not in settings and settings["rollouts_per_example"] == 3
    assert config.expected_samples is None
    assert HostedEvalConfig(num_examples=5, rollouts_per_example=3).expected_samples == 15


def test_env_args_holding_a_null_reach_the_sandbox_as_given(tmp_path: Path) -> None:
    # TOML has no null: such env_args are written as their JSON object, which eval reads.
    args = {"level": None, "words": ["a", None], "n": 2}
    config = HostedEvalConfig(env_args=args)
    path = tmp_path / CONFIG_FILE
    path.write_text(eval_toml(config, environment="e", model="m"))
    assert parse_eval_args(["@", str(path)]).env_args == args
    path.write_text(eval_toml(HostedEvalConfig(env_args={"n": 2}), environment="e", model="m"))
    assert tomllib.loads(path.read_text())["env_args"] == {"n": 2}  # a table when it can be


def test_hostile_values_stay_single_words_in_the_shell() -> None:
    model = "m; touch /tmp/pwned-$(id -u) `id`"
    template = "printf '%s\\n' {env} {model}"
    command = build_command(template, environment="a'b", model=model, config=HostedEvalConfig())
    out = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["a'b", model]


def test_template_keeps_shell_syntax_and_unknown_braces() -> None:
    command = build_command(
        "echo ${HOME:-x} {unknown} {rollouts}",
        environment="e",
        model="m",
        config=HostedEvalConfig(rollouts_per_example=7),
    )
    assert command == "echo ${HOME:-x} {unknown} 7"


@pytest.mark.parametrize("name", ["PROCTOR_API_KEY", "EVALUATION_ID", "1BAD", "A-B"])
def test_secret_names_must_be_plain_and_not_the_launchers(name: str) -> None:
    with pytest.raises(ValidationError):
        HostedEvalConfig(custom_secrets={name: "x"})


def test_public_form_drops_secrets() -> None:
    config = HostedEvalConfig(custom_secrets={"TOKEN": "s3cret"}, timeout_minutes=3)
    public = config.public_form()
    assert "custom_secrets" not in public and "s3cret" not in str(public)
    assert public["timeout_minutes"] == 3


@pytest.mark.parametrize(
    "headers",
    [
        ["Authorization: Bearer sk-live-123", "X-Team: a"],
        {"Authorization": "Bearer sk-live-123", "X-Team": "a"},
    ],
)
def test_public_form_masks_credential_headers(headers: list[str] | dict[str, str]) -> None:
    public = HostedEvalConfig(headers=headers).public_form()
    assert "sk-live-123" not in str(public)
    assert "X-Team" in str(public) and "<redacted>" in str(public)


def test_a_sample_count_past_what_the_database_stores_is_refused() -> None:
    # Each factor is bounded, so their product (a 32-bit column) always fits and the
    # published schema says exactly what is accepted.
    body = {"environment_ids": ["e"], "inference_model": "m"}
    for big in ({"num_examples": 1_000_001}, {"rollouts_per_example": 2_001}):
        with pytest.raises(ValidationError, match="less than or equal to"):
            CreateHostedEvaluation.model_validate({**body, "eval_config": big})
    fits = {"num_examples": 1_000_000, "rollouts_per_example": 2_000}
    config = CreateHostedEvaluation.model_validate({**body, "eval_config": fits}).eval_config
    assert config.expected_samples is not None and config.expected_samples <= 2**31 - 1


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ({"sampling_args": {"temperature": 1, "top_k": 5}}, "sampling_args.top_k"),
        ({"state_columns": ["answer"]}, "state_columns"),
        ({"independent_scoring": True}, "independent_scoring"),
        ({"extra_env_kwargs": {"x": 1}}, "extra_env_kwargs"),
        ({"api_client_type": "anthropic_messages"}, "api_client_type"),
        ({"some_new_knob": 1}, "eval_config.some_new_knob"),
    ],
)
def test_a_setting_proctor_cannot_apply_is_refused_by_name(
    setting: dict[str, object], named: str
) -> None:
    body = {"environment_ids": ["e"], "inference_model": "m", "eval_config": setting}
    with pytest.raises(ValidationError, match=named.replace(".", r"\.")):
        CreateHostedEvaluation.model_validate(body)


def test_the_overlay_is_one_table_both_ways() -> None:
    # The wire -> EvalConfig overrides (the launcher) -> the wire again (`proctor hosted run`).
    wire = {
        "num_examples": 4,
        "rollouts_per_example": 2,
        "max_concurrent": 8,
        "max_retries": 1,
        "sampling_args": {"temperature": 0.5, "stop": ["\n"]},
        "env_args": {"level": "hard"},
        "api_base_url": "http://127.0.0.1:1/v1",
        "api_key_var": "MODEL_KEY",
        "verbose": True,
    }
    config = HostedEvalConfig.model_validate(wire)
    assert config.overrides() == {
        "num_examples": 4,
        "rollouts_per_example": 2,
        "max_concurrent": 8,
        "sampling": {"temperature": 0.5, "stop": ["\n"]},
        "env_args": {"level": "hard"},
        "client": {
            "base_url": "http://127.0.0.1:1/v1",
            "api_key_var": "MODEL_KEY",
            "max_retries": 1,
        },
        "verbose": True,
    }
    assert wire_config(config.overrides()) == wire
    # The wire's defaults (5 x 3) are sent as overrides; eval's apply to what the CLI omits.
    assert HostedEvalConfig().overrides() == {"num_examples": 5, "rollouts_per_example": 3}
    assert wire_config({}) == {"num_examples": -1, "rollouts_per_example": 1}
    all_tasks = HostedEvalConfig(num_examples=-1, headers={"X-Team": "a"}).overrides()
    assert "num_examples" not in all_tasks
    assert all_tasks["client"] == {"headers_var": "PROCTOR_CLIENT_HEADERS"}


def test_the_sandbox_config_is_eval_defaults_under_the_overlay(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("PROCTOR_MODEL_BASE_URL", raising=False)
    config = HostedEvalConfig(num_examples=2, sampling_args={"temperature": 0.2})
    overlay = sandbox_config(config, environment="reverse-text", model="m")
    assert overlay == EvalConfig.model_validate(
        {
            "env": "reverse-text",
            "model": "m",
            "num_examples": 2,
            "rollouts_per_example": 3,
            "sampling": {"temperature": 0.2},
            "rich": False,
        }
    )
    # The sandbox's eval.toml parses back into that very config.
    path = tmp_path / CONFIG_FILE
    path.write_text(eval_toml(config, environment="reverse-text", model="m"))
    assert parse_eval_args(["@", str(path)]) == overlay


@pytest.mark.parametrize(
    ("loc", "named"),
    [
        (("sampling", "temperature"), "sampling_args.temperature"),
        (("client", "base_url"), "api_base_url"),
        (("client", "max_retries"), "max_retries"),
        (("num_examples",), "num_examples"),
        (("client", "headers_var"), "headers"),
    ],
)
def test_an_engine_location_is_named_as_the_wire_names_it(loc: tuple[str, ...], named: str) -> None:
    assert wire_field(loc) == named


def test_a_value_the_engine_refuses_is_a_validation_error_of_the_overlay() -> None:
    config = HostedEvalConfig(sampling_args={"top_p": 3})
    with pytest.raises(ValidationError) as refused:
        sandbox_config(config, environment="e", model="m")
    assert wire_field(refused.value.errors()[0]["loc"]) == "sampling_args.top_p"


def test_the_launchers_own_model_url_stays_the_launchers(monkeypatch: pytest.MonkeyPatch) -> None:
    # The sandbox decides its endpoint's default; the launcher's variable (even a bad one)
    # neither fails the overlay nor lands in the sandbox's eval.toml.
    monkeypatch.setenv("PROCTOR_MODEL_BASE_URL", "launcher-only:1")
    assert (
        "client" not in _sandbox_settings(HostedEvalConfig())
        or "base_url" not in (_sandbox_settings(HostedEvalConfig())["client"])
    )
    overlay = sandbox_config(HostedEvalConfig(), environment="e", model="m")
    assert "base_url" not in overlay.client.model_fields_set
