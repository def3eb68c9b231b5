"""Config from flags and `@ file.toml`: spellings, precedence, `--dry-run`, `--help`."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from proctor.errors import ConfigError
from proctor.eval.args import parse_eval_args
from proctor.toml_io import dump_toml
from tests.eval.helpers import run_eval


def test_dotted_flags_in_kebab_and_snake_case() -> None:
    config = parse_eval_args(
        ["arithmetic", "-n", "5", "-r", "3", "-c", "7", "-m", "gpt-x", "-o", "o", "-v",
         "--client.base-url", "http://a/v1", "--client.api_key_var", "K",
         "--sampling.max-tokens", "64", "--sampling.top_p", "0.9", "--no-push", "--no-rich",
         "--run.attach", "ev-1", "--run.name", "n", "--env-args", '{"seed": 3}']
    )  # fmt: skip
    assert (config.num_examples, config.rollouts_per_example, config.max_concurrent) == (5, 3, 7)
    assert (config.model, config.output_dir, config.verbose) == ("gpt-x", "o", True)
    assert config.client.base_url == "http://a/v1" and config.client.api_key_var == "K"
    assert config.sampling.max_tokens == 64 and config.sampling.top_p == 0.9
    assert config.push is False and config.rich is False
    assert config.run.attach == "ev-1" and config.run.name == "n"
    assert config.env_args == {"seed": 3}


def test_file_then_flags_win(tmp_path: Path) -> None:
    path = tmp_path / "eval.toml"
    path.write_text(
        'env = "arithmetic"\nnum-examples = 10\nmodel = "from-file"\n'
        '[sampling]\ntemperature = 0.7\ntop_k = 20\n[run]\nname = "file-run"\n'
        '[client.headers]\nX-Team = "a"\n'
    )
    config = parse_eval_args(["@", str(path), "-n", "4"])
    assert config.env == "arithmetic" and config.num_examples == 4
    assert config.model == "from-file" and config.run.name == "file-run"
    assert config.sampling.request_args() == {"temperature": 0.7, "top_k": 20}
    assert config.client.headers == {"X-Team": "a"}
    assert parse_eval_args([f"@{path}", "reverse-text"]).env == "reverse-text"


def test_unknown_key_in_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "eval.toml"
    path.write_text('env = "arithmetic"\n[run]\nnmae = "x"\n')
    with pytest.raises(ConfigError, match=r"unknown setting run\.nmae"):
        parse_eval_args(["@", str(path)])


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROCTOR_MODEL_BASE_URL", raising=False)
    config = parse_eval_args(["reverse-text"])
    assert (config.model, config.max_concurrent, config.output_dir) == ("demo", 128, "outputs")
    assert config.push and config.rich and not config.serve
    assert config.client.base_url == "http://127.0.0.1:8001/v1"
    assert config.client.api_key_var == "OPENAI_API_KEY"
    monkeypatch.setenv("PROCTOR_MODEL_BASE_URL", "http://elsewhere:9/v1")
    assert parse_eval_args(["reverse-text"]).client.base_url == "http://elsewhere:9/v1"


@pytest.mark.process
def test_dry_run_prints_resolved_toml_and_writes_nothing(tmp_path: Path) -> None:
    result = run_eval("arithmetic", "-n", "3", "--sampling.temperature", "0", "--dry-run",
                      "-o", "out", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    printed = tomllib.loads(result.stdout)
    assert printed["env"] == "arithmetic" and printed["num_examples"] == 3
    assert printed["sampling"] == {"temperature": 0.0}
    assert printed["run"]["name"].startswith("arithmetic--demo--")
    assert printed["run"]["dir"] == printed["run"]["name"]
    assert "dry_run" not in printed
    assert not (tmp_path / "out").exists()


@pytest.mark.process
def test_help_lists_flags(tmp_path: Path) -> None:
    result = run_eval("--help", cwd=tmp_path)
    assert result.returncode == 0
    flags = ["-n", "--num-examples", "--client.base-url", "--sampling.temperature"]
    flags += ["--run.attach", "--no-push", "--no-rich", "--resume", "--clean", "--dry-run"]
    for flag in flags:
        assert flag in result.stdout


def test_toml_writer_round_trips() -> None:
    data = {
        "env": "x",
        "n": 3,
        "f": 0.5,
        "ok": True,
        "tags": ["a", "b"],
        "env_args": {"nested": {"k": "v"}, "weird key": 1},
        "run": {"name": 'quote " and \\ slash', "id": "r"},
    }
    assert tomllib.loads(dump_toml(data)) == data


def test_saved_config_masks_credential_headers() -> None:
    headers = '{"Authorization": "Bearer sk-1", "X-Api-Key": "k", "X-Team": "evals"}'
    config = parse_eval_args(["arithmetic", "--client.headers", headers])
    assert config.resolved().saved_form()["client"]["headers"] == {
        "Authorization": "<redacted>",
        "X-Api-Key": "<redacted>",
        "X-Team": "evals",
    }
    assert config.client.headers["Authorization"] == "Bearer sk-1"  # still sent
