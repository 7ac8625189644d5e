"""Sentence boundaries of a chunk, as character offsets: one splitter for every step that reads sentences.

The grounded answer's evidence step ranks a chunk's sentences, the span mask keeps a span inside one
sentence, the bi-encoder reranker scores a chunk by its best sentence, and the sentence-vector cache
keys vectors by sentence text — so they must cut a chunk the same way, or the cache misses and the
evidence shown is not the sentence that was scored. A period ends a sentence when a capital, quote or
bracket follows, unless it closes an abbreviation ("Dr.", "U.S.", "[O.S. 28 June]"); a line break
always does. Regular expressions rather than a sentence-splitting model: nothing offline is
better for short English chunks, and this runs in microseconds.
"""

from __future__ import annotations

import re

_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[A-Z\"'(\[])|\n+")
# "[O.S. 28 June]", "U.S. Army", "Dr. Smith": a period that ends an abbreviation, not a sentence
_ABBREVIATION = re.compile(r"(\b[A-Za-z]\.([A-Za-z]\.)*|\b(Mr|Mrs|Ms|Dr|St|Jr|Sr|Prof|Gen|Col|Lt|vs|etc|No|Vol|pp|ca|approx)\.)$")


def ends_abbreviation(text: str, period_end: int) -> bool:
    """Whether the period just before ``period_end`` closes an abbreviation ("[O.S.", "U.S.", "Dr.")."""
    return bool(_ABBREVIATION.search(text[max(0, period_end - 12):period_end]))


def sentence_ends(text: str) -> list[tuple[int, int]]:
    """(end of a sentence, start of the next) for each sentence boundary of ``text``."""
    out = []
    for m in _SENTENCE_END.finditer(text):
        if m.group(0).startswith("\n") or not ends_abbreviation(text, m.start()):
            out.append((m.start(), m.end()))
    return out


def sentence_bounds(text: str, start: int, end: int) -> tuple[int, int]:
    """The sentence (or line) of ``text`` around ``[start, end)``."""
    left, right = 0, len(text)
    for m_start, m_end in sentence_ends(text):
        if m_end <= start:
            left = m_end
        elif m_start >= end:
            right = m_start
            break
    return left, right


def sentence_spans(text: str, min_chars: int = 1) -> list[tuple[int, int]]:
    """``(start, end)`` of every sentence of ``text`` with at least ``min_chars`` characters, edges
    stripped of whitespace."""
    spans, left = [], 0
    for end, next_start in [*sentence_ends(text), (len(text), len(text))]:
        a, b = left, end
        while a < b and text[a].isspace():
            a += 1
        while b > a and text[b - 1].isspace():
            b -= 1
        if b - a >= min_chars:
            spans.append((a, b))
        left = next_start
    return spans


def split_sentences(text: str, min_chars: int = 1) -> list[str]:
    """The sentences of ``text`` (:func:`sentence_spans`) as strings."""
    return [text[a:b] for a, b in sentence_spans(text, min_chars)]
