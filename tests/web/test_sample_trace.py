"""The sample page shows the trace the traces service stored for the sample's episode."""

from __future__ import annotations

import hashlib
import html

from tests.server.test_traces import episode, jsonl
from tests.web.conftest import Web


def test_the_sample_page_shows_its_trace(web: Web) -> None:
    seeded = web.seed()
    eid = web.api.create(seeded.alice_key, name="traced")
    long = episode("ep-long", eid, 1, 0.5)
    long["traces"][0]["info"] = {"pad": "x" * 250_000}
    body = jsonl([episode("ep-web", eid, 0, 0.5), long])
    uploaded = web.api.post(
        "/traces",
        seeded.alice_key,
        headers={
            "Idempotency-Key": "sha256:" + hashlib.sha256(body).hexdigest(),
            "X-Prime-Line-Format": "episode",
        },
        files={"metadata": (None, b'{"schema_version":1}'), "traces": ("t.jsonl", body)},
    )
    assert uploaded.status_code == 201, uploaded.text
    web.login(seeded.alice_key)
    page = web.client.get(f"/evaluations/{eid}/samples/ep-web")
    assert page.status_code == 200
    text = html.unescape(page.text)
    assert 'id="sample-traces"' in text and "ep-web-t0" in text
    assert '"role": "assistant"' in text  # the trace's document, pretty-printed
    data = web.client.get(f"/evaluations/{eid}/samples/ep-web?format=json").json()
    assert [t["summary"]["trace_id"] for t in data["traces"]] == ["ep-web-t0"]
    assert data["traces"][0]["document"]["id"] == "ep-web-t0"
    # A trace too long to inline is linked instead.
    linked = web.client.get(f"/evaluations/{eid}/samples/ep-long")
    assert "ep-long-t0" in linked.text and "Too long to show here" in linked.text
    assert "x" * 1000 not in linked.text.split('id="sample-traces"')[1].split("Raw sample")[0]
    # The page's link serves the document to the signed-in user (no API key needed).
    document = web.client.get(f"/evaluations/{eid}/traces/ep-long-t0")
    assert document.status_code == 200 and document.json()["info"]["pad"] == "x" * 250_000
    assert f'href="/evaluations/{eid}/traces/ep-long-t0"' in linked.text
    web.client.cookies.clear()
    signed_out = web.client.get(f"/evaluations/{eid}/traces/ep-long-t0", follow_redirects=False)
    assert signed_out.status_code == 303
    web.login(seeded.bob_key)  # another user: alice's evaluation is not his to see
    assert web.client.get(f"/evaluations/{eid}/traces/ep-long-t0").status_code == 404
    web.client.cookies.clear()
    web.login(seeded.alice_key)
    # A sample without a stored trace shows none.
    plain = web.client.get(f"/evaluations/{seeded.own}/samples/s-2-3")
    assert plain.status_code == 200 and 'id="sample-traces"' not in plain.text
