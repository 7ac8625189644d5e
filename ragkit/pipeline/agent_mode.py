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

Two ways the model's tool calls are read (``tool_calls``):

* ``"grammar"`` (the default) — every step is decoded under a grammar built from the tools and the
  question (:class:`~ragkit.components.grammar_tool_calls.GrammarToolCallGenerator`): ``search`` with
  the open part's own words, ``sql``, or ``answer()``; each part is then answered by ragkit's answer
  step from its own search's chunks, with a calibrated confidence (:mod:`ragkit.pipeline.agent_answer`).
  A backend that cannot take a grammar or a JSON schema is refused at construction; ``"validated"``
  checks the same actions in Python only (mock generators, trusted backends).
* ``"text"`` — the model writes tool calls as free text (:mod:`ragkit.components.text_tool_calls`), the
  way it was first measured; its answers have confidence 0.0 with ``○``: nothing calibrates a
  free-text agent answer, and ``details["confidence"]`` says so.

The agent's tools and the coverage line live in :mod:`ragkit.pipeline.agent_tools`.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

from haystack.components.agents import Agent
from haystack.dataclasses import ChatMessage, ChatRole
from haystack.tools import Tool

from ragkit.components.confidence import is_decline
from ragkit.components.grammar_tool_calls import GrammarToolCallGenerator
from ragkit.components.query_decomposer import split_by_rules
from ragkit.components.sql_answerer import SqlAnswerer
from ragkit.components.text_tool_calls import TextToolCallGenerator
from ragkit.config import RagConfig
from ragkit.index.store import RagIndex
from ragkit.index.stores import load_index
from ragkit.llm.faults import question_deadline
from ragkit.llm.generators import build_chat_generator
from ragkit.llm.prompts import NO_ANSWER
from ragkit.pipeline.agent_answer import AgentAnswerFinisher
from ragkit.pipeline.features import Features
from ragkit.pipeline.result import AgenticResult
from ragkit.pipeline.trace import RagkitTracer, Trace, failed_steps, first_failure

__all__ = ["AgentRAG", "search_tool", "sql_tool", "uncovered_line", "AGENT_SYSTEM", "CITE_HINT", "EXIT_REASONS"]

EXIT_REASONS = ("answered", "no_tool_call", "max_steps", "unreadable", "failed")
TOOL_CALL_MODES = ("grammar", "validated", "text")
MAX_PARTS = 4  # the rules' split (split_by_rules) gives at most this many parts, each answered once
TOOL_NAMES = {"search": "search", "sql": "count_cars"}

from ragkit.pipeline.agent_tools import AGENT_SYSTEM, CITE_HINT, _RUN, _AgentRun, _short, search_tool, sql_tool, uncovered_line


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
        top_k: int = 5,
        mode: str = "hybrid",
        max_chars: int = 400,
        max_calls_per_reply: int = 2,
        sql_answerer: SqlAnswerer | None = None,
        system_prompt: str | None = None,
        tool_calls: str = "grammar",
    ):
        self.features = (features or Features()).validate()
        if self.features != Features():
            raise ValueError("agent mode has its own workflow: pass Features() (or None); the feature toggles belong to AgenticRAG")
        if max_agent_steps < 1:
            raise ValueError("max_agent_steps must be >= 1")
        if tool_calls not in TOOL_CALL_MODES:
            raise ValueError(f"tool_calls must be one of {TOOL_CALL_MODES}, not {tool_calls!r}")
        unknown = set(tools) - set(TOOL_NAMES)
        if unknown or not tools:
            raise ValueError(f"tools must be a non-empty selection of {sorted(TOOL_NAMES)}, got {list(tools)!r}")
        self.config = config or RagConfig()
        self.tool_names = tuple(tools)
        self.tool_call_mode = tool_calls
        self.max_agent_steps, self.max_calls_per_reply = max_agent_steps, max_calls_per_reply
        self.chat_generator = chat_generator if chat_generator is not None else build_chat_generator(self.config.models)
        built: list[Tool] = []
        if "search" in tools:
            self.index = index if index is not None else load_index(self.config.store or index_dir, expected_embedder=self.config.models.embedder)
            # grammar mode: the search tool proposes a two-hop question's follow-up with the model (one call)
            bridge_llm = self.chat_generator if tool_calls != "text" else None
            built.append(search_tool(self.index, top_k=top_k, mode=mode, max_chars=max_chars, chat_generator=bridge_llm))
        if "sql" in tools:
            self.sql_answerer = sql_answerer or SqlAnswerer(chat_generator=self.chat_generator)
            built.append(sql_tool(self.sql_answerer))
        self.tools = built
        if tool_calls == "text":
            self.llm: Any = TextToolCallGenerator(self.chat_generator, max_calls_per_reply=max_calls_per_reply, step_name="agent_llm")
            system_prompt = system_prompt or AGENT_SYSTEM
        else:  # raises here, not at the first question, when the backend cannot take the constraint
            self.llm = GrammarToolCallGenerator(self.chat_generator, constraint="auto" if tool_calls == "grammar" else "validate")
            self.finisher = AgentAnswerFinisher(self.chat_generator, model=self.config.models.llm, index=getattr(self, "index", None), embedder=self.config.models.embedder)
        self.agent = Agent(
            chat_generator=self.llm, tools=built, system_prompt=system_prompt, max_agent_steps=max_agent_steps,
            raise_on_tool_invocation_failure=False, tool_concurrency_limit=1,
        )
        self.tracer = RagkitTracer()
        self._warm = False

    @property
    def call_budget(self) -> int:
        """The most LLM calls one question may make: one per agent step, plus one per SQL tool call, plus
        (grammar mode) one answer per part of the question, at most :data:`MAX_PARTS` parts, and the bridge
        the search tool asks for once on a one-part question."""
        per_step = 1 + ((self.max_calls_per_reply if self.tool_call_mode == "text" else 1) if "sql" in self.tool_names else 0)
        bridge = 1 if "search" in self.tool_names else 0  # a one-part question's follow-up, proposed once by the search tool
        return self.max_agent_steps * per_step + (0 if self.tool_call_mode == "text" else MAX_PARTS + bridge)

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
        if self.tool_call_mode != "text" and isinstance(question, str):
            run.parts = split_by_rules(question.strip(), max_parts=MAX_PARTS)[0] if question.strip() else []
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
                    if self.tool_call_mode == "text":
                        result = self._result(question, out, trace, run)
                    else:
                        result = self.finisher.finish(question, list(out.get("messages") or []), out.get("exit_reason"), trace, run.sources, self._details,
                                                      run.found, bridges=run.bridges)
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
