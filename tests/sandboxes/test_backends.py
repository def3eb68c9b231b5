"""The sandbox backend registry: each backend's config, creation and handle format by `type`."""

from __future__ import annotations

import pytest

from proctor.errors import ConfigError
from proctor.sandboxes import backends
from proctor.sandboxes.local import LocalSandbox
from proctor.sandboxes.sandbox import SandboxHandle
from proctor.server.hosted.settings import LauncherSettings


def test_the_registered_backends() -> None:
    assert backends.backend_types() == ("local", "ray")
    for name in backends.backend_types():
        module = backends.backend_module(name)
        assert module.Config.model_fields["type"].default == name


def test_settings_pick_the_backend_by_type() -> None:
    backend = LauncherSettings(sandbox="local").backend()
    assert isinstance(backend, LocalSandbox) and backend.name == "local"


def test_an_unknown_backend_is_one_line_naming_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="use one of local, ray"):
        backends.backend_module("docker")
    with pytest.raises(ConfigError, match="sandbox"):
        LauncherSettings.load(sandbox="docker")


def test_ray_needs_its_address() -> None:
    with pytest.raises(ConfigError, match="PROCTOR_HOSTED_RAY_ADDRESS"):
        backends.create_backend("ray", {"ray_address": None})


def test_each_backend_stores_its_handle_in_its_own_format() -> None:
    local = SandboxHandle("local", "4242", 1700000000.5, "/data/sandboxes/e1/sandbox.log")
    assert local.token() == "4242@1700000000.5"
    assert SandboxHandle.from_token("local", local.token(), log_path=local.log_path) == local
    ray = SandboxHandle("ray", "proctor-e1-0123abcd")
    assert ray.token() == "proctor-e1-0123abcd"
    assert SandboxHandle.from_token("ray", ray.token(), log_path=None) == ray
