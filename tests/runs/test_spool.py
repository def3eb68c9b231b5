"""The spool file: appends, acked offset, recovery of a torn tail after a crash."""

from __future__ import annotations

import json
from pathlib import Path

from proctor.runs._spool import Spool


def _line(i: int) -> bytes:
    return json.dumps({"sample_id": f"s{i}", "x": i}).encode() + b"\n"


def test_reads_batches_within_limits_and_acks_survive_reopen(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append([_line(i) for i in range(10)])
    assert spool.pending_records == 10
    lines, end = spool.read_batch(0, max_bytes=10_000, max_count=4)
    assert [json.loads(x)["sample_id"] for x in lines] == ["s0", "s1", "s2", "s3"]
    spool.ack(end, len(lines))
    small, _ = spool.read_batch(end, max_bytes=1, max_count=100)
    assert len(small) == 1  # one line always fits, even over the byte limit
    spool.close()

    reopened = Spool(tmp_path)
    assert reopened.acked == end and reopened.pending_records == 6
    rest, _ = reopened.read_batch(reopened.acked, max_bytes=10_000, max_count=100)
    assert [json.loads(x)["sample_id"] for x in rest] == [f"s{i}" for i in range(4, 10)]
    reopened.close()


def test_a_torn_last_line_is_cut_on_reopen(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append([_line(0), _line(1)])
    spool.close()
    with open(tmp_path / "spool.jsonl", "ab") as f:
        f.write(b'{"sample_id": "s2", "x"')  # the process died mid-write
    reopened = Spool(tmp_path)
    assert list(reopened.sample_ids()) == ["s0", "s1"]
    assert reopened.pending_records == 2
    reopened.append([_line(3)])
    assert list(reopened.sample_ids()) == ["s0", "s1", "s3"]
    reopened.close()


def test_a_drained_spool_is_discarded_on_close(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append([_line(0)])
    spool.ack(spool.size, 1)
    assert spool.drained()
    spool.close(discard_if_drained=True)
    assert not (tmp_path / "spool.jsonl").exists()


def test_an_undrained_spool_is_kept_on_close(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append([_line(0)])
    spool.close(discard_if_drained=True)
    assert (tmp_path / "spool.jsonl").read_bytes() == _line(0)
