"""A live page stays true in chromium: a new evaluation appears on the list, and every part
of a running evaluation's page (histograms, pass@k, per-example figures, samples) follows its
samples as they arrive, then settles on the final figures once it completes."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, expect

from tests.web.conftest import SeededPlatform, shot, signed_in, tool_sample

pytestmark = pytest.mark.browser

WAIT_MS = 30_000


def test_a_new_evaluation_appears_and_its_page_follows_every_batch_then_settles(
    seeded_platform: SeededPlatform, browser: Browser
) -> None:
    platform, ids, alice = seeded_platform.platform, seeded_platform.ids, seeded_platform.alice_key
    page = signed_in(browser, platform, alice, viewport={"width": 1280, "height": 900})
    page.check(f"input[value='{ids['alice-calc']}']")
    with platform.client(alice) as api:
        created = api.post("/evaluations/", json={"name": "fresh-run", "model_name": "demo-c"})
        assert created.status_code == 201, created.text
        fresh = created.json()["evaluation_id"]
    # On the list without a reload by hand, and what was ticked stays ticked.
    expect(page.locator(f"tr[data-id='{fresh}']")).to_contain_text("fresh-run", timeout=WAIT_MS)
    assert page.is_checked(f"input[value='{ids['alice-calc']}']")
    shot(page, "21-live-list-new-evaluation")

    page.goto(f"{platform.url}/evaluations/{fresh}")
    expect(page.locator("#per-example")).to_contain_text("No scored samples yet")
    with platform.client(alice) as api:
        # Two examples x two rollouts: rewards 1, 0 and 1, 1 (one more, errored).
        first = [tool_sample(0, 1, 1.0), tool_sample(0, 2, 0.0), tool_sample(1, 1, 1.0)]
        first.append(tool_sample(1, 2, 1.0))
        first.append(tool_sample(2, 1, 0.0, error={"type": "ModelError", "message": "boom"}))
        posted = api.post(f"/evaluations/{fresh}/samples", json={"samples": first})
        assert posted.status_code == 200, posted.text
    # While it runs: pass@k at k = 1, 2, the per-example histogram, the reward histogram's
    # count and the samples table all follow the batch.
    expect(page.locator("#pass-at-k tbody tr")).to_have_count(2, timeout=WAIT_MS)
    expect(page.locator("#pass-at-k tbody tr").first).to_contain_text("0.750")
    expect(page.locator("#per-example svg.histogram")).to_have_count(1)
    expect(page.locator("#histogram-note")).to_contain_text("4 scored; 1 errored sample")
    expect(page.locator("#samples-table tbody tr")).to_have_count(5)
    assert page.locator("body").get_attribute("data-poll-s") == "5"
    shot(page, "22-live-evaluation-running")

    with platform.client(alice) as api:
        last = [tool_sample(2, 2, 1.0), tool_sample(2, 3, 1.0)]
        assert api.post(f"/evaluations/{fresh}/samples", json={"samples": last}).is_success
        assert api.post(f"/evaluations/{fresh}/finalize", json={}).is_success
    # Settled: the final figures, and no more polling.
    expect(page.locator(".eval-header .status").first).to_have_text("COMPLETED", timeout=WAIT_MS)
    expect(page.locator("#histogram-note")).to_contain_text("6 scored; 1 errored sample")
    expect(page.locator("#samples-table tbody tr")).to_have_count(7)
    # pass@1 over examples 0 (1/2), 1 (2/2), 2 (2/2 scored): (0.5 + 1 + 1) / 3.
    expect(page.locator("#pass-at-k tbody tr").first).to_contain_text("0.833")
    assert page.locator("body").get_attribute("data-poll-s") is None
    shot(page, "23-live-evaluation-completed")
    page.context.close()
