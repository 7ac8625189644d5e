"""AmbiguityCheck: before answering, is the question about one thing in these documents — or should
it be asked back?

It reads the retrieved chunks, not the model's guess (:func:`ragkit.conversation.clarification.find_ambiguity`):
when two or more documents about different subjects contend for the question ("Where was
Washington born?" over a corpus with George Washington and Washington state) and the question names
none of them apart, it emits ``clarification`` — the reason and 2–4 options worded from the
documents' titles, each with the ``scope`` (a source filter) that answers it — and nothing else, so
the graph ends there without an LLM call. Otherwise the documents pass through on ``documents``.

With a ``scope`` (the person already chose: :class:`~ragkit.conversation.session.ChatSession` sends
the chosen option's) the check passes: the retrieval was already narrowed to that scope.

No LLM, a few microseconds. ``ratio`` is how close the second subject's best chunk must score to the
first's to contend (0.3, chosen on squad_dev half A of the clarification set, bench/results/conversation.json:
the check that the question names no contender apart keeps precision up at a low ratio).

Usage::

    check = AmbiguityCheck()
    out = check.run(query="Where was Washington born?", documents=retrieved)
    out.get("clarification")   # {"question", "reason", "options": [{"label", "scope", ...}], "prompt"}
    out.get("documents")       # when the question is clear
"""

from __future__ import annotations

from typing import Any, Optional

from haystack import Document, component, default_from_dict, default_to_dict

from ragkit.conversation.clarification import DEFAULT_RATIO, MAX_OPTIONS, find_ambiguity
from ragkit.pipeline.trace import record


@component
class AmbiguityCheck:
    def __init__(self, ratio: float = DEFAULT_RATIO, max_options: int = MAX_OPTIONS):
        if not 0.0 < ratio <= 1.0:
            raise ValueError("ratio must be in (0, 1]")
        if not 2 <= max_options <= 9:
            raise ValueError("max_options must be between 2 and 9")
        self.ratio, self.max_options = ratio, max_options

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, ratio=self.ratio, max_options=self.max_options)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "AmbiguityCheck":
        return default_from_dict(cls, data)

    @component.output_types(documents=list[Document], clarification=dict)
    def run(self, query: str, documents: list[Document], scope: Optional[dict] = None) -> dict[str, Any]:
        """``documents`` when the question is clear (or ``scope`` was chosen); else ``clarification``."""
        if scope:
            record(decision={"clarify": "scope chosen: " + ", ".join(f"{k} {v}" for k, v in scope.items())[:120]})
            return {"documents": documents}
        found = find_ambiguity(query, documents, ratio=self.ratio, max_options=self.max_options)
        if not found.ambiguous:
            record(decision={"clarify": "clear", "why": found.reason})
            return {"documents": documents}
        record(decision={"clarify": "ask", "why": found.reason, "options": " | ".join(o.label for o in found.options)})
        return {"clarification": found.to_dict(query)}
