"""The words an agent's search may use, and the grammar pieces that hold it to them.

:class:`~ragkit.components.grammar_tool_calls.GrammarToolCallGenerator` decodes each agent step under a
grammar; this module gives it what the search inside that grammar may say: a question part in its own
wording (:func:`phrase_rules`), a name the sources gave for a two-hop question (:func:`source_names`),
the words still missing — each a character trie in GBNF (:func:`trie_gbnf`) so a long list stays cheap
per token — and whether a part was searched already (:func:`searched_part`). Pure functions of text, no
model, so each is tested alone.

Usage::

    phrase_rules([phrase_words("Where was Nikola Tesla born?")])  # ['phrase ::= "Where was Nikola Tesla born" | …']
    source_names(["… his grandfather Genghis Khan …"], exclude="Where was the founder of the Yuan dynasty born?")
"""

from __future__ import annotations

import os
from collections import defaultdict

from ragkit.eval.metrics import content_words
from ragkit.llm.structured import gbnf_literal

MAX_QUERY_WORDS = 12
FUNCTION_WORDS = (
    "a an the of in on at to for from by with and or is are was were be been who whom whose what when where which why how "
    "did does do not first last many much most year born name called"
).split()
_WORD_EDGE = "\"'.,;:!?()[]{}<>`*…"


def query_words(*texts: str, limit: int = 3000) -> list[str]:
    """The distinct words a search query may use: the texts' words (edge punctuation stripped, kept as
    written) and the function words, at most ``limit``; in order of appearance."""
    seen: dict[str, None] = {}
    for text in texts:
        for raw in (text or "").split():
            word = raw.strip(_WORD_EDGE)
            if word and not any(c in word for c in "()\n\\") and len(word) <= 40:
                seen.setdefault(word, None)
    for word in FUNCTION_WORDS:
        seen.setdefault(word, None)
    return list(seen)[:limit]


def phrase_words(text: str) -> list[str]:
    """``text``'s words in order, repeats kept, edge punctuation stripped ("colony?" → "colony")."""
    return [w for w in (raw.strip(_WORD_EDGE) for raw in text.split()) if w and not any(c in w for c in "()\n\\")]


def source_names(texts: list[str], exclude: str = "", limit: int = 400) -> list[str]:
    """Words of ``texts`` that look like names or figures (capitalised, or with a digit) and are not
    words of ``exclude`` (the question), in order of appearance: what a follow-up search can open with."""
    known = {w.lower() for w in phrase_words(exclude)} | set(FUNCTION_WORDS)
    out: dict[str, None] = {}
    for word in query_words(*texts):
        if word in FUNCTION_WORDS or word.lower() in known:
            continue
        if word[0].isupper() or any(c.isdigit() for c in word):
            out.setdefault(word, None)
    return list(out)[:limit]


def trie_gbnf(words: list[str]) -> str:
    """A GBNF expression matching exactly one of ``words``, as a character trie: at any point only the
    next characters some word has are open, which keeps llama.cpp's grammar check per token small."""
    groups: dict[str, list[str]] = defaultdict(list)
    ends_here = False
    for word in dict.fromkeys(words):
        if word:
            groups[word[0]].append(word[1:])
        else:
            ends_here = True
    alternatives = []
    for first, rests in sorted(groups.items()):
        if len(rests) == 1:
            alternatives.append(gbnf_literal(first + rests[0]))
            continue
        shared = os.path.commonprefix(rests)
        alternatives.append(f"{gbnf_literal(first + shared)} ({trie_gbnf([r[len(shared):] for r in rests])})")
    if ends_here:
        alternatives.append('""')
    return " | ".join(alternatives)


def phrase_starts(words: list[str]) -> range:
    """Where a search for a part may start: at its first word, or later as long as only function words
    ("What is the") are dropped. Allowed to drop content words too, the 0.5B searched "Genghis Khan" for
    "What is the Mongolian spelling of Genghis Khan" and "immune system" for "What field involves the
    study of the immune system" — too little to find the answer (4 of the 8 parts it lost to the
    decomposed workflow on 200 two-part questions, bench/results/planning.json)."""
    first = next((i for i, w in enumerate(words) if content_words(w)), 0)
    return range(min(first, max(len(words) - 2, 0)) + 1)


def phrase_rules(phrases: list[list[str]]) -> list[str]:
    """GBNF rules for ``phrase``: one of ``phrases`` (the question parts still open) in its own wording,
    its opening function words droppable (:func:`phrase_starts`). The end is fixed: a 0.5B allowed to
    stop anywhere searched "What is an example of" for a part about immunosuppressive drugs."""
    starts = []
    for words in phrases:
        for i in phrase_starts(words):
            if len(words) - i >= 2:
                starts.append(gbnf_literal(" ".join(words[i:])))
    return [f"phrase ::= {' | '.join(starts)}"] if starts else []


def searched_part(part: str, queries: list[str]) -> bool:
    """Whether one of ``queries`` (searches already run) was a search for ``part``: the end of its wording.
    Such a part is not offered again, whatever the coverage says: offered it, the 0.5B searched the same
    words until its steps ran out."""
    wording = " ".join(phrase_words(part)).lower()
    searched = (" ".join(phrase_words(query)).lower() for query in queries)
    return any(s and (wording == s or wording.endswith(" " + s)) for s in searched)
