"""Renderers: an attribution document in, text out; nothing is written here.

render_html: a self-contained page (plotly.js inline, read from the plotly package); html_pieces:
the same page as pieces for a writer, so plotly.js is never held whole; render_markdown: a
GitHub-flavoured triage comment; render_text: the plain summary `compare` and `analyze` print.
"""
from __future__ import annotations

from rootcause.report.html import html_pieces, render_html
from rootcause.report.markdown import render_markdown
from rootcause.report.text import render_text

__all__ = ["html_pieces", "render_html", "render_markdown", "render_text"]
