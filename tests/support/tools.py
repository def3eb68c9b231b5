"""Tests that need a tool on the machine (bubblewrap, tinyproxy, openssl, chromium, axe-core,
Ray, verifiers, PostgreSQL, a host that can confine sandboxes) fail without it wherever the
suite was promised every tool, and skip only in a bare `pytest` run on a workstation.

`scripts/test` (the README's test command, and CI's) installs and starts every one of them
before the suite runs, and says so to the tests (`PROCTOR_TEST_TOOLS=installed`); CI (`CI` set
to anything but empty, `0`, `false` or `no`) promises the same. There a missing tool is a
missing feature: the test fails with the reason instead of hiding behind a skip.
"""

from __future__ import annotations

import importlib
import os
import shutil
from types import ModuleType
from typing import NoReturn

import pytest

NOT_CI = ("", "0", "false", "no")
INSTALLED = "PROCTOR_TEST_TOOLS"
"""Set to `installed` by `scripts/test` (as root) once it has installed every tool."""


def in_ci() -> bool:
    """Whether the suite runs under CI (the `CI` variable, as CI services set it)."""
    return os.environ.get("CI", "").strip().lower() not in NOT_CI


def missing(reason: str) -> NoReturn:
    """Skip the test for `reason` in a bare run on a workstation; fail it under CI or
    `scripts/test`, which installed every tool."""
    if in_ci():
        pytest.fail(f"{reason} (under CI a missing tool fails the test)", pytrace=False)
    if os.environ.get(INSTALLED) == "installed":
        why = "scripts/test installed every tool, so a missing one fails the test"
        pytest.fail(f"{reason} ({why})", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require(problem: str | None) -> None:
    """Go on when `problem` is None; otherwise skip, or fail under CI, naming it."""
    if problem is not None:
        missing(problem)


def tool(name: str, hint: str = "scripts/test installs it") -> str:
    """The path of the program `name` (a name on PATH or an absolute path); skips the test
    without it, or fails it under CI."""
    path = shutil.which(name)
    if path is None:
        missing(f"{name} is not installed ({hint})")
    return path


def package(name: str, hint: str = "scripts/test installs it") -> ModuleType:
    """The module `name` of an optional extra (verifiers, ray); skips the test (or a whole
    module, at its top) without it, or fails it under CI, as `pytest.importorskip` would not."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        missing(f"{name} is not importable ({e}; {hint})")


def confinable() -> None:
    """Skip (fail under CI, which runs as root with bubblewrap) when this host cannot confine
    hosted sandboxes."""
    from proctor.sandboxes.confine import host_problem

    problem = host_problem()
    require(None if problem is None else f"this machine cannot confine sandboxes: {problem}")
