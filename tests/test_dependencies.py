"""Every third-party module proctor's package imports is declared in pyproject.toml.

An undeclared import works wherever something else happens to install it, and fails with
`ModuleNotFoundError` where nothing does (the error path once imported `httpx2`, which came
only with one build of the `openai` SDK).
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "proctor"


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        requirements += extra
    return {_normalize(re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0]) for r in requirements}


def imported() -> set[str]:
    modules: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    return {
        m for m in modules if m not in sys.stdlib_module_names and m not in ("proctor", "_typeshed")
    }


def test_every_import_of_the_package_is_declared() -> None:
    providers = importlib.metadata.packages_distributions()
    names = declared()
    # A module of an extra not installed here (verifiers has its own venv) is known by name.
    undeclared = {
        module: providers.get(module, ["(not installed)"])
        for module in sorted(imported())
        if not any(_normalize(dist) in names for dist in providers.get(module, [module]))
    }
    assert undeclared == {}, "declare these in pyproject.toml"


def test_the_engine_does_not_import_the_openai_sdk() -> None:
    assert "openai" not in imported()
