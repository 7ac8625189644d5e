"""Is a message a question ragkit can search for at all? Decided before any step runs, without the LLM.

``invalid`` — with a message that says why — when the message is empty, longer than ragkit accepts,
not valid text, only punctuation or digits, or nonsense: letters, but not one word the documents use
and not one ordinary English word ("asdf qwer"). Everything else is ``valid``; whether a valid
question is ambiguous is the evidence's call (:mod:`ragkit.conversation.clarification`), later.

Usage::

    validate("???")                         # Validation(valid=False, reason="… only punctuation …")
    validate("asdkj qwpoe", index)          # invalid: no word of it appears in the documents
    validate("Where was Tesla born?", index)  # valid
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ragkit.eval.metrics import STOPWORDS
from ragkit.index.retrieval import QueryError, check_query

_QUESTION_WORDS = STOPWORDS | {"list", "name", "explain", "describe", "compare", "tell", "give", "show", "define", "summarize", "summarise", "why", "many", "much"}


@dataclass(frozen=True)
class Validation:
    valid: bool
    reason: str


def validate(message: str, index: Any = None) -> Validation:
    """``index`` (a :class:`~ragkit.index.store.RagIndex`): its BM25 vocabulary says which words the documents use."""
    try:
        text = check_query(message)
    except QueryError as exc:
        return Validation(False, str(exc))
    letters = re.findall(r"[^\W\d_]+", text)
    if not letters:
        what = "digits and punctuation" if re.search(r"\d", text) else "punctuation"
        return Validation(False, f"The message is only {what}; ask a question in words.")
    if any(w.lower() in _QUESTION_WORDS for w in letters):
        return Validation(True, "ok")
    if index is not None and len(index):
        try:
            known = index.term_weights(text)
        except Exception:  # a vocabulary we cannot read decides nothing
            return Validation(True, "ok")
        if not known:
            return Validation(False, "No word of the message appears in the documents, and it has no ordinary English word: "
                                     "it looks like noise. Ask a question in words.")
    return Validation(True, "ok")
