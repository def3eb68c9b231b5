"""The one exception tree of proctor: every exception proctor raises on purpose is here.

    ProctorError
     ├── ConfigError            bad configuration or usage: the user fixes a flag or file (exit 2)
     │    ├── EnvironmentNotFound   no environment of that name is installed
     │    ├── SandboxUnavailable    model-written code cannot be run isolated here
     │    └── RunDirError           the run directory cannot be used as asked
     │         └── NothingToResume      --resume of a run whose evaluation is COMPLETED (exit 0)
     ├── ModelError             the model endpoint failed after retries (recorded on an episode)
     ├── HTTPConnectionError    a model call got no whole answer (refused, reset, proxy, TLS)
     │    └── HTTPTimeoutError      no connection within the connect timeout, or no answer in time
     ├── HTTPStatusError        a model call was answered with an error status or a redirect
     ├── JudgeError             a judge model's reply held no score (recorded on an episode)
     ├── ToolCallError          a tool call failed; the message is what the model is told
     ├── SandboxError           a sandbox backend refused a request or could not be reached
     ├── WorkerError            the eval's worker processes could not start or kept dying
     ├── PlatformError          the platform refused or could not be reached (client side)
     │    ├── AttachError           --run.attach could not attach to the named evaluation
     │    ├── PlatformUnreachable   no HTTP answer came back (connection failed or timed out)
     │    └── APIError              the platform answered with an error status (carries it)
     │         └── RetryableAPIError    408, 429 or 5xx: an answer that may change later
     └── ServerError            the server answers a request with this 4xx (proctor.server.errors)
          ├── BadRequest            400 bad_request
          ├── Unauthenticated       401 unauthenticated
          ├── LoginRequired         401 login_required (a dashboard page redirects to sign-in)
          ├── Forbidden             403 forbidden
          │    └── ScopeDenied          403 scope_denied
          ├── NotVisible            404 not_found
          ├── Conflict              409 conflict
          ├── PayloadTooLarge       413 payload_too_large
          ├── InvalidInput          422 invalid_input
          └── TooManyRequests       429 rate_limited (with Retry-After)

Every message is one sentence that names the fix. The `ServerError` family is the server's
own (it carries an HTTP status and code, and no library user catches it), so it lives in
`proctor.server.errors`; `proctor.server.error_handlers` turns one into the JSON error body.
The CLI turns any other error into one line and its `exit_code`.
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


class SandboxUnavailable(ConfigError):
    """Bubblewrap is missing or cannot isolate code here; nothing runs unsandboxed instead."""


class RunDirError(ConfigError):
    """The run directory already holds results, is in use, or does not match a resume."""


class NothingToResume(RunDirError):
    """`--resume` of a run whose evaluation the platform already holds as COMPLETED: nothing
    is run or uploaded again (the message points at the evaluation)."""

    exit_code = 0


class HTTPConnectionError(ProctorError):
    """A model call got no whole answer: the connection failed or the answer was broken.

    The chat client retries it (`--client.max-retries`); the message names the cause, and
    its fix when `names_fix` (a proxy, a certificate, a scheme), so a caller adds none.
    """

    def __init__(self, message: str, *, names_fix: bool = False) -> None:
        super().__init__(message)
        self.names_fix = names_fix


class HTTPTimeoutError(HTTPConnectionError):
    """A model call timed out: `connect` when no connection opened within the connect timeout
    (`--client.connect-timeout`), else no whole answer within `--client.timeout`."""

    def __init__(self, message: str, *, connect: bool) -> None:
        super().__init__(message, names_fix=False)
        self.connect = connect


class HTTPStatusError(ProctorError):
    """A model call was answered with an error status (or a redirect, which is not followed).

    Carries the status, the start of the body and the server's `Retry-After` in seconds.
    """

    def __init__(
        self, message: str, *, status_code: int, body: str = "", retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.body = body
        self.retry_after = retry_after


class ModelError(ProctorError):
    """A model request failed for good (after retries)."""

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class JudgeError(ProctorError):
    """A judge model answered, but its reply could not be read as a score."""


class ToolCallError(ProctorError):
    """A tool call could not be run or failed; the message is what the model is told."""


class SandboxError(ProctorError):
    """A sandbox backend (e.g. a Ray cluster) refused a request or could not be reached."""


class WorkerError(ProctorError):
    """The eval's worker processes failed: one could not load its environment, or kept dying."""


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


class PlatformUnreachable(PlatformError):
    """No HTTP answer came back: the connection failed or timed out."""

    def __init__(self, message: str, *, connected: bool) -> None:
        super().__init__(message)
        self.connected = connected
        """False when the request never reached the server (safe to replay anything)."""


class RetryableAPIError(APIError):
    """An answer that may change later: 408, 429 or a 5xx."""

    def __init__(
        self, message: str, *, status_code: int, code: str | None, retry_after: float | None
    ) -> None:
        super().__init__(message, status_code=status_code, code=code)
        self.retry_after = retry_after
