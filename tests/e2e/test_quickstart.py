"""`proctor quickstart --exit` on a fresh data dir, then again on the same one (a re-run)."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path

import httpx
import pytest
from tests.support.procs import PROCTOR, free_port

pytestmark = pytest.mark.e2e


def _quickstart(data_dir: Path, home: Path) -> subprocess.CompletedProcess[str]:
    args = [
        *PROCTOR,
        "quickstart",
        "--data-dir",
        str(data_dir),
        "--port",
        str(free_port()),
        "--model-port",
        str(free_port()),
        "-n",
        "5",
        "-r",
        "2",
        "--exit",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCTOR_")}
    return subprocess.run(
        args,
        env={**env, "HOME": str(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one stream, in the order a terminal shows it
        text=True,
        timeout=180,
    )


def test_quickstart_runs_a_hosted_eval_and_reruns_on_the_same_data_dir(tmp_path: Path) -> None:
    data_dir = tmp_path / "proctor-home"
    first = _quickstart(data_dir, tmp_path)
    assert first.returncode == 0, first.stdout
    assert "COMPLETED" in first.stdout and "samples: 10" in first.stdout
    assert "alphabet_sort:" in first.stdout and "dashboard: http://127.0.0.1:" in first.stdout
    # "Mean reward", with its interval, as every view says it; and --exit says the server
    # behind the dashboard URL must be started again.
    assert re.search(r"^  mean reward \d\.\d{3} ", first.stdout, re.M), first.stdout
    assert "avg reward" not in first.stdout and "avg score" not in first.stdout
    assert f"(served by `proctor server --data-dir {data_dir} --port " in first.stdout
    assert "finalized" in first.stdout  # the sandbox's live log was shown
    # The status closes the sandbox's log, and the results path printed can be opened.
    sandbox_log, after = first.stdout.split("quickstart: status COMPLETED\n")
    assert "finalized" in sandbox_log and "finalized" not in after
    results = Path(re.search(r"^  results: (.+)$", sandbox_log, re.M).group(1))  # type: ignore[union-attr]
    assert results.is_absolute() and (results / "traces.jsonl").is_file()
    config = tomllib.loads((data_dir / "config.toml").read_text())
    assert config["api_key"].startswith("pk_")
    assert (data_dir / "config.toml").stat().st_mode & 0o077 == 0

    second = _quickstart(data_dir, tmp_path)
    assert second.returncode == 0, second.stdout
    again = tomllib.loads((data_dir / "config.toml").read_text())
    assert again["api_key"] == config["api_key"]  # the stored key still works
    assert again["api_url"] != config["api_url"]  # the new port was written

    # --exit stopped the server it started.
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{again['api_url']}/healthz", timeout=2)


def test_quickstart_refuses_a_busy_port_with_one_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [
                *PROCTOR,
                "quickstart",
                "--data-dir",
                str(tmp_path / "d"),
                "--port",
                str(port),
                "--exit",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 2
    assert f"Port {port}" in result.stderr and "--port" in result.stderr
    assert "Traceback" not in result.stderr


def test_quickstart_refuses_an_unusable_data_dir_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    data_dir = tmp_path / "file" / "proctor-home"  # under a file: cannot be created
    result = subprocess.run(
        [*PROCTOR, "quickstart", "--data-dir", str(data_dir), "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "--data-dir" in result.stderr and "Traceback" not in result.stderr
