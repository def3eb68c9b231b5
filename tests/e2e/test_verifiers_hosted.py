"""The seed's hosted flow for real verifiers environments (vendored from the verifiers
repository, sources unmodified): each is pushed with the public `prime` CLI 0.18.0 and run with
`prime eval run owner/name --hosted` against a real server. Its launcher installs the package
once per content hash outside the confined sandbox (read-only inside, after proctor's own
packages), and verifiers' harness environment once per content from its harness index
(sandboxes never build it), runs `proctor eval owner/name@version … --run.attach
$EVALUATION_ID`, and the evaluation ends COMPLETED with every sample and the
`owner/name@version` that ran. A push proctor cannot run is refused in one sentence, and
`proctor hosted run` starts the same flow.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.hosted_helpers import wait_closed
from tests.e2e.test_hub import evaluation_id, make_key, prime, proctor
from tests.e2e.verifiers_hub import launcher_environment, project, share
from tests.envs.verifiers_fixtures import SUBPROCESS_RUNTIME, write_datasets
from tests.support import tools
from tests.support.platform import Platform, start_platform

tools.package("verifiers")
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

ENVS = ("glossary", "scratchpad", "reverse-text", "alphabet-sort")
DEADLINE_S = 900.0
"""Bound on one hosted run: a cold sandbox prepares verifiers' harness program first."""


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A folder of local datasets every sandbox sees read-only, and the `env_args` that
    point the environments at it."""
    folder = tmp_path_factory.mktemp("shared-data")
    datasets = write_datasets(folder)
    share(folder)
    return folder, datasets


@pytest.fixture(scope="module")
def hub(
    tmp_path_factory: pytest.TempPathFactory, shared: tuple[Path, dict[str, Any]]
) -> Iterator[Platform]:
    """A server whose confined sandboxes install packages offline and reach the harness
    index and the shared datasets."""
    folder, _ = shared
    data_dir = tmp_path_factory.mktemp("vf-hub")
    env = launcher_environment(folder, tmp_path_factory.mktemp("empty-index"))
    plat = start_platform(data_dir, extra_env=env)
    yield plat
    plat.process.stop()


def _built_inside(hub: Platform, eid: str) -> list[Path]:
    """Harness environments `uv` built inside the sandbox (its home is its work dir): none,
    since the launcher builds the one its harness program runs in outside, once."""
    return list((hub.data_dir / "sandboxes" / eid / "work").glob(".cache/uv/environments-v2/*"))


def _env_args(name: str, datasets: dict[str, Any]) -> str:
    return json.dumps({**SUBPROCESS_RUNTIME, **datasets.get(name, {})})


@pytest.mark.parametrize("name", ENVS)
def test_prime_pushes_a_verifiers_environment_and_runs_it_hosted_to_completed(
    name: str,
    hub: Platform,
    shared: tuple[Path, dict[str, Any]],
    demo_model: str,
    tmp_path: Path,
) -> None:
    user = f"vf-{name}"
    key = make_key(hub, user)
    home = tmp_path / "home"
    pushed = prime(hub, key, home, "env", "push", cwd=project(tmp_path, name.replace("-", "_")))
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    assert f"Successfully pushed {user}/{name}" in pushed.stdout, pushed.stdout

    hosted = ["--hosted", "-m", "demo", "-n", "2", "-r", "2", "--api-base-url", demo_model]
    hosted += ["--env-args", _env_args(name, shared[1])]
    started = prime(hub, key, home, "eval", "run", f"{user}/{name}", *hosted)
    assert started.returncode == 0, started.stdout + started.stderr
    eid = evaluation_id(started.stdout)
    client = hub.client(key)
    record = wait_closed(client, hub, eid, timeout=DEADLINE_S)
    logs = client.get(f"/hosted-evaluations/{eid}/logs").json()["logs"]
    assert record["status"] == "COMPLETED", f"{record}\n{logs}"
    assert record["total_samples"] == 4, record
    ran = f"{user}/{name}@0.1.0"
    assert record["metadata"]["environment_ref"] == ran
    assert record["environments"][0]["ref"] == ran
    assert f"installed {ran}" in logs
    assert "verifiers' harness environment" in logs and not _built_inside(hub, eid), logs
    samples = client.get(f"/evaluations/{eid}/samples", params={"limit": 100}).json()["samples"]
    assert sorted((s["example_id"], s["rollout_number"]) for s in samples) == sorted(
        (e, r) for e in range(2) for r in (1, 2)
    )


def test_proctor_hosted_run_reuses_the_environment_built_for_the_same_content(
    hub: Platform, shared: tuple[Path, dict[str, Any]], demo_model: str, tmp_path: Path
) -> None:
    """The package directory is keyed by the wheel's SHA-256: reverse-text pushed again by
    another user (the same bytes) reuses what an earlier run built, or its own first run's."""
    key = make_key(hub, "vf-again")
    pushed = proctor(hub, key, "envs", "push", str(project(tmp_path, "reverse_text")))
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    assert "Published vf-again/reverse-text@0.1.0" in pushed.stdout
    run = ["hosted", "run", "vf-again/reverse-text", "-m", "demo", "--api-base-url", demo_model]
    run += ["-n", "2", "--env-args", _env_args("reverse-text", shared[1])]
    logs = ""
    for _ in range(2):  # the first run builds it unless the parametrized test did
        started = proctor(hub, key, *run)
        assert started.returncode == 0, started.stdout + started.stderr
        eid = started.stdout.strip()
        record = wait_closed(hub.client(key), hub, eid, timeout=DEADLINE_S)
        logs = hub.client(key).get(f"/hosted-evaluations/{eid}/logs").json()["logs"]
        assert record["status"] == "COMPLETED" and record["total_samples"] == 2, logs
        assert not _built_inside(hub, eid), logs
        if "reusing the environment of vf-again/reverse-text@0.1.0" in logs:
            break
    assert "reusing the environment of vf-again/reverse-text@0.1.0" in logs, logs
    # So is verifiers' harness environment: built by an earlier sandbox, or this one's first;
    # the server's own, which no sandbox's uid may change (it sees it read-only besides).
    assert "reusing verifiers' harness environment" in logs, logs
    (built,) = (p for p in (hub.data_dir / "hosted-harness").iterdir() if p.is_dir())
    for path in (built, *built.rglob("*")):
        mode = path.lstat()
        assert mode.st_uid == 0 and (path.is_symlink() or not mode.st_mode & 0o022), path


def test_a_push_proctor_cannot_run_is_refused_in_one_sentence(
    hub: Platform, tmp_path: Path
) -> None:
    key = make_key(hub, "vf-refused")
    folder = project(tmp_path, "glossary")
    # A package `lexicon` with no entry point and no Taskset: nothing proctor can run.
    text = (folder / "pyproject.toml").read_text().replace('"glossary"', '"lexicon"')
    (folder / "pyproject.toml").write_text(text)
    (folder / "lexicon").mkdir()
    (folder / "lexicon" / "__init__.py").write_text("WORDS = ['a']\n__all__ = ['WORDS']\n")
    pushed = prime(hub, key, tmp_path / "home", "env", "push", cwd=folder)
    assert pushed.returncode != 0, pushed.stdout
    said = " ".join(pushed.stdout.split())
    assert "vf-refused/lexicon@0.1.0 is neither a proctor environment nor a verifiers v1" in said
    assert "Traceback" not in pushed.stdout + pushed.stderr
    refused = proctor(hub, key, "envs", "push", str(folder))
    assert refused.returncode != 0 and "is neither a proctor environment" in refused.stderr
    assert "Traceback" not in refused.stderr
    listed = hub.client(key).get("/environmentshub/vf-refused/lexicon/@latest")
    assert listed.status_code == 404 or listed.json()["data"]["latest_version"] is None
