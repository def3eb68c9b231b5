"""The house rule for tests that need a tool (`tests.support.tools`): a missing tool skips
in a bare run on a workstation and fails under CI or scripts/test, which install every one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import tools


@pytest.mark.parametrize("value", ["true", "1", "yes", "True"])
def test_under_ci_a_missing_tool_fails(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.fail.Exception, match="no-such-tool-4e1f is not installed"):
        tools.tool("no-such-tool-4e1f")
    with pytest.raises(pytest.fail.Exception, match="under CI a missing tool fails the test"):
        tools.require("bubblewrap cannot create namespaces")


@pytest.fixture(autouse=True)
def bare_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in a bare `pytest` run: not under scripts/test, which says it installed every tool."""
    monkeypatch.delenv(tools.INSTALLED, raising=False)


def test_under_scripts_test_a_missing_tool_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv(tools.INSTALLED, "installed")
    with pytest.raises(pytest.fail.Exception, match="scripts/test installed every tool"):
        tools.tool("no-such-tool-4e1f")
    with pytest.raises(pytest.fail.Exception, match="no_such_package_4e1f is not importable"):
        tools.package("no_such_package_4e1f")


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


def test_every_skip_goes_through_the_rule() -> None:
    """A test that skips by itself (`pytest.importorskip`, `pytest.skip`, a `skipif`) would
    skip under CI too, hiding a missing feature: each goes through `tests.support.tools`."""
    tests = Path(__file__).parent
    own = {tests / "support" / "tools.py", Path(__file__)}
    found = [
        f"{path.relative_to(tests)}:{number}"
        for path in sorted(tests.rglob("*.py"))
        if path not in own and "fixtures" not in path.parts
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"pytest\.(importorskip|skip)\(|mark\.skip(if)?\b", line)
    ]
    assert not found, f"skips outside tests.support.tools: {found}"


def test_a_missing_package_skips_elsewhere_and_fails_under_ci(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no_such_package_4e1f is not importable"):
        tools.package("no_such_package_4e1f")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="no_such_package_4e1f is not importable"):
        tools.package("no_such_package_4e1f")
    assert tools.package("json").dumps([]) == "[]"
