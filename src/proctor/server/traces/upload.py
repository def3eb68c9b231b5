"""Reading one `POST /traces` request: its headers, its two parts and its JSONL lines.

Everything here is checked before the database is asked anything, in the order the public
protocol names its rejections (`reference/public-clients.md` §7): the idempotency key, the
`metadata` part, the `traces` part's encoding, the size caps, the content digest, then each
line. Each failure is a 400 (`BadRequest`) carrying the protocol's error code; nothing is stored.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from dataclasses import dataclass, field
from typing import Any, Literal

from proctor.contract import SAMPLE_ID_MAX
from proctor.server.errors import BadRequest, InvalidInput
from proctor.server.request_body import (
    STRICT_DECODER,
    NonFiniteNumber,
    bad_value_message,
    check_text,
    non_finite_path,
)

LineFormat = Literal["trace", "episode"]
SCHEMA_VERSION = 1
MAX_TRACES_PER_EPISODE = 10_000
MAX_RECORDS_PER_UPLOAD = 1_000_000
ID_MAX = SAMPLE_ID_MAX
"""Characters an episode or trace id may have (the id of the sample it becomes)."""
_KEY = re.compile(r"sha256:([0-9a-f]{64})")


@dataclass(frozen=True)
class Parts:
    """The raw parts of an upload, as the multipart parser handed them over."""

    metadata: list[str | bytes]
    traces: list[bytes]
    traces_encoding: str | None
    idempotency_key: str | None
    line_format: str | None


@dataclass
class Line:
    """One parsed line: an episode (with its member traces) or a bare trace."""

    record: dict[str, Any]
    raw: str
    record_id: str
    run_id: str
    members: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Upload:
    """A validated upload, ready to be stored."""

    digest: str
    line_format: LineFormat
    context: dict[str, str]
    lines: list[Line]

    def run_ids(self) -> list[str]:
        """The evaluations it writes to, sorted (the order their rows are locked in)."""
        return sorted({line.run_id for line in self.lines})


def _reject(code: str, message: str) -> BadRequest:
    return BadRequest(message, code=code)


def digest_of(key: str | None) -> str:
    """The 64-hex digest of an `Idempotency-Key: sha256:<hex>` header."""
    match = _KEY.fullmatch(key or "")
    if match is None:
        raise _reject(
            "invalid_idempotency_key",
            "The Idempotency-Key header must be sha256:<64 lowercase hex> of the uncompressed "
            "traces part; send that.",
        )
    return match.group(1)


def line_format_of(header: str | None) -> LineFormat:
    """The line format the `X-Prime-Line-Format` header declares (absent: `trace`)."""
    if header is None or header == "trace":
        return "trace"
    if header == "episode":
        return "episode"
    raise _reject(
        "line_format_mismatch",
        "X-Prime-Line-Format must be 'episode' or absent (trace lines); fix the header.",
    )


def context_of(parts: list[str | bytes]) -> dict[str, str]:
    """The `context` of the one `metadata` part, after checking its schema version."""
    if len(parts) != 1:
        raise _reject(
            "invalid_metadata",
            "The upload needs exactly one 'metadata' part holding "
            '{"schema_version": 1}; send one.',
        )
    part = parts[0]
    try:
        text = part.decode("utf-8") if isinstance(part, bytes) else part
        value = STRICT_DECODER.decode(text)
        check_text(text, value, where="The metadata part's")
    except (ValueError, RecursionError):
        value = None
    if not isinstance(value, dict):
        raise _reject(
            "invalid_metadata",
            'The metadata part must be a JSON object such as {"schema_version": 1}; fix it.',
        )
    version = value.get("schema_version")
    if version is None:
        raise _reject("invalid_metadata", "The metadata part has no schema_version; send 1.")
    if version != SCHEMA_VERSION or isinstance(version, bool):
        raise _reject(
            "unsupported_schema_version",
            f"schema_version {str(version)[:40]} is not supported; send schema_version 1.",
        )
    context = value.get("context", {})
    if context is None:
        context = {}
    if not isinstance(context, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and "\x00" not in k + v
        for k, v in context.items()
    ):
        raise _reject(
            "invalid_metadata",
            "The metadata part's context must map strings to strings; fix it.",
        )
    return context


def decoded_body(parts: list[bytes], encoding: str | None, *, max_bytes: int) -> bytes:
    """The uncompressed JSONL of the one `traces` part, refused past `max_bytes`."""
    if len(parts) != 1:
        raise _reject(
            "invalid_trace",
            "The upload needs exactly one 'traces' part holding JSONL; send one.",
        )
    body = parts[0]
    encoding = (encoding or "identity").strip().lower()
    if encoding == "identity":
        if len(body) > max_bytes:
            raise _too_large(max_bytes)
        return body
    if encoding != "gzip":
        raise _reject(
            "malformed_encoding",
            f"Content-Encoding {encoding[:40]!r} of the traces part is not supported; "
            "send gzip or none.",
        )
    # Bounded: a small gzip member can expand to gigabytes.
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        data = inflater.decompress(body, max_bytes + 1)
        if len(data) > max_bytes or inflater.unconsumed_tail:
            raise _too_large(max_bytes)
        data += inflater.flush()
    except zlib.error:
        raise _reject(
            "malformed_encoding", "The traces part is not valid gzip; send gzip bytes or none."
        ) from None
    if not inflater.eof or inflater.unused_data:
        raise _reject(
            "malformed_encoding",
            "The traces part is not one complete gzip member; send gzip bytes or none.",
        )
    return data


def _too_large(max_bytes: int) -> BadRequest:
    return _reject(
        "upload_too_large",
        f"The uncompressed traces part is over the {max_bytes} byte limit; "
        "send the records in smaller batches.",
    )


def check_digest(body: bytes, digest: str) -> None:
    """Refuse a body whose SHA-256 is not the one the Idempotency-Key names."""
    if hashlib.sha256(body).hexdigest() != digest:
        raise _reject(
            "digest_mismatch",
            "The Idempotency-Key is not the SHA-256 of the uncompressed traces part; "
            "compute it over the exact bytes sent.",
        )


def _record_id(value: Any, what: str, number: int, *, too_long: str) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value or "\x00" in value:
        raise _reject(
            "invalid_trace", f"Line {number}: {what} must be a non-empty string; fix that record."
        )
    if len(value) > ID_MAX:
        raise _reject(too_long, f"Line {number}: {what} is over {ID_MAX} characters; shorten it.")
    return value


def _run_id(record: dict[str, Any]) -> str | None:
    run = record.get("run")
    value = run.get("id") if isinstance(run, dict) else None
    return value if isinstance(value, str) else None


def _checked_run_id(value: str | None, number: int) -> str:
    if value is None:
        raise _reject(
            "invalid_trace",
            f"Line {number} has no run.id; stamp each trace with its evaluation id (trace.run.id).",
        )
    if not value or "\x00" in value or len(value) > 64:
        raise _reject(
            "invalid_trace", f"Line {number}: run.id is not an evaluation id; fix that record."
        )
    return value


def _parse_line(text: str, number: int) -> dict[str, Any]:
    try:
        value, end = STRICT_DECODER.raw_decode(text, len(text) - len(text.lstrip()))
    except NonFiniteNumber:
        raise _reject(
            "invalid_trace",
            f"Line {number}: {bad_value_message('its', non_finite_path(text), 'non_finite')}",
        ) from None
    except (ValueError, RecursionError):
        value, end = None, 0
    if not isinstance(value, dict) or text[end:].strip():
        raise _reject("invalid_trace", f"Line {number} is not one JSON object; fix that line.")
    try:
        check_text(text, value, where="its")
    except InvalidInput as e:
        raise _reject("invalid_trace", f"Line {number}: {e}") from None
    return value


def _episode_line(record: dict[str, Any], raw: str, number: int) -> Line:
    members = record.get("traces")
    if not isinstance(members, list):
        raise _reject(
            "line_format_mismatch",
            f"Line {number} has no traces list, but the upload says its lines are episodes; "
            "drop X-Prime-Line-Format: episode for trace lines.",
        )
    if len(members) > MAX_TRACES_PER_EPISODE:
        raise _reject(
            "too_many_traces_in_episode",
            f"Line {number} holds over {MAX_TRACES_PER_EPISODE} traces; split the episode.",
        )
    episode_id = _record_id(
        record.get("id"), "the episode id", number, too_long="episode_id_too_long"
    )
    run_ids = set()
    for member in members:
        if not isinstance(member, dict):
            raise _reject(
                "invalid_trace", f"Line {number}: each of its traces must be a JSON object."
            )
        member["id"] = _record_id(member.get("id"), "a trace id", number, too_long="invalid_trace")
        run_ids.add(_run_id(member))
    run_ids.discard(None)
    if len(run_ids) > 1:
        raise _reject(
            "invalid_trace",
            f"Line {number}: the traces of one episode name different run.id values; "
            "stamp them with one evaluation id.",
        )
    run_id = _checked_run_id(next(iter(run_ids)) if run_ids else _run_id(record), number)
    return Line(record=record, raw=raw, record_id=episode_id, run_id=run_id, members=members)


def _trace_line(record: dict[str, Any], raw: str, number: int) -> Line:
    if "traces" in record:
        raise _reject(
            "line_format_mismatch",
            f"Line {number} is an episode (it has traces); send X-Prime-Line-Format: episode.",
        )
    # A v0 sample row logged as a record has a `sample_id` and no `id`.
    value = record.get("id", record.get("sample_id"))
    record_id = _record_id(value, "the trace id", number, too_long="invalid_trace")
    return Line(
        record=record,
        raw=raw,
        record_id=record_id,
        run_id=_checked_run_id(_run_id(record), number),
    )


def parse_lines(body: bytes, line_format: LineFormat, *, max_line_bytes: int) -> list[Line]:
    """The upload's records, one per non-blank line, with duplicate ids refused."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise _reject(
            "malformed_encoding", "The traces part is not UTF-8 text; send UTF-8 JSONL."
        ) from None
    lines: list[Line] = []
    seen_records: set[str] = set()
    seen_traces: set[str] = set()
    count = 0
    for number, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        if len(raw) > max_line_bytes // 4 and len(raw.encode("utf-8")) > max_line_bytes:
            raise _reject(
                "trace_too_large",
                f"Line {number} is over the {max_line_bytes} byte limit per line; "
                "shrink that record.",
            )
        record = _parse_line(raw, number)
        line = (
            _episode_line(record, raw, number)
            if line_format == "episode"
            else _trace_line(record, raw, number)
        )
        if line.record_id in seen_records:
            code = "duplicate_episode_id" if line_format == "episode" else "duplicate_trace_id"
            raise _reject(code, f"Line {number} repeats id {line.record_id!r}; send each once.")
        seen_records.add(line.record_id)
        for member in line.members:
            if member["id"] in seen_traces:
                raise _reject(
                    "duplicate_trace_id",
                    f"Line {number} repeats trace id {str(member['id'])!r}; send each once.",
                )
            seen_traces.add(str(member["id"]))
        count += 1 + len(line.members)
        if count > MAX_RECORDS_PER_UPLOAD:
            raise _reject(
                "too_many_traces_in_upload",
                f"The upload holds over {MAX_RECORDS_PER_UPLOAD} records; send smaller batches.",
            )
        lines.append(line)
    return lines


def read_upload(parts: Parts, *, max_bytes: int, max_line_bytes: int) -> Upload:
    """Validate an upload's parts completely (see the module docstring).

    Raises:
        BadRequest: With the protocol's code for the first problem found.
    """
    digest = digest_of(parts.idempotency_key)
    line_format = line_format_of(parts.line_format)
    context = context_of(parts.metadata)
    body = decoded_body(parts.traces, parts.traces_encoding, max_bytes=max_bytes)
    check_digest(body, digest)
    lines = parse_lines(body, line_format, max_line_bytes=max_line_bytes)
    return Upload(digest=digest, line_format=line_format, context=context, lines=lines)
