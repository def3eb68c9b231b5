"""Migration 0008 mends lone surrogate halves stored before the boundary refused them: the
reads that decoded them (the dashboard page, `GET /traces`, the record) answer again."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import text

from proctor.server import migrations
from proctor.server.app import create_app
from tests.server.conftest import make_settings
from tests.support.platform import BOOTSTRAP_KEY

HEADERS = {"Authorization": f"Bearer {BOOTSTRAP_KEY}"}


def test_stored_halves_become_u_fffd_and_the_pages_answer_again(
    db_url: str, tmp_path: Path
) -> None:
    app = create_app(make_settings(db_url, tmp_path))
    with TestClient(app, raise_server_exceptions=False) as client:
        api = "/api/v1/evaluations"
        evaluation_id = client.post(api + "/", json={"name": "old"}, headers=HEADERS).json()[
            "evaluation_id"
        ]
        sample = {"sample_id": "s0", "reward": 1.0, "completion": [{"content": "x"}]}
        client.post(f"{api}/{evaluation_id}/samples", json={"samples": [sample]}, headers=HEADERS)
        db = app.state.db
        # What an older server stored: the escapes inside JSON documents it kept as sent.
        metadata = r'{"cut":"a\ud83d","pair":"\ud83d\ude00","literal":"\\ud800"}'
        metrics = r'{"m":"\udc00"}'
        json_cast = "CAST(:m AS JSON)" if db.engine.dialect.name == "postgresql" else ":m"
        with db.write_engine.begin() as conn:
            conn.execute(
                text(
                    f"UPDATE evaluations SET metadata_raw = :r, metrics = {json_cast} WHERE id = :i"
                ),
                {"r": metadata, "m": metrics, "i": evaluation_id},
            )
            conn.execute(
                text("UPDATE samples SET data = :d WHERE evaluation_id = :i"),
                {
                    "d": r'{"sample_id":"s0","reward":1.0,"completion":[{"content":"\udbff!"}]}',
                    "i": evaluation_id,
                },
            )
        migrations.downgrade(db.write_engine, "0007")
        migrations.upgrade(db.write_engine)
        record = client.get(f"{api}/{evaluation_id}", headers=HEADERS)
        assert record.status_code == 200
        assert record.json()["metadata"] == {
            "cut": "a\ufffd",
            "pair": "\U0001f600",
            "literal": "\\ud800",
        }
        assert record.json()["metrics"] == {"m": "\ufffd"}
        # The rest of the stored bytes are as they were.
        assert r'"pair":"\ud83d\ude00","literal":"\\ud800"' in record.text
        samples = client.get(f"{api}/{evaluation_id}/samples", headers=HEADERS)
        assert samples.status_code == 200
        assert samples.json()["samples"][0]["completion"] == [{"content": "\ufffd!"}]
        json.dumps(samples.json(), ensure_ascii=False).encode("utf-8")
