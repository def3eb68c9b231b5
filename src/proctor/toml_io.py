"""Read and write the small TOML documents proctor uses (eval config files, config.toml).

Python reads TOML (`tomllib`); `tomli-w`, its writing twin, writes it.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from proctor.errors import ConfigError


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
    """Render a dict as TOML (tomli-w): None values left out (TOML has no null), anything
    that is not plain data written as its string."""
    return tomli_w.dumps(_plain(data))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value if v is not None]
    if isinstance(value, bool | int | float | str):
        return value
    return str(value)
