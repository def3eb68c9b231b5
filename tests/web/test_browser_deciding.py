"""The dashboard for deciding, in Debian's chromium: live updates that keep what the user
did, the paired compare, phones, dark mode, the CSP and markdown that stays text."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.web.conftest import SeededPlatform, running_evaluation, shot, signed_in, tool_sample

pytestmark = pytest.mark.browser

XSS = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script> **done**'


def _watch(page: Page) -> list[str]:
    """Collect CSP violations and console errors of a page."""
    problems: list[str] = []
    page.on(
        "console",
        lambda m: problems.append(m.text) if m.type == "error" else None,
    )
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.add_init_script(
        "document.addEventListener('securitypolicyviolation', e => "
        "console.error('CSP violation: ' + e.violatedDirective + ' ' + e.blockedURI));"
    )
    return problems


CONTRAST = """
(selectors) => {
  const rgb = (c) => c.match(/[\\d.]+/g).map(Number);
  const lum = ([r, g, b]) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const background = (el) => {
    for (; el; el = el.parentElement) {
      const c = rgb(getComputedStyle(el).backgroundColor);
      if (c.length < 4 || c[3] > 0) { return c; }
    }
    return [255, 255, 255];
  };
  const worst = [];
  for (const sel of selectors) {
    for (const el of document.querySelectorAll(sel)) {
      if (!el.textContent.trim() || !el.getClientRects().length) { continue; }
      const a = lum(rgb(getComputedStyle(el).color)), b = lum(background(el));
      const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
      const what = sel + ' "' + el.textContent.trim().slice(0, 20) + '" ';
      if (ratio < 4.5) { worst.push(what + ratio.toFixed(2)); }
    }
  }
  return worst;
}
"""
TEXT = [".status", ".hint", ".pm", ".shape", "a", "td", "th", ".tag", "small", "button", "dt"]


@pytest.fixture
def desktop(seeded_platform: SeededPlatform, browser: Browser) -> Iterator[tuple[Page, list[str]]]:
    """A desktop-sized page signed in as alice, and the problems `_watch` collects on it."""
    platform, alice = seeded_platform.platform, seeded_platform.alice_key
    page = signed_in(browser, platform, alice, viewport={"width": 1280, "height": 800})
    yield page, _watch(page)
    page.context.close()


def test_live_list_keeps_ticks_and_filter_text_while_it_updates(
    seeded_platform: SeededPlatform, desktop: tuple[Page, list[str]]
) -> None:
    platform, ids, alice = seeded_platform.platform, seeded_platform.ids, seeded_platform.alice_key
    page, problems = desktop
    live = running_evaluation(platform, alice, "alice-calc-live")  # like alice-calc-b
    page.goto(f"{platform.url}/evaluations")
    assert page.locator("body").get_attribute("data-poll-s") == "5"  # alice-calc-live runs
    page.check(f"input[value='{ids['alice-calc']}']")
    page.check(f"input[value='{live}']")
    page.fill("input[name=model]", "demo-")
    page.evaluate("window.scrollTo(0, 40)")
    running = page.locator(f"tr[data-id='{live}'] [data-field=samples]")
    expect(running).to_have_text("6")
    more = [tool_sample(e, 2, 1.0) for e in range(6)]
    with platform.client(alice) as api:
        posted = api.post(f"/evaluations/{live}/samples", json={"samples": more})
        assert posted.status_code == 200, posted.text
    expect(running).to_have_text("12", timeout=15_000)  # patched in place, not reloaded
    mean = page.locator(f"tr[data-id='{live}'] [data-field=mean] .mean")
    expect(mean).to_have_text(f"{(sum(0.5 + 0.1 * e for e in range(6)) + 6) / 12:.3f}")
    assert page.is_checked(f"input[value='{ids['alice-calc']}']")
    assert page.is_checked(f"input[value='{live}']")
    assert page.input_value("input[name=model]") == "demo-"
    shot(page, "11-live-list")
    for path in ("/evaluations", f"/evaluations/{ids['alice-calc']}"):
        page.goto(platform.url + path)
        assert page.evaluate(CONTRAST, TEXT) == [], path  # WCAG AA, light
    assert problems == []


def test_compare_leads_with_the_paired_difference_and_cells_open_both_transcripts(
    seeded_platform: SeededPlatform, desktop: tuple[Page, list[str]]
) -> None:
    platform, ids, alice = seeded_platform.platform, seeded_platform.ids, seeded_platform.alice_key
    page, problems = desktop
    page.goto(f"{platform.url}/compare?ids={ids['alice-calc']},{ids['alice-calc-b']}")
    with platform.client(alice) as api:
        answer = api.get(
            f"/evaluations/compare?ids={ids['alice-calc']},{ids['alice-calc-b']}"
        ).json()
    paired = answer["paired"]
    expect(page.locator("#paired-diff")).to_have_text(f"{paired['mean_diff']:+.3f}")
    expect(page.locator("#paired-wtl")).to_contain_text(
        f"{paired['wins']} wins, {paired['ties']} ties, {paired['losses']} losses"
    )
    expect(page.locator("#paired-p")).to_be_visible()
    # Sort by the difference column (on the server, over all examples), then open one.
    page.locator("#sort-diff").click()
    expect(page).to_have_url(re.compile(r"sort=diff"))
    values = page.locator("#compare-examples tbody td.diff").evaluate_all(
        "cells => cells.map(c => c.dataset.value === '' ? null : Number(c.dataset.value))"
    )
    present = [v for v in values if v is not None]
    assert present == sorted(present)
    page.locator("#compare-examples tbody tr").first.locator("td").nth(1).locator("a").click()
    expect(page.locator("#side-by-side section.side")).to_have_count(2)
    for side in page.locator("#side-by-side section.side").all():
        expect(side.locator(".message.role-assistant").first).to_be_visible()
    shot(page, "12-side-by-side")
    assert problems == []


def test_phone_width_dark_mode_csp_and_markdown_as_text(
    seeded_platform: SeededPlatform, browser: Browser
) -> None:
    platform, ids, alice = seeded_platform.platform, seeded_platform.ids, seeded_platform.alice_key
    # A run like alice-calc-b, plus a sample whose answer is an XSS payload in markdown.
    marked = running_evaluation(platform, alice, "alice-calc-xss")
    sample = tool_sample(9, 1, 1.0, sample_id="xss/../1")
    sample["completion"] = [{"role": "assistant", "content": XSS}]
    with platform.client(alice) as api:
        assert api.post(f"/evaluations/{marked}/samples", json={"samples": [sample]}).is_success
    page = signed_in(
        browser,
        platform,
        alice,
        viewport={"width": 390, "height": 844},
        color_scheme="dark",
        is_mobile=True,
        has_touch=True,
    )
    problems = _watch(page)
    pages = {
        "list": "/evaluations",
        "evaluation": f"/evaluations/{ids['alice-calc']}",
        "samples": f"/evaluations/{marked}/samples",
        "compare": f"/compare?ids={ids['alice-calc']},{marked}",
        "side": f"/compare/example?ids={ids['alice-calc']},{marked}&example=1",
    }
    for name, path in pages.items():
        page.goto(platform.url + path)
        assert page.evaluate(CONTRAST, TEXT) == [], name  # WCAG AA, dark
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, (name, width)
        background = page.evaluate("getComputedStyle(document.body).backgroundColor")
        red, green, blue = (int(part) for part in background[4:-1].split(",")[:3])
        assert red + green + blue < 120, (name, background)  # dark
        shot(page, f"13-phone-dark-{name}")
    # The odd id opens from the table's link; the payload shows as text and never runs.
    page.goto(platform.url + pages["samples"])
    page.get_by_role("link", name="xss/../1").click()
    message = page.locator("#transcript .role-assistant .md")
    expect(message).to_contain_text('<img src=x onerror="window.__xss=1">')
    expect(message.locator("strong")).to_have_text("done")
    assert page.evaluate("window.__xss === undefined")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert problems == []
    page.context.close()
