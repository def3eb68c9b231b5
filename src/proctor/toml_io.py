"""Read and write the small TOML documents proctor uses (eval config files, config.toml).

Python reads TOML (`tomllib`) but cannot write it; the config is plain data (strings,
numbers, booleans, lists, tables), so a short writer beats a new dependency.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

from proctor.errors import ConfigError

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def read_toml(path: Path, *, optional: bool = False, fix: str = "fix the file") -> dict[str, Any]:
    """Parse a TOML file, turning any failure into one `ConfigError` line.

    Args:
        path: the file.
        optional: a missing file (or no regular file at all) reads as empty.
        fix: what the user does about an unreadable file, the end of the message.
    """
    if optional and not path.is_file():
        return {}
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist; check the path after @") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file {path} is not valid TOML ({e}); {fix}") from None
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}; {fix}") from None


def dump_toml(data: dict[str, Any]) -> str:
    """Render a dict as TOML: scalars first, then one `[table]` per nested dict."""
    lines: list[str] = []
    _dump_table(data, [], lines)
    return "\n".join(lines).strip() + "\n"


def _dump_table(data: dict[str, Any], path: list[str], lines: list[str]) -> None:
    scalars = {k: v for k, v in data.items() if not isinstance(v, dict) and v is not None}
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    if path and (scalars or not tables):
        lines.append("")
        lines.append(f"[{'.'.join(_key(p) for p in path)}]")
    for key, value in scalars.items():
        lines.append(f"{_key(key)} = {_value(value)}")
    for key, value in tables.items():
        _dump_table(value, [*path, key], lines)


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(v) for v in value if v is not None) + "]"
    if isinstance(value, dict):
        items = ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items() if v is not None)
        return "{" + items + "}"
    return json.dumps(str(value))
