"""Agent mode's tools: ``search`` and ``count_cars`` (SQL) as Haystack ``Tool`` s, with ragkit's citation
numbering and trace steps, and the coverage line that tells a grammar-constrained agent what is still open.

Split from :mod:`ragkit.pipeline.agent_mode` (which explains why each piece is hand-written) so each
module stays short; import them from there or from here.
"""

from __future__ import annotations

import contextvars
import threading
from dataclasses import dataclass, field
from typing import Any, Sequence

from haystack import Document
from haystack.tools import Tool

from ragkit.components.index_retriever import MODES, IndexRetriever
from ragkit.components.sql_answerer import SqlAnswerer
from ragkit.index.store import RagIndex
from ragkit.llm.prompts import fence
from ragkit.pipeline.trace import Step, Trace, active_trace, collecting_tracer

ONE_PART_SEARCHES = 2  # a one-part question: its own search, then one follow-up for what the sources named

__all__ = ["search_tool", "sql_tool", "uncovered_line", "AGENT_SYSTEM", "CITE_HINT"]

# Short on purpose (every prompt token is paid on every step). The citation request sits at the end
# of each search result, next to where the answer is written: asked for in the system prompt, the
# 0.5B model answered "[1]" before searching (bench/agent_mode.py docstring).
AGENT_SYSTEM = "You are a helpful assistant. You know nothing about the user's documents: call the search function to look facts up before answering."
CITE_HINT = "Answer the question from these passages in one short sentence and cite the passage number, e.g. [1]."


@dataclass
class _AgentRun:
    """What one question's tools found, shared with the tool threads through :data:`_RUN`. ``parts``:
    the question's parts, whose coverage the search tool reports back (grammar mode)."""

    trace: Trace = field(default_factory=Trace)
    sources: list[Document] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    parts: list[str] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)  # searches run so far, as sent
    found: list[tuple[str, list[Document]]] = field(default_factory=list)  # (query, the chunks it found), per search
    bridges: list[str] = field(default_factory=list)  # names a follow-up search was built on (one-part questions)

    def cite(self, document: Document) -> int:
        """The document's citation number in this question (a chunk seen before keeps its number)."""
        with self.lock:
            for i, known in enumerate(self.sources):
                if known.id == document.id:
                    return i + 1
            self.sources.append(document)
            return len(self.sources)


_RUN: contextvars.ContextVar[_AgentRun | None] = contextvars.ContextVar("ragkit_agent_run", default=None)


class _ToolStep:
    """A tool call as a traced step: opened on the RagkitTracer from the tool's own thread (so
    ``record`` inside, e.g. the SQL answerer's LLM call, lands on it) and added to the question's trace."""

    def __init__(self, name: str, component: str):
        self.name, self.component = name, component
        self.run = _RUN.get()
        self.span: Any = None
        self._context: Any = None

    def __enter__(self) -> "_ToolStep":
        tracer = collecting_tracer()
        if self.run is not None and tracer is not None:
            self._context = tracer.trace("haystack.component.run", tags={"haystack.component.name": self.name, "haystack.component.type": self.component})
            self.span = self._context.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.span is None:
            return
        if exc is not None:
            self.span.set_tag("ragkit.error", f"{type(exc).__name__}: {str(exc)[:200]}")
        collected_here = active_trace() is not None  # called on the asking thread
        step: Step = self.span.to_step()
        self._context.__exit__(None, None, None)
        if not collected_here:
            self.run.trace.add(step)

    def set(self, **tags: Any) -> None:
        if self.span is not None:
            for key, value in tags.items():
                self.span.set_tag("ragkit." + key, value)


def _short(text: str, max_chars: int) -> str:
    text = " ".join((text or "").split())
    if len(text) <= max_chars:
        return text
    cut = text[:max_chars].rsplit(" ", 1)[0]
    return cut + "…"


def search_tool(index: RagIndex | None = None, top_k: int = 3, mode: str = "hybrid", max_chars: int = 700, index_path: str | None = None,
                cite_hint: str | None = CITE_HINT, coverage_threshold: float = 0.7, chat_generator: Any = None) -> Tool:
    """A ``Tool`` named ``search``: ``query`` → the ``top_k`` chunks as ``[n] (title) text`` (each cut at
    ``max_chars`` characters, document text fenced), then ``cite_hint``. Inside :meth:`AgentRAG.ask` the
    chunks are recorded as the answer's sources and ``n`` is the chunk's number among them; in grammar
    mode a last line names what the sources found so far still do not cover (:func:`uncovered_line`,
    multi-hop's coverage measure against ``coverage_threshold``). With a ``chat_generator``, a one-part
    question whose first search leaves it under that coverage gets the follow-up multi-hop would make
    (:meth:`~ragkit.components.multi_hop.MultiHopReasoner.follow_up`: the name the question only
    describes, copied from the evidence sentences, plus the words still missing — one LLM call), named
    on that last line for the agent to take or leave."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if top_k < 1 or max_chars < 50:
        raise ValueError("top_k must be >= 1 and max_chars >= 50")
    retriever = IndexRetriever(index=index, index_path=index_path, mode=mode)
    hop = None
    if chat_generator is not None:
        from ragkit.components.multi_hop import MultiHopReasoner

        hop = MultiHopReasoner(chat_generator, index=index, index_path=index_path, retrieval_mode=mode, coverage_threshold=coverage_threshold)

    def search(**arguments: Any) -> str:
        with _ToolStep("search", "IndexRetriever") as step:
            query = arguments.get("query")
            if not isinstance(query, str) or not query.strip() or set(arguments) - {"query"}:
                raise ValueError(f"search takes one argument, query (a non-empty string); got {arguments!r}"[:300])
            run = _RUN.get()
            if run is not None and run.parts and " ".join(query.lower().split()) in run.queries:  # grammar mode: never sent twice
                step.set(decision={"query": query.strip()[:80], "repeated": True})
                return "Already searched for exactly these words: nothing new. Search other words or answer."
            documents = retriever.run(query=query.strip(), top_k=top_k)["documents"]
            if run is not None:
                run.queries.append(" ".join(query.lower().split()))
                run.found.append((query.strip(), list(documents)))
            lines = []
            for i, doc in enumerate(documents):
                number = run.cite(doc) if run is not None else i + 1
                title = doc.meta.get("title") or doc.meta.get("source") or "untitled"
                lines.append(f"[{number}] ({fence(title, attribute=True)}) {fence(_short(doc.content or '', max_chars))}")
            if step.span is not None:
                step.span.set_content_tag("haystack.component.output", {"documents": documents})
            decision: dict[str, Any] = {"query": query.strip()[:80], "found": len(documents),
                                        "ids": [f"{d.id[:8]}:{(d.score or 0.0):.3f}" for d in documents]}
            status = None
            if run is not None and run.parts:
                status, covered = uncovered_line(retriever, run.parts, run.sources, coverage_threshold, run.queries)
                decision["coverage"] = covered
                if hop is not None and len(run.parts) == 1 and len(run.queries) == 1 and covered[0] < coverage_threshold and documents:
                    # multi-hop's gate and bridge: under the coverage threshold, the name the question describes
                    proposal = hop.follow_up(run.parts[0], list(run.sources))
                    decision["bridge"] = proposal["bridge"]
                    if proposal["query"] and " ".join(proposal["query"].lower().split()) not in run.queries:
                        from ragkit.components.grammar_tool_calls import FOLLOW_UP_PREFIX

                        run.bridges.append(proposal["bridge"])
                        status = f"{FOLLOW_UP_PREFIX} {proposal['query']}"
            step.set(decision=decision)
            if not lines:
                return "No passages found." + (f"\n{status}" if status else "")
            return "\n".join(lines + ([cite_hint] if cite_hint else []) + ([status] if status else []))

    return Tool(
        name="search",
        description="Search the user's documents. Returns the best matching passages, numbered.",
        parameters={"type": "object", "properties": {"query": {"type": "string", "description": "a few keywords to look for"}}, "required": ["query"]},
        function=search,
    )


def uncovered_line(retriever: IndexRetriever, parts: list[str], sources: list[Document], threshold: float, queries: Sequence[str] = ()) -> tuple[str, list[float]]:
    """What is still open after the searches so far, for the agent's next step. A part of the question is
    open while its coverage by the best single source (:func:`ragkit.index.coverage.coverage`,
    IDF-weighted) is under ``threshold`` *and* no search has looked for it yet (a query holding at
    least half of its content words, or the end of its wording): searched once, it is left to the answer, so the agent is never
    sent back to the same words. For a one-part question: its content words that no source contains,
    until :data:`ONE_PART_SEARCHES` searches were made."""
    from ragkit.components.agent_search_words import searched_part
    from ragkit.components.grammar_tool_calls import ALL_SEARCHED, UNCOVERED_PREFIX, WORDS_COVERED
    from ragkit.eval.metrics import content_words
    from ragkit.index.coverage import coverage, question_weights

    index = retriever._handle.get()
    chunk_terms = index.terms([d.content or "" for d in sources]) if sources else []
    covered = [round(coverage(question_weights(index, part), chunk_terms), 3) for part in parts]
    searched_words = [set(content_words(q)) for q in queries]
    if len(parts) > 1:
        def searched(part: str) -> bool:
            words = set(content_words(part))
            return searched_part(part, list(queries)) or any(len(words & q) * 2 >= max(len(words), 1) for q in searched_words)

        open_parts = [f"part {i} ({part.rstrip('?')})" for i, (part, c) in enumerate(zip(parts, covered), 1) if c < threshold and not searched(part)]
        return (f"{UNCOVERED_PREFIX} {', '.join(open_parts)}." if open_parts else ALL_SEARCHED), covered
    if len(queries) >= ONE_PART_SEARCHES:  # the question's own search and one follow-up, as multi-hop's bound
        return ALL_SEARCHED, covered
    # only what the sources hold: a first search in the question's own words would otherwise count
    # every word as found and the follow-up would never be offered
    seen = set(content_words(" ".join(d.content or "" for d in sources)))
    missing = [w for w in dict.fromkeys(content_words(parts[0])) if w not in seen]
    if covered[0] >= threshold or not missing:
        return WORDS_COVERED, covered
    return f"{UNCOVERED_PREFIX} {' '.join(missing[:8])}.", covered


def sql_tool(answerer: SqlAnswerer) -> Tool:
    """A ``Tool`` named ``count_cars``: ``question`` → the :class:`SqlAnswerer`'s result sentence (cited
    like a search result inside :meth:`AgentRAG.ask`) or ``SQL failed: <error>``."""
    tables = ", ".join(answerer.tables)

    def count_cars(**arguments: Any) -> str:
        with _ToolStep("count_cars", "SqlAnswerer") as step:
            question = arguments.get("question")
            if not isinstance(question, str) or not question.strip() or set(arguments) - {"question"}:
                raise ValueError(f"count_cars takes one argument, question (a non-empty string); got {arguments!r}"[:300])
            out = answerer.run(query=question.strip())
            if not out["ok"] or not out["documents"]:
                step.set(error=f"sql: {out['error']}")
                return f"SQL failed: {out['error']}"
            document = out["documents"][0]
            run = _RUN.get()
            number = run.cite(document) if run is not None else 1
            return f"[{number}] {fence(document.content)}"

    return Tool(
        name="count_cars",
        description=f"Count, sum, average or compare numbers in the table(s) {tables} with one SQL query. Use for 'how many' questions about the table.",
        parameters={"type": "object", "properties": {"question": {"type": "string", "description": "the counting question in words"}}, "required": ["question"]},
        function=count_cars,
    )
