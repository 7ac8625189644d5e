"""Grounded answers by construction: decoding that can only copy a span of the retrieved text.

A 0.5–1.5B model that has the right paragraph in front of it still writes "[2]", a wrong year, or
"The documents don't say.". For a question that asks for a fact, ragkit can instead let the model
*choose* the answer while making it impossible to *write* anything but a quotation:

* :class:`SpanMask` is a llama-cpp-python logits processor. At each step it allows exactly the
  tokens whose bytes continue some span of the sources that the reply so far already matches — at
  the first step, any token that starts at a word start of a source (with or without a leading
  space) — plus the end-of-turn token once the reply ends at a word boundary. Everything else gets
  ``-inf``, so greedy decoding returns the span the model finds most likely.
* Tokenisation: the match is done on **bytes**, not on the model's tokenisation of the sources, so a
  span may start in the middle of one of the source's tokens ("…1999" tokenised as "…19"+"99"), be
  written with any split of tokens, and contain multi-byte characters cut across tokens.
* Several candidate spans: the live matches are every position in every source the reply so far
  occurs at; a retry (self-correction) passes the answer it rejected and the mask bans spans that
  start with it, so the model gives its next-best span.
* :func:`locate_span` finds where a decoded span sits (source, character offsets, its sentence) for the
  citation and the highlighted evidence; :func:`snap_to_span` is the cheaper alternative for backends
  that give no logits (an OpenAI-compatible server): generate freely, then keep the reply only if it
  is a span of a source, or every content word of it stands in one source sentence (then the
  words it adds to the question are the span), else decline.

Hand-written because no library does it: llama.cpp's GBNF grammars could express "one of these
strings", but a grammar over every span of three paragraphs is thousands of alternatives, and
llama-cpp-python applies a grammar to the whole vocabulary at every step (1.8× slower per token,
:class:`ragkit.llm.structured.FirstTokenMask`); this mask looks up at most a few thousand byte
strings per step in a dictionary of the vocabulary.

Usage::

    vocab = vocabulary_for(llm_generator)                       # once per model (~1 s)
    mask = SpanMask(vocab, [d.content for d in documents])
    llm_generator.run(messages, generation_kwargs={"logits_processor": LogitsProcessorList([mask])})
    span = locate_span(reply_text, [d.content for d in documents])   # Span(source=1, start=…, end=…)
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from ragkit.index.sentences import sentence_bounds, sentence_ends

# Words a span may not start with: the model's pull is to copy a sentence from its start ("The …",
# "In …"), and an answer to a factual question is a name, number or noun phrase, which SQuAD's own
# scoring takes without its leading article anyway.
FUNCTION_WORDS = frozenset(
    "a an the in on at of for to from by with as and or but into during while when where which who whom whose that this these those "
    "it its he she they them his her their there here is are was were be been being has have had do does did not also than then".split()
)

# The longest token piece looked up: Qwen's vocabulary has longer pieces (runs of spaces, code), but
# no word-like piece over 24 bytes; longer lookups only cost time.
MAX_PIECE_BYTES = 24


def _is_word_byte(b: int) -> bool:
    # bytes >= 0x80 belong to multi-byte UTF-8 characters: letters in every language we index
    return b >= 0x80 or chr(b).isalnum()


def _word_at(text: bytes, start: int) -> bytes:
    end = start
    while end < len(text) and _is_word_byte(text[end]):
        end += 1
    return text[start:end]


def word_starts(text: bytes) -> list[int]:
    return [i for i in range(len(text)) if _is_word_byte(text[i]) and (i == 0 or not _is_word_byte(text[i - 1]))]


def ends_at_word_boundary(text: bytes, end: int) -> bool:
    return end >= len(text) or not _is_word_byte(text[end]) or not _is_word_byte(text[end - 1])


_CLAUSE_PUNCTUATION = frozenset(b".,;:!?")


def crosses_clause(text: bytes, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` runs past a clause end: punctuation followed by a space, or a line
    break ("2,000" and "3.5" stay whole; "Paris, France" does not)."""
    for i in range(start, min(end, len(text) - 1)):
        if text[i] == 0x0A or (text[i] in _CLAUSE_PUNCTUATION and text[i + 1] in b" \t\n" and i + 1 < end):
            return True
    return False


class Vocabulary:
    """A model's token pieces as bytes, indexed by piece (the lookup :class:`SpanMask` needs)."""

    def __init__(self, pieces: list[bytes], end_ids: Iterable[int]):
        self.pieces = pieces
        self.end_ids = np.array(sorted(set(end_ids)), dtype=np.intc)
        self.by_piece: dict[bytes, list[int]] = {}
        for token_id, piece in enumerate(pieces):
            if piece and len(piece) <= MAX_PIECE_BYTES:
                self.by_piece.setdefault(piece, []).append(token_id)

    @classmethod
    def from_llama(cls, llm: Any) -> "Vocabulary":
        from ragkit.llm.faults import _end_of_turn_ids

        pieces = []
        for token_id in range(llm.n_vocab()):
            try:
                pieces.append(llm.detokenize([token_id]))
            except Exception:  # control tokens some builds refuse to render
                pieces.append(b"")
        return cls(pieces, [int(llm.token_eos()), *_end_of_turn_ids(llm)])

    def text_of(self, token_ids: Iterable[int]) -> bytes:
        return b"".join(self.pieces[int(i)] for i in token_ids if 0 <= int(i) < len(self.pieces))


_VOCABULARIES: "weakref.WeakKeyDictionary[Any, Vocabulary]" = weakref.WeakKeyDictionary()


def vocabulary_for(generator: Any) -> Vocabulary:
    """The loaded llama.cpp model's :class:`Vocabulary`, built once per model."""
    llm = getattr(generator, "_model", None)
    if llm is None:
        generator.warm_up()
        llm = generator._model
    if llm not in _VOCABULARIES:
        _VOCABULARIES[llm] = Vocabulary.from_llama(llm)
    return _VOCABULARIES[llm]


class SpanMask:
    """Logits processor: the reply must be a span of ``sources`` (bytes-level match, any tokenisation).

    ``banned_prefixes``: spans starting with one of these (case-insensitive) may not be chosen — a
    retry's way to ask for the next-best candidate. ``matches`` after decoding lists where the reply
    occurs: ``(source index, start byte, end byte)``.
    """

    def __init__(
        self, vocabulary: Vocabulary, sources: list[str], banned_prefixes: Iterable[str] = (), banned_first_words: Iterable[str] = FUNCTION_WORDS,
        starts: set[tuple[int, int]] | None = None,
    ):
        """``starts``: the (source, byte offset) where a span may begin (:func:`candidate_starts`);
        None: every word start."""
        self.vocabulary = vocabulary
        self.sources = [s.encode("utf-8") for s in sources]
        self.starts = starts
        self.banned_first_words = {w.lower().encode("utf-8") for w in banned_first_words}
        self.banned = [p.strip().lower().encode("utf-8") for p in banned_prefixes if p and p.strip()]
        self.first_position: int | None = None
        self.consumed = 0  # reply tokens already folded into ``states``
        self.states: list[tuple[int, int, int]] = []  # (source, start, end) of every live match
        self.dead = False  # the reply left every span (a processor before this one forced a token)
        self._first: dict[int, list[tuple[int, int, int]]] | None = None

    # -- which tokens may come next -----------------------------------------------------------
    def _first_step(self) -> dict[int, list[tuple[int, int, int]]]:
        """Every token that can open a span, with the matches it would start (computed once)."""
        if self._first is not None:
            return self._first
        self._first = self._openings(self.starts)
        if not self._first and self.starts is not None:  # the narrowing left nothing: any word start
            self._first = self._openings(None)
        return self._first

    def _openings(self, starts: set[tuple[int, int]] | None) -> dict[int, list[tuple[int, int, int]]]:
        allowed: dict[int, list[tuple[int, int, int]]] = {}
        for s, text in enumerate(self.sources):
            for start in word_starts(text):
                if starts is not None and (s, start) not in starts:
                    continue
                if any(text[start:start + len(b)].lower() == b for b in self.banned):
                    continue
                if self.banned_first_words and _word_at(text, start).lower() in self.banned_first_words:
                    continue
                for k in range(1, min(MAX_PIECE_BYTES, len(text) - start) + 1):
                    if crosses_clause(text, start, start + k):
                        break
                    piece = text[start:start + k]
                    for candidate in (piece, b" " + piece):
                        for token_id in self.vocabulary.by_piece.get(candidate, ()):
                            allowed.setdefault(token_id, []).append((s, start, start + k))
        return allowed

    def _next_tokens(self) -> set[int]:
        out: set[int] = set()
        for s, start, end in self.states:
            text = self.sources[s]
            for k in range(1, min(MAX_PIECE_BYTES, len(text) - end) + 1):
                if crosses_clause(text, max(start, end - 1), end + k):
                    break  # an answer is a phrase: it ends where its clause ends
                out.update(self.vocabulary.by_piece.get(text[end:end + k], ()))
        return out

    def _advance(self, token_id: int) -> None:
        piece = self.vocabulary.pieces[token_id] if 0 <= token_id < len(self.vocabulary.pieces) else b""
        if self.consumed == 0:
            self.states = self._first_step().get(token_id, [])
        else:
            self.states = [(s, start, end + len(piece)) for s, start, end in self.states if self.sources[s][end:end + len(piece)] == piece]
        self.consumed += 1
        if not self.states:
            self.dead = True

    @property
    def matches(self) -> list[tuple[int, int, int]]:
        return list(self.states)

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        if self.first_position is None:
            self.first_position = len(input_ids)
        generated = input_ids[self.first_position:]
        while self.consumed < len(generated) and not self.dead:
            self._advance(int(generated[self.consumed]))
        if self.dead:
            return scores
        if self.consumed == 0:
            allowed = set(self._first_step())
        else:
            allowed = self._next_tokens()
            if any(ends_at_word_boundary(self.sources[s], end) for s, _start, end in self.states):
                allowed.update(int(i) for i in self.vocabulary.end_ids)
        ids = np.fromiter(allowed, dtype=np.intc, count=len(allowed)) if allowed else np.empty(0, dtype=np.intc)
        if not ids.size or not np.isfinite(scores[ids]).any():
            # nothing allowed is possible (an earlier processor forced the end): leave the step alone
            return scores
        masked = np.full_like(scores, -np.inf)
        masked[ids] = scores[ids]
        scores[:] = masked
        return scores


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
            word = _word_at(raw, b0 + i)
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
