"""Directories prepared once per content outside the sandboxes, which see them read-only.

A published environment's packages (`proctor.sandboxes.packages`) and verifiers' harness
environment (`proctor.sandboxes.harness`) are each built by the confinement, as root, into
`<root>/<key>`: first aside (`<key>.building`), then made readable by every uid and writable by
root only, marked ready and renamed into place. A file lock per key lets sandboxes that start
together build it once; the others wait and reuse it. A directory without its ready mark (a
build that died) is never used.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

_READY = ".proctor-ready"


def say(message: str) -> None:
    """One line of the sandbox's log, written from outside it."""
    print(f"proctor: {message}", file=sys.stderr, flush=True)


def ready(root: Path, key: str) -> Path | None:
    """`root/key`, when it is built and complete."""
    target = root / key
    return target if (target / _READY).is_file() else None


def build_once(
    root: Path, key: str, build: Callable[[Path], bool], *, reusing: str, reuse: bool = True
) -> Path | None:
    """`root/key`: reused when ready (saying `reusing`), else built now by `build`, which
    fills the directory it is given and says why when it returns False (then: None).

    Args:
        reuse: False builds it again even when ready (a cache turned off).
    """
    if reuse and (found := ready(root, key)) is not None:
        say(reusing)
        return found
    root.mkdir(parents=True, exist_ok=True)
    with (root / f"{key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if reuse and (found := ready(root, key)) is not None:
            say(reusing)
            return found
        building = root / f"{key}.building"
        shutil.rmtree(building, ignore_errors=True)
        if not build(building):
            shutil.rmtree(building, ignore_errors=True)
            return None
        return _publish(building, root / key)


def _publish(building: Path, target: Path) -> Path:
    """Readable by every uid, writable by root only, marked ready, renamed into place."""
    (building / _READY).write_text(f"{time.time()}\n")
    for base, dirs, files in os.walk(building):
        for name in dirs:
            os.chmod(os.path.join(base, name), 0o755)
        for name in files:
            path = os.path.join(base, name)
            if not os.path.islink(path):
                os.chmod(path, 0o755 if os.access(path, os.X_OK) else 0o644)
    shutil.rmtree(target, ignore_errors=True)
    building.rename(target)
    return target
