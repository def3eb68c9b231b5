"""The sample page shows the trace the traces service stored for the sample's episode."""

from __future__ import annotations

import hashlib
import html

from tests.server.test_traces import episode, jsonl
from tests.web.conftest import Web


def test_the_sample_page_shows_its_trace(web: Web) -> None:
    seeded = web.seed()
    eid = web.api.create(seeded.alice_key, name="traced")
    body = jsonl([episode("ep-web", eid, 0, 0.5)])
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
    # A sample without a stored trace shows none.
    plain = web.client.get(f"/evaluations/{seeded.own}/samples/s-2-3")
    assert plain.status_code == 200 and 'id="sample-traces"' not in plain.text
