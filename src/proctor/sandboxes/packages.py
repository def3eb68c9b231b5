"""A published environment package's own directory of installed packages, per content hash.

The launcher prefixes a hosted run of a pushed environment with
`python -m proctor.sandboxes.packages --wheel W --sha256 H --venvs DIR -- <proctor args>`.
`prepare` checks the stored wheel against its published SHA-256 and pip-installs it (its
dependencies from the configured package index, wheels only: no build runs) into
`DIR/<sha256>`, cached there for later runs (or per sandbox with `--no-cache`), behind a
file lock, and marked ready only once pip has succeeded. Then `main` runs `proctor <args>`
in this interpreter with that directory added *after* proctor's own packages on
`sys.path`: a package pinning other versions of proctor's dependencies never shadows them.
The Python processes the run starts (a verifiers environment's tool servers) see it the same
way, through a `sitecustomize` on their `PYTHONPATH`.

A confined sandbox (`proctor.sandboxes.confine`) gets the directory built outside, by the
confinement as root (with the server's own pip: nothing of the package runs there), and
sees it read-only; the prefix inside then only finds it ready.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import runpy
import shlex
import shutil
import site
import subprocess
import sys
import tempfile
import time
import zipfile
from importlib import metadata
from pathlib import Path

from proctor.sandboxes.prepared import build_once, ready, say

INSTALL_FAILED = 3
"""Exit code of a sandbox whose package could not be installed."""


def install_prefix(
    package: dict[str, str], venvs: Path, *, cache: bool, index_url: str | None
) -> str:
    """The shell words that replace `{proctor}` in the sandbox command for a pushed package."""
    words = [
        sys.executable,
        "-m",
        "proctor.sandboxes.packages",
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


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _missing_requirements(wheel: Path) -> list[str] | None:
    """The wheel's requirements this interpreter does not already satisfy (so pip installs
    only those: it cannot see the server's packages from `--target`); None: unreadable."""
    try:
        from packaging.metadata import InvalidMetadata, Metadata
    except ImportError:
        return None
    missing: list[str] = []
    try:
        with zipfile.ZipFile(wheel) as archive:
            name = next(
                n for n in archive.namelist() if n.count("/") == 1 and n.endswith("/METADATA")
            )
            text = archive.read(name).decode("utf-8", "replace")
        for req in Metadata.from_email(text, validate=False).requires_dist or []:
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            try:
                met = not req.url and req.specifier.contains(
                    metadata.version(req.name), prereleases=True
                )
            except metadata.PackageNotFoundError:
                met = False
            if not met:
                missing.append(str(req))
    except (StopIteration, zipfile.BadZipFile, OSError, InvalidMetadata):
        return None
    return missing


def _pip(target: Path, index_url: str | None, *args: str) -> int:
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-input",
        "--disable-pip-version-check",
        "--no-warn-script-location",
        "--only-binary=:all:",  # never build (and so run) anything of the package here
        "--target",
        str(target),
    ]
    if index_url:
        command += ["--index-url", index_url]
    sys.stderr.flush()
    done = subprocess.run(
        [*command, *args], stdin=subprocess.DEVNULL, stdout=sys.stderr, check=False
    )
    return done.returncode


def _install(building: Path, wheel: Path, index_url: str | None, ref: str) -> bool:
    """pip-install the wheel into `building`; False on failure (said)."""
    started = time.monotonic()
    say(f"installing {ref}")
    missing = _missing_requirements(wheel)
    if missing is None:
        code = _pip(building, index_url, str(wheel))
    else:
        # What the server has is not installed again (it comes first on sys.path anyway).
        code = _pip(building, index_url, *missing) if missing else 0
        if code == 0:
            code = _pip(building, index_url, "--no-deps", str(wheel))
    if code != 0:
        say(f"installing {ref} failed (pip exited {code}); see pip's output above")
        return False
    say(f"installed {ref} in {time.monotonic() - started:.1f}s")
    return True


def prepare(
    wheel: Path, sha256: str, venvs: Path, *, cache: bool, index_url: str | None, ref: str
) -> Path | None:
    """The directory holding the wheel's packages: cached by its hash, or built afresh."""
    reusing = f"reusing the environment of {ref} (cached by content hash)"
    if cache and (found := ready(venvs, sha256)) is not None:
        say(reusing)
        return found
    if not wheel.is_file() or _sha256(wheel) != sha256:
        say(f"the stored package of {ref} is missing or does not match its SHA-256; push again")
        return None
    return build_once(
        venvs,
        sha256,
        lambda building: _install(building, wheel, index_url, ref),
        reusing=reusing,
        reuse=cache,
    )


_BOOT = """\
# Written by proctor.sandboxes.packages: this process sees a published environment's packages
# after its own (a verifiers tool server started as `python -m package.module`).
import site

site.addsitedir({site_dir!r})
if {original!r}:
    with open({original!r}) as _f:
        exec(compile(_f.read(), {original!r}, "exec"))
"""


def _share_with_children(site_dir: Path) -> Path:
    """Python processes the run starts (an environment's tool servers and programs) see the
    package's directory too, after their own packages, as this one does: a `sitecustomize`
    on `PYTHONPATH` (it shadows nothing else; one the interpreter had still runs)."""
    boot = Path(tempfile.mkdtemp(prefix="proctor-site-"))
    original = getattr(sys.modules.get("sitecustomize"), "__file__", None)
    (boot / "sitecustomize.py").write_text(_BOOT.format(site_dir=str(site_dir), original=original))
    inherited = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = f"{boot}{os.pathsep}{inherited}" if inherited else str(boot)
    return boot


def run_proctor(site_dir: Path, args: list[str]) -> int:
    """`proctor <args>` in this process, with the package's directory after proctor's own."""
    site.addsitedir(str(site_dir))  # appended: proctor's pinned packages come first
    boot = _share_with_children(site_dir)
    sys.argv = ["proctor", *args]
    try:
        runpy.run_module("proctor.cli.main", run_name="__main__", alter_sys=True)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        shutil.rmtree(boot, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Install (unless built already), then run `proctor <args>` with the package."""
    parser = argparse.ArgumentParser(prog="python -m proctor.sandboxes.packages")
    parser.add_argument("--wheel", required=True, type=Path)
    parser.add_argument("--sha256", required=True)
    parser.add_argument("--venvs", required=True, type=Path)
    parser.add_argument("--ref", default="the environment")
    parser.add_argument("--index-url", default=None)
    parser.add_argument("--no-cache", dest="cache", action="store_false")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    ns = parser.parse_args(argv)
    args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
    inside = os.environ.get("PROCTOR_SANDBOX_PACKAGES")
    # Built outside by the confinement, and shown to the sandbox there.
    site_dir = ready(Path(inside), ns.sha256) if inside else ready(ns.venvs, ns.sha256)
    if site_dir is None:
        site_dir = prepare(
            ns.wheel, ns.sha256, ns.venvs, cache=ns.cache, index_url=ns.index_url, ref=ns.ref
        )
    if site_dir is None:
        return INSTALL_FAILED
    return run_proctor(site_dir, args)


if __name__ == "__main__":
    sys.exit(main())
