"""One way to show text that came from a user or a document: its control characters visible, never obeyed.

File names, titles, answers, source text and error messages reach a terminal (Rich) and a notebook
(HTML). A name such as ``ESC[2JESC[31mRED`` would clear the user's screen and fake output if printed
raw; a right-to-left override (U+202E) would make ``txt.exe`` read as ``exe.txt``; a ``[bold]`` in a
title would be read as Rich markup. So every such string goes through :func:`visible` — control
characters (C0, C1, DEL) other than newline and tab, and the bidirectional overrides and isolates,
become their escape (``\\x1b``, ``\\u202e``) — and then through the escaping of where it goes:
:func:`terminal_text` for Rich markup strings, :func:`html_text` for HTML. ``rich.text.Text`` parses
no markup, so text put into a ``Text`` needs :func:`visible` only.

Usage::

    console.print(f"[yellow]skipped[/] {terminal_text(source)}")
    HTML(f"<b>{html_text(result.answer)}</b>")
"""

from __future__ import annotations

import html
import unicodedata

# Bidirectional embeddings, overrides and isolates: they reorder what follows them on screen.
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _shown(ch: str) -> str:
    if ch in "\n\t":
        return ch
    if unicodedata.category(ch) == "Cc" or ch in BIDI_CONTROLS:
        return ch.encode("unicode_escape").decode("ascii")
    return ch


def visible(value: object) -> str:
    """``value`` as text with control characters and bidi overrides written out (``\\x1b``), newlines and tabs kept."""
    text = str(value)
    if text.isprintable():  # the common case: nothing to replace
        return text
    return "".join(_shown(ch) for ch in text)


def terminal_text(value: object) -> str:
    """For a Rich markup string: :func:`visible`, then Rich's markup escaped ("[draft]" stays visible)."""
    from rich.markup import escape

    return escape(visible(value))


def html_text(value: object) -> str:
    """For HTML: :func:`visible`, then HTML-escaped (``<script>`` is text)."""
    return html.escape(visible(value))
