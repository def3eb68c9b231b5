"""A sandbox's own virtual environment for a published environment package.

The launcher prefixes a hosted run of a pushed environment with
`python -m proctor.hosted.packages --wheel W --sha256 H --venvs DIR -- <proctor args>`.
That checks the stored wheel against its published SHA-256, makes a virtual environment,
installs the wheel there with pip (its dependencies from the configured package index), and
then replaces itself with that environment's `python -m proctor.cli.main <proctor args>`:
the same `proctor eval` command as for an installed environment.

The venv links the server's own site-packages (a `.pth` file) instead of reinstalling
proctor and its dependencies: it starts in milliseconds and needs no index for what the
server already has. Its own site-packages come first on `sys.path`, so a package pinning
other versions gets them in the venv; pip never changes the server's environment (it only
installs into the venv and will not uninstall outside it). Venvs are cached per content
hash under `--venvs` (or built per sandbox with `--no-cache`), behind a file lock, and
marked ready only once pip has succeeded.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shlex
import shutil
import site
import subprocess
import sys
import time
import venv
import zipfile
from email.parser import HeaderParser
from importlib import metadata
from pathlib import Path

INSTALL_FAILED = 3
"""Exit code of a sandbox whose package could not be installed."""

_READY = ".proctor-ready"


def install_prefix(
    package: dict[str, str], venvs: Path, *, cache: bool, index_url: str | None
) -> str:
    """The shell words that replace `{proctor}` in the sandbox command for a pushed package."""
    words = [
        sys.executable,
        "-m",
        "proctor.hosted.packages",
        "--wheel",
        package["wheel"],
        "--sha256",
        package["sha256"],
        "--venvs",
        str(venvs),
        "--ref",
        package.get("ref", package["sha256"][:12]),
    ]
    if not cache:
        words.append("--no-cache")
    if index_url:
        words += ["--index-url", index_url]
    return " ".join(shlex.quote(w) for w in words) + " --"


def _say(message: str) -> None:
    print(f"proctor: {message}", file=sys.stderr, flush=True)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _link_server(env_dir: Path) -> Path:
    """Create the venv and point it at this interpreter's site-packages; returns its python."""
    venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    paths = [p for p in site.getsitepackages() if Path(p).is_dir()]
    user_site = site.getusersitepackages()
    if site.ENABLE_USER_SITE and Path(user_site).is_dir():
        paths.append(user_site)
    # addsitedir (not a plain path line) so the server's own .pth files, editable installs
    # included, are processed too; it appends, so the venv's packages win.
    line = "import site; " + "; ".join(f"site.addsitedir({p!r})" for p in paths)
    (Path(purelib) / "_proctor_server.pth").write_text(line + "\n")
    return python


def _requirements_met(wheel: Path) -> bool:
    """Whether every requirement of the wheel is already installed here (so pip may skip
    resolving the whole tree of what the server has, which takes seconds)."""
    try:
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError:
        return False
    try:
        with zipfile.ZipFile(wheel) as archive:
            name = next(
                n for n in archive.namelist() if n.count("/") == 1 and n.endswith("/METADATA")
            )
            meta = HeaderParser().parsestr(archive.read(name).decode("utf-8", "replace"))
        for text in meta.get_all("Requires-Dist") or []:
            req = Requirement(str(text))
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            if req.url or req.extras:
                return False
            if not req.specifier.contains(metadata.version(req.name), prereleases=True):
                return False
    except (StopIteration, zipfile.BadZipFile, OSError, InvalidRequirement):
        return False
    except metadata.PackageNotFoundError:
        return False
    return True


def _install(env_dir: Path, wheel: Path, index_url: str | None, ref: str) -> Path | None:
    """Build the venv and pip-install the wheel into it; None (and no venv) on failure."""
    started = time.monotonic()
    python = _link_server(env_dir)
    command = [
        str(python),
        "-m",
        "pip",
        "install",
        "--no-input",
        "--disable-pip-version-check",
        "--no-warn-script-location",
    ]
    if _requirements_met(wheel):
        command.append("--no-deps")  # the server already has every dependency
    if index_url:
        command += ["--index-url", index_url]
    command.append(str(wheel))
    _say(f"installing {ref} into {env_dir}")
    done = subprocess.run(command, stdin=subprocess.DEVNULL, check=False)
    if done.returncode != 0:
        shutil.rmtree(env_dir, ignore_errors=True)
        _say(f"installing {ref} failed (pip exited {done.returncode}); see pip's output above")
        return None
    (env_dir / _READY).write_text(f"{time.time()}\n")
    _say(f"installed {ref} in {time.monotonic() - started:.1f}s")
    return python


def prepare(
    wheel: Path, sha256: str, venvs: Path, *, cache: bool, index_url: str | None, ref: str
) -> Path | None:
    """The python of a venv holding the wheel: cached by its hash, or built for this sandbox."""
    if not wheel.is_file() or _sha256(wheel) != sha256:
        _say(f"the stored package of {ref} is missing or does not match its SHA-256; push again")
        return None
    if not cache:
        return _install(venvs, wheel, index_url, ref)
    venvs.mkdir(parents=True, exist_ok=True)
    env_dir = venvs / sha256
    with (venvs / f"{sha256}.lock").open("w") as lock:
        # One sandbox builds it; the others wait here and then reuse it.
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (env_dir / _READY).is_file():
            _say(f"reusing the environment of {ref} (cached by content hash)")
            return env_dir / "bin" / "python"
        shutil.rmtree(env_dir, ignore_errors=True)  # a build that died half-way
        return _install(env_dir, wheel, index_url, ref)


def main(argv: list[str] | None = None) -> int:
    """Install, then exec `proctor <args>` in the package's venv."""
    parser = argparse.ArgumentParser(prog="python -m proctor.hosted.packages")
    parser.add_argument("--wheel", required=True, type=Path)
    parser.add_argument("--sha256", required=True)
    parser.add_argument("--venvs", required=True, type=Path)
    parser.add_argument("--ref", default="the environment")
    parser.add_argument("--index-url", default=None)
    parser.add_argument("--no-cache", dest="cache", action="store_false")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    ns = parser.parse_args(argv)
    args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
    python = prepare(
        ns.wheel, ns.sha256, ns.venvs, cache=ns.cache, index_url=ns.index_url, ref=ns.ref
    )
    if python is None:
        return INSTALL_FAILED
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(str(python), [str(python), "-m", "proctor.cli.main", *args])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
