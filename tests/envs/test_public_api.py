"""The public surface of `proctor.envs` and `proctor.demo`: curated and sorted."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize("module_name", ["proctor.envs", "proctor.demo"])
def test_all_is_sorted_and_importable(module_name: str) -> None:
    module = importlib.import_module(module_name)
    assert module.__all__ == sorted(module.__all__)
    for name in module.__all__:
        assert getattr(module, name) is not None
        assert not name.startswith("_")


def test_the_runner_contract_names_exist() -> None:
    from proctor import envs

    for name in [
        "Environment",
        "Task",
        "Taskset",
        "Episode",
        "load_environment",
        "list_environments",
        "reward",
        "metric",
        "SingleTurnEnv",
        "MultiTurnEnv",
        "ToolEnv",
    ]:
        assert name in envs.__all__
