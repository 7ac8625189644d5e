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
  citation and the highlighted evidence; :func:`snap_to_span` is the way for a backend that gives no
  logits and takes no grammar: generate freely, then keep the reply only if it is a span of a source,
  or every content word of it stands in one source sentence (then the words it adds to the question
  are the span), else decline. llama-server takes the mask's rule as a GBNF grammar instead
  (:mod:`ragkit.llm.span_grammar`).
* The model-free side — word boundaries in a source's bytes, where a span may start
  (:func:`candidate_starts`) and where one sits (:func:`locate_span`, :func:`snap_to_span`,
  :func:`evidence_for`) — is in :mod:`ragkit.llm.source_spans` and importable from here too.

Hand-written because no library does it: llama.cpp's GBNF grammars can express the same rule (what a
server is sent), but llama-cpp-python applies a grammar to the whole vocabulary at every step (1.8×
slower per token, :class:`ragkit.llm.structured.FirstTokenMask`); this mask looks up at most a few
thousand byte strings per step in a dictionary of the vocabulary.

Usage::

    vocab = vocabulary_for(llm_generator)                       # once per model (~1 s)
    mask = SpanMask(vocab, [d.content for d in documents])
    llm_generator.run(messages, generation_kwargs={"logits_processor": LogitsProcessorList([mask])})
    span = locate_span(reply_text, [d.content for d in documents])   # Span(source=1, start=…, end=…)
"""

from __future__ import annotations

import weakref
from typing import Any, Iterable

import numpy as np

from ragkit.llm.source_spans import FUNCTION_WORDS, crosses_clause, ends_at_word_boundary, span_openings

# The longest token piece looked up: Qwen's vocabulary has longer pieces (runs of spaces, code), but
# no word-like piece over 24 bytes; longer lookups only cost time.
MAX_PIECE_BYTES = 24


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

    def cache_key(self) -> dict[str, object]:
        """Everything that decides which spans the mask allows, for the LLM cache's key (:mod:`ragkit.llm.cache`)."""
        return {"span_mask": {
            "sources": [s.decode("utf-8", "replace") for s in self.sources], "starts": sorted(self.starts) if self.starts is not None else None,
            "banned_first_words": sorted(w.decode("utf-8", "replace") for w in self.banned_first_words),
            "banned": [b.decode("utf-8", "replace") for b in self.banned],
        }}

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
        for s, start in span_openings(self.sources, starts, self.banned, self.banned_first_words):
            text = self.sources[s]
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

