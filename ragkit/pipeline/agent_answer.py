"""The end of a grammar-constrained agent run: the answer, per part, with a confidence.

:class:`~ragkit.components.grammar_tool_calls.GrammarToolCallGenerator` makes every agent step one
valid action and ends with ``answer()``; this module writes the answer and turns how the run ended
into an :class:`~ragkit.pipeline.result.AgenticResult`, the way the fixed workflow's results are:

* every part of the question (the rules' split, as the agent's prompt showed it) is answered by
  ragkit's answer step from the sources the agent found: the evidence sentence for that part
  (:class:`~ragkit.components.evidence_selector.EvidenceSelector`), then a grounded span copied from
  it (:class:`~ragkit.components.guarded_generator.GuardedGenerator`) — so an agent never answers with
  a fact that is not in a source. One LLM call per part; a part without sources is declined.
* exit reasons: ``answered`` (the agent chose ``answer()`` after searching, or nothing was left
  open), ``no_tool_call`` (it chose ``answer()`` before any search: no sources, a decline),
  ``max_steps`` (its steps ran out while it was still searching: answered from what it found),
  ``unreadable`` (the last step's reply could not be read: answered from what it found, the failure
  stays on the trace, so the confidence is capped under 0.5).

The confidence is ragkit's :class:`~ragkit.components.confidence.ConfidenceScorer` with the signals
the answer step gives (token probabilities, the evidence sentence, the answer's words against the
sources) — the same signals as the fixed workflow's grounded answer, so its calibration for the model
applies; ``details["confidence"]`` names the fit. A multi-part answer gets the lowest of its parts'.

Usage (inside :meth:`AgentRAG.ask <ragkit.pipeline.agent_mode.AgentRAG.ask>`)::

    finisher = AgentAnswerFinisher(chat_generator=llm, model="qwen2.5-coder-0.5b", index=index)
    result = finisher.finish(question, messages, exit_reason, trace, sources, details)
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from haystack import Document, tracing
from haystack.dataclasses import ChatMessage, ChatRole

from ragkit.components.answer_mode import AnswerModeSelector
from ragkit.components.confidence import ConfidenceScorer, is_decline, symbol
from ragkit.components.evidence_selector import EvidenceSelector
from ragkit.components.guarded_generator import GuardedGenerator
from ragkit.components.per_part import renumber
from ragkit.components.query_decomposer import split_by_rules
from ragkit.eval.metrics import content_words
from ragkit.llm.prompts import NO_ANSWER, answer_task, context_messages, evidence_messages, grounded_answer_task
from ragkit.llm.source_spans import evidence_for
from ragkit.pipeline.result import AgenticResult
from ragkit.pipeline.trace import Trace, degraded_steps, failed_steps, first_failure, record

def hop_order(searches: Sequence[tuple[str, list[Document]]]) -> list[Document]:
    """Every chunk the searches found, the latest search's first: as multi-hop holds a follow-up's new
    chunks before the first retrieval's, so the answer's evidence is looked for where the bridge led."""
    seen: dict[str, Document] = {}
    for _, found in reversed(searches):
        for document in found:
            seen.setdefault(document.id, document)
    return list(seen.values())


def sources_for(part: str, sources: list[Document], searches: Sequence[tuple[str, list[Document]]]) -> list[Document]:
    """The chunks to answer ``part`` from: those of the search that holds most of the part's content
    words (at least half of them), else every source. As in the decomposed workflow, a part's evidence
    sentence is then chosen among its own search's chunks, not among another part's."""
    words = set(content_words(part))
    best, best_overlap = None, 0
    for query, found in searches:
        overlap = len(words & set(content_words(query)))
        if found and overlap > best_overlap:
            best, best_overlap = found, overlap
    if best is None or best_overlap * 2 < max(len(words), 1):
        return list(sources)
    return list(best)


class AgentAnswerFinisher:
    def __init__(self, chat_generator: Any, model: str | None = None, index: Any = None, answer_mode: str = "auto", embedder: str = "all-MiniLM-L6-v2"):
        """``answer_mode``: "auto" picks grounded or free per part as the engine's rules do
        (:class:`~ragkit.components.answer_mode.AnswerModeSelector`), or fixed "grounded" / "free"."""
        self.answer_mode, self.embedder = answer_mode, embedder
        self._modes = AnswerModeSelector()
        self._evidence = EvidenceSelector(index=index, embedder=embedder) if index is not None else None
        self._answer = GuardedGenerator(chat_generator=chat_generator, max_tokens=96, step="answer", answer_mode="free" if answer_mode == "auto" else answer_mode)
        self._scorer = ConfidenceScorer(model=model)

    def finish(self, question: str, messages: list[ChatMessage], exit_reason: str | None, trace: Trace, sources: list[Document],
               details: Callable[[list[ChatMessage], Trace], dict[str, Any]], searches: Sequence[tuple[str, list[Document]]] = (),
               bridges: Sequence[str] = ()) -> AgenticResult:
        """``searches``: (query, chunks found) per search, so each part is answered from the search made for it.
        ``bridges``: the names a one-part question's follow-up search was built on. When it was followed, the
        answer is looked for in every chunk found, the follow-up's first (as multi-hop holds them), with the
        evidence sentence chosen for the follow-up query — the bridge and the words still unknown. Chosen
        for the question and the bridge together, as multi-hop's evidence step is, the sentence that names
        the bridge won and its answer was the bridge itself (bridge dev split: 3 of 12 right, then 4)."""
        last = messages[-1] if messages and messages[-1].is_from(ChatRole.ASSISTANT) else None
        meta = (last.meta or {}) if last is not None else {}
        if exit_reason == "max_agent_steps":
            reason = "max_steps"
        elif meta.get("agent_action") == "answer":
            reason = "answered"
        else:
            reason = "unreadable"
        result = AgenticResult(question=question, answer=NO_ANSWER, sources=list(sources), trace=trace)
        result.details.update(details(messages, trace))
        result.details.update(agent_exit=exit_reason, answer_chosen_by=meta.get("chosen_by") or reason)
        result.exit_reason = reason if reason != "answered" or result.details.get("agent") else "no_tool_call"
        parts = list(meta.get("question_parts") or split_by_rules(question)[0])
        degraded = degraded_steps(trace)
        if reason == "unreadable" and "agent_llm" not in degraded:
            degraded = [*degraded, "agent_llm"]
        answers = []
        for part in parts:  # each a traced step of its own: an Agent run has no component span open here
            with tracing.tracer.trace("haystack.component.run", tags={"haystack.component.name": "answer", "haystack.component.type": "GuardedGenerator"}):
                if len(parts) == 1 and bridges and len(searches) > 1:
                    answers.append(self._answer_part(part, hop_order(searches), degraded, list(sources), focus=searches[-1][0]))
                else:
                    answers.append(self._answer_part(part, sources_for(part, sources, searches), degraded, list(sources)))
        if len(parts) > 1:
            result.details["parts"] = [{"question": p, **a} for p, a in zip(parts, answers)]
            result.answer = NO_ANSWER if all(is_decline(a["answer"]) for a in answers) else "\n".join(f"{p} {a['answer']}" for p, a in zip(parts, answers))
        else:
            result.answer = answers[0]["answer"]
        result.answer_mode = answers[0].get("mode")
        result.declined = is_decline(result.answer)
        result.confidence = 0.0 if result.declined else min(a["confidence"] for a in answers if not is_decline(a["answer"]))
        result.symbol = symbol(result.confidence)
        result.p_lacks_answer = answers[0].get("p_lacks_answer")
        result.details["confidence"] = answers[0]["components"] if len(answers) == 1 else [a["components"] for a in answers]
        result.failed_steps = failed_steps(trace)
        result.error = first_failure(trace) if reason == "unreadable" else None
        result.warnings = [f"{s.name}: {w}" for s in trace.steps for w in s.warnings]
        if not result.declined and sources and len(parts) == 1:
            result.evidence = evidence_for(result.answer, sources)
        return result

    def _answer_part(self, part: str, sources: list[Document], degraded: list[str], every_source: list[Document], focus: str | None = None) -> dict[str, Any]:
        """The answer step for one part over ``sources`` (its search's chunks): answer (cited by its number
        among ``every_source``, the result's sources), confidence, its components. ``focus``: what the
        evidence sentence is chosen for (the part, or a follow-up search's query)."""
        if not sources:
            record(decision={"answered": "no sources: declined"})
            return {"answer": NO_ANSWER, "confidence": 0.0, "components": {}, "p_lacks_answer": 1.0}
        mode = self._modes.run(query=part)["mode"] if self.answer_mode == "auto" else self.answer_mode
        evidence, evidence_signals = None, None
        if mode == "grounded" and self._evidence is not None:
            selected = self._evidence.run(query=focus or part, documents=sources, mode=mode)
            evidence, evidence_signals = selected["evidence"], selected["signals"]
        # the prompt the engine's answer step sends (answer_prompt_builder): the evidence sentences, or the sources
        messages = evidence_messages(evidence, part) if evidence else context_messages(sources, grounded_answer_task(part) if mode == "grounded" else answer_task(part))
        out = self._answer.run(messages=messages, documents=sources, mode=mode, query=part, evidence=evidence)
        text = (out["replies"][0].text or "").strip() if out["ok"] else ""
        answer = renumber(text, sources, every_source) if text and not is_decline(text) else (text or NO_ANSWER)
        scored = self._scorer.run(documents=list(sources), replies=[answer], query=part, failed_steps=degraded if out["ok"] else [*degraded, "answer"],
                                  answer_tokens=out.get("tokens"), evidence_signals=evidence_signals)
        return {"answer": answer, "mode": out.get("mode", mode), "confidence": 0.0 if is_decline(answer) else scored["confidence"], "components": scored["components"],
                "p_lacks_answer": scored.get("p_lacks_answer")}
