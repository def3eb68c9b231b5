"""The spool file: appends, acked offset, recovery of a torn tail after a crash."""

from __future__ import annotations

import json
from pathlib import Path

from proctor.runs._spool import Spool


def _line(i: int) -> bytes:
    return json.dumps({"sample_id": f"s{i}", "x": i}).encode() + b"\n"


def _ids(chunk: bytes) -> list[str]:
    return [json.loads(line)["sample_id"] for line in chunk.splitlines()]


def test_reads_chunks_within_limits_and_acks_survive_reopen(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append([_line(i) for i in range(10)])
    assert spool.pending_records == 10
    chunk, count = spool.read_chunk(0, max_bytes=10_000, max_count=4)
    assert (_ids(chunk), count) == (["s0", "s1", "s2", "s3"], 4)
    spool.ack(len(chunk), count)
    small, n = spool.read_chunk(len(chunk), max_bytes=1, max_count=100)
    assert (_ids(small), n) == (["s4"], 1)  # one line always goes, even over the byte limit
    by_bytes, n = spool.read_chunk(len(chunk), max_bytes=len(_line(4)) * 2 + 3, max_count=100)
    assert (_ids(by_bytes), n) == (["s4", "s5"], 2)
    spool.close()

    reopened = Spool(tmp_path)
    assert reopened.acked == len(chunk) and reopened.pending_records == 6
    rest, n = reopened.read_chunk(reopened.acked, max_bytes=10_000, max_count=100)
    assert (_ids(rest), n) == ([f"s{i}" for i in range(4, 10)], 6)
    assert reopened.read_chunk(reopened.size, max_bytes=10_000, max_count=100) == (b"", 0)
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
