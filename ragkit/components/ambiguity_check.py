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
from ragkit.index.handle import IndexHandle
from ragkit.index.store import RagIndex
from ragkit.pipeline.trace import record


@component
class AmbiguityCheck:
    def __init__(self, ratio: float = DEFAULT_RATIO, max_options: int = MAX_OPTIONS, index: RagIndex | None = None, index_path: str | None = None):
        """``index`` / ``index_path`` (optional): lets a generic reference ("the city") be found anywhere in a
        contender's document, not only in the chunks retrieved (chosen on squad_dev half A)."""
        if not 0.0 < ratio <= 1.0:
            raise ValueError("ratio must be in (0, 1]")
        if not 2 <= max_options <= 9:
            raise ValueError("max_options must be between 2 and 9")
        self.ratio, self.max_options = ratio, max_options
        self._handle = IndexHandle(index, index_path) if index is not None or index_path is not None else None
        self._texts: dict[str, str] | None = None

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, ratio=self.ratio, max_options=self.max_options, index_path=self._handle.index_path if self._handle else None)

    def source_text(self, source: str) -> str:
        """A source's chunks joined, lower-cased (built once for the whole index, on first use)."""
        if self._handle is None:
            return ""
        if self._texts is None:
            joined: dict[str, list[str]] = {}
            for chunk in self._handle.get().chunks.values():
                joined.setdefault(str(chunk.meta.get("source")), []).append((chunk.content or "").lower())
            self._texts = {src: "\n".join(parts) for src, parts in joined.items()}
        return self._texts.get(source, "")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "AmbiguityCheck":
        return default_from_dict(cls, data)

    @component.output_types(documents=list[Document], clarification=dict)
    def run(self, query: str, documents: list[Document], scope: Optional[dict] = None) -> dict[str, Any]:
        """``documents`` when the question is clear (or ``scope`` was chosen); else ``clarification``."""
        if scope:
            record(decision={"clarify": "scope chosen: " + ", ".join(f"{k} {v}" for k, v in scope.items())[:120]})
            return {"documents": documents}
        found = find_ambiguity(query, documents, ratio=self.ratio, max_options=self.max_options,
                               source_text=self.source_text if self._handle is not None else None)
        if not found.ambiguous:
            record(decision={"clarify": "clear", "why": found.reason})
            return {"documents": documents}
        record(decision={"clarify": "ask", "why": found.reason, "options": " | ".join(o.label for o in found.options)})
        return {"clarification": found.to_dict(query)}
