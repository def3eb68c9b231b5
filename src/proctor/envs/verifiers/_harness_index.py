"""A local package index of what verifiers' harness programs install, for offline runs.

verifiers prepares each harness program (a PEP 723 script) with `uv sync --script`, which
downloads the script's dependencies from PyPI. Where there is no network (CI, an air-gapped
cluster), build this index once while online and point uv at it:

    proctor envs harness-index ~/.proctor/harness-index
    export UV_DEFAULT_INDEX=file://$HOME/.proctor/harness-index/simple

The index holds wheels for this machine's Python and platform only, plus `uv` itself, and
lists the chat harness program's requirements (`harness-requirements.txt`): a hosted launcher
builds that program's environment from it once, outside its sandboxes
(`proctor.sandboxes.harness`).
"""

from __future__ import annotations

import html
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from proctor.errors import ConfigError

REQUIREMENTS_FILE = "harness-requirements.txt"
"""The chat harness program's requirements, one a line (`proctor.sandboxes.harness` reads it)."""

_SCRIPT_BLOCK = re.compile(r"^# /// script\s*$(.*?)^# ///\s*$", re.MULTILINE | re.DOTALL)


def script_dependencies(source: str) -> list[str]:
    """The `dependencies` of a PEP 723 script's metadata block (none if it has no block)."""
    match = _SCRIPT_BLOCK.search(source)
    if match is None:
        return []
    body = "\n".join(line.removeprefix("#").removeprefix(" ") for line in match[1].splitlines())
    deps = tomllib.loads(body).get("dependencies", [])
    return [str(d) for d in deps]


def chat_program() -> str:
    """The source of verifiers' bundled chat harness program (`bash`, `null`)."""
    from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE

    return str(CHAT_PROGRAM_SOURCE)


def chat_program_requirements() -> list[str]:
    """What the chat harness program installs, sorted."""
    return sorted(set(script_dependencies(chat_program())))


def harness_requirements() -> list[str]:
    """What the bundled chat harness program (`bash`, `null`) installs, and `uv`."""
    return sorted({*chat_program_requirements(), "uv"})


def build_harness_index(dest: Path, *, requirements: list[str] | None = None) -> str:
    """Download the harness programs' wheels into `dest/wheels` and write a PEP 503 index
    of them in `dest/simple`; returns the `UV_DEFAULT_INDEX` value that uses it.

    Raises:
        ConfigError: pip could not download them (run it where PyPI is reachable).
    """
    wheels = dest / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    wanted = requirements if requirements is not None else harness_requirements()
    command = [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:"]
    done = subprocess.run(
        [*command, "-d", str(wheels), *wanted], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(
            f"could not download the harness wheels ({tail}); run this where PyPI is reachable."
        )
    write_simple_index(wheels, dest / "simple")
    if requirements is None:
        listed = "".join(f"{r}\n" for r in chat_program_requirements())
        (dest / REQUIREMENTS_FILE).write_text(listed)
    return (dest / "simple").resolve().as_uri()


def write_simple_index(wheels: Path, simple: Path) -> None:
    """A PEP 503 `simple/<project>/index.html` for each project with a wheel in `wheels`."""
    by_project: dict[str, list[Path]] = {}
    for wheel in sorted(wheels.glob("*.whl")):
        project = re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()
        by_project.setdefault(project, []).append(wheel)
    for project, files in by_project.items():
        page = simple / project
        page.mkdir(parents=True, exist_ok=True)
        links = "".join(
            f'<a href="{f.resolve().as_uri()}">{html.escape(f.name)}</a><br>\n' for f in files
        )
        (page / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")
