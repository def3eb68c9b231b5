"""Which names are verifiers environments, and their `[env]` config, validated by verifiers.

A name is a verifiers environment when it resolves as `vf-eval` resolves a taskset id: the
installed package `name` (hub form `owner/name@version` read as `name`, `-` as `_`) exporting
a `verifiers.v1.Taskset` subclass, or one of the tasksets bundled with verifiers.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import re
import sys
import tomllib
from importlib import metadata
from importlib.metadata import packages_distributions
from pathlib import Path
from typing import TYPE_CHECKING, Any

from proctor.errors import ConfigError

if TYPE_CHECKING:
    from pydantic import ValidationError

logger = logging.getLogger(__name__)

EXTRA = "proctor[verifiers]"
"""The optional extra that installs the tested verifiers range."""


def module_name(name: str) -> str:
    """The module `vf-eval` imports for a taskset id (`owner/name@1.0` -> `name`)."""
    return name.rsplit("/", 1)[-1].split("@", 1)[0].replace("-", "_").lower()


def _find_spec(module: str) -> Any:
    try:
        return importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None


def _bundled(module: str) -> bool:
    """Whether verifiers ships a taskset `module` (looked up on disk: importing verifiers
    costs a second, which a proctor built-in should not pay)."""
    spec = _find_spec("verifiers")
    if spec is None or not spec.submodule_search_locations:
        return False
    for root in spec.submodule_search_locations:
        base = Path(root) / "v1" / "tasksets"
        if (base / module / "__init__.py").is_file() or (base / f"{module}.py").is_file():
            return True
    return False


def is_verifiers_environment(name: str) -> bool:
    """Whether `name` names a verifiers environment.

    Raises:
        ConfigError: it is one, but verifiers is not installed (the sentence names the
            extra), or its package is broken.
    """
    module = module_name(name)
    if not module.isidentifier() or module in sys.stdlib_module_names:
        return False
    installed = _find_spec("verifiers") is not None
    if _find_spec(module) is None:
        return installed and _bundled(module)
    if not installed:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as e:
            if (e.name or "").split(".")[0] == "verifiers":
                raise ConfigError(
                    f"{name} is a verifiers environment; install the extra to run it: "
                    f"pip install '{EXTRA}'."
                ) from e
        except Exception:
            logger.debug("module %s failed to import", module, exc_info=True)
        return False
    from verifiers.v1.utils.loaders import taskset_class

    try:
        taskset_class(name)
    except (TypeError, AttributeError):
        return False  # a module of that name, but no taskset: not verifiers'
    except ModuleNotFoundError as e:
        # The package is there (found above), so something it imports is missing.
        raise ConfigError(f"verifiers environment {name} failed to import: {e}") from e
    except Exception as e:
        raise ConfigError(
            f"verifiers environment {name} failed to load ({type(e).__name__}: {e}); "
            "fix or reinstall its package."
        ) from e
    return True


def bundled_tasksets() -> list[str]:
    """The taskset ids verifiers ships (`verifiers/v1/tasksets/*`), read from disk."""
    spec = _find_spec("verifiers")
    if spec is None or not spec.submodule_search_locations:
        return []
    found: set[str] = set()
    for root in spec.submodule_search_locations:
        base = Path(root) / "v1" / "tasksets"
        for entry in base.glob("*") if base.is_dir() else ():
            stem = entry.stem if entry.suffix == ".py" else entry.name
            if stem.startswith("_") or not stem.isidentifier():
                continue
            if entry.suffix == ".py" or (entry / "__init__.py").is_file():
                found.add(stem.replace("_", "-"))
    return sorted(found)


def package_of(name: str) -> tuple[str, str | None] | None:
    """The distribution that provides the verifiers environment `name` and its version:
    the installed package's (verifiers' own for a bundled taskset), else the version in the
    `pyproject.toml` beside a source checkout on the path; None when nothing says."""
    module = module_name(name)
    spec = _find_spec(module)
    if spec is None:
        return ("verifiers", _version("verifiers")) if _bundled(module) else None
    # The distribution is usually named as its module; scanning them all costs seconds.
    for guess in dict.fromkeys((module, module.replace("_", "-"))):
        if module in _top_level_of(guess):
            return guess, _version(guess)
    origin = Path(spec.origin) if spec.origin else None
    project = origin.parent.parent / "pyproject.toml" if origin else None
    if project is not None and project.is_file():
        try:
            meta = tomllib.loads(project.read_text()).get("project", {})
        except (OSError, tomllib.TOMLDecodeError):
            return None
        if isinstance(meta.get("name"), str):
            version = meta.get("version")
            return meta["name"], version if isinstance(version, str) else None
    for dist in packages_distributions().get(module, []):
        return dist, _version(dist)
    return None


def _top_level_of(dist: str) -> list[str]:
    try:
        return _top_level(metadata.distribution(dist))
    except metadata.PackageNotFoundError:
        return []


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def installed_environments() -> list[tuple[str, str]]:
    """Each installed verifiers environment, as `vf-eval` names it, and where it comes from
    (`package@version`, or `verifiers@version (bundled)`), sorted by name.

    A package is one when it depends on verifiers and a module of it exports a taskset;
    bundled tasksets come from verifiers itself.
    """
    if _find_spec("verifiers") is None:
        return []
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        dist_name = dist.metadata["Name"] or ""
        if dist_name.lower() == "verifiers" or not _requires_verifiers(dist):
            continue
        for module in _top_level(dist):
            name = module.replace("_", "-")
            try:
                if is_verifiers_environment(module):
                    found[name] = f"{dist_name}@{dist.version}"
            except ConfigError as e:
                logger.warning("verifiers environment %s is broken: %s", name, e)
    bundled = f"verifiers@{_version('verifiers')} (bundled)"
    for name in bundled_tasksets():
        found.setdefault(name, bundled)
    return sorted(found.items())


_REQUIRES_VERIFIERS = re.compile(r"^verifiers\b(?!-)", re.IGNORECASE)


def _requires_verifiers(dist: metadata.Distribution) -> bool:
    return any(_REQUIRES_VERIFIERS.match(req) for req in dist.requires or ())


def _top_level(dist: metadata.Distribution) -> list[str]:
    """The importable top-level modules a distribution installs."""
    text = dist.read_text("top_level.txt")
    if text:
        return [line.strip() for line in text.splitlines() if line.strip().isidentifier()]
    modules: set[str] = set()
    for file in dist.files or ():
        top = (file.parts[0] if file.parts else "").removesuffix(".py")
        if top.isidentifier() and top != "__pycache__":
            modules.add(top)
    return sorted(modules)


def env_config(name: str, env_args: dict[str, Any]) -> Any:
    """The verifiers `EnvConfig` for `name` and `--env-args` (the `[env]` block), narrowed
    and validated by verifiers as `vf-eval` does.

    Raises:
        ConfigError: verifiers' config models reject the settings (their message, one line).
    """
    from pydantic import ValidationError
    from verifiers.v1.utils.loaders import resolve_env_config

    data = dict(env_args)
    taskset = data.get("taskset") or {}
    if not isinstance(taskset, dict):
        raise ConfigError("--env-args taskset must be a table of the taskset's settings.")
    if taskset.get("id") not in (None, name):
        raise ConfigError(
            f"--env-args names taskset {taskset['id']!r} but the environment is {name!r}; "
            "drop taskset.id from --env-args (the environment name is the taskset id)."
        )
    data["taskset"] = {**taskset, "id": name}
    try:
        return resolve_env_config(data)
    except ValidationError as e:
        raise ConfigError(f"environment {name} rejects its settings: {describe(e)}") from e
    except (ValueError, TypeError, ImportError) as e:
        raise ConfigError(f"environment {name} rejects its settings: {one_line(e)}") from e


def describe(error: ValidationError) -> str:
    """A pydantic error as one sentence naming the `--env-args` key (`taskset.foo`)."""
    errors = error.errors()
    first = errors[0]
    where = ".".join(str(part) for part in first.get("loc", ()))
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    message = one_line(first.get("msg", "invalid")).rstrip(".")
    key = f"--env-args {where}: " if where else ""
    return f"{key}{message}{more}; fix it in --env-args or the TOML [env_args] table."


def one_line(error: BaseException | str) -> str:
    """The first line of an error's text."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
