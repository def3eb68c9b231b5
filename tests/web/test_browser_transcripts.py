"""Transcripts and the list in Debian's chromium: steps with their output, images drawn,
code with its whitespace, a 3,000-line answer capped until "show all", the samples one
click (or key) away, and the list filtered by tag and sorted by its columns."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.web import transcript_samples as samples
from tests.web.conftest import SeededPlatform, shot, signed_in

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def transcripts_run(seeded_platform: SeededPlatform) -> str:
    """An evaluation holding `samples.all_samples()` on the module's server (only read)."""
    platform, alice = seeded_platform.platform, seeded_platform.alice_key
    with platform.client(alice) as api:
        created = api.post(
            "/evaluations/",
            json={"name": "transcripts", "tags": ["code", "vision"], "description": "Readable."},
        )
        assert created.status_code == 201, created.text
        eid = str(created.json()["evaluation_id"])
        posted = api.post(f"/evaluations/{eid}/samples", json={"samples": samples.all_samples()})
        assert posted.status_code == 200, posted.text
    return eid


@pytest.fixture
def transcripts(
    seeded_platform: SeededPlatform, browser: Browser, transcripts_run: str
) -> Iterator[tuple[Page, str, str]]:
    """A signed-in page, the server's URL and an evaluation holding `samples.all_samples()`."""
    platform, alice = seeded_platform.platform, seeded_platform.alice_key
    page = signed_in(browser, platform, alice, viewport={"width": 1280, "height": 800})
    yield page, platform.url, transcripts_run
    page.context.close()


def test_steps_show_their_output_and_images_are_drawn(transcripts: tuple[Page, str, str]) -> None:
    page, url, eid = transcripts
    page.goto(f"{url}/evaluations/{eid}/sample?id=he-1")
    sandbox = page.locator("#transcript .step-sandbox")
    expect(sandbox).to_contain_text("exit 1")
    traceback = sandbox.locator("pre.output")
    expect(traceback).to_be_visible()  # not folded away in the raw JSON
    assert traceback.inner_text() == samples.TRACEBACK
    judge = page.locator("#transcript .step-judge")
    expect(judge.get_by_text("GRADE: 0.25")).to_be_visible()
    expect(judge.locator("details.output-fold pre")).to_be_hidden()  # the prompt, folded
    target = page.locator("#sample-target pre")
    assert target.inner_text() == samples.TARGET  # code keeps its indentation
    assert target.evaluate("e => getComputedStyle(e).whiteSpace") == "pre-wrap"
    shot(page, "21-sample-steps")
    # A message can be read as written: the markdown's source, fences and all.
    answer = page.locator("#transcript .role-assistant").first
    answer.get_by_role("button", name="As written").click()
    written = answer.locator("pre.written")
    expect(written).to_be_visible()
    assert written.inner_text().startswith("```python\ndef has_close_elements(")
    expect(answer.locator(".content")).to_be_hidden()
    answer.get_by_role("button", name="As written").click()
    expect(written).to_be_hidden()
    expect(answer.locator(".content")).to_be_visible()

    page.goto(f"{url}/evaluations/{eid}/sample?id=img-1")
    images = page.locator("#transcript img.part-image")
    expect(images).to_have_count(2)
    for image in images.all():
        expect(image).to_be_visible()
        assert image.evaluate("i => i.complete && i.naturalWidth") == 24  # decoded, drawn
    expect(page.locator("#transcript")).to_contain_text("image at https://example.com/cat.png")
    assert samples.AUDIO[:200] not in page.locator("#transcript").inner_text()
    shot(page, "22-sample-images")


def test_a_long_answer_is_capped_until_show_all(transcripts: tuple[Page, str, str]) -> None:
    page, url, eid = transcripts
    page.goto(f"{url}/evaluations/{eid}/sample?id=long-1")
    answer = page.locator("#transcript .role-assistant .content")
    capped = answer.bounding_box()
    assert capped is not None and capped["height"] < 600
    assert page.evaluate("document.documentElement.scrollHeight") < 4000
    button = page.get_by_role("button", name="Show all (3,000 lines)")
    button.click()
    whole = answer.bounding_box()
    assert whole is not None and whole["height"] > 20 * capped["height"]
    expect(page.get_by_role("button", name="Show less")).to_have_attribute("aria-expanded", "true")
    page.get_by_role("button", name="Show less").click()
    again = answer.bounding_box()
    assert again is not None and again["height"] == capped["height"]
    shot(page, "23-sample-long")


def test_previous_next_and_rollouts_are_one_click_or_key_away(
    transcripts: tuple[Page, str, str],
) -> None:
    page, url, eid = transcripts
    page.goto(f"{url}/evaluations/{eid}/sample?id=he-2")
    page.get_by_role("link", name="next sample →").click()
    expect(page.locator("h1")).to_contain_text("he-3")
    page.keyboard.press("k")  # back to the previous one
    expect(page.locator("h1")).to_contain_text("he-2")
    page.keyboard.press("j")
    expect(page.locator("h1")).to_contain_text("he-3")
    page.locator("#rollouts").get_by_role("link", name="1: 0.000").click()
    expect(page.locator("h1")).to_contain_text("he-1")
    expect(page.locator("#rollouts [aria-current=page]")).to_have_text("1: 0.000")
    expect(page.locator("#sample-nav")).to_contain_text("first sample")


def test_the_list_filters_by_tag_and_sorts_by_any_column(
    transcripts: tuple[Page, str, str],
) -> None:
    page, url, _ = transcripts
    page.goto(f"{url}/evaluations")
    row = page.locator("#evaluations tr", has_text="transcripts")
    expect(row.locator(".description")).to_have_text("Readable.")
    row.get_by_role("link", name="vision").click()
    names = page.locator("#evaluations tbody td[data-label=Name] > a")
    expect(names).to_have_text(["transcripts"])
    page.goto(f"{url}/evaluations")
    page.locator("#evaluations thead").get_by_role("link", name="Name").click()
    expect(names).to_have_text(
        ["alice-calc", "alice-calc-b", "blue-team-run", "transcripts"], timeout=10_000
    )
    expect(page.locator("#evaluations th[aria-sort=ascending]")).to_contain_text("Name")
    page.locator("#evaluations thead").get_by_role("link", name="Name").click()
    expect(names).to_have_text(["transcripts", "blue-team-run", "alice-calc-b", "alice-calc"])
    page.locator("#evaluations thead").get_by_role("link", name="Samples").click()
    expect(names.first).to_have_text("alice-calc")  # 24 samples, the most
    page.fill("input[name=q]", "calc")
    page.get_by_role("button", name="Filter").click()
    expect(names).to_have_text(["alice-calc", "alice-calc-b"])  # sorted by samples still
    shot(page, "24-list-sorted")
