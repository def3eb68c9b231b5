"""The dashboard in a real browser: Debian's chromium, driven headless by Playwright.

A real `proctor server` (the `seeded_platform` fixture) is seeded through its API: alice's own
evaluations (one with tool calls and four rollouts per example), one of her team's, and one
of bob's team that she must never see. Screenshots go to `test-artifacts/screenshots/`.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, expect

from tests.web.conftest import SeededPlatform, shot

pytestmark = pytest.mark.browser


def test_sign_in_list_evaluation_sample_compare_and_sign_out(
    seeded_platform: SeededPlatform, browser: Browser
) -> None:
    platform, ids, alice = seeded_platform.platform, seeded_platform.ids, seeded_platform.alice_key
    context = browser.new_context(viewport={"width": 1366, "height": 800})
    page = context.new_page()

    # Unauthenticated: every page sends the browser to the sign-in form.
    page.goto(f"{platform.url}/evaluations/{ids['alice-calc']}")
    expect(page).to_have_url(f"{platform.url}/login?next=%2Fevaluations%2F{ids['alice-calc']}")
    page.fill("#api_key", "pk_not_a_key")
    page.click("button[type=submit] >> text=Sign in")
    expect(page.locator(".flash.bad")).to_contain_text("invalid or revoked")
    shot(page, "01-sign-in-rejected")

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
    shot(page, "02-evaluations-list")

    # An evaluation: header, histogram, pass@k, samples.
    table.get_by_role("link", name="alice-calc", exact=True).click()
    expect(page.locator("h1")).to_contain_text("alice-calc")
    expect(page.locator("svg.histogram").first).to_be_visible()
    expect(page.locator("#pass-at-k tbody tr")).to_have_count(3)
    expect(page.locator("#samples-table")).to_contain_text("the model timed out")
    shot(page, "03-evaluation")

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
    shot(page, "04-sample")

    # Compare the two runs of tool-calc from the list's checkboxes.
    page.goto(f"{platform.url}/evaluations")
    page.check(f"input[value='{ids['alice-calc']}']")
    page.check(f"input[value='{ids['alice-calc-b']}']")
    page.click("text=Compare selected")
    expect(page.locator("h1")).to_contain_text("tool-calc")
    expect(page.locator("#compare-examples tbody tr")).to_have_count(6)
    expect(page.locator("#compare-examples td.best").first).to_be_visible()
    shot(page, "05-compare")

    # Bob's team's evaluation is a 404 page for alice.
    response = page.goto(f"{platform.url}/evaluations/{ids['red-secret-run']}")
    assert response is not None and response.status == 404
    expect(page.locator("h1")).to_have_text("Not found")
    expect(page.locator("body")).not_to_contain_text("red-secret-run")
    shot(page, "06-not-visible")

    # Sign out: the session is gone.
    page.click("header.top button")
    expect(page).to_have_url(f"{platform.url}/login")
    page.goto(f"{platform.url}/evaluations")
    expect(page).to_have_url(f"{platform.url}/login?next=%2Fevaluations")
    context.close()
