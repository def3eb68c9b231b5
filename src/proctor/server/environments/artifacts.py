"""Packages stored by the hub: uploads written under the data dir, named by their SHA-256.

An upload streams into a temporary file beside its final place, is hashed on the way and
moved into place only when its size and SHA-256 match what the push declared, so a failed
or oversized upload leaves nothing behind.
"""

from __future__ import annotations

import configparser
import contextlib
import hashlib
import os
import re
import tempfile
import zipfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path

from proctor.server.errors import InvalidInput, PayloadTooLarge

ENTRY_POINT_GROUP = "proctor.environments"
"""The entry-point group proctor loads environments from (see `proctor.envs`)."""

_SAFE_FILENAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,250}")
_HEX64 = re.compile(r"[0-9a-f]{64}")


def check_sha256(value: str, what: str) -> str:
    """`value` if it is a lowercase 64-hex SHA-256, else a 422 naming `what`."""
    text = value.strip().lower()
    if not _HEX64.fullmatch(text):
        raise InvalidInput(
            f"{what} must be a SHA-256 in hex (64 characters); fix it and push again."
        )
    return text


def check_filename(value: str, suffixes: tuple[str, ...], what: str) -> str:
    """A bare file name with one of `suffixes`, else a 422 naming `what`."""
    if not _SAFE_FILENAME.fullmatch(value) or not value.endswith(suffixes):
        raise InvalidInput(
            f"{what} {value!r} is not a plain file name ending in {' or '.join(suffixes)}; "
            "push the built package again."
        )
    return value


def too_large(size: int, cap: int) -> PayloadTooLarge:
    """The error for a package over the size cap."""
    return PayloadTooLarge(
        f"The package is {size} bytes, over the hub's {cap} byte limit "
        "(PROCTOR_HUB_MAX_ARTIFACT_BYTES); make it smaller and push again."
    )


def stored_path(hub_dir: Path, kind: str, sha256: str, filename: str) -> Path:
    """Where a package with this hash is kept: `<hub>/<kind>s/<sha256>/<filename>`."""
    return hub_dir / f"{kind}s" / sha256 / filename


def relative_to_data_dir(path: str) -> str:
    """The stored form of a package path: `hub/<kind>s/<sha256>/<filename>`, relative to the
    data dir, so moving or re-pointing the data dir keeps every version runnable."""
    parts = Path(path).parts
    if len(parts) >= 4 and parts[-4] == "hub":
        return "/".join(parts[-4:])
    return path


def locate(data_dir: Path, stored: str | None) -> Path | None:
    """The absolute path of a stored package path (relative ones live under `data_dir`)."""
    if not stored:
        return None
    path = Path(stored)
    return path if path.is_absolute() else (data_dir / path).resolve()


async def receive(
    chunks: AsyncIterator[bytes], target: Path, *, sha256: str, size: int | None, cap: int
) -> None:
    """Stream an upload to `target`, checked against the declared hash and size.

    Raises:
        PayloadTooLarge: It grew past `cap` bytes.
        InvalidInput: Its size or SHA-256 differs from what was declared.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    received = 0
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=".upload-")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            async for chunk in chunks:
                received += len(chunk)
                if received > cap:
                    raise too_large(received, cap)
                digest.update(chunk)
                out.write(chunk)
        if size is not None and received != size:
            raise InvalidInput(
                f"The upload has {received} bytes but the push declared {size}; push again."
            )
        if digest.hexdigest() != sha256:
            raise InvalidInput(
                "The uploaded bytes do not match the SHA-256 the push declared; push again."
            )
        tmp.replace(target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


@dataclass(frozen=True)
class WheelFacts:
    """What the hub reads from a wheel: its distribution and the environments it provides."""

    name: str
    version: str
    requires_dist: list[str] = field(default_factory=list)
    entry_points: list[str] = field(default_factory=list)
    summary: str = ""


def read_wheel(path: Path) -> WheelFacts:
    """The distribution metadata and `proctor.environments` entry points of a wheel.

    Raises:
        InvalidInput: It is not a wheel (not a zip, or no `.dist-info/METADATA`).
    """
    try:
        with zipfile.ZipFile(path) as wheel:
            names = wheel.namelist()
            metadata_name = next(
                (n for n in names if n.count("/") == 1 and n.endswith(".dist-info/METADATA")), None
            )
            if metadata_name is None:
                raise InvalidInput(
                    "The wheel has no .dist-info/METADATA; build it with `pip wheel` or "
                    "`python -m build --wheel` and push again."
                )
            metadata = HeaderParser().parsestr(wheel.read(metadata_name).decode("utf-8", "replace"))
            entry_name = metadata_name.rsplit("/", 1)[0] + "/entry_points.txt"
            entry_text = (
                wheel.read(entry_name).decode("utf-8", "replace") if entry_name in names else ""
            )
    except (zipfile.BadZipFile, OSError) as e:
        raise InvalidInput(
            f"The uploaded wheel is not a valid zip archive ({e}); rebuild it."
        ) from e
    parser = configparser.ConfigParser(interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        parser.read_string(entry_text)
    except configparser.Error as e:
        raise InvalidInput(f"The wheel's entry_points.txt cannot be read ({e}); rebuild it.") from e
    entry_points = (
        sorted(parser[ENTRY_POINT_GROUP]) if parser.has_section(ENTRY_POINT_GROUP) else []
    )
    return WheelFacts(
        name=str(metadata.get("Name") or ""),
        version=str(metadata.get("Version") or ""),
        requires_dist=[str(r) for r in metadata.get_all("Requires-Dist") or []],
        entry_points=entry_points,
        summary=str(metadata.get("Summary") or ""),
    )


def remove(path: str | None) -> None:
    """Delete a stored package and its hash directory (when empty)."""
    if not path:
        return
    file = Path(path)
    with contextlib.suppress(FileNotFoundError):
        file.unlink()
    with contextlib.suppress(OSError):
        file.parent.rmdir()
