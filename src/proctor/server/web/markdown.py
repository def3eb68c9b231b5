"""Message text as safe HTML: markdown (markdown-it-py) with code highlighted (Pygments).

Raw HTML in a message is escaped, never passed through (`html=False`), images are not
rendered (the page loads nothing from elsewhere; the CSP would block them anyway), and
markdown-it's link validation drops `javascript:` and other unsafe URLs. Highlighting uses
CSS classes, so a stylesheet (`stylesheet()`, served as /static/highlight.css), not inline
styles, colours it under the strict CSP.
"""

from __future__ import annotations

from functools import lru_cache

from markdown_it import MarkdownIt
from markupsafe import Markup, escape
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

MAX_CHARS = 200_000
"""Longer texts are shown as plain text: rendering is linear, but a page should stay quick."""

_FORMATTER = HtmlFormatter(nowrap=True)


def _highlight(code: str, language: str, _attrs: str) -> str:
    try:
        lexer = get_lexer_by_name(language.strip() or "text")
    except ClassNotFound:
        return ""  # markdown-it escapes it as a plain code block
    return highlight(code, lexer, _FORMATTER)


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    parser = MarkdownIt("commonmark", {"html": False, "highlight": _highlight, "breaks": True})
    parser.disable("image")
    parser.enable("table")
    parser.enable("strikethrough")
    return parser


def render(text: str) -> Markup:
    """`text` as HTML that is safe to insert into a page."""
    if len(text) > MAX_CHARS:
        return Markup(f'<pre class="content">{escape(text)}</pre>')
    return Markup(_parser().render(text))


@lru_cache(maxsize=1)
def stylesheet() -> str:
    """The Pygments rules for code in rendered messages, light and (media query) dark."""
    light = HtmlFormatter(style="default").get_style_defs(".md pre")
    dark = HtmlFormatter(style="github-dark").get_style_defs(".md pre")
    return f"{light}\n@media (prefers-color-scheme: dark) {{\n{dark}\n}}\n"
