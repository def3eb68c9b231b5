"""The public API surface: curated, sorted `__all__`s that resolve, a cheap `import proctor`,
and no module reaching into another package's private `_modules` (STYLE.md rules 1 and 3).
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

import proctor

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "proctor"


def module_name(path: Path) -> str:
    """`src/proctor/runs/_run.py` -> `proctor.runs._run`; a package's `__init__` -> the package."""
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def defines_all(path: Path) -> bool:
    """Whether the module assigns `__all__` at its top level (read with ast, not imported)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(
        isinstance(node, ast.Assign | ast.AnnAssign)
        and any(
            isinstance(t, ast.Name) and t.id == "__all__"
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        )
        for node in tree.body
    )


MODULES_WITH_ALL = sorted(module_name(p) for p in PACKAGE.rglob("*.py") if defines_all(p))


def test_the_expected_packages_curate_their_api() -> None:
    for name in ["proctor", "proctor.envs", "proctor.eval", "proctor.models", "proctor.runs"]:
        assert name in MODULES_WITH_ALL


@pytest.mark.parametrize("name", MODULES_WITH_ALL)
def test_all_is_sorted_unique_and_resolves(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert exported == sorted(exported)
    assert len(exported) == len(set(exported))
    for attr in exported:
        assert getattr(module, attr) is not None, f"{name}.{attr}"
        assert not attr.startswith("_") or attr == "__version__", f"{name}.{attr} is private"


def test_top_level_exports() -> None:
    from proctor import envs, errors

    for attr in ["Environment", "Task", "Taskset", "Episode", "reward", "metric"]:
        assert getattr(proctor, attr) is getattr(envs, attr)
    for attr in ["load_environment", "list_environments", "SingleTurnEnv", "ToolEnv"]:
        assert getattr(proctor, attr) is getattr(envs, attr)
    assert proctor.runs is importlib.import_module("proctor.runs")
    assert callable(proctor.runs.init)
    exceptions = [v for v in vars(errors).values() if isinstance(v, type)]
    exceptions = [e for e in exceptions if issubclass(e, errors.ProctorError)]
    assert exceptions and all(getattr(proctor, e.__name__) is e for e in exceptions)
    assert isinstance(proctor.__version__, str) and proctor.__version__
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = proctor.nope


def test_every_public_top_level_name_is_in_all() -> None:
    for attr in proctor.__all__:
        getattr(proctor, attr)  # resolve the lazy ones too
    public = {
        name
        for name, value in vars(proctor).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public <= set(proctor.__all__)
    assert set(dir(proctor)) >= set(proctor.__all__)


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from proctor import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(proctor.__all__)


def test_import_proctor_stays_light() -> None:
    # Only the exception tree loads eagerly; the engine, the SDK and their third-party
    # dependencies wait until a name is used. Measured against what the interpreter had
    # already loaded, so site hooks do not count.
    code = (
        "import json, sys; before = set(sys.modules); import proctor; "
        "print(json.dumps(sorted(set(sys.modules) - before)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = set(json.loads(out.stdout))
    assert {m for m in loaded if m.split(".")[0] == "proctor"} == {"proctor", "proctor.errors"}
    heavy = {"typing", "asyncio", "importlib.metadata", "pydantic", "httpx", "openai"}
    assert loaded & heavy == set()


def private_imports(module: str, source: str, *, is_package: bool = False) -> list[str]:
    """Imports in `source` (the code of `module`) of another package's `_private` module or name."""
    own_package = module if is_package else module.rpartition(".")[0]
    targets: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                anchor = own_package.split(".")[: len(own_package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    found = []
    for lineno, target in targets:
        parts = target.split(".")
        if parts[0] != "proctor":
            continue
        private = [i for i, part in enumerate(parts) if part.startswith("_") and part[1:2] != "_"]
        if private and ".".join(parts[: private[0]]) != own_package:
            found.append(f"{module}:{lineno} imports {target}")
    return found


def test_no_module_imports_another_packages_private_module() -> None:
    violations = [
        v
        for path in sorted(PACKAGE.rglob("*.py"))
        for v in private_imports(
            module_name(path),
            path.read_text(encoding="utf-8"),
            is_package=path.name == "__init__.py",
        )
    ]
    assert violations == []


def test_the_private_import_check_catches_one() -> None:
    source = (
        "from proctor.runs._spool import Spool\n"
        "from proctor.eval import _own_helper\n"
        "from ._sibling import x\n"
        "from ..runs import _client\n"
        "import proctor.envs._task\n"
        "from proctor.envs import Task\n"
    )
    assert private_imports("proctor.eval.probe", source) == [
        "proctor.eval.probe:1 imports proctor.runs._spool.Spool",
        "proctor.eval.probe:4 imports proctor.runs._client",
        "proctor.eval.probe:5 imports proctor.envs._task",
    ]
