"""#25 item 11, through the CLI: the small things a newcomer trips over (the CLI in a process
of its own where its start or a build is part of it, else in this one)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.cli.test_first_hour_mistakes import proctor
from tests.e2e.hosted_helpers import hub_project
from tests.support.cli import cli_in_process
from tests.support.procs import free_port


def test_keys_list_leaves_out_the_revoked_keys_of_finished_sandboxes(tmp_path: Path) -> None:
    data = ["--data-dir", str(tmp_path / "data")]
    assert cli_in_process("server", "migrate", *data, home=tmp_path).returncode == 0
    for name in ("me", "sandbox:1111", "sandbox:2222"):
        made = cli_in_process("keys", "create", "--name", name, *data, home=tmp_path)
        assert made.returncode == 0, made.stderr
    ids = {
        line.split()[3]: line.split()[0]
        for line in cli_in_process("keys", "list", *data, home=tmp_path).stdout.splitlines()[1:]
    }
    for name in ("sandbox:1111", "sandbox:2222"):
        assert cli_in_process("keys", "revoke", ids[name], *data, home=tmp_path).returncode == 0
    listed = cli_in_process("keys", "list", *data, home=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert " me " in listed.stdout and "sandbox:" not in listed.stdout.split("(")[0]
    assert "(2 revoked sandbox key(s) of finished hosted runs not shown; --all)" in listed.stdout
    everything = cli_in_process("keys", "list", "--all", *data, home=tmp_path)
    revoked = [line for line in everything.stdout.splitlines() if "sandbox:" in line]
    assert len(revoked) == 2 and "not shown" not in everything.stdout


def test_envs_push_leaves_the_project_folder_as_it_found_it(tmp_path: Path) -> None:
    project = hub_project(tmp_path)
    backend = project / "wheel_backend.py"
    backend.write_text(
        backend.read_text()
        + """
_build_wheel = build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    # As setuptools does: its intermediate files land in the project folder.
    (ROOT / "build" / "lib").mkdir(parents=True, exist_ok=True)
    (ROOT / "tiny_echo.egg-info").mkdir(exist_ok=True)
    return _build_wheel(wheel_directory, config_settings, metadata_directory)
"""
    )
    (project / "build").mkdir()  # one the user made stays
    before = sorted(p.name for p in project.iterdir())
    dead = {"PROCTOR_API_URL": f"http://127.0.0.1:{free_port()}", "PROCTOR_API_KEY": "pk_x"}
    pushed = proctor("envs", "push", str(project), home=tmp_path, env=dead)
    assert "cannot connect" in pushed.stderr, pushed.stderr  # built, then found no platform
    assert sorted(p.name for p in project.iterdir()) == before
    shutil.rmtree(project / "build")
    proctor("envs", "push", str(project), home=tmp_path, env=dead)
    assert not (project / "build").exists() and not (project / "tiny_echo.egg-info").exists()


def test_the_demo_model_gives_the_same_results_run_after_run(
    demo_model: str, tmp_path: Path
) -> None:
    rewards = []
    for name in ("a", "b"):
        ran = cli_in_process("eval", "alphabet-sort", "-n", "6", "-r", "2", "--no-push",
                             "--run.dir", name, "--client.base-url", demo_model,
                             home=tmp_path)  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        traces = (tmp_path / "outputs" / name / "traces.jsonl").read_text().splitlines()
        records = [json.loads(line) for line in traces if line]
        rewards.append(sorted((r["example_id"], r["rollout_number"], r["reward"]) for r in records))
    assert rewards[0] == rewards[1]
