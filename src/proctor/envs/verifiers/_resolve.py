"""Which names are verifiers environments, and their `[env]` config, validated by verifiers.

A name is a verifiers environment when it resolves as `vf-eval` resolves a taskset id: the
installed package `name` (hub form `owner/name@version` read as `name`, `-` as `_`) exporting
a `verifiers.v1.Taskset` subclass, or one of the tasksets bundled with verifiers.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
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
