"""The one exception tree of proctor.

    ProctorError
     ├── ConfigError          bad configuration or usage: the user fixes a flag or file (exit 2)
     ├── EnvironmentNotFound  no environment of that name is installed (exit 2)
     ├── ModelError           the model endpoint failed after retries (recorded on an episode)
     ├── RunDirError          the run directory cannot be used as asked (exit 2)
     └── PlatformError        the platform refused or could not be reached
          ├── AttachError     --run.attach could not attach to the named evaluation
          └── APIError        the platform answered with an error status (carries it)

Every message is one sentence that names the fix.
"""

from __future__ import annotations


class ProctorError(Exception):
    """Base of every error proctor raises on purpose."""

    exit_code: int = 1


class ConfigError(ProctorError):
    """Invalid configuration or usage; the message names the field and the fix."""

    exit_code = 2


class EnvironmentNotFound(ConfigError):
    """No environment of the requested name is installed."""


class RunDirError(ConfigError):
    """The run directory already holds results, or does not match a resume."""


class ModelError(ProctorError):
    """A model request failed for good (after retries)."""

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class PlatformError(ProctorError):
    """The platform refused a request or could not be reached."""


class AttachError(PlatformError):
    """Attaching to an existing evaluation failed before any rollout ran."""


class APIError(PlatformError):
    """The platform answered with an error status."""

    def __init__(self, message: str, *, status_code: int, code: str | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.code = code
