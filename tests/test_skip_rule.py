"""The house rule for tests that need a tool (`tests.support.tools`): a missing tool skips
on a workstation and fails under CI, where scripts/test installs every one."""

from __future__ import annotations

import pytest

from tests.support import tools


@pytest.mark.parametrize("value", ["true", "1", "yes", "True"])
def test_under_ci_a_missing_tool_fails(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.fail.Exception, match="no-such-tool-4e1f is not installed"):
        tools.tool("no-such-tool-4e1f")
    with pytest.raises(pytest.fail.Exception, match="under CI a missing tool fails the test"):
        tools.require("bubblewrap cannot create namespaces")


@pytest.mark.parametrize("value", [None, "", "0", "false", "no"])
def test_elsewhere_a_missing_tool_skips(monkeypatch: pytest.MonkeyPatch, value: str | None) -> None:
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.skip.Exception, match="scripts/test installs it"):
        tools.tool("no-such-tool-4e1f")
    tools.require(None)  # no problem: the test goes on


def test_a_present_tool_is_found() -> None:
    assert tools.tool("sh").endswith("/sh")
