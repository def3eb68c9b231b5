"""verifiers' chat harness environment, built once per content outside the confined sandbox.

verifiers runs each rollout's harness program (a PEP 723 script that imports `openai`) in an
environment it prepares with `uv sync --script` under the runtime's home. A confined
sandbox's home is its own work dir, so each sandbox would install and compile the same
packages again before its first rollout (about 2 s of CPU, 6.5 with bytecode).

When the launcher has a harness index (`PROCTOR_HOSTED_HARNESS_INDEX`, a local index: nothing
is downloaded) and keeps environments (`PROCTOR_HOSTED_VENV_CACHE`), the confinement builds
that environment here instead, as root, once per content: the requirements the index lists
(`harness-requirements.txt`, written by `proctor envs harness-index`), the index's pages and
the interpreter. Wheels only (no build runs): `uv` unpacks them and the server's interpreter
compiles them with `-S` (no `.pth` of theirs runs); nothing of the packages runs here. It is
marked ready only once complete; every sandbox sees it read-only at
`/opt/proctor-harness/<key>` (`PROCTOR_SANDBOX_HARNESS`), where the verifiers driver hands it
to verifiers in place of the one it would prepare. Without it (no index, an index without the
file, a failed build) each sandbox prepares its own, as before.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from proctor.sandboxes.prepared import build_once, say

REQUIREMENTS_FILE = "harness-requirements.txt"
"""The chat harness program's requirements, one a line: in the index, and in each environment
built from it (the verifiers driver checks them against the program it runs). The name
`proctor.envs.verifiers._harness_index` writes, stated again: the server may not import it."""


def requirements(index: Path) -> list[str]:
    """The requirements the index lists (none: an index built before it listed them)."""
    try:
        text = (index / REQUIREMENTS_FILE).read_text()
    except OSError:
        return []
    return sorted({line.strip() for line in text.splitlines() if line.strip()})


def content_key(index: Path, wanted: list[str]) -> str:
    """What the environment is built from: the requirements, the index's pages (the wheels
    they offer) and the interpreter it runs on."""
    digest = hashlib.sha256()
    python = [os.path.realpath(sys.executable), sys.version]
    digest.update(json.dumps({"requirements": wanted, "python": python}).encode())
    for page in sorted((index / "simple").glob("*/index.html")):
        digest.update(f"\0{page.parent.name}\0".encode())
        digest.update(page.read_bytes())
    return digest.hexdigest()[:32]


def prepare(index: Path, envs: Path) -> Path | None:
    """The environment built from `index` under `envs`: cached by content, or built now;
    None when there is none to give (each sandbox then prepares its own)."""
    if not _verifiers_installed():
        return None  # no harness program runs here
    wanted = requirements(index)
    if not wanted:
        say(
            f"the harness index {index} lists no requirements, so each sandbox prepares "
            "verifiers' harness itself; build it again with `proctor envs harness-index`"
        )
        return None
    try:
        key = content_key(index, wanted)
    except OSError as e:
        say(f"the harness index {index} could not be read ({e.strerror or e})")
        return None
    return build_once(
        envs,
        key,
        lambda building: _build(building, index, wanted),
        reusing=f"reusing verifiers' harness environment {key[:12]}",
    )


def _verifiers_installed() -> bool:
    return importlib.util.find_spec("verifiers") is not None


def _uv() -> str | None:
    """The `uv` beside this interpreter (`proctor[verifiers]` installs it), or on PATH."""
    here = Path(sys.executable).parent / "uv"
    return str(here) if here.is_file() else shutil.which("uv")


def _build(building: Path, index: Path, wanted: list[str]) -> bool:
    """Install `wanted` from the index into `building` and compile it; False on failure
    (said)."""
    uv = _uv()
    if uv is None:
        say("no `uv` beside the server, so each sandbox prepares verifiers' harness itself")
        return False
    started = time.monotonic()
    say(f"preparing verifiers' harness environment {building.name.removesuffix('.building')[:12]}")
    python = building / "bin" / "python"
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site_packages = building / "lib" / version / "site-packages"
    quiet = ["-q", "--no-config"]
    offline = [
        "--offline",
        "--only-binary",
        ":all:",
        "--default-index",
        (index / "simple").as_uri(),
    ]
    steps = [
        [uv, "venv", *quiet, "--relocatable", "--python", sys.executable, str(building)],
        [uv, "pip", "install", *quiet, *offline, "--python", str(python), *wanted],
        # The environment's interpreter is this one: compiled with -S, so no `.pth` runs.
        [sys.executable, "-I", "-S", "-m", "compileall", "-q", "-j", "0", str(site_packages)],
    ]
    with tempfile.TemporaryDirectory(prefix="proctor-harness-uv-") as cache:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "UV_CACHE_DIR": cache}
        for step in steps:
            sys.stderr.flush()
            run = subprocess.run(step, env=env, stdin=subprocess.DEVNULL, stdout=sys.stderr)
            if run.returncode != 0:
                failed = f"failed (exit {run.returncode}); see above"
                say(f"preparing verifiers' harness environment {failed}")
                return False
    (building / REQUIREMENTS_FILE).write_text("".join(f"{r}\n" for r in wanted))
    say(f"prepared verifiers' harness environment in {time.monotonic() - started:.1f}s")
    return True
