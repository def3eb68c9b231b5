"""#25 item 2: a platform that refuses the key keeps the paid work in an offline spool that
`proctor runs sync` uploads later with the right key (exit 75, as for an outage). The CLI runs
in this process (`cli_in_process`): what it prints, spools and uploads is the point."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import cli_in_process
from tests.support.platform import Platform


def test_a_wrong_key_keeps_an_offline_spool_that_sync_uploads(
    demo_model: str, platform: Platform, tmp_path: Path
) -> None:
    wrong = {"PROCTOR_API_URL": platform.url, "PROCTOR_API_KEY": "pk_mistyped"}
    args = ["eval", "reverse-text", "-n", "3", "--run.name", "r", "--client.base-url", demo_model]
    ran = cli_in_process(*args, home=tmp_path, env=wrong)
    assert ran.returncode == 75, ran.stderr
    assert "Traceback" not in ran.stderr
    last = ran.stderr.strip().splitlines()[-1]
    assert "nothing is lost" in last and last.endswith("proctor runs sync outputs/r"), last
    assert "HTTP 401" in ran.stderr and "the run goes on offline" in ran.stderr

    right = {"PROCTOR_API_URL": platform.url, "PROCTOR_API_KEY": platform.api_key}
    synced = cli_in_process("runs", "sync", "outputs/r", home=tmp_path, env=right)
    assert synced.returncode == 0, (synced.stdout, synced.stderr)
    with platform.client() as http:
        listed = http.get("/evaluations").json()["evaluations"]
    assert [e["total_samples"] for e in listed] == [3], listed
