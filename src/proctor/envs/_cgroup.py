"""One control group per code sandbox: a single memory cap and process cap for all of it.

Per-process rlimits bound each process; they do not bound a sandbox that forks eight
processes, nor the memory of files it writes to a tmpfs (`/dev/shm`, `/tmp`, `/work`),
which belongs to no process at all. The kernel charges both to the writer's cgroup, so
each sandbox gets a fresh one, a child of the cgroup proctor itself runs in:

- cgroup v2 (the unified hierarchy, where the memory controller is enabled for the
  children of proctor's cgroup): `memory.max`, `memory.swap.max = 0` and `pids.max`;
- cgroup v1: a child in the `memory` hierarchy (`memory.limit_in_bytes`, and
  `memory.memsw.limit_in_bytes` where swap is accounted) and one in the `pids` hierarchy.

The sandbox's first process joins them before it starts bubblewrap, so every process of
the sandbox and every page it writes is counted. Past the cap the kernel's OOM killer ends
a process of that sandbox, never one outside it. Creating a cgroup needs write access to
proctor's own cgroup: root has it, and so has a user to whom systemd delegates one
(`systemd-run --user --scope -p Delegate=yes`). Elsewhere `create()` answers None and the
sandbox keeps its per-process limits only.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

PREFIX = "proctor-sandbox-"
"""Names of the cgroups sandboxes get: PREFIX + "<proctor's pid>-<n>"."""

_counter = itertools.count(1)
_sweeps = itertools.count(0)
_found: list[tuple[str, dict[str, Path]] | None] = []
"""Where sandbox cgroups are made, found once per process: (version, controller -> dir)."""


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """(mount point, root inside the hierarchy, fs type, super options) of cgroup mounts."""
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields = line.split()
            if " - " not in line:
                continue
            after = line.split(" - ", 1)[1].split()
            if len(after) < 3 or after[0] not in ("cgroup", "cgroup2"):
                continue
            found.append((fields[4], fields[3], after[0], set(after[2].split(","))))
    return found


def _own_paths() -> dict[str, str]:
    """Hierarchy key ("" for v2, else each v1 controller) -> this process's cgroup path."""
    paths: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                paths[name] = path
    return paths


def _inside(mount: str, root: str, path: str) -> Path | None:
    """The directory of cgroup `path` under a mount of the hierarchy's `root`."""
    root = root.rstrip("/")
    if path != root and not path.startswith(root + "/"):
        return None
    found = Path(mount + path[len(root) :])
    return found if found.is_dir() else None


def _locate() -> tuple[str, dict[str, Path]] | None:
    mounts = _mounts()
    own = _own_paths()
    for mount, root, fstype, _ in mounts:
        if fstype != "cgroup2" or "" not in own:
            continue
        base = _inside(mount, root, own[""])
        if base is None:
            continue
        with contextlib.suppress(OSError):
            enabled = (base / "cgroup.subtree_control").read_text().split()
            if "memory" in enabled and os.access(base, os.W_OK):
                return "v2", {"memory": base}
    dirs: dict[str, Path] = {}
    for mount, root, fstype, options in mounts:
        for controller in ("memory", "pids"):
            if fstype == "cgroup" and controller in options and controller in own:
                base = _inside(mount, root, own[controller])
                if base is not None and os.access(base, os.W_OK):
                    dirs[controller] = base
    if "memory" in dirs:
        return "v1", dirs
    return None


def _where() -> tuple[str, dict[str, Path]] | None:
    if not _found:
        _found.append(_locate())
        if _found[0] is None:
            logger.warning(
                "no cgroup can be made here for the code sandbox (run proctor as root, or in "
                "a cgroup v2 subtree delegated to you with the memory controller enabled): "
                "each sandboxed process keeps its own memory limit, but the sandbox as a "
                "whole has no single cap"
            )
    return _found[0]


def available() -> bool:
    """Whether sandboxes get a cgroup here."""
    return _where() is not None


def _sweep(parent: Path) -> None:
    """Remove sandbox cgroups left by proctor processes that no longer exist."""
    with contextlib.suppress(OSError):
        for child in parent.iterdir():
            if not child.name.startswith(PREFIX):
                continue
            owner = child.name[len(PREFIX) :].split("-", 1)[0]
            if not owner.isdigit() or int(owner) == os.getpid():
                continue
            try:
                os.kill(int(owner), 0)
            except ProcessLookupError:
                with contextlib.suppress(OSError):
                    child.rmdir()
            except OSError:
                pass


@dataclass(slots=True)
class SandboxCgroup:
    """The cgroup(s) of one sandbox; `procs_files` are what its first process joins."""

    version: str
    dirs: list[Path]
    memory_dir: Path

    @classmethod
    def create(cls, memory_bytes: int, max_processes: int) -> SandboxCgroup | None:
        """A fresh cgroup capping memory (tmpfs included) and processes; None if none can be
        made here (see the module docstring)."""
        where = _where()
        if where is None:
            return None
        version, parents = where
        name = f"{PREFIX}{os.getpid()}-{next(_counter)}"
        made: list[Path] = []
        try:
            sweep = next(_sweeps) % 64 == 0
            for controller, parent in parents.items():
                if sweep:
                    _sweep(parent)
                path = parent / name
                path.mkdir()
                made.append(path)
                if version == "v2":
                    _write(path / "memory.max", memory_bytes)
                    _write(path / "memory.swap.max", 0, optional=True)
                    _write(path / "pids.max", max_processes, optional=True)
                elif controller == "memory":
                    _write(path / "memory.limit_in_bytes", memory_bytes)
                    _write(path / "memory.memsw.limit_in_bytes", memory_bytes, optional=True)
                else:
                    _write(path / "pids.max", max_processes)
        except OSError as e:
            for path in made:
                with contextlib.suppress(OSError):
                    path.rmdir()
            logger.warning("could not make a cgroup for a code sandbox (%s)", e)
            return None
        memory_dir = made[list(parents).index("memory")]
        return cls(version=version, dirs=made, memory_dir=memory_dir)

    @property
    def procs_files(self) -> list[str]:
        return [str(path / "cgroup.procs") for path in self.dirs]

    def peak_bytes(self) -> int | None:
        """The sandbox's highest memory use, where the kernel records it."""
        name = "memory.peak" if self.version == "v2" else "memory.max_usage_in_bytes"
        try:
            return int((self.memory_dir / name).read_text().strip())
        except (OSError, ValueError):
            return None

    def remove(self) -> bool:
        """Kill what is left in it and remove it; False while a process still lingers."""
        removed = True
        for path in self.dirs:
            if not path.exists():
                continue
            with contextlib.suppress(OSError, ValueError):
                for pid in (path / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        os.kill(int(pid), 9)
            try:
                path.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                removed = False
        return removed


def _write(path: Path, value: int, *, optional: bool = False) -> None:
    if optional and not path.exists():
        return
    path.write_text(f"{value}\n")
