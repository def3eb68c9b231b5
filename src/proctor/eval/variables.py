"""`PROCTOR_EVAL_*` environment variables: a source of `proctor eval`'s settings.

Each setting that has a flag has one variable: `PROCTOR_EVAL_` and its config path in upper
case, with `__` between a section and its field (`PROCTOR_EVAL_NUM_EXAMPLES`,
`PROCTOR_EVAL_CLIENT__BASE_URL`, `PROCTOR_EVAL_SAMPLING__TEMPERATURE`); dict and list
settings take JSON, as their flags do. pydantic-settings' `EnvSettingsSource` reads the
variables into nested settings (its nested delimiter, its JSON decoding); this module adds
proctor's rules around it: a `PROCTOR_EVAL_*` variable no setting has is an error naming
the nearest one (a typo is never silently ignored), a value that is not the JSON its
setting takes is named by its variable, and each setting read records its variable as its
source (`proctor config eval` shows it).

The prefix is eval's own: the runs SDK's, the server's and the launcher's `PROCTOR_*`
variables never read as eval settings. A hosted run's sandbox never holds one: the
launcher hands it a clean environment and refuses secrets so named, and the Ray guard drops
those of the node (`proctor.sandboxes.guard`); it runs from its `eval.toml` and flags only.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsError

from proctor.errors import ConfigError
from proctor.eval.config import ENV_PREFIX, EvalConfig, field_kind

NESTED_DELIMITER = "__"
"""Between a section and its field in a variable's name: `PROCTOR_EVAL_CLIENT__TIMEOUT`."""


def variable(path: str) -> str:
    """The variable of a config path: `client.base_url` -> `PROCTOR_EVAL_CLIENT__BASE_URL`."""
    return ENV_PREFIX + path.replace(".", NESTED_DELIMITER).upper()


def read_environment(settings: type[BaseSettings]) -> tuple[dict[str, Any], dict[str, str]]:
    """The settings the `PROCTOR_EVAL_*` variables give, nested as in a TOML file, and the
    source of each (`{"num_examples": "environment PROCTOR_EVAL_NUM_EXAMPLES"}`).

    `settings` is eval's config as a settings model; an empty variable is no setting.

    Raises:
        ConfigError: a variable no setting has, or one that is not its setting's JSON.
    """
    fields = _fields(EvalConfig)
    known = {variable(path): path for path in fields}
    sources: dict[str, str] = {}
    for name, value in sorted(os.environ.items()):
        if not name.upper().startswith(ENV_PREFIX):
            continue
        path = known.get(name)
        if path is None:
            raise ConfigError(_unknown(name, known, fields))
        if _extra(fields[path]).get("cli") is False:
            raise ConfigError(f"{name} cannot be set: the engine sets {path} itself; unset it")
        if not value.strip():
            continue
        if (kind := field_kind(fields[path].annotation)) in (dict, list):
            example = '{"key": "value"}' if kind is dict else '["a", "b"]'
            _check_json(name, value, example=example, echo=not path.endswith("headers"))
        sources[path] = f"environment {name}"
    if not sources:
        return {}, {}
    source = EnvSettingsSource(
        settings,
        case_sensitive=False,  # the names were checked above, upper case
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=NESTED_DELIMITER,
        env_ignore_empty=True,
    )
    try:
        return dict(source()), sources
    except SettingsError as e:  # the JSON was checked; anything else the library refuses
        raise ConfigError(f"{e}; fix or unset the variable") from None


def variable_of(loc: Sequence[int | str], sources: Mapping[str, str]) -> str | None:
    """The variable that gave the value at `loc` (a validation error's), if one did."""
    paths = [".".join(map(str, loc[:n])) for n in range(len(loc), 0, -1)]
    source = next((sources[p] for p in paths if p in sources), "")
    return source.removeprefix("environment ") if source.startswith("environment ") else None


def _fields(model: type[BaseModel], prefix: str = "") -> dict[str, FieldInfo]:
    """Every setting of `model` by its dotted path, sub-models flattened."""
    out: dict[str, FieldInfo] = {}
    for name, field in model.model_fields.items():
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            out.update(_fields(sub, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = field
    return out


def _extra(field: FieldInfo) -> dict[str, Any]:
    extra = field.json_schema_extra
    return extra if isinstance(extra, dict) else {}


def _check_json(name: str, value: str, *, example: str, echo: bool) -> None:
    """Raises ConfigError unless `value` is JSON; `echo`: say what it was (never headers,
    which hold credentials)."""
    try:
        json.loads(value)
    except ValueError:
        got = f" (got {value!r})" if echo else ""
        raise ConfigError(
            f"{name} must be JSON, e.g. {name}='{example}'{got}; fix or unset it"
        ) from None


def _unknown(name: str, known: Mapping[str, str], fields: Mapping[str, FieldInfo]) -> str:
    """One sentence for a `PROCTOR_EVAL_*` variable no setting has, naming the nearest."""
    upper = name.upper()
    if upper in known:
        return f"{name} is spelled {upper} (eval's variables are upper case); rename it"
    path = upper.removeprefix(ENV_PREFIX).lower().replace(NESTED_DELIMITER, ".")
    if any(p.startswith(f"{path}.") for p in fields):
        first = variable(next(p for p in fields if p.startswith(f"{path}.")))
        return (
            f"{name} names a whole section; give each of its settings its own variable, "
            f"e.g. {first}"
        )
    section, _, key = path.rpartition(".")
    if any(p.startswith(f"{section}.") for p in fields) and _open(section):
        return (
            f"{name} is no setting of its own: only {section}'s named settings have "
            f"variables; put {key} in the [{section}] table of an @ file, or unset it"
        )
    settable = {
        v.removeprefix(ENV_PREFIX): p
        for v, p in known.items()
        if _extra(fields[p]).get("cli") is not False
    }
    found = difflib.get_close_matches(upper.removeprefix(ENV_PREFIX), settable, n=1, cutoff=0.6)
    if found:
        nearest = ENV_PREFIX + found[0]
        return f"unknown variable {name}; did you mean {nearest} ({settable[found[0]]})?"
    return (
        f"unknown variable {name}: no eval setting has it; unset it (each setting's variable "
        f"is {ENV_PREFIX} and its name, e.g. {variable('client.base_url')} for "
        "--client.base-url)"
    )


def _open(section: str) -> bool:
    """Whether the section takes keys beyond its fields (`[sampling]`: passed through)."""
    model: type[BaseModel] = EvalConfig
    for part in section.split("."):
        sub = model.model_fields[part].annotation
        assert isinstance(sub, type) and issubclass(sub, BaseModel)
        model = sub
    return model.model_config.get("extra") == "allow"
