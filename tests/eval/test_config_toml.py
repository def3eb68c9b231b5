"""`config_toml` writes a config back as the `@ file.toml` that loads into it (a hosted
sandbox's `eval.toml` is made this way), for every field of `EvalConfig`."""

from __future__ import annotations

import tomllib
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from proctor.errors import ConfigError
from proctor.eval.args import config_toml, parse_eval_args
from proctor.eval.config import EvalConfig


def _leaves(model: type[BaseModel], prefix: str = "") -> dict[str, Any]:
    """Every flag-backed field path of `model`, with its pydantic field."""
    found: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if (field.json_schema_extra or {}).get("cli") is False:  # type: ignore[union-attr]
            continue
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            found.update(_leaves(sub, f"{prefix}{name}."))
        else:
            found[f"{prefix}{name}"] = field
    return found


def _kind(annotation: Any) -> Any:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, type(int | None)) and len(args) == 1:
        return _kind(args[0])
    return typing.get_origin(annotation) or annotation


def _other_value(path: str, field: Any) -> Any:
    """A value unlike the default, of the field's kind (and inside its bounds)."""
    kind = _kind(field.annotation)
    default = field.get_default(call_default_factory=True)
    if kind is bool:
        return not default
    if kind is int:
        return 7 if default != 7 else 8
    if kind is float:
        return 0.25 if default != 0.25 else 0.5
    if kind is dict:
        return {"X-Team": "a b", "n": "1"} if path.startswith("client.") else {"k": [1, "v w"]}
    if kind is list:
        return ["a b", "-c"]
    if path == "shard":
        return "1/3"  # a form of its own: I/N
    return "http://127.0.0.1:9/v1 x" if path.endswith("base_url") else "-odd name"


def _get(config: BaseModel, path: str) -> Any:
    value: Any = config
    for part in path.split("."):
        value = getattr(value, part)
    return value


def _set(data: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for part in parents:
        data = data.setdefault(part, {})
    data[last] = value


def _through_a_file(config: EvalConfig, folder: Path) -> EvalConfig:
    path = folder / "eval.toml"
    path.write_text(config_toml(config))
    return parse_eval_args(["@", str(path)])


def test_every_field_round_trips_through_the_file(tmp_path: Path) -> None:
    data: dict[str, Any] = {"env": "reverse-text"}
    for path, field in _leaves(EvalConfig).items():
        if path != "env":
            _set(data, path, _other_value(path, field))
    config = EvalConfig.model_validate(data)
    parsed = _through_a_file(config, tmp_path)
    assert parsed == config
    # Every field came back unlike its default: none was left out of the file.
    default = EvalConfig(env="reverse-text")
    same = [p for p in _leaves(EvalConfig) if p != "env" and _get(parsed, p) == _get(default, p)]
    assert same == []


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"num_examples": 3, "verbose": False, "push": True},  # set, equal to the default
        {"sampling": {"seed": -3, "temperature": 0, "top_k": 5}, "model": "-m"},
        {"env_args": {"nested": {"a": [1, 2]}}, "client": {"headers": {"X-A": "1"}}},
        {"env_args": {"level": None, "words": ["a", None]}},  # TOML has no null
        {"judge": {"temperature": 0.0}, "run": {"finish_timeout": 1e-3}},
    ],
)
def test_a_config_round_trips(data: dict[str, Any], tmp_path: Path) -> None:
    config = EvalConfig.model_validate({"env": "arithmetic", **data})
    assert _through_a_file(config, tmp_path) == config


def test_only_set_fields_are_written() -> None:
    config = EvalConfig.model_validate(
        {"env": "e", "num_examples": 4, "verbose": True, "push": False, "sampling": {"seed": -3}}
    )
    assert tomllib.loads(config_toml(config)) == {
        "env": "e",
        "num_examples": 4,
        "verbose": True,
        "push": False,
        "sampling": {"seed": -3},
    }
    assert tomllib.loads(config_toml(EvalConfig(env="e"))) == {"env": "e"}
    with_id = EvalConfig.model_validate({"env": "e", "run": {"id": "r-1", "name": "n"}})
    assert tomllib.loads(config_toml(with_id))["run"] == {"name": "n"}


@pytest.mark.parametrize(
    ("data", "named"),
    [
        ({"client": {"headers": {"Authorization": "Bearer sk-1"}}}, "--client.headers-var"),
        ({"judge": {"temperature": None}}, "judge.temperature cannot be unset"),
    ],
)
def test_what_no_file_can_carry_is_refused_by_name(data: dict[str, Any], named: str) -> None:
    config = EvalConfig.model_validate({"env": "e", **data})
    with pytest.raises(ConfigError, match=named) as refused:
        config_toml(config)
    assert "sk-1" not in str(refused.value)  # a secret is never echoed
