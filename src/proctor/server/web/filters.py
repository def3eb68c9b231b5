"""Jinja filters of the dashboard templates: numbers, times, statuses, query strings, charts."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlencode

from jinja2 import Environment
from starlette.datastructures import URL

from proctor.server.web.histograms import histogram_svg

NONE = "\u2013"  # an en dash stands for a missing value

STATUS_CLASSES = {
    "PENDING": "pending",
    "RUNNING": "running",
    "PROCESSING": "running",
    "COMPLETED": "ok",
    "FAILED": "bad",
    "CANCELLED": "muted",
    "TIMEOUT": "bad",
}


def number(value: Any, digits: int = 3) -> str:
    """A number for a table cell; an en dash for none."""
    if value is None or isinstance(value, bool):
        return NONE if value is None else str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def when(value: str | None) -> str:
    """An ISO timestamp as `YYYY-MM-DD HH:MM:SS UTC`."""
    if not value:
        return NONE
    try:
        return datetime.fromisoformat(value).strftime("%Y-%m-%d %H:%M:%S UTC")
    except ValueError:
        return value


def seconds(value: float | None) -> str:
    """A duration in seconds, readable."""
    if value is None:
        return NONE
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.1f} s"
    minutes, secs = divmod(int(value), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {secs:02d}s"


def timing(value: Any, name: str) -> str:
    """A timing field readable: epoch seconds as a UTC time, `_s`/`_ms` fields as durations."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return number(value)
    if name in ("start", "end", "started_at", "ended_at") and 1e9 < value < 1e11:
        return datetime.fromtimestamp(value, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"
    if name.endswith("_ms"):
        return seconds(value / 1000)
    if name.endswith("_s") or name.endswith("seconds"):
        return seconds(value)
    return number(value)


def pvalue(value: float | None) -> str:
    """A p-value: three decimals, or `< 0.001`."""
    if value is None:
        return NONE
    return "< 0.001" if value < 0.001 else f"{value:.3f}"


def status_class(status: str) -> str:
    """CSS class colouring a status badge."""
    return STATUS_CLASSES.get(status, "muted")


def with_query(url: URL, **changes: Any) -> str:
    """The current path and query with some parameters changed (None removes one)."""
    params = dict(parse_qsl(url.query, keep_blank_values=True))
    params.pop("format", None)
    for key, value in changes.items():
        if value is None:
            params.pop(key, None)
        else:
            params[key] = str(value)
    return f"{url.path}?{urlencode(params)}" if params else url.path


def pretty(value: Any) -> str:
    """JSON, indented."""
    return json.dumps(value, ensure_ascii=False, indent=2, default=str)


def install_filters(env: Environment) -> None:
    """Register the filters on a Jinja environment."""
    env.filters.update(
        number=number,
        when=when,
        seconds=seconds,
        timing=timing,
        pvalue=pvalue,
        status_class=status_class,
        pretty=pretty,
    )
    env.globals.update(with_query=with_query, histogram_svg=histogram_svg)
