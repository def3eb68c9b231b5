"""Fixtures of the runs SDK tests: one platform per module, a clean client environment."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.platform import Platform, start_platform

CLIENT_VARS = ("PROCTOR_API_URL", "PROCTOR_API_KEY", "PROCTOR_TEAM_ID", "PROCTOR_RUNS_MODE")


@pytest.fixture(scope="module")
def plat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    """A platform server shared by the tests of one module (they never stop it)."""
    data = tmp_path_factory.mktemp("platform")
    platform = start_platform(data)
    yield platform
    platform.process.stop()


@pytest.fixture(autouse=True)
def client_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No PROCTOR_* client variables and a private HOME (so no ~/.proctor/config.toml)."""
    for var in CLIENT_VARS:
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def online(monkeypatch: pytest.MonkeyPatch, plat: Platform) -> Platform:
    """The shared platform, with PROCTOR_API_URL and PROCTOR_API_KEY pointing at it."""
    monkeypatch.setenv("PROCTOR_API_URL", plat.url)
    monkeypatch.setenv("PROCTOR_API_KEY", plat.api_key)
    return plat
