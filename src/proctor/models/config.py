"""Typed settings of the OpenAI-compatible model client: where to send requests and how."""

from __future__ import annotations

import difflib
import json
import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from proctor.errors import ConfigError

DEFAULT_BASE_URL = "http://127.0.0.1:8001/v1"
"""Where the client looks when neither `--client.base-url` nor `PROCTOR_MODEL_BASE_URL` is set
(the demo model's usual port)."""


def _default_base_url() -> str:
    url = os.environ.get("PROCTOR_MODEL_BASE_URL") or DEFAULT_BASE_URL
    if problem := _scheme_problem(url):
        raise ConfigError(f"PROCTOR_MODEL_BASE_URL {problem}")
    return url


def _scheme_problem(url: str) -> str | None:
    # Without a scheme the HTTP client reports "cannot connect", which sends the user
    # looking for a model that is running fine.
    if url.startswith(("http://", "https://")):
        return None
    rest = url.split("://", 1)[1] if "://" in url else url  # `htp://host`: keep the host
    return f"must start with http:// or https:// (got {url!r}); pass e.g. http://{rest}"


class ClientConfig(BaseModel):
    """How to reach an OpenAI-compatible chat-completions endpoint."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    base_url: str = Field(default_factory=_default_base_url)
    """Base URL of the endpoint, ending in /v1 (default: $PROCTOR_MODEL_BASE_URL, else
    http://127.0.0.1:8001/v1)."""
    api_key_var: str = "OPENAI_API_KEY"
    """Name of the environment variable holding the API key (unset: a placeholder is sent)."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra HTTP headers sent with every request (TOML table or JSON object)."""
    headers_var: str | None = None
    """Name of an environment variable holding a JSON object of more headers, merged over
    `headers` (keeps secret headers off the command line; hosted sandboxes use it)."""
    timeout: float = Field(default=600.0, gt=0)
    """Per-request timeout in seconds."""
    connect_timeout: float = Field(default=10.0, gt=0)
    """Seconds to open a connection (TCP, proxy tunnel and TLS), within the request timeout."""
    keepalive_expiry: float = Field(default=4.0, ge=0)
    """Seconds an idle connection is kept for reuse: shorter than servers keep theirs (uvicorn,
    so vLLM: 5 s) and than firewalls remember idle flows, so a reused one is never dead."""
    ca_bundle: str | None = None
    """PEM file of CA certificates trusted on top of the system's (also: $SSL_CERT_FILE)."""
    max_retries: int = Field(default=5, ge=0)
    """Retries of a request after a 429, a 5xx or a connection error, before it fails for good."""
    retry_base_delay: float = Field(default=0.5, ge=0)
    """First backoff delay in seconds; doubles each retry, with jitter."""
    retry_max_delay: float = Field(default=30.0, ge=0)
    """Longest wait between two attempts, Retry-After included."""
    preflight: bool = True
    """Check that the endpoint speaks the API (`GET /models` lists models) before any rollout."""
    adaptive_concurrency: bool = True
    """On HTTP 429s, lower the requests in flight (AIMD) and climb back to -c when they stop
    (`--client.no-adaptive-concurrency`: always keep -c in flight)."""

    @field_validator("base_url")
    @classmethod
    def _has_scheme(cls, value: str) -> str:
        if problem := _scheme_problem(value):
            raise ValueError(problem)
        return value

    def all_headers(self) -> dict[str, str]:
        """`headers`, with those of `headers_var`'s JSON object over them.

        Raises:
            ConfigError: the variable holds something other than a JSON object of strings.
        """
        if not self.headers_var or not os.environ.get(self.headers_var):
            return dict(self.headers)
        try:
            extra = json.loads(os.environ[self.headers_var])
        except ValueError:
            extra = None
        if not isinstance(extra, dict) or not all(isinstance(v, str) for v in extra.values()):
            raise ConfigError(
                f"${self.headers_var} must hold a JSON object of header names to strings; fix it "
                "or drop --client.headers-var"
            )
        return {**self.headers, **extra}

    def api_key(self) -> str | None:
        """The key read from `api_key_var`, or None when the variable is unset or empty."""
        return os.environ.get(self.api_key_var) or None


PROVIDER_PARAMETERS = frozenset(
    {"top_k", "min_p", "top_a", "typical_p", "repetition_penalty", "logit_bias", "logprobs",
     "top_logprobs", "n", "response_format", "reasoning_effort", "max_completion_tokens"}
)  # fmt: skip
"""Parameters some endpoints take that proctor does not model; they pass through as given."""


class SamplingConfig(BaseModel):
    """Sampling parameters sent with every chat-completion request (unset ones are omitted)."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)

    temperature: float | None = Field(default=None, ge=0)
    """Sampling temperature."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Most tokens the model may generate per turn."""
    top_p: float | None = Field(default=None, gt=0, le=1)
    """Nucleus-sampling mass."""
    seed: int | None = None
    """Seed for providers that support deterministic sampling."""
    stop: list[str] | None = None
    """Stop sequences."""
    presence_penalty: float | None = None
    """Presence penalty."""
    frequency_penalty: float | None = None
    """Frequency penalty."""

    @model_validator(mode="after")
    def _no_typos(self) -> SamplingConfig:
        """Unknown keys pass through to the endpoint, unless one is a near-miss of a known
        parameter (`temprature`): then it is a typo that would silently change nothing."""
        known = list(type(self).model_fields)
        for key in self.model_extra or {}:
            if key in PROVIDER_PARAMETERS:
                continue
            near = difflib.get_close_matches(key, known, n=1, cutoff=0.85)
            if near:
                raise ValueError(f"has no parameter {key!r}; did you mean {near[0]}?")
        return self

    def request_args(self) -> dict[str, Any]:
        """The set parameters as fields of the chat-completions request body.

        Unknown keys from a TOML `[sampling]` table pass through unchanged, so
        provider-specific knobs (e.g. `top_k`) reach the endpoint.
        """
        known = {
            name: value
            for name in type(self).model_fields
            if (value := getattr(self, name)) is not None
        }
        known.update(self.model_extra or {})
        return known


class JudgeConfig(BaseModel):
    """The judge model that grades episodes for judge rewards (unset: the evaluated model's)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    model: str | None = None
    """Judge model name (default: the evaluated model, -m)."""
    base_url: str | None = None
    """Base URL of the judge's endpoint, ending in /v1 (default: --client.base-url)."""
    api_key_var: str | None = None
    """Environment variable holding the judge's API key (default: --client.api-key-var)."""
    max_concurrent: int = Field(default=32, ge=1)
    """Judge requests in flight at once."""
    max_retries: int = Field(default=5, ge=0)
    """Retries of a judge request after a 429, a 5xx or a connection error."""
    timeout: float = Field(default=120.0, gt=0)
    """Per-request timeout of the judge, in seconds."""
    temperature: float | None = Field(default=0.0, ge=0)
    """The judge's sampling temperature; 0 gives the same verdict for the same answer."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Most tokens the judge may write per verdict."""

    def client_config(self, evaluated: ClientConfig) -> ClientConfig:
        """The judge's endpoint settings: its own where set, else the evaluated model's."""
        return evaluated.model_copy(
            update={
                "base_url": self.base_url or evaluated.base_url,
                "api_key_var": self.api_key_var or evaluated.api_key_var,
                "max_retries": self.max_retries,
                "timeout": self.timeout,
            }
        )

    def sampling(self) -> SamplingConfig:
        """The judge's sampling parameters."""
        return SamplingConfig(temperature=self.temperature, max_tokens=self.max_tokens)
