"""The registry of sandbox backends: `SandboxConfig`, the union of their configs by `type`.

Each backend is one module that defines, besides its `SandboxBackend` class:

- `Config`: a pydantic model with a `type` field (the backend's name, what
  `PROCTOR_HOSTED_SANDBOX` and `--sandbox` say) and its options. The launcher's settings
  hold one `SandboxConfig` and validate it once, at start-up. Options named like a launcher
  setting (`isolation`, `uids`, `limits`, `stop_grace_seconds`) take that setting; the
  backend's own are read from `PROCTOR_HOSTED_<TYPE>_<OPTION>` (`ray`'s `address` from
  `PROCTOR_HOSTED_RAY_ADDRESS`);
- `create(config) -> SandboxBackend`;
- `handle_token(handle) -> str` and `handle_from_token(token, *, log_path) -> SandboxHandle`:
  the handle's format when it is stored with the evaluation.

Adding a backend is that module plus its member in `SandboxConfig`. The backend modules
import Ray only when a Ray sandbox is used; the CLI imports this module only once its
flags have parsed.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import TYPE_CHECKING, Annotated, get_args

from pydantic import BaseModel, Field

from proctor.errors import ConfigError
from proctor.sandboxes import local, ray_jobs

if TYPE_CHECKING:
    from proctor.sandboxes.sandbox import SandboxBackend, SandboxHandle

SandboxConfig = Annotated[local.Config | ray_jobs.Config, Field(discriminator="type")]
"""One backend's config, the member its `type` names."""

_CONFIGS = {c.model_fields["type"].default: c for c in get_args(get_args(SandboxConfig)[0])}


def backend_types() -> tuple[str, ...]:
    """The registered backends' names, e.g. `("local", "ray")`."""
    return tuple(_CONFIGS)


def backend_config(type_: str) -> type[BaseModel]:
    """The `Config` model of the backend named `type_`.

    Raises:
        ConfigError: no backend has that name.
    """
    try:
        return _CONFIGS[type_]
    except KeyError:
        raise ConfigError(
            f"Unknown sandbox backend {type_!r}; use one of {', '.join(_CONFIGS)}."
        ) from None


def backend_module(type_: str) -> ModuleType:
    """The module of the backend named `type_`.

    Raises:
        ConfigError: no backend has that name.
    """
    return sys.modules[backend_config(type_).__module__]


def create_backend(config: SandboxConfig) -> SandboxBackend:
    """The backend `config` configures (its `type` names it)."""
    backend: SandboxBackend = backend_module(config.type).create(config)
    return backend


def handle_token(handle: SandboxHandle) -> str:
    """The handle as one short string, in its backend's format."""
    token: str = backend_module(handle.backend).handle_token(handle)
    return token


def handle_from_token(type_: str, token: str, *, log_path: str | None) -> SandboxHandle:
    """Rebuild a handle that `handle_token` stored."""
    handle: SandboxHandle = backend_module(type_).handle_from_token(token, log_path=log_path)
    return handle
