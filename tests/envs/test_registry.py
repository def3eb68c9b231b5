"""Finding environments through the entry-point group, and `proctor envs list`."""

from __future__ import annotations

import json
import subprocess

import pytest

from proctor.envs import Environment, list_environments, load_environment
from proctor.errors import ConfigError, EnvironmentNotFound
from tests.support.procs import PROCTOR

BUILTINS = ["alphabet-sort", "arithmetic", "reverse-text", "tool-calc"]


def test_builtins_load_through_entry_points() -> None:
    for name in BUILTINS:
        env = load_environment(name)
        assert isinstance(env, Environment)
        assert env.name == name and env.description
        assert env.taskset.name == name


def test_unknown_name_lists_the_installed_ones() -> None:
    with pytest.raises(EnvironmentNotFound) as caught:
        load_environment("alphabet-srot")
    message = str(caught.value)
    assert "'alphabet-srot'" in message
    assert all(name in message for name in BUILTINS)
    assert caught.value.exit_code == 2


def test_bad_environment_arguments_are_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"has no argument colour; it takes: num_tasks, seed"):
        load_environment("arithmetic", colour="red")
    with pytest.raises(ConfigError, match="num_tasks must be at least 1"):
        load_environment("reverse-text", num_tasks=0)


@pytest.mark.process  # loading humaneval probes the code sandbox, a process of its own
def test_list_environments_describes_each() -> None:
    infos = {info.name: info for info in list_environments()}
    assert set(BUILTINS) <= set(infos)
    assert infos["alphabet-sort"].kind == "infinite" and infos["alphabet-sort"].size is None
    assert infos["arithmetic"].kind == "finite" and infos["arithmetic"].size == 1000
    assert infos["tool-calc"].entry_point == "proctor.envs.builtin.tool_calc:load_environment"


def _proctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PROCTOR, *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_envs_list_command() -> None:
    table = _proctor("envs", "list")
    assert table.returncode == 0, table.stderr
    for name in BUILTINS:
        assert name in table.stdout
    assert "infinite" in table.stdout and "1000" in table.stdout

    as_json = _proctor("envs", "list", "--json")
    rows = {row["name"]: row for row in json.loads(as_json.stdout)}
    assert rows["reverse-text"]["size"] == 1000

    bad = _proctor("envs", "lst")
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "invalid choice" in bad.stderr
