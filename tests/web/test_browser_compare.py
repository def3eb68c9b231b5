"""Compare in a real browser: the baseline is the one the user chose on the list, and the
swap control reverses B - A; status badges readable in both colour schemes."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, expect

from tests.web.conftest import SeededPlatform, running_evaluation, signed_in, tool_sample
from tests.web.test_browser_deciding import CONTRAST

pytestmark = pytest.mark.browser


def test_the_chosen_baseline_leads_and_swap_reverses_the_difference(
    seeded_platform: SeededPlatform, browser: Browser
) -> None:
    platform, ids, alice = seeded_platform.platform, seeded_platform.ids, seeded_platform.alice_key
    page = signed_in(browser, platform, alice)
    a, b = ids["alice-calc"], ids["alice-calc-b"]  # b is the newer: the list's first row
    page.check(f"input[name=pick][value='{b}']")
    page.check(f"input[name=pick][value='{a}']")
    page.click("text=Compare selected")
    # No baseline chosen: the older run is A, whatever order the list ticked them in.
    expect(page.locator("#baseline-name")).to_have_text("alice-calc")
    diff = float(page.locator("#paired-diff").inner_text())

    page.goto(f"{platform.url}/evaluations")
    page.check(f"input[name=pick][value='{a}']")
    page.check(f"input[name=pick][value='{b}']")
    page.check(f"input[name=baseline][value='{b}']")
    page.click("text=Compare selected")
    expect(page.locator("#baseline-name")).to_have_text("alice-calc-b")
    expect(page.locator("#candidate-name")).to_have_text("alice-calc")
    expect(page.locator("#paired-diff")).to_have_text(f"{-diff:+.3f}")

    page.click("#swap")
    expect(page.locator("#baseline-name")).to_have_text("alice-calc")
    expect(page.locator("#paired-diff")).to_have_text(f"{diff:+.3f}")
    page.context.close()


def test_failed_badges_are_readable_in_both_schemes(
    seeded_platform: SeededPlatform, browser: Browser
) -> None:
    platform, alice = seeded_platform.platform, seeded_platform.alice_key
    with platform.client(alice) as api:
        # FAILED and TIMEOUT share the "bad" badge.
        created = api.post("/evaluations/", json={"name": "badge-failed"})
        assert created.status_code == 201, created.text
        evaluation_id = created.json()["evaluation_id"]
        changed = api.put(f"/evaluations/{evaluation_id}", json={"status": "FAILED"})
        assert changed.is_success, changed.text
    page = signed_in(browser, platform, alice)
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        page.goto(f"{platform.url}/evaluations")
        expect(page.locator(".status.bad").first).to_be_visible()
        assert page.evaluate(CONTRAST, [".status"]) == [], scheme  # WCAG AA
    page.context.close()


def test_a_live_evaluation_page_shows_every_final_figure_once_it_completes(
    seeded_platform: SeededPlatform, browser: Browser
) -> None:
    platform, alice = seeded_platform.platform, seeded_platform.alice_key
    running = running_evaluation(platform, alice, "alice-calc-live")  # 6 examples x 1 rollout
    page = signed_in(browser, platform, alice)
    page.goto(f"{platform.url}/evaluations/{running}")
    expect(page.locator("#pass-at-k tbody tr")).to_have_count(1)
    with platform.client(alice) as api:
        more = [tool_sample(e, 2, 0.0) for e in range(6)]
        posted = api.post(f"/evaluations/{running}/samples", json={"samples": more})
        assert posted.status_code == 200, posted.text
        assert api.post(f"/evaluations/{running}/finalize", json={}).is_success
    # Without a reload by hand: the status, pass@k at k = 1, 2, the per-example histogram
    # (2 rollouts each now) and the samples table all show the finished run.
    expect(page.locator(".eval-header .status").first).to_have_text("COMPLETED", timeout=30_000)
    expect(page.locator("#pass-at-k tbody tr")).to_have_count(2, timeout=30_000)
    expect(page.locator("#per-example svg.histogram")).to_have_count(1)
    expect(page.locator("#samples-table tbody tr")).to_have_count(12)
    assert page.locator("body").get_attribute("data-poll-s") is None
    page.context.close()
