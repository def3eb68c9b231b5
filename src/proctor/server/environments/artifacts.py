"""Packages stored by the hub: uploads written under the data dir, named by their SHA-256.

An upload streams into a temporary file beside its final place, is hashed on the way and
moved into place only when its size and SHA-256 match what the push declared, so a failed
or oversized upload leaves nothing behind. A wheel is then read with bounded reads only
(`read_wheel`), so a zip bomb is refused without being inflated.
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
from pathlib import Path

from packaging.metadata import InvalidMetadata, Metadata, parse_email

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


# A wheel is inspected with bounded reads, so a zip bomb costs the server nothing: the member
# count, each member's declared size and compression ratio, and the bytes read are capped.
MAX_MEMBERS = 20_000
"""Members a wheel may hold."""
MAX_UNCOMPRESSED_BYTES = 2 * 1024**3
"""Declared uncompressed bytes of all members together."""
MAX_RATIO = 200
"""Uncompressed / compressed size of a member larger than `RATIO_FLOOR_BYTES`."""
RATIO_FLOOR_BYTES = 1024 * 1024
MAX_METADATA_BYTES = 1024 * 1024
"""Bytes of `METADATA` or `entry_points.txt` read (a larger one is refused)."""
# What is stored from METADATA, bounded so no listing answers a huge body.
MAX_SUMMARY_CHARS = 512
MAX_FIELD_CHARS = 200
MAX_REQUIREMENTS = 500
MAX_REQUIREMENT_CHARS = 1000
MAX_ENTRY_POINTS = 200


@dataclass(frozen=True)
class WheelFacts:
    """What the hub reads from a wheel: its distribution and the environments it provides."""

    name: str
    version: str
    requires_dist: list[str] = field(default_factory=list)
    entry_points: list[str] = field(default_factory=list)
    summary: str = ""


def _refuse(problem: str) -> InvalidInput:
    return InvalidInput(f"The wheel {problem}; rebuild it with `pip wheel` and push again.")


def _check_members(members: list[zipfile.ZipInfo]) -> None:
    """Refuse a wheel whose member list is a bomb or names a path outside the archive."""
    if len(members) > MAX_MEMBERS:
        raise _refuse(f"has {len(members)} members, over the hub's {MAX_MEMBERS}")
    total = 0
    for member in members:
        name = member.filename
        if name.startswith(("/", "\\")) or "\x00" in name or ".." in name.split("/"):
            raise _refuse(f"has a member named {name[:100]!r} outside the archive")
        total += member.file_size
        ratio = member.file_size / max(member.compress_size, 1)
        if member.file_size > RATIO_FLOOR_BYTES and ratio > MAX_RATIO:
            raise _refuse(
                f"member {name[:100]!r} inflates {ratio:.0f}-fold (to {member.file_size} "
                f"bytes), over the hub's limit of {MAX_RATIO}"
            )
    if total > MAX_UNCOMPRESSED_BYTES:
        raise _refuse(f"inflates to {total} bytes, over the hub's {MAX_UNCOMPRESSED_BYTES}")


def _read_bounded(wheel: zipfile.ZipFile, member: zipfile.ZipInfo) -> str:
    """A small text member, read at most `MAX_METADATA_BYTES` (whatever its header says)."""
    if member.file_size > MAX_METADATA_BYTES:
        raise _refuse(f"{member.filename[:100]!r} is {member.file_size} bytes, over 1 MiB")
    with wheel.open(member) as handle:
        data = handle.read(MAX_METADATA_BYTES + 1)
    if len(data) > MAX_METADATA_BYTES:
        raise _refuse(f"{member.filename[:100]!r} inflates past 1 MiB")
    return data.decode("utf-8", "replace")


def _bounded(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _distribution(text: str, entry_points: list[str]) -> tuple[str, str, str, list[str]]:
    """Name, version, summary and requirements of a METADATA file (`packaging.metadata`),
    counted and measured before anything is parsed.

    Only these fields are validated: a wheel with fields its metadata version does not
    define (e.g. `License-File` under 2.1, as older setuptools writes) is still read.
    """
    raw, _ = parse_email(text)
    requires = raw.get("requires_dist", [])
    if len(entry_points) > MAX_ENTRY_POINTS or len(requires) > MAX_REQUIREMENTS:
        raise _refuse(
            f"declares {len(entry_points)} environments and {len(requires)} requirements, "
            f"over the hub's {MAX_ENTRY_POINTS} and {MAX_REQUIREMENTS}"
        )
    fields = [raw.get("name", ""), raw.get("version", ""), *entry_points]
    if any(len(f) > MAX_FIELD_CHARS for f in fields) or any(
        len(r) > MAX_REQUIREMENT_CHARS for r in requires
    ):
        raise _refuse(
            f"has a name, version or environment over {MAX_FIELD_CHARS} characters, or a "
            f"requirement over {MAX_REQUIREMENT_CHARS}"
        )
    metadata = Metadata.from_raw(raw, validate=False)
    try:
        parsed = [str(r) for r in metadata.requires_dist or []]
        return metadata.name, str(metadata.version), metadata.summary or "", parsed
    except InvalidMetadata as e:
        raise _refuse(f"has invalid METADATA ({str(e)[:200]})") from None


def read_wheel(path: Path) -> WheelFacts:
    """The distribution metadata and `proctor.environments` entry points of a wheel, read with
    bounded reads (see `MAX_MEMBERS` and the limits beside it) and stored bounded.

    Raises:
        InvalidInput: It is not a wheel (not a zip, or no `.dist-info/METADATA`), or it is a
            zip bomb (too many members, too large, inflating too much, or unsafe names).
    """
    try:
        with zipfile.ZipFile(path) as wheel:
            members = wheel.infolist()
            _check_members(members)
            by_name = {m.filename: m for m in members}
            metadata_name = next(
                (n for n in by_name if n.count("/") == 1 and n.endswith(".dist-info/METADATA")),
                None,
            )
            if metadata_name is None:
                raise InvalidInput(
                    "The wheel has no .dist-info/METADATA; build it with `pip wheel` or "
                    "`python -m build --wheel` and push again."
                )
            metadata_text = _read_bounded(wheel, by_name[metadata_name])
            entry_name = metadata_name.rsplit("/", 1)[0] + "/entry_points.txt"
            entry = by_name.get(entry_name)
            entry_text = _read_bounded(wheel, entry) if entry is not None else ""
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError) as e:
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
    name, version, summary, requires = _distribution(metadata_text, entry_points)
    return WheelFacts(
        name=name,
        version=version,
        requires_dist=requires,
        entry_points=entry_points,
        summary=_bounded(summary, MAX_SUMMARY_CHARS),
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
