"""`proctor evals rename` and `proctor evals delete` through the CLI (in this process, against a
real server), with the team rules (#25 item 12): only the owner, a team admin or a platform
admin renames or deletes."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import cli_in_process
from tests.support.platform import Platform


def test_team_rules_for_rename_and_delete(
    demo_model: str, platform: Platform, tmp_path: Path
) -> None:
    data = ["--data-dir", str(platform.data_dir)]
    assert cli_in_process("teams", "create", "blue", *data, home=tmp_path).returncode == 0
    keys = {}
    for user in ("alice", "carol", "dave"):
        made = cli_in_process(
            "keys", "create", "--name", user, "--team", "blue", *data, home=tmp_path
        )
        assert made.returncode == 0, made.stderr
        keys[user] = made.stdout.split()[0]
    promoted = cli_in_process(
        "teams", "add-member", "blue", "dave", "--role", "admin", *data, home=tmp_path
    )
    assert promoted.returncode == 0 and "as admin" in promoted.stdout, promoted.stderr

    def as_user(user: str) -> dict[str, str]:
        return {"PROCTOR_API_URL": platform.url, "PROCTOR_API_KEY": keys[user]}

    in_team = {**as_user("alice"), "PROCTOR_TEAM_ID": "blue"}
    for _ in range(2):
        ran = cli_in_process(
            "eval",
            "reverse-text",
            "-n",
            "1",
            "--client.base-url",
            demo_model,
            home=tmp_path,
            env=in_team,
        )
        assert ran.returncode == 0, ran.stderr
    with platform.client(keys["alice"]) as http:
        ids = [e["evaluation_id"] for e in http.get("/evaluations").json()["evaluations"]]
    first, second = ids

    member_rename = cli_in_process(
        "evals", "rename", first, "mine", home=tmp_path, env=as_user("carol")
    )
    assert member_rename.returncode == 1 and member_rename.stdout == ""
    line = member_rename.stderr.strip()
    assert "only the owner" in line and "may rename it" in line and len(line.splitlines()) == 1
    assert "HTTP" not in line and "Traceback" not in line
    renamed = cli_in_process(
        "evals", "rename", first, "take two", home=tmp_path, env=as_user("dave")
    )
    assert renamed.returncode == 0, renamed.stderr
    assert f"evaluation {first} is now named 'take two'" in renamed.stdout

    member = cli_in_process("evals", "delete", first, "--yes", home=tmp_path, env=as_user("carol"))
    assert member.returncode == 1
    line = member.stderr.strip()
    assert "only the owner" in line and "team" in line and len(line.splitlines()) == 1
    assert "HTTP" not in line and "DELETE" not in line

    unconfirmed = cli_in_process("evals", "delete", first, home=tmp_path, env=as_user("alice"))
    assert unconfirmed.returncode == 2
    assert "'take two', 1 samples) cannot be undone; add --yes" in unconfirmed.stderr

    admin = cli_in_process("evals", "delete", first, "--yes", home=tmp_path, env=as_user("dave"))
    assert admin.returncode == 0, admin.stderr
    assert f"deleted evaluation {first} ('take two')" in admin.stdout
    owner = cli_in_process("evals", "delete", second, "--yes", home=tmp_path, env=as_user("alice"))
    assert owner.returncode == 0, owner.stderr
    gone = cli_in_process("evals", "get", first, home=tmp_path, env=as_user("alice"))
    assert gone.returncode != 0 and "No evaluation with id" in gone.stderr
    listed = cli_in_process("evals", "list", home=tmp_path, env=as_user("alice"))
    assert first not in listed.stdout and second not in listed.stdout
