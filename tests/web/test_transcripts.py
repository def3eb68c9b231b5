"""Transcripts a researcher reads, in-process: the trajectory's steps with their output,
images as images, code with its whitespace, long texts capped, and the samples one click
away (the browser checks of the same are in `test_browser_transcripts.py`)."""

from __future__ import annotations

import html
import re

import pytest

from tests.web import transcript_samples as samples
from tests.web.conftest import SeededWeb, Web


@pytest.fixture(scope="module")
def eid(seeded_web: SeededWeb) -> str:
    """The transcripts' evaluation, alice's, posted once for the module's seeded app."""
    web, key = seeded_web.web, seeded_web.seeded.alice_key
    evaluation_id = web.api.create(key, name="transcripts")
    posted = web.api.post(
        f"/evaluations/{evaluation_id}/samples", key, json={"samples": samples.all_samples()}
    )
    assert posted.status_code == 200, posted.text
    return evaluation_id


@pytest.fixture
def web(fresh_web: SeededWeb) -> Web:
    """The module's seeded app (`seeded_web`), alice signed in; the tests only read."""
    fresh_web.web.login(fresh_web.seeded.alice_key)
    return fresh_web.web


def _page(web: Web, eid: str, sample_id: str) -> str:
    response = web.client.get(f"/evaluations/{eid}/sample?id={sample_id}")
    assert response.status_code == 200, response.text
    # What the page shows, not the raw sample folded at its end.
    return html.unescape(response.text.split("<summary>Raw sample</summary>")[0])


def test_the_sandbox_traceback_and_the_judges_verdict_are_steps_with_their_output(
    web: Web, eid: str
) -> None:
    text = _page(web, eid, "he-1")
    sandbox = text.split('class="step step-sandbox"')[1].split("</article>")[0]
    assert "sandbox run · unit tests" in sandbox and "exit 1" in sandbox
    assert '<span class="status bad">failed</span>' in sandbox
    assert samples.TRACEBACK in sandbox  # whole, with its line breaks and indentation
    judge = text.split('class="step step-judge"')[1].split("</article>")[0]
    assert "judge-model" in judge and "score <strong>0.25</strong>" in judge
    assert "VERDICT: the loop compares each pair twice; GRADE: 0.25" in judge
    assert '<details class="output-fold"><summary>prompt' in judge  # folded, but there
    # Both come after the conversation: they graded it.
    assert text.index("After the conversation") < text.index("step step-sandbox")
    steps = web.client.get(f"/evaluations/{eid}/sample?id=he-1&format=json").json()
    kinds = [step["kind"] for step in steps["sample"]["steps"]]
    assert kinds == ["sandbox", "judge"]
    assert steps["sample"]["steps"][0]["outputs"][0] == {
        "label": "stderr",
        "text": samples.TRACEBACK,
        "open": True,
        "long": False,
        "lines": 6,
    }


def test_a_step_run_mid_conversation_follows_its_turn_and_unknown_entries_show(
    web: Web, eid: str
) -> None:
    text = _page(web, eid, "code-1")
    first, second = [m.start() for m in re.finditer("turn [12]</small>", text)][:2]
    run = text.index("step step-sandbox")
    assert first < run < second  # the code of turn 1 ran before turn 2
    assert "    indented\n        twice\n" in text  # stdout as printed
    assert "branch 2" in text and "branch answer" in text and "input tokens <strong>12" in text
    event = text.split('class="step step-event"')[1].split("</article>")[0]
    assert "retrieval" in event and '"query": "q"' in event
    assert "z" * 50_000 not in event and "50,000 characters" in event


def test_images_in_a_content_list_are_images_never_a_dump_of_base64(web: Web, eid: str) -> None:
    text = _page(web, eid, "img-1")
    sources = re.findall(r'<img class="part-image" src="([^"]+)"', text)
    assert sources == [f"data:image/png;base64,{samples.IMAGE}"] * 2
    assert samples.IMAGE not in text.replace(f'src="data:image/png;base64,{samples.IMAGE}"', "")
    assert "image at https://example.com/cat.png (not loaded" in text
    assert samples.AUDIO not in text and samples.AUDIO[:40] in text  # cut, with its size
    assert "What colour is this?" in text
    assert "{'type'" not in text and '"type": "image_url"' not in text
    # The samples table's preview names the image instead of dumping it.
    table = web.client.get(f"/evaluations/{eid}/samples?format=json").json()
    assert all(samples.AUDIO[:40] not in row["preview"] for row in table["table"]["samples"])


def test_code_keeps_its_whitespace_and_long_answers_are_capped(web: Web, eid: str) -> None:
    text = _page(web, eid, "he-1")
    target = re.search(r'id="sample-target"><pre class="output target">(.*?)</pre>', text, re.S)
    assert target is not None and target.group(1) == samples.TARGET
    assert re.search(r"<pre><code[^>]*>.*def.*has_close_elements", text, re.S)  # fenced code
    long = _page(web, eid, "long-1")
    assert f'class="content clamp" tabindex="0" data-lines="{samples.LONG_LINES}"' in long
    assert "line 3000 of the answer" in long  # all of it is there, only capped
    short = _page(web, eid, "img-1")
    assert "clamp" not in short.split('id="transcript"')[1]


def test_previous_next_and_the_examples_other_rollouts_are_one_click_away(
    web: Web, eid: str
) -> None:
    nav = web.client.get(f"/evaluations/{eid}/sample?id=he-2&format=json").json()["nav"]
    assert nav["previous"]["sample_id"] == "he-1" and nav["next"]["sample_id"] == "he-3"
    assert [(r["sample_id"], r["reward"]) for r in nav["rollouts"]] == [
        ("he-1", 0.0),
        ("he-2", 1.0),
        ("he-3", 0.0),
    ]
    text = _page(web, eid, "he-2")
    assert f'<a rel="prev" href="/evaluations/{eid}/sample?id=he-1"' in text
    assert f'<a rel="next" href="/evaluations/{eid}/sample?id=he-3"' in text
    assert '<span class="current" aria-current="page">2: 1.000</span>' in text
    first = web.client.get(f"/evaluations/{eid}/sample?id=he-1&format=json").json()["nav"]
    last = web.client.get(f"/evaluations/{eid}/sample?id=code-1&format=json").json()["nav"]
    assert first["previous"] is None and last["next"] is None
    alone = _page(web, eid, "long-1")
    assert 'id="rollouts"' not in alone  # a single rollout lists no others


def test_no_link_is_nested_in_a_summary(web: Web, seeded_web: SeededWeb) -> None:
    seeded = seeded_web.seeded
    pages = [
        f"/compare/example?ids={seeded.own},{seeded.second}&example=1",
        f"/evaluations/{seeded.own}/sample?id=s-1-1",
        f"/evaluations/{seeded.own}",
    ]
    for path in pages:
        text = web.client.get(path).text
        summaries = re.findall(r"<summary>(.*?)</summary>", text, re.S)
        assert summaries and not [s for s in summaries if "<a " in s], path
