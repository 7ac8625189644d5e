"""A grounded answer through a server: the span rule of :class:`ragkit.llm.span_decoding.SpanMask` as a GBNF grammar.

In-process, a grounded answer is decoded under a logits mask that only lets the model copy a span of
the evidence. A server runs no Python logits processor; before this, a served grounded answer was a
free draft snapped to a span afterwards (:func:`ragkit.llm.source_spans.snap_to_span`), and the 0.5B's
draft was so often a paraphrase or a whole sentence that it declined 54 of 200 SQuAD dev questions
against 2 in-process (``bench/results/served_confidence.json``). ``llama-server`` takes a GBNF grammar in
the chat request (``"grammar"``, sent through the OpenAI client's ``extra_body``), and a grammar can say
the same rule as the mask, at word granularity:

* a span opens at a word start the mask allows (the question's sentences and answer type from
  :func:`ragkit.llm.source_spans.candidate_starts`; never at a function word; never at a rejected
  answer's words on a self-correction retry), with or without a leading space;
* it goes on word by word and may stop after any word, but never past the end of its clause
  (:func:`ragkit.llm.source_spans.crosses_clause`); where the clause ends it may keep the punctuation that
  ends it ("1884."), as the mask does.

One rule per word end says "what may follow here", shared by every span that reaches it, so the
grammar grows with the evidence's length, not with its number of spans.

The confidence reads the answer's token probabilities as the mask sees them: renormalised over the tokens
it allowed. A server lists them from before its grammar cut the vocabulary, so the request asks for each
token's top alternatives and :meth:`SpanGrammar.token_probabilities` renormalises over the allowed ones
among them. With the grammar, the 0.5B's served answer is the in-process span for 191 of 200 SQuAD dev
questions and 114 of 120 held-out ones, none declined.

Hand-written because no library turns "a span of these texts" into a grammar; llama.cpp's own JSON-schema
converter writes grammars for JSON, not for substrings.

Usage::

    grammar = SpanGrammar([e.content for e in evidence], starts=candidate_starts(question, texts))
    kwargs = {"max_tokens": 32, "extra_body": {"grammar": grammar.text}, "logprobs": True, "top_logprobs": 100}
    reply = generator.run(messages, generation_kwargs=kwargs)["replies"][0]
    grammar.token_probabilities(reply.meta["logprobs"])   # [0.9, 1.0, 0.75]: each token's share of what was allowed
"""

from __future__ import annotations

import bisect
import json
import math
from typing import Any, Iterable

from ragkit.llm.source_spans import FUNCTION_WORDS, _is_word_byte, crosses_clause, span_openings, word_at


def _literal(piece: bytes) -> str:
    return json.dumps(piece.decode("utf-8", "replace"))  # GBNF literals take JSON's escapes


def _punctuation_after(text: bytes, end: int) -> bytes:
    """The punctuation right after a word end, up to the next space or word ("." of "1884. He", "," of "Smiljan, in")."""
    stop = end
    while stop < len(text) and not _is_word_byte(text[stop]) and text[stop:stop + 1] not in (b" ", b"\t", b"\n", b"\r"):
        stop += 1
    return text[end:stop]


def _word_ends(text: bytes) -> list[int]:
    return [i for i in range(1, len(text) + 1) if _is_word_byte(text[i - 1]) and (i == len(text) or not _is_word_byte(text[i]))]


class SpanGrammar:
    """The spans :class:`~ragkit.llm.span_decoding.SpanMask` allows (word-aligned) over ``sources``: as GBNF
    (``text``; None when no span may open), as the set of strings it allows (``spans``), and the reading of a
    reply's token probabilities as the mask's would be (:meth:`token_probabilities`). ``starts``: (source
    index, byte offset) where a span may begin; when none of them opens a span, any word start may (as the mask does)."""

    def __init__(
        self, sources: list[str], starts: set[tuple[int, int]] | None = None, banned_prefixes: Iterable[str] = (),
        banned_first_words: Iterable[str] = FUNCTION_WORDS,
    ):
        encoded = [s.encode("utf-8") for s in sources]
        banned_words = {w.lower().encode("utf-8") for w in banned_first_words}
        banned = [p.strip().lower().encode("utf-8") for p in banned_prefixes if p and p.strip()]

        openings = span_openings(encoded, starts, banned, banned_words)
        if not openings and starts is not None:
            openings = span_openings(encoded, None, banned, banned_words)
        # one rule a reachable word end: "stop here, or take the separator and the next word of this clause"
        rules: dict[tuple[int, int], tuple[int, int] | None] = {}
        word_ends = [_word_ends(text) for text in encoded]
        alternatives: dict[str, None] = {}
        self.spans: set[str] = set()
        for s, start in openings:
            text, ends = encoded[s], word_ends[s]
            end = start + len(word_at(text, start))
            alternatives[f"{_literal(text[start:end])} e{s}x{end}"] = None
            while True:
                self.spans.add(text[start:end].decode("utf-8", "replace"))
                if (s, end) not in rules:
                    i = bisect.bisect_right(ends, end)
                    following = ends[i] if i < len(ends) else None
                    rules[(s, end)] = None if following is None or crosses_clause(text, end, following) else (s, following)
                if rules[(s, end)] is None:
                    # the clause ends here: the mask lets a span keep the punctuation that ends it ("1884.")
                    if tail := _punctuation_after(text, end):
                        self.spans.add(text[start:end + len(tail)].decode("utf-8", "replace"))
                    break
                end = rules[(s, end)][1]
        self.text: str | None = None
        if alternatives:
            body = [f'root ::= " "? ( {" | ".join(alternatives)} )']
            for (s, end), nxt in sorted(rules.items()):
                tail = _punctuation_after(encoded[s], end)
                rule = f'"" | {_literal(encoded[s][end:nxt[1]])} e{s}x{nxt[1]}' if nxt else (f'"" | {_literal(tail)}' if tail else '""')
                body.append(f"e{s}x{end} ::= {rule}")
            self.text = "\n".join(body)
        self._sorted = sorted(self.spans)

    def allows(self, reply: str) -> bool:
        """Whether ``reply`` is one of the grammar's sentences (the optional leading space aside)."""
        return reply.removeprefix(" ") in self.spans

    def token_probabilities(self, logprobs: Any) -> list[float]:
        """Each chosen token's probability among the tokens the grammar allowed at its step, from an OpenAI-style
        ``logprobs`` with ``top_logprobs`` ([] when a step's alternatives are missing or the reply left the grammar).

        A server reports the model's probabilities before its grammar cut the vocabulary; in-process the mask's
        :class:`~ragkit.llm.structured.TokenProbabilities` reads them after (the confidence is fitted on those).
        Renormalising over the allowed tokens among the top alternatives is that number, up to the allowed tokens
        outside the list (each less likely than the chosen one)."""
        steps = [t for part in (logprobs if isinstance(logprobs, list) else [logprobs]) if isinstance(part, dict)
                 for t in part.get("content") or [] if isinstance(t, dict)]
        written, out = "", []
        for step in steps:
            token, chosen = step.get("token"), step.get("logprob")
            # a list, not a dict by text: two tokens can render alike (the end-of-turn and end-of-text tokens as "")
            alternatives = [(a.get("token"), a.get("logprob")) for a in step.get("top_logprobs") or [] if isinstance(a, dict)]
            if not isinstance(token, str) or not isinstance(chosen, (int, float)) or not alternatives or not self._continues(written, token):
                return []
            if not any(t == token and isinstance(lp, (int, float)) and abs(lp - chosen) < 1e-6 for t, lp in alternatives):
                alternatives.append((token, chosen))
            allowed = [lp for t, lp in alternatives if isinstance(t, str) and isinstance(lp, (int, float)) and self._continues(written, t)]
            out.append(math.exp(chosen) / sum(math.exp(lp) for lp in allowed))
            written += token
        return out

    def _continues(self, written: str, token: str) -> bool:
        """Whether the grammar allows ``token`` after ``written`` ("" is the end of the reply)."""
        if token == "":
            return self.allows(written)
        text = written + token
        text = text[1:] if text.startswith(" ") else text
        i = bisect.bisect_left(self._sorted, text)  # the first span >= text starts with it, if any does
        return i < len(self._sorted) and self._sorted[i].startswith(text)

