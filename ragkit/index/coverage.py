"""How much of a question the retrieved chunks cover, by the index's own term statistics (no LLM).

The coverage check of the fallback retriever and of multi-hop planning: the IDF-weighted share of
the question's content terms that the best single chunk contains. A term the corpus never saw gets
the highest IDF there is — no chunk can contain it, and a question about something the documents
never mention is what a fallback is for.

Usage::

    weights = question_weights(index, "Where was Nikola Tesla born?")
    coverage(weights, index.terms([d.content for d in documents]))    # 0.0 … 1.0
"""

from __future__ import annotations

import math

from ragkit.eval.metrics import STOPWORDS
from ragkit.index.store import RagIndex


def coverage(question_weights: dict[str, float], chunk_terms: list[set[str]]) -> float:
    """IDF-weighted share of the question's terms found in the best single chunk (0 without chunks)."""
    total = sum(question_weights.values())
    if not total or not chunk_terms:
        return 0.0
    return max(sum(w for t, w in question_weights.items() if t in terms) for terms in chunk_terms) / total


def question_weights(index: RagIndex, question: str) -> dict[str, float]:
    """IDF of each of the question's terms; a term the corpus never saw gets the highest IDF there is
    (no chunk can contain it, and a question about something the documents never mention is the case
    a fallback is for)."""
    content = " ".join(w for w in question.split() if w.lower().strip("?!.,;:\"'()") not in STOPWORDS)  # "where", "was" are no evidence
    known = index.term_weights(content)
    unseen = math.log((len(index) + 1) / 0.5)
    return {t: known.get(t, unseen) for t in (index.terms([content]) or [set()])[0] if t}
