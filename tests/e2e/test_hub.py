"""The environments hub end to end: a real server whose launcher installs pushed packages
into sandbox venvs, driven by `proctor envs push` / `proctor hosted run` (in this process,
`cli_in_process`: what they send and print is the point) and by the public `prime` CLI 0.18.0
in its own process (HOME a temp dir, PRIME_API_BASE_URL pointing at the server)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.e2e.hosted_helpers import hub_project as project
from tests.e2e.hosted_helpers import wait_closed
from tests.support.cli import Finished, cli_in_process
from tests.support.platform import Platform, start_platform
from tests.support.procs import PROCTOR

from proctor.server.auth import service as auth
from proctor.server.db.models import Team
from proctor.server.db.session import Database

pytestmark = pytest.mark.e2e

PRIME_BIN = str(Path(sys.executable).with_name("prime"))  # the dev extra's prime 0.18.0


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    """One platform; pip finds nothing beyond the machine's local wheels (no network)."""
    data_dir = tmp_path_factory.mktemp("hub-platform")
    empty_index = tmp_path_factory.mktemp("empty-index")
    env = {
        "PROCTOR_HOSTED_POLL_SECONDS": "0.1",
        "PROCTOR_HOSTED_STOP_GRACE_SECONDS": "1",
        "PROCTOR_HOSTED_PACKAGE_INDEX": empty_index.as_uri(),
    }
    plat = start_platform(data_dir, extra_env=env)
    yield plat
    plat.process.stop()


def make_key(platform: Platform, user: str, team: str | None = None) -> str:
    """A key of a new user (in `team`), written straight into the server's SQLite file."""
    db = Database(f"sqlite:///{platform.data_dir / 'proctor.db'}")
    try:
        with db.write() as session:
            if team is not None and session.get(Team, team) is None:
                auth.create_team(session, team)
            return auth.create_key(session, name=user, team_id=team).secret
    finally:
        db.dispose()


def proctor(platform: Platform, key: str, *args: str) -> Finished:
    """`proctor ARGS` in this process, as the user of `key` on `platform` (a HOME of its own)."""
    home = platform.data_dir.parent / "cli-home"
    home.mkdir(exist_ok=True)
    env = {"PROCTOR_API_URL": platform.url, "PROCTOR_API_KEY": key, "NO_PROXY": "127.0.0.1"}
    return cli_in_process(*args, home=home, env=env)


def prime_env(platform: Platform, key: str, home: Path, **extra: str) -> dict[str, str]:
    """The environment of the public prime client (CLI or library) pointed at `platform` with
    `key` and its own HOME: none of this process's PRIME_/PROCTOR_ settings nor its venv,
    loopback unproxied, no version check; `extra` on top."""
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PRIME_", "PROCTOR_"))}
    env.pop("VIRTUAL_ENV", None)  # prime installs into an active venv: never the suite's own
    env.update(
        HOME=str(home),
        PRIME_API_BASE_URL=platform.url,
        PRIME_FRONTEND_URL=platform.url,
        PRIME_API_KEY=key,
        PRIME_DISABLE_VERSION_CHECK="1",
        NO_PROXY="127.0.0.1,localhost",
        COLUMNS="200",
    )
    env.update(extra)
    return env


def prime(
    platform: Platform,
    key: str,
    home: Path,
    *args: str,
    cwd: Path | None = None,
    path_prefix: Path | None = None,
    timeout: float = 240,
) -> subprocess.CompletedProcess[str]:
    """The real `prime` CLI pointed at the platform (`path_prefix` first on its PATH)."""
    env = prime_env(platform, key, home)
    if path_prefix is not None:
        env["PATH"] = f"{path_prefix}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(
        [PRIME_BIN, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def evaluation_id(output: str) -> str:
    found = re.search(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", output)
    assert found, output
    return found.group(0)


def test_proctor_push_then_hosted_run_installs_the_package(
    hub: Platform, demo_model: str, tmp_path: Path
) -> None:
    alice = make_key(hub, "alice")
    folder = project(tmp_path)
    pushed = proctor(hub, alice, "envs", "push", str(folder))
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    assert "Published alice/tiny-echo@0.1.0" in pushed.stdout
    again = proctor(hub, alice, "envs", "push", str(folder))
    assert again.returncode == 0 and "already published" in again.stdout, again.stderr

    run = ["hosted", "run", "alice/tiny-echo", "-m", "demo", "--api-base-url", demo_model]
    run += ["-n", "4", "-r", "2", "--follow", "--poll-seconds", "0.2"]
    cold = proctor(hub, alice, *run)
    assert cold.returncode == 0, cold.stdout + cold.stderr
    assert "COMPLETED" in cold.stderr and "samples: 8" in cold.stdout
    assert "installed alice/tiny-echo@0.1.0" in cold.stdout
    warm = proctor(hub, alice, *run)
    assert warm.returncode == 0, warm.stdout + warm.stderr
    assert "reusing the environment of alice/tiny-echo@0.1.0" in warm.stdout
    # The server's own environment never gained the package.
    check = subprocess.run(
        [PROCTOR[0], "-c", "import importlib.util as u; print(u.find_spec('tiny_echo'))"],
        capture_output=True,
        text=True,
    )
    assert check.stdout.strip() == "None"


def test_a_package_that_cannot_install_fails_with_pip_error(
    hub: Platform, demo_model: str, tmp_path: Path
) -> None:
    alice = make_key(hub, "alice-broken")
    folder = project(tmp_path, name="broken-echo", deps='"proctor-hub-missing-dependency>=1"')
    pushed = proctor(hub, alice, "envs", "push", str(folder), "--no-build-isolation")
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    run = proctor(
        hub, alice, "hosted", "run", "broken-echo", "-m", "demo", "--api-base-url", demo_model
    )
    assert run.returncode == 0, run.stderr
    record = wait_closed(hub.client(), hub, run.stdout.strip())
    assert record["status"] == "FAILED"
    assert "proctor-hub-missing-dependency" in record["error_message"]
    assert "pip exited" in record["error_message"]


def test_push_refuses_a_folder_without_pyproject_in_one_sentence(
    hub: Platform, tmp_path: Path
) -> None:
    alice = make_key(hub, "alice-bad")
    (tmp_path / "empty").mkdir()
    done = proctor(hub, alice, "envs", "push", str(tmp_path / "empty"))
    assert done.returncode != 0
    assert "has no pyproject.toml" in done.stderr and "Traceback" not in done.stderr
    folder = project(tmp_path, name="unbuildable")
    (folder / "wheel_backend.py").write_text("raise RuntimeError('cannot build this')\n")
    done = proctor(hub, alice, "envs", "push", str(folder))
    assert done.returncode != 0 and "Building a wheel" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_prime_cli_pushes_lists_and_runs_hosted(
    hub: Platform, demo_model: str, tmp_path: Path
) -> None:
    bob = make_key(hub, "bob")
    home = tmp_path / "home"
    folder = project(tmp_path, version="0.2.0")
    pushed = prime(hub, bob, home, "env", "push", cwd=folder)
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    assert "Successfully pushed bob/tiny-echo" in pushed.stdout
    listed = prime(hub, bob, home, "env", "list")
    assert listed.returncode == 0 and "bob/tiny-echo" in listed.stdout, listed.stdout
    assert "proctor/alphabet-sort" in listed.stdout
    status = prime(hub, bob, home, "env", "status", "bob/tiny-echo")
    assert "0.2.0" in status.stdout, status.stdout

    hosted = ["--hosted", "-m", "demo", "-n", "3", "-r", "1", "--api-base-url", demo_model]
    followed = prime(
        hub, bob, home, "eval", "run", "bob/tiny-echo", *hosted, "--follow", "--poll-interval", "1"
    )
    assert followed.returncode == 0, followed.stdout + followed.stderr
    assert "COMPLETED" in followed.stdout
    done = hub.client(bob).get(f"/evaluations/{evaluation_id(followed.stdout)}").json()
    assert (
        done["total_samples"] == 3 and done["metadata"]["environment_ref"] == "bob/tiny-echo@0.2.0"
    )

    # A brand-new user runs a built-in by its bare name (the CLI falls back to the platform).
    newcomer = make_key(hub, "newcomer")
    started = prime(hub, newcomer, tmp_path / "home2", "eval", "run", "alphabet-sort", *hosted)
    assert started.returncode == 0, started.stdout + started.stderr
    assert "Hosted evaluation started" in started.stdout
    view = re.search(r"View results: (\S+)", started.stdout)
    assert view and view.group(1).startswith(f"{hub.url}/dashboard/evaluations/")
    record = wait_closed(hub.client(newcomer), hub, evaluation_id(started.stdout))
    assert record["status"] == "COMPLETED" and record["total_samples"] == 3, record

    # The URL the CLI printed opens the evaluation's page once signed in.
    with httpx.Client(timeout=30) as browser:
        first = browser.get(view.group(1), follow_redirects=True)
        assert first.status_code == 200 and "/login" in str(first.url)
        signed_in = browser.post(
            f"{hub.url}/login", data={"api_key": newcomer, "next": "/evaluations"}
        )
        assert signed_in.status_code == 303
        # The cookie is Secure (loopback counts as secure for browsers, not for httpx's jar).
        cookie = f"proctor_session={signed_in.cookies['proctor_session']}"
        hop = browser.get(view.group(1), headers={"Cookie": cookie})
        assert hop.status_code == 307  # httpx drops a Cookie header on redirects: one by one
        page = browser.get(f"{hub.url}{hop.headers['location']}", headers={"Cookie": cookie})
        assert page.status_code == 200 and record["name"] in page.text


def test_private_team_environments_stay_with_the_team(
    hub: Platform, demo_model: str, tmp_path: Path
) -> None:
    alice = make_key(hub, "alice-red", team="red")
    carol = make_key(hub, "carol-red", team="red")
    mallory = make_key(hub, "mallory-blue", team="blue")
    folder = project(tmp_path, name="team-echo")
    pushed = proctor(hub, alice, "envs", "push", str(folder), "--team", "red")
    assert pushed.returncode == 0 and "red/team-echo" in pushed.stdout, pushed.stderr
    run = ["hosted", "run", "red/team-echo", "-m", "demo", "--api-base-url", demo_model, "-n", "1"]
    refused = proctor(hub, mallory, *run)
    assert refused.returncode != 0 and "no environment 'red/team-echo'" in refused.stderr, (
        refused.stderr
    )
    listed = prime(hub, mallory, tmp_path / "mhome", "env", "list")
    assert "team-echo" not in listed.stdout
    hosted = prime(
        hub, mallory, tmp_path / "mhome", "eval", "run", "red/team-echo", "--hosted", "-m", "demo"
    )
    assert hosted.returncode != 0 and "published" in hosted.stdout, hosted.stdout
    allowed = proctor(hub, carol, *run, "-r", "1")
    assert allowed.returncode == 0, allowed.stderr
    assert wait_closed(hub.client(carol), hub, allowed.stdout.strip())["status"] == "COMPLETED"
