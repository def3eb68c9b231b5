"""`prime login` (the real prime CLI 0.18.0) against a proctor server, with the approval
clicked in the dashboard by headless Debian chromium: the CLI stores a new key of the user who
approved, and later commands use it."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import expect, sync_playwright
from tests.e2e.test_hub import PRIME_BIN, make_key
from tests.support.platform import Platform
from tests.support.tools import tool

pytestmark = pytest.mark.e2e

CHROMIUM = "/usr/bin/chromium"


def prime_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PRIME_", "PROCTOR_"))}
    env.update(
        HOME=str(home),
        PRIME_DISABLE_VERSION_CHECK="1",
        NO_PROXY="127.0.0.1,localhost",
        COLUMNS="200",
    )
    return env


def run_prime(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PRIME_BIN, *args], env=prime_env(home), capture_output=True, text=True, timeout=120
    )


def test_prime_login_with_approval_in_the_dashboard(platform: Platform, tmp_path: Path) -> None:
    chromium = tool(CHROMIUM)
    mia = make_key(platform, "mia", team="mias-lab")
    home = tmp_path / "home"
    home.mkdir()
    for command in ("set-base-url", "set-frontend-url"):
        done = run_prime(home, "config", command, platform.url)
        assert done.returncode == 0, done.stdout + done.stderr

    login = subprocess.Popen(
        [PRIME_BIN, "login", "--headless"],
        env=prime_env(home),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(login.stdout.readline, "")))  # type: ignore[union-attr]
    reader.start()
    try:
        assert login.stdin is not None
        login.stdin.write("2\n")  # the team prompt after sign-in: mias-lab
        login.stdin.close()
        deadline = time.monotonic() + 60
        url = None
        while url is None and time.monotonic() < deadline and login.poll() is None:
            url = next((w for line in list(lines) for w in line.split() if "?code=" in w), None)
            time.sleep(0.2)
        assert url and url.startswith(f"{platform.url}/dashboard/tokens/challenge"), "".join(lines)
        code = url.rsplit("=", 1)[1]

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=chromium, headless=True, args=["--no-sandbox"]
            )
            try:
                page = browser.new_page()
                page.goto(url)
                expect(page).to_have_url(
                    f"{platform.url}/login?next=%2Fdashboard%2Ftokens%2Fchallenge%3Fcode%3D{code}"
                )
                page.fill("#api_key", mia)
                page.click("button[type=submit] >> text=Sign in")
                expect(page.locator("#code")).to_have_text(code)
                expect(page.locator("#challenge")).to_contain_text("act as mia")
                page.click("#approve")
                expect(page.locator("#decided")).to_contain_text("Approved")
            finally:
                browser.close()
        assert login.wait(timeout=60) == 0, "".join(lines)
    finally:
        if login.poll() is None:
            login.kill()
            login.wait(timeout=10)
        reader.join(timeout=10)
    output = "".join(lines)
    assert "Successfully logged in" in output, output

    config = json.loads((home / ".prime" / "config.json").read_text())
    new_key = config["api_key"]
    assert new_key.startswith("pk_") and new_key != mia
    assert config["team_id"] == "mias-lab"
    with httpx.Client(base_url=f"{platform.url}/api/v1", timeout=30) as api:
        me = api.get("/user/whoami", headers={"Authorization": f"Bearer {new_key}"})
        assert me.json()["data"]["name"] == "mia"
        # The challenge was collected: polling it again finds nothing.
        again = api.get("/auth_challenge/status", params={"challenge": code})
        assert again.status_code == 404

    teams = run_prime(home, "teams", "list")  # the stored key, no PRIME_API_KEY
    assert teams.returncode == 0 and "mias-lab" in teams.stdout, teams.stdout + teams.stderr
