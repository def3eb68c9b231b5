"""Where each setting is read: the rows `proctor config` prints, and the shell variables a
hosted run's sandbox will not see (`proctor hosted run` names them before it creates one).

A row is one setting's effective value (secrets masked) and its source: a flag, an
environment variable, the config file `~/.proctor/config.toml`, a TOML file given with `@`,
the default, or "read in the sandbox" (a hosted run's setting that the sandbox's own
environment decides, not this shell's).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic_settings import BaseSettings

DEFAULT = "default"
IN_SANDBOX = "read in the sandbox"
SECRET_NAMES = ("key", "secret", "password", "token")
"""A setting whose name holds one of these words is shown masked."""


@dataclass(frozen=True)
class Row:
    """One setting as `proctor config` shows it."""

    name: str
    value: str
    source: str


@dataclass(frozen=True)
class Section:
    """The settings one part of proctor reads."""

    title: str
    read_by: str
    rows: list[Row]


def mask(secret: str) -> str:
    """`****abcd`: enough to tell two keys apart, never enough to use one."""
    return f"****{secret[-4:]}" if len(secret) >= 12 else "****"


def shown(value: Any, *, secret: bool = False) -> str:
    """A value as a row shows it: `unset` for None, secrets masked, URLs without passwords."""
    if isinstance(value, SecretStr):
        value, secret = value.get_secret_value(), True
    if value is None or value == "":
        return "unset"
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    text = str(value)
    if secret:
        return mask(text)
    if "://" in text and "@" in text.split("://", 1)[1].split("/", 1)[0]:
        scheme, rest = text.split("://", 1)
        credentials, host = rest.split("@", 1)
        user = credentials.split(":", 1)[0]
        return f"{scheme}://{user}:****@{host}"
    return text


def _is_secret(name: str) -> bool:
    return any(word in name.lower() for word in SECRET_NAMES) and not name.endswith("_var")


def _environ_rows(
    settings: BaseSettings, *, prefix: str, aliases: Mapping[str, Iterable[str]] = {}
) -> list[Row]:
    """One row per field of a `BaseSettings` read from `PREFIX_FIELD` variables."""
    rows = []
    for name in type(settings).model_fields:
        names = [f"{prefix}{name.upper()}", *aliases.get(name, ())]
        given = next((v for v in names if os.environ.get(v, "").strip()), None)
        source = f"environment {given}" if given else DEFAULT
        value = shown(getattr(settings, name), secret=_is_secret(name))
        rows.append(Row(f"{prefix}{name.upper()}", value, source))
    return rows


def client_section() -> Section:
    """The runs SDK's settings: where `proctor eval` pushes, `runs sync`, `hosted`, `evals`."""
    from proctor.runs import config_file_path, load_settings
    from proctor.toml_io import read_toml

    settings = load_settings()
    path = config_file_path()
    in_file = read_toml(path, optional=True, fix="fix or delete the file")
    rows = []
    for name in type(settings).model_fields:
        variable = f"PROCTOR_{name.upper()}"
        if os.environ.get(variable, "").strip():
            source = f"environment {variable}"
        elif name in in_file:
            source = f"config file {path}"
        else:
            source = DEFAULT
        value = shown(getattr(settings, name), secret=_is_secret(name))
        if name == "runs_mode" and value == "unset":
            value = "online" if settings.key() else "disabled (no API key)"
        rows.append(Row(variable, value, source))
    return Section("client", "the runs SDK: proctor eval (push), runs sync, hosted, evals", rows)


def server_section() -> Section:
    """`proctor server`'s settings (its flags, when given, win over these)."""
    from proctor.server.settings import Settings
    from proctor.server.setup import settings_from

    settings: Settings = settings_from(None)
    rows = _environ_rows(settings, prefix="PROCTOR_", aliases={"database_url": ["DATABASE_URL"]})
    for i, row in enumerate(rows):
        if row.name == "PROCTOR_DATABASE_URL" and row.value == "unset":
            sqlite = settings.resolved_database_url()
            rows[i] = Row(row.name, f"unset: {sqlite}", row.source)
    return Section("server", "proctor server, keys, teams, launcher (their flags win)", rows)


def launcher_section() -> Section:
    """The hosted launcher's settings, in `proctor server` or `proctor launcher`."""
    from proctor.server.hosted.settings import LauncherSettings

    settings = LauncherSettings.load()
    rows = []
    for row in _environ_rows(settings, prefix="PROCTOR_HOSTED_"):
        if row.name != "PROCTOR_HOSTED_SANDBOX":
            rows.append(row)
            continue
        for name, value in settings.sandbox_variables().items():  # the backend and its options
            source = f"environment {name}" if os.environ.get(name, "").strip() else DEFAULT
            rows.append(Row(name, shown(value), source))
    return Section("launcher", "the hosted launcher in proctor server, or proctor launcher", rows)


def _model_rows(
    model: BaseModel, sources: Mapping[str, str], prefix: str = ""
) -> list[tuple[str, Any, str]]:
    """(dotted path, value, source) of every field of an eval config, sub-models flattened."""
    out: list[tuple[str, Any, str]] = []
    for name in type(model).model_fields:
        value = getattr(model, name)
        path = f"{prefix}{name}"
        if isinstance(value, BaseModel):
            out += _model_rows(value, sources, f"{path}.")
            for extra, item in (value.model_extra or {}).items():
                out.append((f"{path}.{extra}", item, sources.get(f"{path}.{extra}", DEFAULT)))
            continue
        out.append((path, value, sources.get(path, DEFAULT)))
    return out


def eval_section(argv: list[str]) -> Section:
    """What `proctor eval ARGV` would run with, and where each value came from."""
    from proctor.eval.args import parse_eval_args_with_sources
    from proctor.eval.config import SECRET_HEADER

    config, sources = parse_eval_args_with_sources(argv)
    rows = []
    for path, value, source in _model_rows(config, sources):
        if path == "client.headers":  # sent, but never shown: a credential's value is masked
            value = {k: mask(v) if SECRET_HEADER.search(k) else v for k, v in value.items()}
        if (
            path == "client.base_url"
            and source == DEFAULT
            and os.environ.get("PROCTOR_MODEL_BASE_URL")
        ):
            source = "environment PROCTOR_MODEL_BASE_URL"
        rows.append(Row(path, shown(value, secret=_is_secret(path)), source))
    key_var = config.client.api_key_var
    key = os.environ.get(key_var)
    rows.append(
        Row(
            f"${key_var}",
            shown(key, secret=True) if key else "unset (a placeholder key is sent)",
            f"environment {key_var}" if key else DEFAULT,
        )
    )
    return Section("eval", "proctor eval " + " ".join(argv), rows)


def hosted_section(given: Mapping[str, Any]) -> Section:
    """A hosted run's sandbox settings: the flags given here, the rest read in the sandbox.

    `given` holds the eval settings the user passed as flags (nested, as `given_overrides`
    returns them).
    """
    from proctor.eval.args import flag_name
    from proctor.models.config import DEFAULT_BASE_URL

    flat = _flat(given)
    rows = [
        Row(path, shown(value), f"flag {flag_name(tuple(path.split('.')))}")
        for path, value in sorted(flat.items())
    ]
    if "client.base_url" not in flat:
        where = f"the sandbox's $PROCTOR_MODEL_BASE_URL, else {DEFAULT_BASE_URL}"
        rows.append(Row("client.base_url", where, IN_SANDBOX))
    key_var = flat.get("client.api_key_var") or "OPENAI_API_KEY"
    where = "the launcher's, when it forwards it (PROCTOR_HOSTED_FORWARD_ENV), or --secret"
    rows.append(Row(f"${key_var}", where, IN_SANDBOX))
    rows.append(Row("any other eval setting", "eval's default", IN_SANDBOX))
    return Section("hosted run", "proctor hosted run: its sandbox runs proctor eval", rows)


def _flat(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, Mapping) and key in {"client", "sampling"} and not prefix:
            out.update(_flat(value, f"{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def unseen_by_sandbox(given: Mapping[str, Any], *, secrets: Iterable[str] = ()) -> list[str]:
    """Sentences naming what this shell holds that a hosted run's sandbox will not see.

    `given` holds the eval settings passed as flags (as `given_overrides` returns them),
    `secrets` the variable names passed with `--secret`.
    """
    from proctor.eval.args import flag_name
    from proctor.eval.config import ENV_PREFIX
    from proctor.sandboxes.command import HOSTED_FIELDS

    given = _flat(given)
    notes = []
    for name in sorted(n for n in os.environ if n.startswith(ENV_PREFIX) and os.environ[n]):
        path = name.removeprefix(ENV_PREFIX).lower().replace("__", ".")
        if path in given:
            continue
        hosted = any(path == f or path.startswith(f"{f}.") for f in HOSTED_FIELDS)
        flag = flag_name(tuple(path.split(".")))
        fix = f"pass {flag}" if hosted else "a hosted run does not take it"
        notes.append(
            f"this shell's {name} is not sent: a hosted run's sandbox reads only its "
            f"eval.toml and flags; {fix}"
        )
    base_url = os.environ.get("PROCTOR_MODEL_BASE_URL")
    if base_url and "client.base_url" not in given:
        notes.append(
            f"this shell's PROCTOR_MODEL_BASE_URL ({shown(base_url)}) is not sent: the sandbox "
            "reads its own; pass --client.base-url to use it"
        )
    passed = set(secrets)
    key_var = str(given.get("client.api_key_var") or "OPENAI_API_KEY")
    if os.environ.get(key_var) and key_var not in passed:
        notes.append(
            f"this shell's {key_var} is not sent: the sandbox gets the launcher's (when it "
            f"forwards it); pass --secret {key_var} to send yours"
        )
    return notes
