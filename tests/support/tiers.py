"""The two tiers of the suite, and how xdist shares them out (a pytest plugin).

A test is in the `process` tier when it starts a process — a server, the demo model, the CLI,
a sandbox, a browser, a Ray head node — and in the in-process tier otherwise; `scripts/test
--fast` runs only the latter. The marker is set here, in a run that selects by it (`-m` naming
`process`, or `PROCTOR_TEST_TIER=fast`), so a new test needs no decoration:
- a test marked `process`, `e2e`, `ray` or `browser`;
- a test whose function or one of its fixtures names a way to start one (`subprocess`,
  `ManagedProcess`, `start_platform`, ...), or refers to a function or class of the test tree
  that does, however deep (a module's `proctor(...)` helper that runs the CLI).
In the in-process tier a test that starts a process anyway fails, naming the marker to add.

Tests that share a module-scoped fixture (a server for the module, a Ray head node) carry an
`xdist_group` of their module, so `--dist loadgroup` starts that fixture once, on one worker.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import re
import subprocess
import textwrap
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


def _of_the_tests(value: Any) -> bool:
    """A function or class of the test tree (other than this plugin)."""
    owner = getattr(value, "__module__", None) or ""
    ours = owner.startswith("tests.") and owner != __name__
    return ours and (inspect.isfunction(value) or inspect.isclass(value))


def _referenced(source: str, namespace: dict[str, Any]) -> Iterator[Any]:
    """The functions and classes of the test tree that `source` names: globals of its module,
    `helpers.name` of a test module it holds, and names it imports from `tests.*` itself."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            yield namespace.get(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            holder = namespace.get(node.value.id)
            if inspect.ismodule(holder) and holder.__name__.startswith("tests."):
                yield getattr(holder, node.attr, None)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests."):
            module = importlib.import_module(node.module or "")
            yield from (getattr(module, alias.name, None) for alias in node.names)


@cache
def _reaches_a_process(root: Any) -> bool:
    """`root` (a test, a fixture, a helper) names a way to start a process, or a function or
    class of the test tree it refers to does, however deep."""
    seen: set[int] = set()
    todo = [root]
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        try:
            source = textwrap.dedent(inspect.getsource(obj))
        except (OSError, TypeError):
            continue
        if STARTS_A_PROCESS.search(source):
            return True
        namespace = getattr(inspect.getmodule(obj), "__dict__", {})
        todo.extend(value for value in _referenced(source, namespace) if _of_the_tests(value))
    return False


def starts_a_process(item: pytest.Item) -> bool:
    """Whether `item` is in the process tier."""
    if any(item.get_closest_marker(name) for name in PROCESS_MARKERS):
        return True
    function = getattr(item, "function", None)
    if function is None or _reaches_a_process(function):
        return True
    info = getattr(item, "_fixtureinfo", None)
    for defs in info.name2fixturedefs.values() if info else ():
        for fixturedef in defs:
            if _of_the_tests(fixturedef.func) and _reaches_a_process(fixturedef.func):
                return True
    return False


def _module_scoped(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    return any(
        fixturedef.scope in ("module", "package", "class")
        for defs in (info.name2fixturedefs.values() if info else ())
        for fixturedef in defs
    )


def _selects_by_tier(config: pytest.Config) -> bool:
    """Whether this run chooses tests by their tier. Only then is each test's marker worked out:
    that reads every test's source (~5 s of CPU for the whole suite, in each xdist worker)."""
    return _in_process_tier(config) or "process" in str(config.getoption("markexpr", "") or "")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    by_tier = _selects_by_tier(config)
    for item in items:
        if by_tier and starts_a_process(item):
            item.add_marker(pytest.mark.process)
        if not item.get_closest_marker("xdist_group") and _module_scoped(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


def _in_process_tier(config: pytest.Config) -> bool:
    selected = str(config.getoption("markexpr", "") or "")
    return os.environ.get("PROCTOR_TEST_TIER") == "fast" or "not process" in selected


@pytest.fixture(autouse=True)
def _no_process_in_the_fast_tier(request: pytest.FixtureRequest) -> Iterator[None]:
    """In the in-process tier, starting a process fails the test with the fix, even where the
    code under test catches the refusal (a sandbox that reports a failed start as a reward)."""
    if not _in_process_tier(request.config):
        yield
        return
    original = subprocess.Popen.__init__
    message = (
        f"{request.node.nodeid} starts a process in the in-process tier; mark it "
        "`@pytest.mark.process` (or its module: `pytestmark = pytest.mark.process`)."
    )
    refused: list[str] = []

    def refuse(self: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:
        refused.append(message)
        raise AssertionError(message)

    subprocess.Popen.__init__ = refuse  # type: ignore[method-assign]
    try:
        yield
    finally:
        subprocess.Popen.__init__ = original  # type: ignore[method-assign]
    if refused:
        pytest.fail(message, pytrace=False)
