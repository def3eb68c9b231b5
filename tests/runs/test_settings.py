"""Client settings: arguments, then PROCTOR_* variables, then ~/.proctor/config.toml."""

from __future__ import annotations

from pathlib import Path

import pytest

from proctor.errors import ConfigError
from proctor.runs import load_settings


def _write_config(home: Path, text: str) -> None:
    (home / ".proctor").mkdir(exist_ok=True)
    (home / ".proctor" / "config.toml").write_text(text)


def test_arguments_beat_environment_beat_file(
    client_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_config(client_env, 'api_url = "http://file:1"\napi_key = "k-file"\nteam_id = "t-file"\n')
    s = load_settings()
    assert (s.api_url, s.key(), s.team_id) == ("http://file:1", "k-file", "t-file")
    monkeypatch.setenv("PROCTOR_API_URL", "http://env:2/api/v1/")
    monkeypatch.setenv("PROCTOR_API_KEY", "k-env")
    s = load_settings()
    assert (s.api_url, s.key(), s.team_id) == ("http://env:2", "k-env", "t-file")
    s = load_settings(api_url="http://arg:3", api_key="k-arg", team_id="t-arg")
    assert (s.api_url, s.key(), s.team_id) == ("http://arg:3", "k-arg", "t-arg")


def test_the_key_is_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROCTOR_API_KEY", "pk-secret-value")
    s = load_settings()
    assert "pk-secret-value" not in repr(s) and "pk-secret-value" not in str(s.model_dump())


def test_runs_mode_is_normalized_and_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROCTOR_RUNS_MODE", " Disabled ")
    assert load_settings().runs_mode == "disabled"
    monkeypatch.setenv("PROCTOR_RUNS_MODE", "sometimes")
    with pytest.raises(ConfigError, match="set PROCTOR_RUNS_MODE to online or disabled"):
        load_settings()


def test_a_broken_config_file_names_itself(client_env: Path) -> None:
    _write_config(client_env, "api_url = [unterminated\n")
    with pytest.raises(ConfigError, match=r"config\.toml is not valid TOML"):
        load_settings()


def test_a_url_without_scheme_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROCTOR_API_URL", "localhost:8000")
    with pytest.raises(ConfigError, match="PROCTOR_API_URL"):
        load_settings()
