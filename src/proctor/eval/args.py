"""Turn `proctor eval` arguments into an `EvalConfig`.

The flags come from pydantic-settings: its CLI source (`CliSettingsSource`) walks
`EvalSettings`, eval's config as a settings model, adds one flag per field to proctor's own
argparse parser (`root_parser`), and turns the parsed flags back into nested settings,
decoding JSON for dicts and lists. So a new field is a new flag: nested fields are dotted
(`--client.base-url`, kebab case; the snake spelling `--client.base_url` works too), and
`@ file.toml` (or `@file.toml`) loads a file; `PROCTOR_EVAL_*` variables are a source too
(`proctor.eval.variables`): flags win over variables, variables over files, files over
defaults. What proctor adds is its style, in the hook through which the library adds each
flag: short flags (`-n`), `--x/--no-x` booleans (`--resume` and the other switches one way
only), help text ending in `(default: X)`, `JSON` and `NAME` metavars, and every mistake as
one `ConfigError` line naming the flag and the fix ("did you mean" for a mistyped flag).

This module owns the flags and the file: `add_eval_flags` gives another command (`hosted
run`, `quickstart`) eval's own flags for some fields, and `config_toml` writes a config back
as the file that loads into it (a hosted sandbox's `eval.toml`).
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, CliSettingsSource, SettingsConfigDict, SettingsError

from proctor.errors import ConfigError
from proctor.eval.config import SECRET_HEADER, EvalConfig, field_kind
from proctor.eval.variables import read_environment, variable_of
from proctor.toml_io import dump_toml, read_toml

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

SHORT_FLAGS = {
    "num_examples": "-n",
    "rollouts_per_example": "-r",
    "max_concurrent": "-c",
    "workers": "-w",
    "model": "-m",
    "output_dir": "-o",
    "verbose": "-v",
}

SWITCHES = frozenset({"verbose", "resume", "clean", "dry_run"})
"""Boolean fields that are one-way switches (`--resume`), not `--x/--no-x` pairs."""

HELP_HINT = "run `proctor eval --help` for the options"


class _Parser(argparse.ArgumentParser):
    source: CliSettingsSource[Any] | None = None
    """The settings source whose flags the parser holds (`build_parser`)."""

    def settings(self, namespace: argparse.Namespace) -> dict[str, Any]:
        """The parsed flags as nested settings, JSON decoded (by the settings source)."""
        assert self.source is not None
        try:
            return dict(self.source(parsed_args=namespace)())
        except SettingsError as e:
            raise ConfigError(f"{e}; {HELP_HINT}") from None

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        # argparse swallows a closed pipe here; `proctor.cli.main` handles it as for any output.
        if message:
            (file or sys.stdout).write(message)

    def error(self, message: str) -> NoReturn:
        prefix = "unrecognized arguments: "
        if message.startswith(prefix):
            flags = [
                f for a in self._actions if a.help != argparse.SUPPRESS for f in a.option_strings
            ]
            typed = message.removeprefix(prefix).split()[0]
            if found := difflib.get_close_matches(typed.split("=")[0], flags, n=1, cutoff=0.8):
                raise ConfigError(f"{message}; did you mean {found[0]}? ({HELP_HINT})")
        raise ConfigError(f"{message}; {HELP_HINT}")


def parse_eval_args(argv: list[str]) -> EvalConfig:
    """Build the config from `@ file.toml` (optional), `PROCTOR_EVAL_*` variables and flags.

    Raises:
        ConfigError: an unknown flag or variable, a bad value, an unreadable file.
    """
    return parse_eval_args_with_sources(argv)[0]


def parse_eval_args_with_sources(argv: list[str]) -> tuple[EvalConfig, dict[str, str]]:
    """The config `parse_eval_args` builds, and where each given setting came from.

    The sources map a dotted field path (`num_examples`, `client.base_url`, `env_args`) to
    `flag --x`, `environment PROCTOR_EVAL_RUN__NAME` or `file run.toml`; a field missing
    from it holds its default.

    Raises:
        ConfigError: an unknown flag or variable, a bad value, an unreadable file.
    """
    argv, files = _split_config_files(argv)
    data: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for path in files:
        loaded = _normalise_keys(read_toml(path), EvalConfig)
        sources.update(dict.fromkeys(_leaf_paths(loaded), f"file {path}"))
        _merge(data, loaded)
    parser = build_parser()
    namespace = parser.parse_args(argv)
    from_environment, variables = read_environment(EvalSettings)
    sources.update(variables)
    _merge(data, from_environment)
    for dest in vars(namespace):
        sources[dest] = "argument" if dest == "env" else f"flag {flag_name(tuple(dest.split('.')))}"
    _merge(data, parser.settings(namespace))
    return _validated(data, sources), sources


def _leaf_paths(data: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths of a file's settings; dict-valued fields (`env_args`) are one leaf."""
    out: list[str] = []
    for key, value in data.items():
        path = f"{prefix}{key}"
        field = EvalConfig.model_fields.get(key) if not prefix else None
        sub = field.annotation if field is not None else None
        if isinstance(value, dict) and isinstance(sub, type) and issubclass(sub, BaseModel):
            out += _leaf_paths(value, f"{path}.")
        else:
            out.append(path)
    return out


def _validated(data: dict[str, Any], sources: Mapping[str, str]) -> EvalConfig:
    if "env" not in data:
        raise ConfigError(
            "name the environment to evaluate, e.g. `proctor eval alphabet-sort` "
            "(`proctor envs list` shows the installed ones)"
        )
    try:
        return EvalConfig.model_validate(data)
    except ValidationError as e:
        variable = variable_of(e.errors(include_url=False)[0]["loc"], sources)
        text = describe_validation_error(e, name=variable)
        if variable is not None and (text.endswith("; fix the value") or ";" not in text):
            text = f"{text.removesuffix('; fix the value')}; fix or unset the variable"
        raise ConfigError(text) from None


class EvalSettings(BaseSettings, EvalConfig):
    """`EvalConfig` as a settings model: the one pydantic-settings' CLI source makes the
    flags of (kebab case, dotted nested fields, JSON for dicts and lists)."""

    model_config = SettingsConfigDict(
        extra="forbid",
        use_attribute_docstrings=True,
        case_sensitive=True,  # required with a root parser of one's own
        cli_kebab_case=True,
        cli_implicit_flags=True,
        cli_prog_name="proctor eval",
    )


def build_parser() -> _Parser:
    """The argparse front, one option per config field (the help text is each docstring)."""
    parser = _Parser(
        prog="proctor eval",
        description="Run an environment against a model and write a run directory.",
        epilog="Settings can also come from a TOML file (proctor eval @ file.toml [flags]) and "
        "PROCTOR_EVAL_* variables (PROCTOR_EVAL_CLIENT__BASE_URL): flags win over variables. "
        'Dict and list values take JSON, e.g. --client.headers \'{"X-Team": "a"}\'.',
        allow_abbrev=False,
        argument_default=argparse.SUPPRESS,
    )
    parser.source = _connect(parser, _Styler(fields=None, defaults={}, json_type=_json_text))
    return parser


def add_eval_flags(
    parser: argparse.ArgumentParser,
    fields: Iterable[str],
    *,
    defaults: Mapping[str, Any] | None = None,
    json_object: Callable[[str], Any] | None = None,
) -> None:
    """Give another command `proctor eval`'s flags for some config fields, as eval has them.

    `fields` are config paths: `"num_examples"`, `"client.base_url"`, or `"sampling"` for
    every `--sampling.*` flag. Names, short flags, help text and defaults are eval's (made by
    the same settings source); a command whose run needs another default (quickstart's
    infinite taskset needs a count) names it in `defaults` and the help shows it.
    `json_object` parses dict-valued flags instead of plain JSON (the hosted commands name
    the object form in their errors). Read the given values back with `given_overrides`.
    """
    styler = _Styler(
        fields=tuple(fields),
        defaults=dict(defaults or {}),
        json_type=_json_value,
        json_object=json_object,
    )
    _connect(parser, styler)


def _connect(parser: argparse.ArgumentParser, styler: _Styler) -> CliSettingsSource[Any]:
    """pydantic-settings' CLI source over `EvalSettings`, adding its flags to `parser`
    through `styler` (all on the parser itself: no group per sub-model)."""
    return CliSettingsSource(
        EvalSettings,
        root_parser=parser,
        add_argument_method=styler.add_argument,
        add_argument_group_method=lambda parser, **kwargs: parser,
    )


class _Styler:
    """The hook through which pydantic-settings adds each flag, in proctor's style.

    The library names the flag (kebab case, dotted) and its destination; the hook adds the
    short spelling, the snake alias, proctor's help and metavar, and the boolean pair. It
    leaves out the library's whole-model JSON flags (`--client JSON`: each setting has its
    own flag), the read-only `run.id`, and, for another command, the fields it does not take.
    """

    def __init__(
        self,
        *,
        fields: tuple[str, ...] | None,
        defaults: dict[str, Any],
        json_type: Callable[[str], Any],
        json_object: Callable[[str], Any] | None = None,
    ) -> None:
        self.fields = fields
        self.defaults = defaults
        self.json_type = json_type
        self.json_object = json_object

    def add_argument(self, parser: argparse.ArgumentParser, *names: str, **kwargs: Any) -> None:
        dest = str(kwargs.get("dest") or names[0])
        if kwargs.get("action") == "help" or self._left_out(dest):
            return
        model, name, prefix = _resolve(dest)
        if dest == "env":
            parser.add_argument("env", nargs="?", help=_doc(EvalConfig, "env"), metavar="ENV")
            return
        long = next(n for n in names if n.startswith("--"))
        _add_field_flag(
            parser,
            model,
            name,
            prefix,
            long=long,
            default=self.defaults.get(dest, argparse.SUPPRESS),
            json_type=self.json_object if self.json_object is not None else self.json_type,
            list_type=self.json_type,
        )

    def _left_out(self, dest: str) -> bool:
        if dest.startswith("-") or _is_model_path(dest):
            return True
        given = self.fields
        if given is not None and (dest == "env" or not any(_under(dest, r) for r in given)):
            return True
        try:
            model, name, _ = _resolve(dest)
        except KeyError:
            return True
        extra = model.model_fields[name].json_schema_extra
        return isinstance(extra, dict) and extra.get("cli") is False


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(f"{root}.")


def _resolve(path: str) -> tuple[type[BaseModel], str, str]:
    """(model, field name, flag prefix) of a config path such as `client.base_url`.

    Raises:
        KeyError: no field has that path.
    """
    model: type[BaseModel] = EvalConfig
    *parents, name = path.split(".")
    for part in parents:
        sub = model.model_fields[part].annotation
        if not (isinstance(sub, type) and issubclass(sub, BaseModel)):
            raise KeyError(path)
        model = sub
    if name not in model.model_fields:
        raise KeyError(path)
    return model, name, "".join(f"{p}." for p in parents)


def _add_field_flag(
    parser: argparse.ArgumentParser,
    model: type[BaseModel],
    name: str,
    prefix: str,
    *,
    long: str,
    default: Any,
    json_type: Callable[[str], Any],
    list_type: Callable[[str], Any],
) -> None:
    field = model.model_fields[name]
    kind = field_kind(field.annotation)
    names = [long]
    if not prefix and name in SHORT_FLAGS:
        names.insert(0, SHORT_FLAGS[name])
    no_flag = f"--{prefix}no-{long.removeprefix(f'--{prefix}')}" if kind is bool else None
    if name in SWITCHES:
        no_flag = None
    help_ = _with_default(_doc(model, name), field, on=long, off=no_flag, replace=default)
    dest = f"{prefix}{name}"
    value_type = json_type if kind is dict else list_type
    extra: dict[str, Any] = {"default": default}
    if kind is bool:
        parser.add_argument(*names, dest=dest, action="store_true", help=help_, **extra)
        if no_flag is not None:
            opposite = f"The opposite of {long}."
            parser.add_argument(no_flag, dest=dest, action="store_false", help=opposite, **extra)
    elif kind in (dict, list):
        parser.add_argument(*names, dest=dest, type=value_type, metavar="JSON", help=help_, **extra)
    else:
        parser.add_argument(*names, dest=dest, metavar=name.upper(), help=help_, **extra)
    snake = f"--{prefix}{name}"
    if snake != long:
        # The snake spelling works too, without doubling the help text.
        action: dict[str, Any] = {"action": "store_true"} if kind is bool else {}
        if kind in (dict, list):
            action = {"type": value_type}
        parser.add_argument(snake, dest=dest, help=argparse.SUPPRESS, **action, **extra)


def _with_default(
    help_: str, field: FieldInfo, *, on: str, off: str | None, replace: Any = argparse.SUPPRESS
) -> str:
    """The help text ending in `(default: X)`, in the style of every other command's help.

    A docstring that states its default (`(default: the run name)`) keeps its words unless
    a command `replace`s the default; a boolean pair shows the flag that is in force
    (`--push`), a one-way switch nothing.
    """
    if replace is not argparse.SUPPRESS:
        help_ = _STATED_DEFAULT.sub("", help_)
    if "(default" in help_:
        return help_
    # Called only now: a factory may read the environment (`client.base_url`).
    default = (
        field.get_default(call_default_factory=True) if replace is argparse.SUPPRESS else replace
    )
    if default is None or (isinstance(default, bool) and off is None):
        return help_
    if isinstance(default, bool):
        text = on if default else off
    elif isinstance(default, dict | list):
        text = json.dumps(default)
    elif isinstance(default, float):
        text = f"{default:g}"
    else:
        text = str(default)
    return f"{help_} (default: {str(text).replace('%', '%%')})"


_STATED_DEFAULT = re.compile(r" \(default[^)]*\)")


def _doc(model: type[BaseModel], name: str) -> str:
    """The field's docstring in the style of every command's help: lower case, no full stop."""
    text = " ".join((model.model_fields[name].description or "").split()).removesuffix(".")
    if text[1:2].islower():
        text = text[0].lower() + text[1:]
    return text.replace("%", "%%")


def _json_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected JSON, got {text!r}") from None


def _json_text(text: str) -> str:
    """The text, once it is JSON: the settings source decodes it, proctor words the error."""
    _json_value(text)
    return text


def _split_config_files(argv: list[str]) -> tuple[list[str], list[Path]]:
    rest: list[str] = []
    files: list[Path] = []
    args = iter(argv)
    for arg in args:
        if arg == "@":
            path = next(args, None)
            if path is None:
                raise ConfigError("`@` must be followed by a TOML file, e.g. `@ eval.toml`")
            files.append(Path(path))
        elif arg.startswith("@") and len(arg) > 1:
            files.append(Path(arg[1:]))
        else:
            rest.append(arg)
    return rest, files


def _normalise_keys(data: dict[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    """Accept kebab-case keys in files; recurse into sub-model tables only."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = key.replace("-", "_")
        field = model.model_fields.get(name)
        if field is None:
            out[key] = value  # left for validation to reject with the key's own name
            continue
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel) and isinstance(value, dict):
            value = _normalise_keys(value, sub)
        out[name] = value
    return out


def _merge(into: dict[str, Any], new: dict[str, Any]) -> None:
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict) and key != "env_args":
            _merge(into[key], value)
        else:
            into[key] = value


def _set_dotted(data: dict[str, Any], path: list[str], value: Any) -> None:
    for part in path[:-1]:
        data = data.setdefault(part, {})
    data[path[-1]] = value


def flag_name(loc: tuple[int | str, ...]) -> str:
    """The flag spelling of a config location, e.g. `-n/--num-examples`, `--client.timeout`."""
    parts = [str(p) for p in loc]
    if parts and parts[0] == "env_args":
        return "--env-args"
    dotted = ".".join(p.replace("_", "-") for p in parts[:2])
    if len(parts) == 1 and parts[0] in SHORT_FLAGS:
        return f"{SHORT_FLAGS[parts[0]]}/--{dotted}"
    return f"--{dotted}"


def describe_validation_error(
    error: ValidationError, *, at: tuple[str, ...] = (), name: str | None = None
) -> str:
    """One line for the first problem pydantic found, phrased as a fix.

    `at` is the config path of a value checked on its own (`check_overrides`); `name` what
    to call the setting instead of its flag (the variable its value came from).
    """
    first = error.errors(include_url=False)[0]
    first["loc"] = (*at, *first["loc"])
    flag = name or flag_name(first["loc"])
    kind = first["type"]
    ctx = first.get("ctx") or {}
    given = first.get("input")
    if kind == "greater_than_equal":
        return f"{flag} must be at least {ctx['ge']} (got {given})"
    if kind == "greater_than":
        return f"{flag} must be greater than {ctx['gt']} (got {given})"
    if kind == "less_than_equal":
        return f"{flag} must be at most {ctx['le']} (got {given})"
    if kind in ("int_parsing", "int_from_float", "int_type"):
        return f"{flag} must be a whole number (got {given!r})"
    if kind in ("float_parsing", "float_type"):
        return f"{flag} must be a number (got {given!r})"
    if kind in ("bool_parsing", "bool_type"):
        return f"{flag} must be true or false (got {given!r})"
    if kind == "value_error":
        return f"{flag} {first['msg'].removeprefix('Value error, ')}"
    if kind == "extra_forbidden":
        where = ".".join(map(str, first["loc"]))
        guess = _closest_setting(first["loc"])
        fix = f"did you mean {guess}?" if guess else f"remove it ({HELP_HINT})"
        return f"unknown setting {where}; {fix}"
    return f"{flag}: {first['msg'].lower()} (got {given!r}); fix the value"


def _closest_setting(loc: tuple[int | str, ...]) -> str | None:
    """The known setting nearest to a mistyped one (`client.base_ur` -> `client.base_url`)."""
    model: type[BaseModel] = EvalConfig
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        sub = field.annotation if field else None
        if not (isinstance(sub, type) and issubclass(sub, BaseModel)):
            return None
        model = sub
    typed = str(loc[-1]).replace("-", "_")
    known = [name for name in model.model_fields if name != "id"]
    found = difflib.get_close_matches(typed, known, n=1, cutoff=0.6)
    return ".".join([*map(str, loc[:-1]), found[0]]) if found else None


# --- flags for other commands, and a config back as a file ----------------------------------


def given_overrides(namespace: argparse.Namespace, fields: Iterable[str]) -> dict[str, Any]:
    """The values given to `add_eval_flags`' flags, as nested config fields (unchecked)."""
    roots = tuple(fields)
    out: dict[str, Any] = {}
    for dest, value in vars(namespace).items():
        if any(dest == root or dest.startswith(f"{root}.") for root in roots):
            _set_dotted(out, dest.split("."), value)
    return out


def check_overrides(overrides: dict[str, Any], *, prefix: str = "") -> dict[str, Any]:
    """Each given value checked and typed as its `EvalConfig` field (`"5"` -> 5), alone.

    Rules across fields, and a field's own validators (`client.base_url`'s scheme), are left
    to whoever validates the whole config; keys no field has pass through unchanged.

    Raises:
        ConfigError: a value its field refuses, in the words `proctor eval` uses.
    """
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and key != "env_args" and _is_model_path(path):
            out[key] = check_overrides(value, prefix=f"{path}.")
            continue
        try:
            model, name, _ = _resolve(path)
            field = model.model_fields[name]
        except KeyError:
            out[key] = value
            continue
        kind: Any = field.annotation
        adapter: TypeAdapter[Any] = TypeAdapter(
            Annotated[kind, *field.metadata] if field.metadata else kind
        )
        try:
            out[key] = adapter.validate_python(value)
        except ValidationError as e:
            raise ConfigError(describe_validation_error(e, at=tuple(path.split(".")))) from None
    return out


def _is_model_path(path: str) -> bool:
    try:
        model, name, _ = _resolve(path)
    except KeyError:
        return False
    sub = model.model_fields[name].annotation
    return isinstance(sub, type) and issubclass(sub, BaseModel)


def config_toml(config: EvalConfig) -> str:
    """The `@ file.toml` that loads into `config`: its set fields, as TOML (tomli-w).

    `parse_eval_args(["@", file]) == config`. Only fields that were set are written, so
    defaults that depend on where the command runs (`client.base_url` reads
    `$PROCTOR_MODEL_BASE_URL`) stay that machine's; `run.id` is never written. TOML has no
    null, so `env_args` holding one is written as its JSON object (which eval reads too).

    Raises:
        ConfigError: a value no file can carry: None over a default that is not None, or
            a credential-like header (a secret never goes into a file that travels with a
            run: use `--client.headers-var`).
    """
    if any(SECRET_HEADER.search(name) for name in config.client.headers):
        raise ConfigError(
            "a credential-like header may not go into a config file; pass it in the "
            "variable that --client.headers-var names"
        )
    data = config.model_dump(mode="json", exclude_unset=True, exclude={"run": {"id"}})
    _refuse_unset_nulls(config, "")
    if "env_args" in data and _holds_null(data["env_args"]):
        data["env_args"] = json.dumps(data["env_args"], sort_keys=True)
    return dump_toml(data)


def _refuse_unset_nulls(model: BaseModel, prefix: str) -> None:
    for name, field in type(model).model_fields.items():
        if name not in model.model_fields_set:
            continue
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            _refuse_unset_nulls(value, f"{prefix}{name}.")
        elif value is None and field.get_default(call_default_factory=True) is not None:
            raise ConfigError(
                f"{prefix}{name} cannot be unset by a config file (TOML has no null); leave "
                "it out of the config"
            )


def _holds_null(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_holds_null(v) for v in value.values())
    if isinstance(value, list):
        return any(_holds_null(v) for v in value)
    return value is None
