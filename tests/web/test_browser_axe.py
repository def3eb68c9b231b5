"""Every dashboard page passes axe-core (WCAG 2.1 A and AA, and axe's best practices) in
the light and the dark colour scheme, in Debian's chromium; and a live hosted log does not
jump to its end while the reader is scrolled up in it.

axe-core is not vendored (its minified script is ~650 KB): `scripts/test` installs it from
npm into `~/.cache/proctor/axe` before the tests leave the network (`PROCTOR_TEST_AXE`
names another copy). Without it these tests skip on a workstation and fail under CI
(`tests.support.tools`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from proctor.server.db.models import HostedEvaluation
from proctor.server.db.session import Database
from tests.support.platform import Platform
from tests.support.tools import missing
from tests.web import transcript_samples as samples
from tests.web.conftest import SeededPlatform, shot, signed_in

pytestmark = pytest.mark.browser

AXE = Path(
    os.environ.get("PROCTOR_TEST_AXE")
    or Path.home() / ".cache/proctor/axe/node_modules/axe-core/axe.min.js"
)
RULES = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"]
RUN_AXE = """
async (tags) => {
  // Folded parts too: open every <details> so their content is checked as well.
  document.querySelectorAll("details").forEach((d) => { d.open = true; });
  const result = await axe.run(document, { runOnly: { type: "tag", values: tags } });
  return result.violations.map((v) =>
    v.id + ": " + v.help + " -> " + v.nodes.slice(0, 3).map((n) => n.target.join(" ")).join(" | "));
}
"""


def _axe() -> Path:
    if not AXE.is_file():
        missing(f"axe-core is not installed at {AXE}; run scripts/test, which installs it")
    return AXE


@dataclass
class Dashboard:
    """A server with every kind of page to visit: ids by name, alice's key, a live log."""

    platform: Platform
    alice: str
    ids: dict[str, str]
    log: Path


def _play_sandbox(platform: Platform, hosted_id: str, log: Path) -> None:
    """Play the sandbox's part of a hosted run: a local handle whose log file is `log`."""
    database = Database(f"sqlite:///{platform.data_dir / 'proctor.db'}")
    try:
        with database.write() as session:
            row = session.get(HostedEvaluation, hosted_id)
            assert row is not None
            row.sandbox_handle, row.log_path = "4242", str(log)
    finally:
        database.engine.dispose()
        database.write_engine.dispose()


@pytest.fixture(scope="module")
def dashboard(
    seeded_platform: SeededPlatform, tmp_path_factory: pytest.TempPathFactory
) -> Dashboard:
    """`seeded_platform` (its server has no launcher: the test plays the sandbox) plus the
    transcript samples and a hosted evaluation with a log; one for the module."""
    platform, alice = seeded_platform.platform, seeded_platform.alice_key
    ids = dict(seeded_platform.ids)
    with platform.client(alice) as api:
        created = api.post("/evaluations/", json={"name": "transcripts", "tags": ["code"]})
        ids["transcripts"] = created.json()["evaluation_id"]
        posted = api.post(
            f"/evaluations/{ids['transcripts']}/samples",
            json={"samples": samples.all_samples()},
        )
        assert posted.status_code == 200, posted.text
        hosted = api.post(
            "/hosted-evaluations",
            json={
                "environment_ids": ["tool-calc"],
                "inference_model": "demo",
                "eval_config": {"num_examples": 4, "rollouts_per_example": 1},
            },
        )
        assert hosted.status_code == 200, hosted.text
        ids["hosted"] = hosted.json()["evaluation_id"]
        challenge = api.post("/auth_challenge/generate", json={"encryptionPublicKey": "k"})
        ids["challenge"] = challenge.json()["challenge"] if challenge.is_success else ""
    log = tmp_path_factory.mktemp("axe") / "sandbox.log"
    log.write_text("".join(f"step {n} of the run\n" for n in range(1, 201)))
    _play_sandbox(platform, ids["hosted"], log)
    return Dashboard(platform, alice, ids, log)


def _pages(ids: dict[str, str]) -> dict[str, str]:
    """Every kind of signed-in page, by name."""
    own, other, run = ids["alice-calc"], ids["alice-calc-b"], ids["transcripts"]
    pages = {
        "list": "/evaluations",
        "list-sorted": "/evaluations?sort=-mean&tag=code",
        "evaluation": f"/evaluations/{own}",
        "evaluation-running": f"/evaluations/{other}",
        "evaluation-hosted": f"/evaluations/{ids['hosted']}",
        "samples": f"/evaluations/{own}/samples",
        "sample-tools": f"/evaluations/{own}/sample?id=s-1-1",
        "sample-errored": f"/evaluations/{own}/sample?id=s-1-2",
        "compare": f"/compare?ids={own},{other}",
        "compare-example": f"/compare/example?ids={own},{other}&example=1",
        "environments": "/environments",
        "challenge": "/dashboard/tokens/challenge",
        "not-found": f"/evaluations/{ids['red-secret-run']}",
        "logout": "/logout",
    }
    for sample in ("he-1", "img-1", "long-1", "code-1"):
        pages[f"sample-{sample}"] = f"/evaluations/{run}/sample?id={sample}"
    if ids["challenge"]:
        pages["challenge-code"] = f"/dashboard/tokens/challenge?code={ids['challenge']}"
    return pages


def _violations(page: Page, axe: Path) -> list[str]:
    page.add_script_tag(path=str(axe))
    found: list[str] = page.evaluate(RUN_AXE, RULES)
    return found


def test_every_page_is_axe_clean_in_both_colour_schemes(
    dashboard: Dashboard, browser: Browser
) -> None:
    axe = _axe()
    platform = dashboard.platform
    with platform.client(dashboard.alice) as api:
        environments = api.get("/environmentshub/").json().get("data") or []
    pages = _pages(dashboard.ids)
    for env in environments[:1]:
        pages["environment"] = f"/environments/{env['owner']['name']}/{env['name']}"
    report: list[str] = []
    for scheme in ("light", "dark"):
        # The CSP forbids inline scripts, and Playwright injects axe as one.
        options: dict[str, Any] = {"viewport": {"width": 1280, "height": 800}}
        options.update(color_scheme=scheme, bypass_csp=True)
        signed_out = browser.new_context(**options)
        page = signed_out.new_page()
        page.goto(f"{platform.url}/login")
        problems = {"login": _violations(page, axe)}
        signed_out.close()
        page = signed_in(browser, platform, dashboard.alice, **options)
        for name, path in pages.items():
            page.goto(platform.url + path)
            problems[name] = _violations(page, axe)
            if problems[name]:
                shot(page, f"axe-{scheme}-{name}")
        page.context.close()
        report += [f"{scheme} {name}: {rule}" for name, found in problems.items() for rule in found]
    assert not report, "\n".join(report)


def test_the_live_log_stays_where_the_reader_scrolled(
    dashboard: Dashboard, browser: Browser
) -> None:
    platform, ids = dashboard.platform, dashboard.ids
    page = signed_in(browser, platform, dashboard.alice, viewport={"width": 1280, "height": 800})
    page.goto(f"{platform.url}/evaluations/{ids['hosted']}")
    log = page.locator("#hosted-logs")
    expect(log).to_contain_text("step 200 of the run")
    at_end = "l => l.scrollHeight - l.scrollTop - l.clientHeight < 8"
    assert log.evaluate(at_end)  # a live log opens at its end
    # The reader scrolls up to read; new lines arrive and are added, and the view stays.
    log.evaluate("l => { l.scrollTop = 40; }")
    with dashboard.log.open("a") as file:
        file.write("step 201 of the run\n")
    expect(log).to_contain_text("step 201 of the run", timeout=20_000)
    assert log.evaluate("l => l.scrollTop") == 40
    window_y = page.evaluate("window.scrollY")
    # Back at the end, it follows again.
    log.evaluate("l => { l.scrollTop = l.scrollHeight; }")
    with dashboard.log.open("a") as file:
        file.write("step 202 of the run\n")
    expect(log).to_contain_text("step 202 of the run", timeout=20_000)
    assert log.evaluate(at_end)
    assert page.evaluate("window.scrollY") == window_y  # the page itself never moved
    page.context.close()
