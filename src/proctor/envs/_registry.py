"""Finding environments: the `proctor.environments` entry-point group.

A package offers an environment by declaring, in its `pyproject.toml`,

    [project.entry-points."proctor.environments"]
    my-env = "my_package.my_env:load_environment"

where `load_environment(**env_args) -> Environment`.

A name may also be a verifiers environment (`proctor.envs.verifiers`). The rule when both
could answer: an installed verifiers environment wins over a proctor environment of the same
name (a package the user installed is what they mean), with a warning; `proctor/NAME` always
names proctor's own.
"""

from __future__ import annotations

import difflib
import inspect
import logging
from dataclasses import replace
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from proctor.envs._environment import Environment, EnvironmentInfo
from proctor.errors import ConfigError, EnvironmentNotFound

logger = logging.getLogger(__name__)

GROUP = "proctor.environments"


def _entry_points() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def _check_arguments(name: str, factory: Any, env_args: dict[str, Any]) -> None:
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    accepted = [n for n, p in params.items() if p.kind is not inspect.Parameter.VAR_POSITIONAL]
    unknown = sorted(set(env_args) - set(accepted))
    if unknown:
        takes = ", ".join(accepted) if accepted else "no arguments"
        raise ConfigError(
            f"environment {name} has no argument {', '.join(unknown)}; it takes: {takes}."
        )


def load_environment(name: str, **env_args: Any) -> Environment:
    """Load the installed environment `name`, passing it `env_args`.

    Raises:
        EnvironmentNotFound: nothing of that name is installed (the message lists what is).
        ConfigError: the environment failed to load or rejected its arguments.
    """
    eps = _entry_points()
    own = name.removeprefix(BUILTIN_PREFIX)
    if own == name:
        from proctor.envs.verifiers import is_verifiers_environment, load_verifiers_environment

        if is_verifiers_environment(name):
            if name in eps:
                _warn_shadowed(name)
            return load_verifiers_environment(name, env_args)
    ep = eps.get(own)
    if ep is None:
        installed = ", ".join(sorted(eps)) or "none"
        near = difflib.get_close_matches(own, list(eps), n=1, cutoff=0.75)
        guess = f"did you mean {near[0]}? " if near else ""
        raise EnvironmentNotFound(
            f"no environment named {name!r} is installed (installed: {installed}); "
            f"{guess}pick one of those or install the package that provides it."
        )
    return _load(own, ep, env_args)


BUILTIN_PREFIX = "proctor/"
"""`proctor/NAME` names proctor's environment NAME, never a verifiers one."""

_warned: set[str] = set()


def _warn_shadowed(name: str) -> None:
    if name not in _warned:
        _warned.add(name)
        logger.warning(
            "%s is both a verifiers environment and a proctor one; running the verifiers "
            "environment (pass %s%s for proctor's)",
            name,
            BUILTIN_PREFIX,
            name,
        )


def _load(name: str, ep: EntryPoint, env_args: dict[str, Any]) -> Environment:
    try:
        factory = ep.load()
    except Exception as e:
        raise ConfigError(
            f"environment {name} could not be imported from {ep.value} ({type(e).__name__}: "
            f"{e}); reinstall the package that provides it."
        ) from e
    _check_arguments(name, factory, env_args)
    try:
        env = factory(**env_args)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"environment {name} rejected its arguments: {e}") from e
    if not isinstance(env, Environment):
        raise ConfigError(
            f"{ep.value} returned {type(env).__name__}, not an Environment; fix that package."
        )
    return env


def list_environments() -> list[EnvironmentInfo]:
    """Every installed environment, sorted by name: proctor's, loaded with their default
    arguments, and the installed verifiers environments (not loaded).

    One that fails to load is listed with kind `broken` and the reason as its description. A
    proctor environment that a verifiers one of the same name shadows is listed as
    `proctor/NAME`, the name that runs it.
    """
    infos: list[EnvironmentInfo] = []
    for name, ep in sorted(_entry_points().items()):
        try:
            info = _load(name, ep, {}).info()  # the entry points are scanned once
        except Exception as e:
            logger.warning("environment %s failed to load: %s", name, e)
            infos.append(EnvironmentInfo(name, f"failed to load: {e}", "broken", None, ep.value))
            continue
        infos.append(EnvironmentInfo(info.name, info.description, info.kind, info.size, ep.value))
    from proctor.envs.verifiers import installed_environments

    verifiers = installed_environments()
    shadowed = {name for name, _ in verifiers}
    # A shadowed one runs as `proctor/NAME`; the bare name runs the verifiers one.
    infos = [
        replace(info, name=f"{BUILTIN_PREFIX}{info.name}") if info.name in shadowed else info
        for info in infos
    ]
    for name, source in verifiers:
        # Not loaded: counting a taskset's tasks may read a dataset from a hub.
        description = "verifiers environment (tasks counted when it runs)"
        infos.append(EnvironmentInfo(name, description, "finite", None, source, "verifiers"))
    return sorted(infos, key=lambda info: info.name.removeprefix(BUILTIN_PREFIX))
