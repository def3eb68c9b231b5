"""A PEP 517 backend with no requirements, so this test package builds offline.

It builds a pure-Python wheel from `[project]` in pyproject.toml, of the `tiny_echo` package
(or hatch's `packages`: the verifiers environments' hosted tests build theirs with it too),
with fixed timestamps, so the same sources always give the same wheel bytes.
"""

from __future__ import annotations

import base64
import hashlib
import re
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).parent
STAMP = (2026, 1, 1, 0, 0, 0)


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _packages() -> list[str]:
    """The package folders to ship: hatch's `packages` setting when there is one."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text()).get("tool", {})
    wheel = tool.get("hatch", {}).get("build", {}).get("targets", {}).get("wheel", {})
    return list(wheel.get("packages", ["tiny_echo"]))


def _dist(project: dict) -> str:
    return re.sub(r"[-_.]+", "_", project["name"]).lower()


def _metadata(project: dict) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}", f"Version: {project['version']}"]
    if project.get("description"):
        lines.append(f"Summary: {project['description']}")
    if project.get("requires-python"):
        lines.append(f"Requires-Python: {project['requires-python']}")
    lines += [f"Requires-Dist: {dep}" for dep in project.get("dependencies", [])]
    return "\n".join(lines) + "\n"


def _entry_points(project: dict) -> str:
    out = []
    for group, points in project.get("entry-points", {}).items():
        out.append(f"[{group}]")
        out += [f"{name} = {value}" for name, value in points.items()]
    return "\n".join(out) + "\n"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    project = _project()
    dist, version = _dist(project), project["version"]
    info = f"{dist}-{version}.dist-info"
    files: list[tuple[str, bytes]] = []
    for package in _packages():
        for path in sorted((ROOT / package).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                files.append((path.relative_to(ROOT).as_posix(), path.read_bytes()))
    files.append((f"{info}/METADATA", _metadata(project).encode()))
    wheel = (
        "Wheel-Version: 1.0\nGenerator: wheel_backend\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    files.append((f"{info}/WHEEL", wheel.encode()))
    files.append((f"{info}/entry_points.txt", _entry_points(project).encode()))
    record = [_record_line(n, d) for n, d in files] + [f"{info}/RECORD,,"]
    files.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode()))
    name = f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(Path(wheel_directory) / name, "w", zipfile.ZIP_DEFLATED) as out:
        for arcname, data in files:
            entry = zipfile.ZipInfo(arcname, STAMP)
            entry.external_attr = 0o644 << 16
            out.writestr(entry, data, zipfile.ZIP_DEFLATED)
    return name
