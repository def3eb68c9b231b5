"""The two tiers of the suite, and how xdist shares them out (a pytest plugin).

A test is in the `process` tier when it starts a process — a server, the demo model, the CLI,
a sandbox, a browser, a Ray head node — and in the in-process tier otherwise; `scripts/test
--fast` runs only the latter. The marker is set here, so a new test needs no decoration:
- a test marked `process`, `e2e`, `ray` or `browser`;
- a test whose module (or a test module it imports from), or the function of one of its
  fixtures, names a way to start one (`subprocess`, `ManagedProcess`, `start_platform`, ...).
In the in-process tier a test that starts a process anyway fails, naming the marker to add.

Tests that share a module-scoped fixture (a server for the module, a Ray head node) carry an
`xdist_group` of their module, so `--dist loadgroup` starts that fixture once, on one worker.
"""

from __future__ import annotations

import ast
import inspect
import os
import re
import subprocess
from collections.abc import Iterator
from functools import cache
from typing import Any

import pytest

PROCESS_MARKERS = ("process", "e2e", "ray", "browser")

STARTS_A_PROCESS = re.compile(
    r"\b(subprocess|Popen|ManagedProcess|start_platform|platform_on|start_demo_model|PROCTOR"
    r"|pty|pexpect|multiprocessing|ProcessPoolExecutor|create_subprocess_exec"
    r"|create_subprocess_shell|os\.fork|sync_playwright|run_cli|run_proctor|run_on_a_terminal"
    r"|LocalSandbox|Launcher)\b"
)
"""Names in a test's source that mean it starts a process."""


@cache
def _source_starts_a_process(obj: Any) -> bool:
    try:
        source = inspect.getsource(obj)
    except (OSError, TypeError):
        return False
    return STARTS_A_PROCESS.search(source) is not None


@cache
def _module_starts_a_process(module: Any) -> bool:
    """Its source names a way to start a process, or a helper it imports from another test
    module does (`from tests.cli.test_first_hour_mistakes import proctor`: a CLI run)."""
    if _source_starts_a_process(module):
        return True
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError, SyntaxError):
        return False
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests."):
            for alias in node.names:
                helper = getattr(module, alias.asname or alias.name, None)
                if callable(helper) and _source_starts_a_process(helper):
                    return True
    return False


def starts_a_process(item: pytest.Item) -> bool:
    """Whether `item` is in the process tier."""
    if any(item.get_closest_marker(name) for name in PROCESS_MARKERS):
        return True
    module = getattr(item, "module", None)
    if module is not None and _module_starts_a_process(module):
        return True
    info = getattr(item, "_fixtureinfo", None)
    for defs in info.name2fixturedefs.values() if info else ():
        for fixturedef in defs:
            owner = getattr(fixturedef.func, "__module__", "")
            ours = owner.startswith("tests.") and owner != __name__
            if ours and _source_starts_a_process(fixturedef.func):
                return True
    return False


def _module_scoped(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    return any(
        fixturedef.scope in ("module", "package", "class")
        for defs in (info.name2fixturedefs.values() if info else ())
        for fixturedef in defs
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if starts_a_process(item):
            item.add_marker(pytest.mark.process)
        if not item.get_closest_marker("xdist_group") and _module_scoped(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


def _in_process_tier(config: pytest.Config) -> bool:
    selected = str(config.getoption("markexpr", "") or "")
    return os.environ.get("PROCTOR_TEST_TIER") == "fast" or "not process" in selected


@pytest.fixture(autouse=True)
def _no_process_in_the_fast_tier(request: pytest.FixtureRequest) -> Iterator[None]:
    """In the in-process tier, starting a process fails the test with the fix."""
    if not _in_process_tier(request.config):
        yield
        return
    original = subprocess.Popen.__init__
    nodeid = request.node.nodeid

    def refuse(self: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:
        raise AssertionError(
            f"{nodeid} starts a process in the in-process tier; mark it "
            "`@pytest.mark.process` (or its module: `pytestmark = pytest.mark.process`)."
        )

    subprocess.Popen.__init__ = refuse  # type: ignore[method-assign]
    try:
        yield
    finally:
        subprocess.Popen.__init__ = original  # type: ignore[method-assign]
