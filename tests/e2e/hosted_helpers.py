"""Helpers shared by the hosted end-to-end tests: the launcher's settings, the CLI's command
and environment, waiting on statuses and logs, reading launcher rows and shards' progress."""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import psutil
from tests.support.platform import Platform
from tests.support.procs import PROCTOR
from tests.support.waiting import wait_until

from proctor.contract import TERMINAL_STATUSES

TERMINAL = TERMINAL_STATUSES
HUB_PACKAGE = Path(__file__).parent / "hub_env"
"""The example environment package the hub tests and bench/hosted.py publish."""
LAUNCHER_ENV = {"PROCTOR_HOSTED_POLL_SECONDS": "0.1", "PROCTOR_HOSTED_STOP_GRACE_SECONDS": "1"}
"""A launcher that polls and stops quickly, for a test platform's `extra_env`."""


def cli_env(platform: Platform, home: Path) -> dict[str, str]:
    """This process's environment for the CLI, without its PROCTOR_ settings, on `platform`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCTOR_")}
    return {
        **env,
        "PROCTOR_API_URL": platform.url,
        "PROCTOR_API_KEY": platform.api_key,
        "HOME": str(home),
    }


def hosted_run(*args: str) -> list[str]:
    """`proctor hosted run ARGS -m demo --follow`, polling every 0.2 s."""
    return [*PROCTOR, "hosted", "run", *args, "-m", "demo", "--follow", "--poll-seconds", "0.2"]


def create_hosted(client: httpx.Client, env: str = "alphabet-sort", **eval_config: Any) -> str:
    """Queue one hosted evaluation against the demo model; returns its id."""
    body = {"environment_ids": [env], "inference_model": "demo", "eval_config": eval_config}
    answer = client.post("/hosted-evaluations", json=body)
    assert answer.status_code == 200, answer.text
    ids = answer.json()["evaluation_ids"]
    assert answer.json()["evaluation_id"] == ids[0] and len(ids) == 1
    return str(ids[0])


def wait_status(
    client: httpx.Client, evaluation_id: str, statuses: tuple[str, ...], timeout: float = 90.0
) -> dict[str, Any]:
    """Poll the record until its status is one of `statuses`."""
    record: dict[str, Any] = {}

    def reached() -> dict[str, Any] | None:
        record.clear()
        record.update(client.get(f"/evaluations/{evaluation_id}").json())
        return record if record.get("status") in statuses else None

    # A terminal status stays: its wait may poll less often as it goes on.
    slower = 0.5 if set(statuses) <= set(TERMINAL) else None
    return wait_until(
        reached,
        timeout=timeout,
        interval=0.1,
        max_pause=slower,
        what=lambda: f"status in {statuses} ({record})",
    )


def launcher_rows(
    platform: Platform, table: str, evaluation_id: str, *, order_by: str = "rowid"
) -> list[dict[str, Any]]:
    """The launcher's rows of `table` for an evaluation, read straight from the SQLite file."""
    with sqlite3.connect(platform.data_dir / "proctor.db", timeout=30) as conn:
        conn.row_factory = sqlite3.Row
        rows = conn.execute(
            f"SELECT * FROM {table} WHERE evaluation_id = ? ORDER BY {order_by}", (evaluation_id,)
        ).fetchall()
    return [dict(row) for row in rows]


def hosted_row(platform: Platform, evaluation_id: str) -> dict[str, Any]:
    """The launcher's row for an evaluation."""
    rows = launcher_rows(platform, "hosted_evaluations", evaluation_id)
    assert len(rows) == 1, rows
    return rows[0]


def shard_rows(platform: Platform, evaluation_id: str) -> list[dict[str, Any]]:
    """The launcher's shard rows, by shard."""
    return launcher_rows(platform, "hosted_shards", evaluation_id, order_by="shard")


def stored_pairs(client: httpx.Client, evaluation_id: str) -> Counter[tuple[int, int]]:
    """How often each (example, rollout) pair is stored."""
    pairs: Counter[tuple[int, int]] = Counter()
    page = 1
    while True:
        answer = client.get(
            f"/evaluations/{evaluation_id}/samples", params={"page": page, "limit": 100}
        ).json()
        pairs.update((s["example_id"], s["rollout_number"]) for s in answer["samples"])
        if not answer["has_more"]:
            return pairs
        page += 1


def wait_closed(
    client: httpx.Client, platform: Platform, evaluation_id: str, timeout: float = 90.0
) -> dict[str, Any]:
    """Wait until the launcher has closed the sandbox's row; returns the final record."""
    wait_until(
        lambda: hosted_row(platform, evaluation_id)["ended_at"] is not None,
        timeout=timeout,
        interval=0.1,
        what=f"the launcher closing {evaluation_id}",
    )
    return dict(client.get(f"/evaluations/{evaluation_id}").json())


def hosted_logs(client: httpx.Client, evaluation_id: str) -> str:
    """The sandbox's (or, sharded, every shard's) log as the platform serves it."""
    return str(client.get(f"/hosted-evaluations/{evaluation_id}/logs").json()["logs"])


def wait_logs(client: httpx.Client, evaluation_id: str, text: str, timeout: float = 60.0) -> str:
    """Poll the sandbox's logs until they contain `text`."""
    logs = [""]

    def shown() -> str | None:
        logs[0] = hosted_logs(client, evaluation_id)
        return logs[0] if text in logs[0] else None

    return wait_until(
        shown, timeout=timeout, interval=0.1, what=lambda: f"{text!r} in the logs:\n{logs[0]}"
    )


def wait_shard_storing(
    client: httpx.Client, evaluation_id: str, shard: int, shards: int, timeout: float = 240.0
) -> None:
    """Wait until shard `shard` of `shards`, in its first attempt, has stored some samples
    (its progress line in the logs no longer says 0). A timeout shows the logs' last lines:
    three sandboxes starting on a loaded machine can take minutes."""
    head = f"shard {shard}/{shards}: running, attempt 1, "
    seen = [""]

    def storing() -> bool:
        seen[0] = text = hosted_logs(client, evaluation_id)
        done = f"shard {shard}/{shards}: done, attempt 1, "
        assert done not in text, f"shard {shard} ended before it was seen storing: {text[-1500:]}"
        return head in text and f"{head}0 of" not in text

    def what() -> str:
        return f"shard {shard} storing samples (the logs end: {seen[0][-1500:]!r})"

    wait_until(storing, timeout=timeout, interval=0.2, what=what)


def group_alive(pgid: int) -> bool:
    """Whether any live (non-zombie) process is left in the process group."""
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(proc.info["pid"]) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


def all_command_lines() -> str:
    """Every process's command line, as `ps` shows them."""
    lines = []
    for proc in psutil.process_iter(["cmdline"]):
        lines.append(" ".join(proc.info["cmdline"] or []))
    return "\n".join(lines)


def hub_project(
    tmp_path: Path, *, name: str = "tiny-echo", version: str = "0.1.0", deps: str = ""
) -> Path:
    """A copy of the example hub package, renamed / re-versioned / with extra dependencies."""
    target = tmp_path / f"{name}-{version}"
    shutil.copytree(
        HUB_PACKAGE, target, ignore=shutil.ignore_patterns("dist", "__pycache__", ".prime")
    )
    text = (target / "pyproject.toml").read_text()
    text = text.replace('name = "tiny-echo"', f'name = "{name}"')
    text = text.replace('version = "0.1.0"', f'version = "{version}"')
    if deps:
        text = text.replace('dependencies = ["proctor"]', f'dependencies = ["proctor", {deps}]')
    (target / "pyproject.toml").write_text(text)
    return target
