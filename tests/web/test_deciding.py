"""Dashboard pages for deciding: security headers, 404 pages, markdown, odd sample ids,
side-by-side transcripts, progress, the hosted log's new part, and cancel."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from tests.web.conftest import Seeded, SeededWeb, Web, tool_sample

XSS = '<img src=x onerror="alert(1)"><script>alert(2)</script>'


@pytest.fixture
def web(fresh_web: SeededWeb) -> Web:
    """The tests here share one app per backend, seeded once (`seeded_web`), signed out; a
    test that adds an evaluation does so as a user of its own (`own_user`)."""
    return fresh_web.web


@pytest.fixture
def seeded(fresh_web: SeededWeb) -> Seeded:
    return fresh_web.seeded


def own_user(web: Web, name: str) -> str:
    """A user of the test's own, in a team of its own, signed in: what it adds, no other
    test of the module sees. Its key."""
    key = web.api.key(f"{name}-key", user=name, team=f"{name}-team")
    web.login(key)
    return key


def test_every_response_has_the_security_headers_and_pages_need_no_inline_code(
    web: Web, seeded: Seeded
) -> None:
    web.login(seeded.alice_key)
    for path in (
        "/evaluations",
        f"/evaluations/{seeded.own}",
        f"/evaluations/{seeded.own}/samples",
        f"/evaluations/{seeded.own}/sample?id=s-1-1",
        f"/compare?ids={seeded.own},{seeded.second}",
        f"/compare/example?ids={seeded.own},{seeded.second}&example=1",
        "/login",
        "/no/such/page",
    ):
        response = web.client.get(path, headers={"Accept": "text/html"})
        csp = response.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "style-src 'self'" in csp, path
        assert "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "same-origin"
        # The policy forbids inline code: pages must have none.
        assert not re.search(r"<script(?![^>]*\bsrc=)", response.text), path
        assert "<style" not in response.text and " style=" not in response.text, path
        assert not re.search(r"\son[a-z]+=", response.text), path
    api = web.api.get("/evaluations/", seeded.alice_key)
    assert api.headers["x-content-type-options"] == "nosniff"


def test_unknown_dashboard_paths_answer_the_html_404_page_and_the_api_json(web: Web) -> None:
    browser = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
    page = web.client.get("/no/such/page", headers=browser)
    assert page.status_code == 404 and "text/html" in page.headers["content-type"]
    assert "Not found" in page.text
    script = web.client.get("/no/such/page")  # no HTML asked for: the JSON envelope
    assert script.status_code == 404 and script.json()["error"]["code"] == "not_found"
    api = web.client.get("/api/v1/no-such-route", headers=browser)
    assert api.status_code == 404 and api.json()["error"]["code"] == "not_found"
    icon = web.client.get("/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg")
    assert web.client.get("/static/favicon.svg").status_code == 200
    css = web.client.get("/static/highlight.css")
    assert css.status_code == 200 and ".md pre" in css.text


def test_transcripts_render_markdown_safely_and_highlight_code(web: Web) -> None:
    key = own_user(web, "md")
    evaluation = web.api.create(key, name="md")
    content = f"**bold** answer\n\n```python\ndef f():\n    return 1\n```\n\n{XSS}"
    sample = tool_sample(0, 1, 1.0, sample_id="md-1")
    sample["completion"] = [{"role": "assistant", "content": content}]
    posted = web.api.post(f"/evaluations/{evaluation}/samples", key, json={"samples": [sample]})
    assert posted.is_success
    page = web.client.get(f"/evaluations/{evaluation}/sample?id=md-1")
    assert page.status_code == 200
    assert "<strong>bold</strong>" in page.text
    assert '<span class="k">def</span>' in page.text  # Pygments, by class
    assert "<img" not in page.text and "<script>alert" not in page.text
    rendered = re.findall(r'<div class="md">(.*?)</div>', page.text, re.S)[-1]
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in rendered  # shown as text
    assert "&lt;img src=x onerror=" in rendered
    assert 'id="sample-target"' in page.text and ">Target<" in page.text
    assert "Answer</dt>" not in page.text


def test_sample_links_work_for_any_id(web: Web) -> None:
    key = own_user(web, "odd-ids")
    evaluation = web.api.create(key, name="odd-ids")
    odd = ["a/b", "..", "../x", "q?x=1&y#z", "100% sure", "+plus"]
    samples = [tool_sample(i, 1, 0.5, sample_id=sid) for i, sid in enumerate(odd)]
    posted = web.api.post(f"/evaluations/{evaluation}/samples", key, json={"samples": samples})
    assert posted.is_success, posted.text
    table = web.client.get(f"/evaluations/{evaluation}/samples").text
    links = re.findall(r'href="(/evaluations/[^"]+/sample\?id=[^"]+)"', table)
    assert len(links) == len(odd)
    opened = set()
    for link in links:
        response = web.client.get(html.unescape(link), follow_redirects=False)
        assert response.status_code == 200, link
        opened.add(_sample_id(response.text))
    assert opened == set(odd)


def _sample_id(page: str) -> str:
    match = re.search(r"<h1>Sample <code>(.*?)</code></h1>", page, re.S)
    assert match
    return html.unescape(match.group(1))


def test_compare_cells_open_both_transcripts_side_by_side(web: Web, seeded: Seeded) -> None:
    web.login(seeded.alice_key)
    page = web.client.get(f"/compare?ids={seeded.own},{seeded.second}")
    assert page.status_code == 200
    assert 'id="paired-diff"' in page.text and 'id="paired-wtl"' in page.text
    links = set(re.findall(r'href="(/compare/example\?[^"]+)"', page.text))
    assert len(links) == 5  # one per example; every cell of a row links there
    link = html.unescape(next(iter(sorted(links))))
    side = web.client.get(link)
    assert side.status_code == 200
    sections = re.findall(r'<section class="side" data-evaluation="([^"]+)"', side.text)
    assert sections == [seeded.own, seeded.second]
    assert side.text.count('class="message role-assistant"') >= 2
    data = web.client.get(link + "&format=json").json()
    assert [len(c["samples"]) for c in data["columns"]] == [4, 1]


def test_running_hosted_evaluation_shows_progress_new_log_text_and_cancels(
    web: Web, tmp_path: Path
) -> None:
    key = own_user(web, "hosted")
    hosted_id = web.hosted(key, num_examples=4, rollouts_per_example=2)
    log = tmp_path / "sandbox.log"
    log.write_text("line one\n")
    web.play_sandbox(hosted_id, log)
    page = web.client.get(f"/evaluations/{hosted_id}")
    assert 'id="progress"' in page.text and "of 8 samples" in page.text
    assert 'id="cancel"' in page.text and 'data-length="9"' in page.text
    log.write_text("line one\nline two\n")
    twin = web.client.get(f"/evaluations/{hosted_id}?format=json&logs_from=9").json()
    assert twin["logs"] == "line two\n" and twin["logs_length"] == 18
    assert twin["progress"]["expected"] == 8 and twin["progress"]["done"] == 0
    refused = web.client.post(f"/evaluations/{hosted_id}/cancel", follow_redirects=False)
    assert refused.status_code == 400
    # A page on another port of this host posting the form with the signed-in cookie.
    forged = web.client.post(
        f"/evaluations/{hosted_id}/cancel",
        data={"confirm": "yes"},
        headers={"Origin": "http://testserver:9999", "Sec-Fetch-Site": "same-site"},
        follow_redirects=False,
    )
    assert forged.status_code == 403
    running = web.api.get(f"/evaluations/{hosted_id}", key).json()
    assert running["status"] != "CANCELLED"
    done = web.client.post(
        f"/evaluations/{hosted_id}/cancel", data={"confirm": "yes"}, follow_redirects=False
    )
    assert done.status_code == 303
    record = web.api.get(f"/evaluations/{hosted_id}", key).json()
    assert record["status"] == "CANCELLED"
    after = web.client.get(f"/evaluations/{hosted_id}")
    assert 'id="cancel"' not in after.text
    again = web.client.post(f"/evaluations/{hosted_id}/cancel", data={"confirm": "yes"})
    assert again.status_code == 409
