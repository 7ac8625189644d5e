"""Spans of the retrieved text, found without a model: word boundaries in a source's bytes, where an
answer span may start (:func:`candidate_starts`), and where a span sits (:func:`locate_span`,
:func:`snap_to_span`, :func:`evidence_for`).

Kept apart from :mod:`ragkit.llm.span_decoding` (the logits mask that decodes a span; it re-exports
these) because none of this needs a model or its vocabulary.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ragkit.index.sentences import sentence_bounds, sentence_ends

# Words a span may not start with: the model's pull is to copy a sentence from its start ("The …",
# "In …"), and an answer to a factual question is a name, number or noun phrase, which SQuAD's own
# scoring takes without its leading article anyway.
FUNCTION_WORDS = frozenset(
    "a an the in on at of for to from by with as and or but into during while when where which who whom whose that this these those "
    "it its he she they them his her their there here is are was were be been being has have had do does did not also than then".split()
)


def _is_word_byte(b: int) -> bool:
    # bytes >= 0x80 belong to multi-byte UTF-8 characters: letters in every language we index
    return b >= 0x80 or chr(b).isalnum()


def word_at(text: bytes, start: int) -> bytes:
    end = start
    while end < len(text) and _is_word_byte(text[end]):
        end += 1
    return text[start:end]


def word_starts(text: bytes) -> list[int]:
    return [i for i in range(len(text)) if _is_word_byte(text[i]) and (i == 0 or not _is_word_byte(text[i - 1]))]


def ends_at_word_boundary(text: bytes, end: int) -> bool:
    return end >= len(text) or not _is_word_byte(text[end]) or not _is_word_byte(text[end - 1])


def span_openings(
    sources: list[bytes], starts: set[tuple[int, int]] | None, banned_prefixes: list[bytes], banned_first_words: set[bytes],
) -> list[tuple[int, int]]:
    """(source, byte offset) where a grounded span may open: a word start among ``starts`` (every one for None),
    not at a function word, not where a rejected answer (``banned_prefixes``, lowercased) starts. The one rule
    for the in-process mask and a server's grammar (:mod:`ragkit.llm.span_grammar`)."""
    return [
        (s, start) for s, text in enumerate(sources) for start in word_starts(text)
        if (starts is None or (s, start) in starts) and word_at(text, start).lower() not in banned_first_words
        and not any(text[start:start + len(b)].lower() == b for b in banned_prefixes)
    ]


_CLAUSE_PUNCTUATION = frozenset(b".,;:!?")


def crosses_clause(text: bytes, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` runs past a clause end: punctuation followed by a space, or a line
    break ("2,000" and "3.5" stay whole; "Paris, France" does not)."""
    for i in range(start, min(end, len(text) - 1)):
        if text[i] == 0x0A or (text[i] in _CLAUSE_PUNCTUATION and text[i + 1] in b" \t\n" and i + 1 < end):
            return True
    return False


# -- where a span may start: the question's sentences, the question's answer type ------------------
_STOP = FUNCTION_WORDS | frozenset("what which how many much why does did is was were the name called known".split())
_NUMBER_WORDS = frozenset(
    "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen "
    "twenty thirty forty fifty sixty seventy eighty ninety hundred thousand million billion dozen several half".split()
)
_WEEKDAYS = frozenset("monday tuesday wednesday thursday friday saturday sunday".split())
_MONTHS = frozenset("january february march april may june july august september october november december".split())


def _stem(word: str) -> str:
    return word.lower()[:6]


def answer_type(question: str) -> str | None:
    """What kind of span answers ``question``: "number", "time", "name", "place", or None (anything)."""
    q = question.strip().lower()
    if re.match(r"^(how (many|much)|what (number|percentage|percent|amount))\b", q) or re.search(r"\bhow (many|much)\b", q):
        return "number"
    if re.match(r"^(when|(in |during )?(what|which) (year|decade|century|month|date|day))\b", q):
        return "time"
    if re.match(r"^(who|whom|whose)\b", q):
        return "name"
    if re.match(r"^(where|(in |at |from )?(what|which) (city|country|town|village|state|region|place|continent))\b", q):
        return "place"
    return None


def _fits_type(word: bytes, kind: str | None) -> bool:
    text = word.decode("utf-8", "ignore")
    if not text or kind is None:
        return True
    if kind == "number":
        return text[0].isdigit() or text.lower() in _NUMBER_WORDS
    if kind == "time":
        return text[0].isdigit() or text.lower() in _MONTHS or text.lower() in _NUMBER_WORDS
    if kind == "place":  # a proper name that is not a date: "Smiljan", not "July" or "1856"
        return text[0].isupper() and text.lower() not in _MONTHS and text.lower() not in _WEEKDAYS
    return text[0].isupper()  # a name


def candidate_starts(question: str, sources: list[str], sentences: int = 3, hint: str = "") -> set[tuple[int, int]] | None:
    """Where a grounded answer may start: word starts in the ``sentences`` source sentences that
    share the most content words with the question, narrowed to the question's answer type
    (:func:`answer_type`) when any such word is there; words of ``hint`` (a drafted answer) count
    twice. None when no sentence shares a word (no
    narrowing). Milliseconds, no model: a small model reading three paragraphs otherwise likes to
    copy the start of the first sentence it sees."""
    asked = {_stem(w) for w in _WORD.findall(question) if w.lower() not in _STOP and len(w) > 1}
    # the draft answer's own words ("Broncos") point at its sentence more surely than the question's
    hinted = {_stem(w) for w in _WORD.findall(hint) if w.lower() not in _STOP and len(w) > 1} - asked
    scored: list[tuple[int, int, int, int]] = []  # (overlap, source, start, end) in bytes
    for s, text in enumerate(sources):
        left = 0
        bounds = [b for _, b in sentence_ends(text)] + [len(text)]
        for right in bounds:
            sentence = text[left:right]
            words = {_stem(w) for w in _WORD.findall(sentence)}
            overlap = len(asked & words) + 2 * len(hinted & words)
            if overlap:
                b0 = len(text[:left].encode("utf-8"))
                scored.append((overlap, s, b0, b0 + len(sentence.encode("utf-8"))))
            left = right
    if not scored:
        return None
    scored.sort(key=lambda x: -x[0])
    kind = answer_type(question)
    starts: set[tuple[int, int]] = set()
    typed: set[tuple[int, int]] = set()
    for _overlap, s, b0, b1 in scored[:sentences]:
        raw = sources[s].encode("utf-8")
        for i in word_starts(raw[b0:b1]):
            word = word_at(raw, b0 + i)
            if _stem(word.decode("utf-8", "ignore")) in asked:
                continue  # an answer does not open by repeating the question
            starts.add((s, b0 + i))
            if _fits_type(word, kind):
                typed.add((s, b0 + i))
    return (typed or starts) or None


# -- where a span sits -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Span:
    source: int  # 1-based, as cited
    start: int  # character offsets in the source's text
    end: int
    sentence_start: int
    sentence_end: int

    def to_dict(self) -> dict[str, int]:
        return {"source": self.source, "start": self.start, "end": self.end, "sentence_start": self.sentence_start, "sentence_end": self.sentence_end}


def clean_span(text: str) -> str:
    """A decoded span without the whitespace and dangling punctuation a copy can pick up at its edges."""
    return text.strip().strip(",;:").strip()


def locate_span(span: str, sources: list[str]) -> Span | None:
    """The first source containing ``span`` verbatim (case-sensitive, then not), as a :class:`Span`."""
    span = clean_span(span)
    if not span:
        return None
    for fold in (False, True):
        needle = span.lower() if fold else span
        for i, text in enumerate(sources, 1):
            hay = text.lower() if fold else text
            at = hay.find(needle)
            while at >= 0:  # prefer an occurrence that starts at a word start
                if at == 0 or not text[at - 1].isalnum():
                    s0, s1 = sentence_bounds(text, at, at + len(span))
                    return Span(i, at, at + len(span), s0, s1)
                at = hay.find(needle, at + 1)
    return None


_WORD = re.compile(r"\w+")


def snap_to_span(reply: str, sources: list[str], question: str = "") -> tuple[str, Span] | None:
    """Extract-then-verify: ``reply`` as it appears in a source (verbatim); else, in a source sentence
    that holds every content word of the reply (verified), the shortest stretch holding the words the
    reply adds to the question ("Tesla was born in Smiljan" → "Smiljan"); None when no sentence
    supports the whole reply."""
    from ragkit.eval.metrics import strip_citations

    reply = clean_span(strip_citations(reply))
    exact = locate_span(reply, sources)
    if exact is not None:
        return sources[exact.source - 1][exact.start:exact.end], exact
    content = {w.lower() for w in _WORD.findall(reply) if w.lower() not in FUNCTION_WORDS}
    if not content or len(content) > 40:
        return None
    asked = {w.lower() for w in _WORD.findall(question)}
    new = (content - asked) or content
    best: tuple[int, int, int, int] | None = None  # (length, source, start, end)
    for i, text in enumerate(sources, 1):
        left = 0
        for right in [b for _, b in sentence_ends(text)] + [len(text)]:
            words = list(_WORD.finditer(text, left, right))
            lowered = [w.group(0).lower() for w in words]
            if content <= set(lowered):
                at = [k for k, w in enumerate(lowered) if w in new]
                for a in at:  # the shortest window from a word of `new` that holds all of `new`
                    seen, b = set(), a
                    while b < len(lowered) and not new <= seen:
                        seen.add(lowered[b]) if lowered[b] in new else None
                        b += 1
                    if new <= seen:
                        length = words[b - 1].end() - words[a].start()
                        if best is None or length < best[0]:
                            best = (length, i, words[a].start(), words[b - 1].end())
            left = right
    if best is None:
        return None
    _, i, start, end = best
    text = sources[i - 1]
    s0, s1 = sentence_bounds(text, start, end)
    return text[start:end], Span(i, start, end, s0, s1)


_CITED = re.compile(r"\[(\d+)\]")


def evidence_for(answer: str, documents: list[Any]) -> dict[str, Any] | None:
    """Where ``answer`` (citations stripped) stands verbatim in the sources — the cited source first —
    as the dict the panel and the CLI highlight; None when it is not a span of any source."""
    from ragkit.eval.metrics import strip_citations

    texts = [getattr(d, "content", None) or "" for d in documents]
    cited = [int(n) for n in _CITED.findall(answer or "") if 0 < int(n) <= len(texts)]
    order = list(dict.fromkeys([*cited, *range(1, len(texts) + 1)]))
    found = locate_span(strip_citations(answer or ""), [texts[i - 1] for i in order])
    if found is None:
        return None
    source = order[found.source - 1]
    text = texts[source - 1]
    return {
        **found.to_dict(), "source": source, "document_id": getattr(documents[source - 1], "id", None),
        "text": text[found.start:found.end], "sentence": text[found.sentence_start:found.sentence_end],
    }
