"""The package structure's rules, read from the sources (docs/architecture.md).

- DESIGN's boundaries, as import-linter contracts in pyproject.toml: parts depend one way
  (which also rules out a cycle), the server never imports the engine, the runs SDK never
  imports environments, the contract imports nothing; checked statically (imports inside
  functions count) and at run time (what `import proctor.server.app` loads).
- Every exception class proctor defines lives in `proctor.errors`, the one tree, except the
  server's HTTP answers (`ServerError` and its family), which `proctor.server.errors` holds.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import proctor.errors
import proctor.server.errors

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "proctor"
ROOT = SRC.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

ENGINE = ("proctor.eval.runner", "proctor.eval.scheduler", "proctor.eval.workers", "proctor.envs")
"""What the server must never load: the engine that runs rollouts, and the environments."""


def lint_imports(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )


def test_the_import_contracts_hold() -> None:
    """pyproject.toml's contracts: DESIGN's layers and forbidden imports, run as CI runs them."""
    result = lint_imports()
    assert result.returncode == 0, result.stdout[-3000:]
    assert "0 broken" in result.stdout


def test_a_broken_contract_is_caught(tmp_path: Path) -> None:
    # The server does import the contract: a contract forbidding that must fail.
    config = tmp_path / "contracts.toml"
    config.write_text(
        '[tool.importlinter]\nroot_package = "proctor"\n\n'
        "[[tool.importlinter.contracts]]\n"
        'name = "planted"\ntype = "forbidden"\n'
        'source_modules = ["proctor.server"]\nforbidden_modules = ["proctor.contract"]\n'
    )
    result = lint_imports("--config", str(config))
    assert result.returncode == 1
    assert "planted BROKEN" in result.stdout


def test_the_server_app_loads_no_engine_module() -> None:
    probe = (
        "import sys, proctor.server.app; "
        "print('\\n'.join(m for m in sys.modules if m.startswith('proctor.')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    ).stdout.split()
    assert [m for m in loaded if m.startswith(ENGINE)] == []
    assert "proctor.eval.config" in loaded  # what the launcher does read: a sandbox's command


def _is_exception(node: ast.ClassDef) -> bool:
    names = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
    return any(n.endswith(("Error", "Exception")) or n in _TREE for n in names)


_TREE = {
    name
    for name, value in vars(proctor.errors).items()
    if isinstance(value, type) and issubclass(value, BaseException)
}


def test_every_public_exception_is_in_proctor_errors() -> None:
    outside = [
        f"{path.relative_to(SRC)}:{node.lineno} {node.name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path not in (PACKAGE / "errors.py", PACKAGE / "server" / "errors.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_") and _is_exception(node)
    ]
    assert outside == []


def test_the_tree_in_the_docstring_draws_every_exception() -> None:
    drawn = set((proctor.errors.__doc__ or "").split())
    server = {
        name
        for name, value in vars(proctor.server.errors).items()
        if isinstance(value, type) and issubclass(value, proctor.errors.ProctorError)
    }
    for name in (_TREE | server) - {"Exception", "BaseException"}:
        assert name in drawn, f"{name} is missing from proctor.errors' tree"


def test_only_transition_changes_a_status() -> None:
    """`evaluations.service.transition` is the one place an evaluation's status is written."""
    owner = PACKAGE / "server" / "evaluations" / "service.py"
    writes = [
        f"{path.relative_to(SRC)}:{node.lineno}"
        for path in sorted((PACKAGE / "server").rglob("*.py"))
        if path != owner
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Attribute) and t.attr == "status" for t in node.targets)
    ]
    assert writes == []


def test_the_architecture_page_draws_the_contracted_layers() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in contracts["contracts"] if c["type"] == "layers"]
    page = (ROOT / "docs" / "architecture.md").read_text()
    drawn = page.split("## The arrows", 1)[1].split("```")[1].split()
    assert " ".join(drawn) == " ".join(layers).replace("proctor.", "")
