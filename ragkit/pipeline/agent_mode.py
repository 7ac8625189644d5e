"""Agent mode: Haystack's ``Agent`` with a search tool (and a SQL tool) — the LLM decides when to search.

ragkit's engine (:class:`~ragkit.pipeline.engine.AgenticRAG`) is a *fixed workflow*: every step and
every bound is in the graph, the LLM only fills in steps. Agent mode is the contrasting configuration
learners ask about: one ``haystack.components.agents.Agent`` loop, bounded by ``max_agent_steps``, in
which the model chooses whether to call ``search`` (and ``count_cars``), with what query, how often,
and when to answer. :class:`AgentRAG` has the engine's ``ask(question) -> AgenticResult``, so the two
can be run side by side (``bench/agent_mode.py``).

Usage::

    rag = AgentRAG(index=RagIndex.load(".ragkit/index"), max_agent_steps=4, tools=("search", "sql"))
    result = rag.ask("Who placed Genghis Khan on the imperial records?")
    result.answer, result.exit_reason, result.sources, result.details["agent"], result.trace.table()

What is hand-written, and why:

* the tools (:func:`search_tool`, :func:`sql_tool`) are plain Haystack ``Tool`` s over ragkit's
  :class:`~ragkit.components.index_retriever.IndexRetriever` and
  :class:`~ragkit.components.sql_answerer.SqlAnswerer`; what they add is the *citation numbering*:
  within one question a chunk keeps its number across searches (``[4]`` in the second search is
  ``result.sources[3]``), which an Agent tool has no other way to know.
* the trace. Haystack's Agent traces through ``haystack.agent.*`` spans, which
  :class:`~ragkit.pipeline.trace.RagkitTracer` (built for component spans) does not collect, and runs
  tools in a thread pool where the tracer's thread-local trace is not visible. So each LLM call is a
  traced step of :class:`~ragkit.components.text_tool_calls.TextToolCallGenerator` (``agent_llm``),
  and each tool call opens its own step on the tracer from inside the tool (``search``,
  ``count_cars``), handed to the question's trace through a context variable (the Agent copies the
  context into its tool threads). An unknown tool name never reaches a tool: it is a fallback on the
  ``agent_llm`` step that asked for it.
* reading tool calls out of the model's text, and sending tool results back in a form the Qwen
  template renders: see :mod:`ragkit.components.text_tool_calls` (llama-cpp-python returns tool
  calls as text, and llama-cpp-haystack sends results as a role the template drops).

Exit reasons: ``answered`` (a text answer after at least one tool call), ``no_tool_call`` (the model
answered without calling any tool: no sources, the answer is the model's own), ``max_steps`` (still
calling tools when ``max_agent_steps`` ran out: no answer), ``failed`` (the LLM raised, the deadline
passed, or the final reply was a tool call that could not be read: ``failed=True``, ``error`` says
what). A tool that raises, unknown tool names and arguments that do not fit are answered to the model
as errors (Haystack's ``raise_on_tool_invocation_failure=False``) and show on the trace; the run goes on.

Confidence is 0.0 with ``○``: ragkit's confidence is calibrated on the fixed workflow's signals
(retrieval scores, grading, the hallucination judge); an agent's answer has none of them, and a number
without calibration would be made up. ``details["confidence"]`` says so.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from haystack import Document, tracing
from haystack.components.agents import Agent
from haystack.dataclasses import ChatMessage, ChatRole
from haystack.tools import Tool

from ragkit.components.confidence import is_decline
from ragkit.components.index_retriever import MODES, IndexRetriever
from ragkit.components.sql_answerer import SqlAnswerer
from ragkit.components.text_tool_calls import TextToolCallGenerator
from ragkit.config import RagConfig
from ragkit.index.store import RagIndex
from ragkit.llm.faults import question_deadline
from ragkit.llm.generators import build_chat_generator
from ragkit.llm.prompts import NO_ANSWER, fence
from ragkit.pipeline.features import Features
from ragkit.pipeline.result import AgenticResult
from ragkit.pipeline.trace import RagkitTracer, Step, Trace, active_trace, collecting_tracer, failed_steps, first_failure

__all__ = ["AgentRAG", "search_tool", "sql_tool", "AGENT_SYSTEM", "EXIT_REASONS"]

EXIT_REASONS = ("answered", "no_tool_call", "max_steps", "failed")
TOOL_NAMES = {"search": "search", "sql": "count_cars"}

# Short on purpose (every prompt token is paid on every step). The citation request sits at the end
# of each search result, next to where the answer is written: asked for in the system prompt, the
# 0.5B model answered "[1]" before searching (bench/agent_mode.py docstring).
AGENT_SYSTEM = "You are a helpful assistant. You know nothing about the user's documents: call the search function to look facts up before answering."
CITE_HINT = "Answer the question from these passages in one short sentence and cite the passage number, e.g. [1]."


@dataclass
class _AgentRun:
    """What one question's tools found, shared with the tool threads through :data:`_RUN`."""

    trace: Trace = field(default_factory=Trace)
    sources: list[Document] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

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


def search_tool(index: RagIndex | None = None, top_k: int = 3, mode: str = "hybrid", max_chars: int = 700, index_path: str | None = None, cite_hint: str | None = CITE_HINT) -> Tool:
    """A ``Tool`` named ``search``: ``query`` → the ``top_k`` chunks as ``[n] (title) text`` (each cut at
    ``max_chars`` characters, document text fenced), then ``cite_hint``. Inside :meth:`AgentRAG.ask` the
    chunks are recorded as the answer's sources and ``n`` is the chunk's number among them."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if top_k < 1 or max_chars < 50:
        raise ValueError("top_k must be >= 1 and max_chars >= 50")
    retriever = IndexRetriever(index=index, index_path=index_path, mode=mode)

    def search(**arguments: Any) -> str:
        with _ToolStep("search", "IndexRetriever") as step:
            query = arguments.get("query")
            if not isinstance(query, str) or not query.strip() or set(arguments) - {"query"}:
                raise ValueError(f"search takes one argument, query (a non-empty string); got {arguments!r}"[:300])
            documents = retriever.run(query=query.strip(), top_k=top_k)["documents"]
            run = _RUN.get()
            lines = []
            for i, doc in enumerate(documents):
                number = run.cite(doc) if run is not None else i + 1
                title = doc.meta.get("title") or doc.meta.get("source") or "untitled"
                lines.append(f"[{number}] ({fence(title, attribute=True)}) {fence(_short(doc.content or '', max_chars))}")
            if step.span is not None:
                step.span.set_content_tag("haystack.component.output", {"documents": documents})
            step.set(decision={"query": query.strip()[:80], "found": len(documents)})
            if not lines:
                return "No passages found."
            return "\n".join(lines + ([cite_hint] if cite_hint else []))

    return Tool(
        name="search",
        description="Search the user's documents. Returns the best matching passages, numbered.",
        parameters={"type": "object", "properties": {"query": {"type": "string", "description": "a few keywords to look for"}}, "required": ["query"]},
        function=search,
    )


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


class AgentRAG:
    """Haystack's ``Agent`` over ragkit's tools, asked like :class:`~ragkit.pipeline.engine.AgenticRAG`.

    ``features`` exists so the two are interchangeable in benchmarks and notebooks; agent mode has its
    own workflow, so only ``Features()`` (all toggles off) is accepted. ``tools``: ``"search"`` and/or
    ``"sql"``. ``max_agent_steps`` bounds the LLM calls (one per step); each step runs at most
    ``max_calls_per_reply`` tool calls, and each SQL call is one more LLM call (:attr:`call_budget`)."""

    def __init__(
        self,
        features: Features | None = None,
        index_dir: str | Path = ".ragkit/index",
        config: RagConfig | None = None,
        chat_generator: Any = None,
        index: RagIndex | None = None,
        max_agent_steps: int = 4,
        tools: Sequence[str] = ("search",),
        top_k: int = 3,
        mode: str = "hybrid",
        max_chars: int = 700,
        max_calls_per_reply: int = 2,
        sql_answerer: SqlAnswerer | None = None,
        system_prompt: str = AGENT_SYSTEM,
    ):
        self.features = (features or Features()).validate()
        if self.features != Features():
            raise ValueError("agent mode has its own workflow: pass Features() (or None); the feature toggles belong to AgenticRAG")
        if max_agent_steps < 1:
            raise ValueError("max_agent_steps must be >= 1")
        unknown = set(tools) - set(TOOL_NAMES)
        if unknown or not tools:
            raise ValueError(f"tools must be a non-empty selection of {sorted(TOOL_NAMES)}, got {list(tools)!r}")
        self.config = config or RagConfig()
        self.tool_names = tuple(tools)
        self.max_agent_steps, self.max_calls_per_reply = max_agent_steps, max_calls_per_reply
        self.chat_generator = chat_generator if chat_generator is not None else build_chat_generator(self.config.models)
        built: list[Tool] = []
        if "search" in tools:
            self.index = index if index is not None else RagIndex.load(index_dir, expected_embedder=self.config.models.embedder)
            built.append(search_tool(self.index, top_k=top_k, mode=mode, max_chars=max_chars))
        if "sql" in tools:
            self.sql_answerer = sql_answerer or SqlAnswerer(chat_generator=self.chat_generator)
            built.append(sql_tool(self.sql_answerer))
        self.tools = built
        self.llm = TextToolCallGenerator(self.chat_generator, max_calls_per_reply=max_calls_per_reply, step_name="agent_llm")
        self.agent = Agent(
            chat_generator=self.llm, tools=built, system_prompt=system_prompt, max_agent_steps=max_agent_steps,
            raise_on_tool_invocation_failure=False, tool_concurrency_limit=1,
        )
        self.tracer = RagkitTracer()
        self._warm = False

    @property
    def call_budget(self) -> int:
        """The most LLM calls one question may make: one per agent step, plus one per SQL tool call."""
        per_step = 1 + (self.max_calls_per_reply if "sql" in self.tool_names else 0)
        return self.max_agent_steps * per_step

    def warm_up(self) -> None:
        if not self._warm:
            self.agent.warm_up()
            if "sql" in self.tool_names:
                self.sql_answerer.warm_up()
            self._warm = True

    def ask(self, question: str) -> AgenticResult:
        """Never raises: a bad question, an LLM that raises or a deadline is a ``failed`` result."""
        started = time.perf_counter()
        run = _AgentRun()
        token = _RUN.set(run)
        try:
            with self.tracer.collect() as trace:
                run.trace = trace
                try:
                    from ragkit.index.retrieval import check_query

                    question = check_query(question)
                    self.warm_up()
                    with question_deadline(self.config.deadline_s):
                        out = self.agent.run(messages=[ChatMessage.from_user(question)])
                except Exception as exc:  # an explicit, traced failure, never a crash
                    result = self._failed(str(question), trace, run, exc)
                else:
                    result = self._result(question, out, trace, run)
        finally:
            _RUN.reset(token)
        result.seconds = time.perf_counter() - started
        return result

    # -- reading the run -----------------------------------------------------------------------------
    @staticmethod
    def tool_calls(messages: list[ChatMessage], max_chars: int = 160) -> list[dict[str, Any]]:
        """Every tool call the model made, in order: tool, arguments, a short result, error."""
        calls: list[dict[str, Any]] = []
        by_id: dict[str, dict[str, Any]] = {}
        for message in messages:
            if message.is_from(ChatRole.ASSISTANT):
                for call in message.tool_calls:
                    entry = {"tool": call.tool_name, "arguments": call.arguments, "result": None, "error": False}
                    calls.append(entry)
                    by_id[call.id or str(len(calls))] = entry
            elif message.is_from(ChatRole.TOOL):
                for res in message.tool_call_results:
                    entry = by_id.get(res.origin.id or "")
                    if entry is not None:
                        entry["result"], entry["error"] = _short(str(res.result), max_chars), bool(res.error)
        return calls

    def _details(self, messages: list[ChatMessage], trace: Trace) -> dict[str, Any]:
        calls = self.tool_calls(messages)
        formats = Counter(m.meta.get("tool_call_format") for m in messages if m.is_from(ChatRole.ASSISTANT) and m.tool_calls)
        unparsed = sum(1 for m in messages if m.is_from(ChatRole.ASSISTANT) and m.meta.get("tool_call_error"))
        return {
            "agent": calls,
            "agent_stats": {
                "llm_calls": trace.llm_calls, "tool_calls": len(calls), "tool_errors": sum(c["error"] for c in calls),
                "searched": any(c["tool"] == "search" and not c["error"] for c in calls),
                "unparsed_tool_calls": unparsed, "tool_call_formats": {str(k): v for k, v in formats.items()},
                "max_agent_steps": self.max_agent_steps,
            },
            "confidence": "none: ragkit's confidence is calibrated for the fixed workflow's signals; an agent answer has no calibration",
        }

    def _result(self, question: str, out: dict[str, Any], trace: Trace, run: _AgentRun) -> AgenticResult:
        messages = list(out.get("messages") or [])
        result = AgenticResult(question=question, answer=NO_ANSWER, sources=list(run.sources), trace=trace, confidence=0.0, symbol="○", answer_mode="free")
        result.details = self._details(messages, trace)
        result.details["agent_exit"] = out.get("exit_reason")
        last = messages[-1] if messages else None
        final_text = (last.text or "").strip() if last is not None and last.is_from(ChatRole.ASSISTANT) and not last.tool_calls else ""
        unreadable = last.meta.get("tool_call_error") if last is not None and last.is_from(ChatRole.ASSISTANT) else None
        if out.get("exit_reason") == "max_agent_steps":
            result.exit_reason = "max_steps"
        elif unreadable:
            result.exit_reason, result.failed = "failed", True
            result.details["unreadable_reply"] = final_text[:300]
        elif not final_text:
            result.exit_reason, result.failed = "failed", True
            result.details["unreadable_reply"] = ""
        else:
            result.answer = final_text
            result.exit_reason = "answered" if result.details["agent"] else "no_tool_call"
        result.declined = is_decline(result.answer)
        result.failed_steps = failed_steps(trace)
        result.error = first_failure(trace) if result.failed else None
        if result.failed and result.error is None:
            result.error = "agent_llm: the final reply was empty"
        result.warnings = [f"{s.name}: {w}" for s in trace.steps for w in s.warnings]
        if last is not None and last.meta.get("finish_reason") == "length":
            result.warnings.append("agent_llm: reply cut at max_tokens")
        if result.exit_reason == "answered" and not result.declined and result.sources:
            from ragkit.llm.source_spans import evidence_for

            result.evidence = evidence_for(result.answer, result.sources)
        return result

    def _failed(self, question: str, trace: Trace, run: _AgentRun, error: BaseException) -> AgenticResult:
        result = AgenticResult(question=question, answer=NO_ANSWER, sources=list(run.sources), trace=trace, confidence=0.0, symbol="○",
                               exit_reason="failed", failed=True, answer_mode="free")
        result.details = self._details([], trace)
        result.details["error"] = f"{type(error).__name__}: {str(error)[:300]}"
        result.failed_steps = failed_steps(trace) or ["agent"]
        result.error = first_failure(trace) or f"agent: {result.details['error']}"
        return result
