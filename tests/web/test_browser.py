"""The dashboard in a real browser: Debian's chromium, driven headless by Playwright.

A real `proctor server` (the `platform` fixture) is seeded through its API: alice's own
evaluations (one with tool calls and four rollouts per example), one of her team's, and one
of bob's team that she must never see. Screenshots go to `test-artifacts/screenshots/`.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.conftest import Platform
from tests.procs import PROCTOR
from tests.web.conftest import tool_sample

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"


def _cli(platform: Platform, *args: str) -> str:
    done = subprocess.run(
        [*PROCTOR, *args, "--data-dir", str(platform.data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


def _key(platform: Platform, name: str, team: str) -> str:
    _cli(platform, "teams", "create", team)
    return _cli(platform, "keys", "create", "--name", name, "--team", team).split()[0]


def _seed(platform: Platform, key: str, bob_key: str) -> dict[str, str]:
    with platform.client(key) as api:
        env = api.post("/environmentshub/resolve", json={"name": "tool-calc"}).json()["data"]
        ids: dict[str, str] = {}
        for name, model in (("alice-calc", "demo-a"), ("alice-calc-b", "demo-b")):
            created = api.post(
                "/evaluations/",
                json={"name": name, "model_name": model, "environments": [{"id": env["id"]}]},
            )
            assert created.status_code == 201, created.text
            ids[name] = created.json()["evaluation_id"]
        samples = [
            tool_sample(e, r, 1.0 if (e + r) % 3 else 0.0) for e in range(6) for r in range(1, 5)
        ]
        samples[5]["error"] = {"type": "ModelError", "message": "the model timed out"}
        assert api.post(f"/evaluations/{ids['alice-calc']}/samples", json={"samples": samples})
        summary = {"avg_reward": 0.7, "avg_metrics": {"correct_answer": 0.7}}
        assert api.post(f"/evaluations/{ids['alice-calc']}/finalize", json={"metrics": summary})
        other = [tool_sample(e, 1, 0.5 + 0.1 * e) for e in range(6)]
        assert api.post(f"/evaluations/{ids['alice-calc-b']}/samples", json={"samples": other})
        team = api.post("/evaluations/", json={"name": "blue-team-run", "team_id": "blue"})
        ids["blue-team-run"] = team.json()["evaluation_id"]
    with platform.client(bob_key) as bob:
        red = bob.post("/evaluations/", json={"name": "red-secret-run", "team_id": "red"})
        assert red.status_code == 201, red.text
        ids["red-secret-run"] = red.json()["evaluation_id"]
    return ids


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless Debian chromium (never a downloaded browser)."""
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
        )
        yield chromium
        chromium.close()


def _shot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def test_sign_in_list_evaluation_sample_compare_and_sign_out(
    platform: Platform, browser: Browser
) -> None:
    alice = _key(platform, "alice", "blue")
    bob = _key(platform, "bob", "red")
    ids = _seed(platform, alice, bob)
    context = browser.new_context(viewport={"width": 1366, "height": 800})
    page = context.new_page()

    # Unauthenticated: every page sends the browser to the sign-in form.
    page.goto(f"{platform.url}/evaluations/{ids['alice-calc']}")
    expect(page).to_have_url(f"{platform.url}/login?next=%2Fevaluations%2F{ids['alice-calc']}")
    page.fill("#api_key", "pk_not_a_key")
    page.click("button[type=submit] >> text=Sign in")
    expect(page.locator(".flash.bad")).to_contain_text("invalid or revoked")
    _shot(page, "01-sign-in-rejected")

    # Sign in: back to the page asked for.
    page.fill("#api_key", alice)
    page.click("button[type=submit] >> text=Sign in")
    expect(page).to_have_url(f"{platform.url}/evaluations/{ids['alice-calc']}")
    cookie = next(c for c in context.cookies() if c["name"] == "proctor_session")
    assert cookie["httpOnly"] and cookie["secure"] and cookie["sameSite"] == "Lax"

    # The list: own and team evaluations, never bob's team's.
    page.goto(f"{platform.url}/evaluations")
    table = page.locator("#evaluations")
    for name in ("alice-calc", "alice-calc-b", "blue-team-run"):
        expect(table.get_by_role("link", name=name, exact=True)).to_be_visible()
    expect(table).not_to_contain_text("red-secret-run")
    expect(table.locator(".status.ok")).to_have_text("COMPLETED")
    _shot(page, "02-evaluations-list")

    # An evaluation: header, histogram, pass@k, samples.
    table.get_by_role("link", name="alice-calc", exact=True).click()
    expect(page.locator("h1")).to_contain_text("alice-calc")
    expect(page.locator("svg.histogram").first).to_be_visible()
    expect(page.locator("#pass-at-k tbody tr")).to_have_count(3)
    expect(page.locator("#samples-table")).to_contain_text("the model timed out")
    _shot(page, "03-evaluation")

    # Sort by reward, then open a sample: the transcript shows the tool call and its result.
    page.select_option("select[name=sort]", "-reward")
    page.click("#samples button[type=submit]")
    expect(page).to_have_url(
        f"{platform.url}/evaluations/{ids['alice-calc']}/samples?sort=-reward&errored=&example="
    )
    page.get_by_role("link", name="s-1-1").click()
    expect(page.locator("#transcript .role-tool")).to_contain_text("7")
    expect(page.locator("#transcript .tool-call").first).to_contain_text("add")
    expect(page.locator("#sample-scores")).to_contain_text("correct_answer")
    _shot(page, "04-sample")

    # Compare the two runs of tool-calc from the list's checkboxes.
    page.goto(f"{platform.url}/evaluations")
    page.check(f"input[value='{ids['alice-calc']}']")
    page.check(f"input[value='{ids['alice-calc-b']}']")
    page.click("text=Compare selected")
    expect(page.locator("h1")).to_contain_text("tool-calc")
    expect(page.locator("#compare-examples tbody tr")).to_have_count(6)
    expect(page.locator("#compare-examples td.best").first).to_be_visible()
    _shot(page, "05-compare")

    # Bob's team's evaluation is a 404 page for alice.
    response = page.goto(f"{platform.url}/evaluations/{ids['red-secret-run']}")
    assert response is not None and response.status == 404
    expect(page.locator("h1")).to_have_text("Not found")
    expect(page.locator("body")).not_to_contain_text("red-secret-run")
    _shot(page, "06-not-visible")

    # Sign out: the session is gone.
    page.click("header.top button")
    expect(page).to_have_url(f"{platform.url}/login")
    page.goto(f"{platform.url}/evaluations")
    expect(page).to_have_url(f"{platform.url}/login?next=%2Fevaluations")
    context.close()
