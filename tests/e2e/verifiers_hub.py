"""What the hosted verifiers tests and bench/verifiers_hosted.py share: a pushable copy of a
vendored verifiers environment, and the launcher settings of an offline server that runs them."""

from __future__ import annotations

import os
import re
import shlex
import shutil
from pathlib import Path

from tests.e2e.hosted_helpers import HUB_PACKAGE
from tests.envs.verifiers_fixtures import ALPHABET_SORT_DATASET, ENVS_DIR

from proctor.sandboxes.command import DEFAULT_COMMAND

HARNESS_INDEX = Path(
    os.environ.get("PROCTOR_TEST_HARNESS_INDEX") or Path.home() / ".cache/proctor/harness-index"
)
"""The offline index scripts/test builds: the harness programs' wheels, and uv."""


def project(tmp_path: Path, package: str) -> Path:
    """A copy of a vendored environment whose sources are untouched; only its build backend
    is the in-tree one of the hub's example package, so it builds offline."""
    target = tmp_path / package
    shutil.copytree(ENVS_DIR / package, target, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(HUB_PACKAGE / "wheel_backend.py", target)
    text = (target / "pyproject.toml").read_text()
    text = re.sub(
        r"\[build-system\].*?(?=\n\[)",
        '[build-system]\nrequires = []\nbuild-backend = "wheel_backend"\nbackend-path = ["."]\n',
        text,
        flags=re.DOTALL,
    )
    (target / "pyproject.toml").write_text(text)
    return target


def share(folder: Path) -> None:
    """Make `folder` and what it holds readable by any uid: a confined sandbox runs as a uid
    of its own, and sees a shared folder with its host permissions (pytest's are 0700)."""
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


def launcher_environment(shared: Path, empty_index: Path) -> dict[str, str]:
    """`PROCTOR_HOSTED_*` of a server whose confined sandboxes install packages offline and
    see the harness index and the `shared` datasets (alphabet-sort reads its dataset from
    the working directory, so the command links it there)."""
    link = f"ln -sfn {shlex.quote(str(shared / ALPHABET_SORT_DATASET.parts[0]))} . && "
    return {
        "PROCTOR_HOSTED_POLL_SECONDS": "0.1",
        "PROCTOR_HOSTED_STOP_GRACE_SECONDS": "1",
        "PROCTOR_HOSTED_PACKAGE_INDEX": empty_index.as_uri(),
        "PROCTOR_HOSTED_HARNESS_INDEX": str(HARNESS_INDEX),
        "PROCTOR_HOSTED_SHARED_PATHS": str(shared),
        "PROCTOR_HOSTED_COMMAND": link + DEFAULT_COMMAND,
    }
