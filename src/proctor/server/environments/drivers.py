"""Which of proctor's drivers runs a pushed wheel, decided at push time by reading it.

A wheel is runnable when it declares a `proctor.environments` entry point (proctor's own
driver), or when it is a verifiers v1 environment as `vf-eval` resolves one: the module named
for the environment (`reverse-text` -> `reverse_text`) is in the wheel, imports `verifiers.v1`
and exports a `Taskset` subclass through `__all__`. The wheel's sources are only parsed,
never run: the server executes no pushed code. A verifiers environment is accepted only where
the server's own interpreter (which every sandbox runs) has verifiers, and only if none of
its requirements asks for another version of a package installed there: a sandbox adds the
package's own dependencies *after* proctor's, so such a pin would never take effect.
Anything else is refused in one sentence, before the version is published.
"""

from __future__ import annotations

import ast
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Literal

from packaging.requirements import InvalidRequirement, Requirement

from proctor.server.environments.artifacts import MAX_METADATA_BYTES, WheelFacts
from proctor.server.errors import InvalidInput

VERIFIERS_EXTRA = "proctor[verifiers]"
"""What the server's interpreter needs to run verifiers environments."""


@dataclass(frozen=True)
class Driver:
    """How a pushed version runs (stored in the version's details)."""

    kind: Literal["proctor", "verifiers"]
    module: str | None = None
    """For verifiers: the module `vf-eval` imports for the environment's name."""

    def details(self) -> dict[str, str]:
        """The version-details fields that record it."""
        found: dict[str, str] = {"driver": self.kind}
        if self.module:
            found["module"] = self.module
        return found


def module_name(name: str) -> str:
    """The module `vf-eval` imports for an environment id (verifiers' own rule:
    `owner/name@1.0` -> `name`, `-` read as `_`, lower case)."""
    return name.rsplit("/", 1)[-1].split("@", 1)[0].replace("-", "_").lower()


@dataclass
class _Sources:
    """What the parsed sources of one module say about it."""

    imports_v1: bool = False
    imports_verifiers: bool = False
    taskset_classes: int = 0
    exports: bool = False
    exports_taskset: bool = False
    """`__all__` names a Taskset (e.g. one re-exported from verifiers' bundled tasksets)."""
    load_environment: bool = False


def _module_files(wheel: zipfile.ZipFile, module: str) -> list[zipfile.ZipInfo]:
    return [
        m
        for m in wheel.infolist()
        if m.filename.endswith(".py")
        and (m.filename.startswith(f"{module}/") or m.filename == f"{module}.py")
    ]


def _scan(tree: ast.Module, found: _Sources, *, top: bool) -> None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
            found.imports_verifiers |= any(n.split(".")[0] == "verifiers" for n in names)
            found.imports_v1 |= any(n.startswith("verifiers.v1") for n in names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.imports_verifiers |= node.module.split(".")[0] == "verifiers"
            found.imports_v1 |= node.module.startswith("verifiers.v1") or (
                node.module == "verifiers" and any(a.name == "v1" for a in node.names)
            )
        elif isinstance(node, ast.ClassDef) and any(
            "Taskset" in ast.unparse(base) for base in node.bases
        ):
            found.taskset_classes += 1
    if top:
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else []
            if isinstance(node, ast.AnnAssign | ast.AugAssign):
                targets = [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                found.exports = True
                value = getattr(node, "value", None)
                listed: list[ast.expr] = (
                    value.elts if isinstance(value, ast.List | ast.Tuple) else []
                )
                found.exports_taskset |= any(
                    isinstance(n, ast.Constant) and "Taskset" in str(n.value) for n in listed
                )
            found.load_environment |= (
                isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                and node.name == "load_environment"
            )


def _read_sources(path: Path, module: str) -> _Sources | None:
    """The module's sources, parsed (None: the wheel has no such module)."""
    found = _Sources()
    with zipfile.ZipFile(path) as wheel:
        files = _module_files(wheel, module)
        if not files:
            return None
        for member in files:
            if member.file_size > MAX_METADATA_BYTES:
                continue  # generated data, not the environment's code
            with wheel.open(member) as handle:
                text = handle.read(MAX_METADATA_BYTES + 1).decode("utf-8", "replace")
            try:
                tree = ast.parse(text, filename=member.filename)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                raise InvalidInput(
                    f"The wheel's {member.filename[:100]!r} is not valid Python; fix it and "
                    "push again."
                ) from None
            top = member.filename in (f"{module}/__init__.py", f"{module}.py")
            _scan(tree, found, top=top)
    return found


def _version_conflicts(requires: list[str], installed: Callable[[str], str]) -> str | None:
    """A requirement of the wheel that the server's installed version does not meet."""
    for text in requires:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            have = installed(req.name)
        except metadata.PackageNotFoundError:
            continue  # installed for the package, beside proctor's own
        if req.specifier and not req.specifier.contains(have, prereleases=True):
            return f"{req.name}{req.specifier} (proctor runs {req.name} {have})"
    return None


def driver_of(
    path: Path,
    facts: WheelFacts,
    *,
    name: str,
    label: str,
    installed: Callable[[str], str] = metadata.version,
) -> Driver:
    """The driver that runs the wheel pushed as the environment `name` (`label` names the
    push in messages); `installed` gives a distribution's version in the server's
    interpreter (raising `PackageNotFoundError` when absent).

    Raises:
        InvalidInput: proctor cannot run it; the sentence says why and what to do.
    """
    if facts.entry_points:
        return Driver("proctor")
    module = module_name(name)
    sources = _read_sources(path, module)
    if sources is None:
        raise InvalidInput(
            f"{label} has no `proctor.environments` entry point and no module {module!r} "
            f"(what vf-eval imports for {name!r}), so proctor cannot run it; name the "
            "environment after its package or add the entry point, and push again."
        )
    taskset = sources.taskset_classes or sources.exports_taskset
    if not (sources.imports_v1 and taskset and sources.exports):
        if sources.imports_verifiers and sources.load_environment and not sources.imports_v1:
            kind = "an older verifiers environment (`load_environment`)"
        elif sources.imports_v1:
            kind = f"a verifiers module whose `__all__` in {module!r} exports no Taskset"
        else:
            kind = "neither a proctor environment nor a verifiers v1 environment"
        raise InvalidInput(
            f"{label} is {kind}, so proctor cannot run it; export a `verifiers.v1` Taskset "
            f"subclass through `__all__` of {module!r} (or add a `proctor.environments` "
            "entry point) and push again."
        )
    try:
        have = installed("verifiers")
    except metadata.PackageNotFoundError:
        raise InvalidInput(
            f"{label} is a verifiers environment and this platform cannot run one yet; its "
            f"operator installs {VERIFIERS_EXTRA} beside the server, then push again."
        ) from None
    conflict = _version_conflicts(facts.requires_dist, installed)
    if conflict is not None:
        raise InvalidInput(
            f"{label} requires {conflict}, and a hosted run never replaces proctor's own "
            f"packages (verifiers {have} among them); relax that requirement and push again."
        )
    return Driver("verifiers", module)
