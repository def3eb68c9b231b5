"""The registry of sandbox backends, chosen by a `type` (`PROCTOR_HOSTED_SANDBOX`, `--sandbox`).

Each backend is one module that defines, besides its `SandboxBackend` class:

- `Config`: a pydantic model with a `type` field (the backend's name) and its own options,
  filled by `Config.from_settings(values)` from the launcher's settings (a backend with new
  options reads them there too, e.g. from `PROCTOR_HOSTED_<NAME>_*` variables);
- `create(config) -> SandboxBackend`;
- `handle_token(handle) -> str` and `handle_from_token(token, *, log_path) -> SandboxHandle`:
  the handle's format when it is stored with the evaluation.

Adding a backend is that module plus its line in `_MODULES`. Modules are imported on first
use, so `proctor --help` never imports a backend (nor Ray).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

from proctor.errors import ConfigError

if TYPE_CHECKING:
    from proctor.sandboxes.sandbox import SandboxBackend, SandboxHandle

_MODULES = {
    "local": "proctor.sandboxes.local",
    "ray": "proctor.sandboxes.ray_jobs",
}


def backend_types() -> tuple[str, ...]:
    """The registered backends' names, e.g. `("local", "ray")`."""
    return tuple(_MODULES)


def backend_module(type_: str) -> ModuleType:
    """The module of the backend named `type_`.

    Raises:
        ConfigError: no backend has that name.
    """
    try:
        return importlib.import_module(_MODULES[type_])
    except KeyError:
        raise ConfigError(
            f"Unknown sandbox backend {type_!r}; use one of {', '.join(_MODULES)}."
        ) from None


def create_backend(type_: str, settings: Mapping[str, Any]) -> SandboxBackend:
    """A backend of `type_`, configured from the launcher's settings (a `model_dump()`).

    Raises:
        ConfigError: an unknown backend, or options it cannot work with.
    """
    module = backend_module(type_)
    backend: SandboxBackend = module.create(module.Config.from_settings(settings))
    return backend


def handle_token(handle: SandboxHandle) -> str:
    """The handle as one short string, in its backend's format."""
    token: str = backend_module(handle.backend).handle_token(handle)
    return token


def handle_from_token(type_: str, token: str, *, log_path: str | None) -> SandboxHandle:
    """Rebuild a handle that `handle_token` stored."""
    handle: SandboxHandle = backend_module(type_).handle_from_token(token, log_path=log_path)
    return handle
