"""Client side of the environments hub: build a package and publish it (`proctor envs push`).

A push speaks the same protocol as the public `prime env push`: resolve the name, announce
the wheel, PUT it to the upload URL the platform answers, finalize it, announce the version,
finalize that. A project folder's content hash is the one `prime env push` computes
(`file:<path>` + bytes over the project's files), so either CLI pushing the same folder
publishes one version; a built wheel's content hash is its SHA-256.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from packaging.metadata import InvalidMetadata, Metadata

from proctor.errors import ConfigError, PlatformError
from proctor.runs import PlatformClient
from proctor.trust import ssl_context

_SKIPPED_DIRS = {"dist", "__pycache__", "build", "outputs"}


@dataclass(frozen=True)
class Package:
    """A wheel ready to push."""

    name: str
    """The hub name (`[project].name`, or the wheel's distribution name)."""
    version: str | None
    wheel: Path
    content_hash: str
    description: str = ""
    dependencies: list[str] = field(default_factory=list)
    requires_dist: list[str] = field(default_factory=list)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _project_files(root: Path) -> list[Path]:
    files = [
        p
        for p in root.iterdir()
        if p.is_file()
        and not p.is_symlink()
        and (p.name in ("README.md", "pyproject.toml") or p.suffix == ".py")
    ]
    for sub in root.iterdir():
        if not sub.is_dir() or sub.is_symlink() or sub.name.startswith("."):
            continue
        if sub.name in _SKIPPED_DIRS or sub.name.endswith(".egg-info"):
            continue
        for path in sub.rglob("*"):
            parts = path.relative_to(root).parts
            if any(
                part.startswith(".") or part in ("__pycache__",) or part.endswith(".egg-info")
                for part in parts
            ):
                continue
            if path.is_file() and not path.is_symlink():
                files.append(path)
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def content_hash(root: Path) -> str:
    """The content hash of a project folder, as `prime env push` computes it (no .gitignore)."""
    digest = hashlib.sha256()
    for path in _project_files(root):
        digest.update(f"file:{path.relative_to(root).as_posix()}".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _wheel_metadata(wheel: Path) -> dict[str, Any]:
    try:
        with zipfile.ZipFile(wheel) as archive:
            name = next(
                (
                    n
                    for n in archive.namelist()
                    if n.count("/") == 1 and n.endswith(".dist-info/METADATA")
                ),
                None,
            )
            if name is None:
                raise ConfigError(f"{wheel} has no .dist-info/METADATA; is it a wheel?")
            text = archive.read(name).decode("utf-8", "replace")
    except (zipfile.BadZipFile, OSError) as e:
        raise ConfigError(f"{wheel} is not a readable wheel ({e}); build it again.") from e
    meta = Metadata.from_email(text, validate=False)
    try:
        return {
            "name": meta.name,
            "version": str(meta.version),
            "summary": meta.summary or "",
            "requires_dist": [str(r) for r in meta.requires_dist or []],
        }
    except InvalidMetadata as e:
        raise ConfigError(f"{wheel} has invalid METADATA ({e}); fix it and build again.") from None


def _build_leftovers(project: Path) -> set[Path]:
    """The directories a build may write into a project folder (and its `src/`)."""
    found = {project / "build"} if (project / "build").is_dir() else set()
    for folder in (project, project / "src"):
        found |= {p for p in folder.glob("*.egg-info") if p.is_dir()}
    return found


def _build_wheel(project: Path, out_dir: Path, *, isolation: bool) -> Path:
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(out_dir)]
    if not isolation:
        command.append("--no-build-isolation")
    # Absolute: pip reads a bare word such as `proj` as a package name on the index.
    command.append(str(project.resolve()))
    before = _build_leftovers(project)
    # The build imports an in-tree backend (or setup.py) from the project: without this, its
    # bytecode cache (`__pycache__`) would be left in the user's folder.
    environ = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False, env=environ)
    finally:
        # A setuptools build writes `build/` and `*.egg-info` into the project: the push
        # must leave the user's folder as it found it.
        for leftover in _build_leftovers(project) - before:
            shutil.rmtree(leftover, ignore_errors=True)
    wheels = sorted(out_dir.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        lines = [ln.strip() for ln in (done.stderr + done.stdout).splitlines() if ln.strip()]
        errors = [ln for ln in lines if "error" in ln.lower()] or lines
        reason = errors[-1] if errors else f"pip exited {done.returncode}"
        raise ConfigError(
            f"Building a wheel of {project} failed ({reason}); fix the package "
            "(`pip wheel --no-deps .` shows the whole output) and push again."
        )
    return wheels[0]


def prepare(
    path: Path, out_dir: Path, *, name: str | None = None, isolation: bool = True
) -> Package:
    """The package to push from a project folder (built into `out_dir`) or a built wheel.

    Raises:
        ConfigError: No pyproject.toml or name, an unreadable wheel, or a failed build.
    """
    if path.is_file() and path.suffix == ".whl":
        meta = _wheel_metadata(path)
        return Package(
            name=name or meta["name"],
            version=meta["version"],
            wheel=path,
            content_hash=_sha256(path.read_bytes()),
            description=meta["summary"],
            requires_dist=meta["requires_dist"],
        )
    if not path.is_dir():
        raise ConfigError(f"{path} is neither a project folder nor a .whl file; check the path.")
    pyproject = path / "pyproject.toml"
    if not pyproject.is_file():
        raise ConfigError(
            f"{path} has no pyproject.toml; push a project folder with one, or a built .whl file."
        )
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project") or {}
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{pyproject} is not valid TOML ({e}); fix it and push again.") from e
    hub_name = name or project.get("name")
    if not hub_name:
        raise ConfigError(f"{pyproject} has no [project] name; add one or pass --name.")
    wheel = _build_wheel(path, out_dir, isolation=isolation)
    meta = _wheel_metadata(wheel)
    return Package(
        name=str(hub_name),
        version=project.get("version") or meta["version"],
        wheel=wheel,
        content_hash=content_hash(path),
        description=str(project.get("description") or meta["summary"]),
        dependencies=[str(d) for d in project.get("dependencies") or []],
        requires_dist=meta["requires_dist"],
    )


def _data(answer: dict[str, Any]) -> dict[str, Any]:
    data = answer.get("data", answer)
    return data if isinstance(data, dict) else {}


def _put(url: str, body: bytes) -> None:
    try:
        response = httpx.put(
            url,
            content=body,
            headers={"Content-Type": "application/octet-stream"},
            timeout=300,
            verify=ssl_context(),
        )
    except httpx.HTTPError as e:
        raise PlatformError(
            f"Uploading the package failed ({e}); check the platform and retry."
        ) from e
    if response.is_success:
        return
    try:
        answer: Any = response.json()
        message = str((answer.get("error") or {}).get("message") or answer.get("detail"))
    except (ValueError, AttributeError):
        message = response.text
    raise PlatformError(
        f"The platform refused the package upload ({response.status_code}): {message}"
    )


@dataclass(frozen=True)
class Pushed:
    """What a push published."""

    owner: str
    name: str
    version: str | None
    content_hash: str
    created: bool
    message: str


def push(
    client: PlatformClient,
    package: Package,
    *,
    team_id: str | None = None,
    visibility: str | None = None,
) -> Pushed:
    """Publish `package` on the hub (a no-op when the same content is already published).

    Raises:
        PlatformError: The platform refused a step (the message says which and why).
    """
    body: dict[str, Any] = {"name": package.name}
    if team_id:
        body["team_id"] = team_id
    if visibility:
        body["visibility"] = visibility
    env = _data(client.call("POST", "/environmentshub/resolve", json_body=body, replayable=False))
    env_id = str(env["id"])
    wheel_bytes = package.wheel.read_bytes()
    metadata = {
        "description": package.description,
        "dependencies": package.dependencies,
        "requires_dist": package.requires_dist,
        "original_filename": package.wheel.name,
    }
    common = {
        "content_hash": package.content_hash,
        "semantic_version": package.version,
        "metadata": metadata,
    }
    slot = _data(
        client.call(
            "POST",
            f"/environmentshub/{env_id}/wheels",
            json_body={
                **common,
                "filename": package.wheel.name,
                "sha256": _sha256(wheel_bytes),
                "size": len(wheel_bytes),
            },
            replayable=False,
        )
    )
    if slot.get("upload_url"):
        _put(str(slot["upload_url"]), wheel_bytes)
        client.call(
            "POST",
            f"/environmentshub/{env_id}/wheels/{slot['wheel_id']}/finalize",
            replayable=False,
        )
    version = _data(
        client.call(
            "POST", f"/environmentshub/{env_id}/versions", json_body=common, replayable=False
        )
    )
    done = _data(
        client.call(
            "POST",
            f"/environmentshub/{env_id}/versions/{version['version_id']}/finalize",
            replayable=False,
        )
    )
    owner = env.get("owner")
    return Pushed(
        owner=str(owner.get("name") if isinstance(owner, dict) else owner),
        name=str(env.get("name") or package.name),
        version=package.version,
        content_hash=package.content_hash,
        created=bool(env.get("created")),
        message=str(done.get("message") or ""),
    )


def push_path(
    client: PlatformClient,
    path: Path,
    *,
    name: str | None = None,
    team_id: str | None = None,
    visibility: str | None = None,
    isolation: bool = True,
) -> Pushed:
    """Build (if a folder) and push."""
    with tempfile.TemporaryDirectory(prefix="proctor-push-") as tmp:
        package = prepare(path, Path(tmp), name=name, isolation=isolation)
        return push(client, package, team_id=team_id, visibility=visibility)
