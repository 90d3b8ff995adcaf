"""Renderers: an attribution document in, text out, no file read or written here.

render_html: a self-contained page (plotly.js inline); render_markdown: a GitHub-flavoured
triage comment; render_text: the plain summary `compare` and `analyze` print.
"""
from __future__ import annotations

from rootcause.report.html import render_html
from rootcause.report.markdown import render_markdown
from rootcause.report.text import render_text

__all__ = ["render_html", "render_markdown", "render_text"]
