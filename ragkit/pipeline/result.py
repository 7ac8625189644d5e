"""What one question produced — :class:`AgenticResult` — and how it is read off a graph run.

:func:`result_from_outputs` turns ``Pipeline.run``'s outputs (and the trace collected meanwhile)
into the object users read: answer, sources, confidence, route, exit reason, corrections, trace.
Exit reasons: ``needs_clarification`` (the question was asked back: ``clarification`` holds the
options), ``no_retrieval`` (the router's direct branch), ``no_context`` (nothing retrieved or
everything graded out), the self-correction loop's ``supported`` / ``max_corrections`` /
``unknown``, ``answer_failed`` (every answer call failed: never reported as supported) and
``pipeline_error`` (the graph itself raised: the error is on the trace, the confidence is 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from haystack import Document

from ragkit.components.confidence import is_decline
from ragkit.llm.prompts import NO_ANSWER, reply_text
from ragkit.llm.source_spans import evidence_for
from ragkit.pipeline.trace import Trace, failed_steps, first_failure

ANSWER_STEPS = ("answer", "direct_answer")


def answer_failed(trace: Trace) -> bool:
    """Every answer call failed (a failed correction retry that kept the first answer is not this)."""
    answers = [s for s in trace.steps if s.name in ANSWER_STEPS]
    return bool(answers) and all(s.error or s.fallbacks for s in answers)


@dataclass
class AgenticResult:
    question: str
    answer: str
    sources: list[Document]
    route: str | None = None
    confidence: float | None = None
    symbol: str = ""
    declined: bool = False
    exit_reason: str | None = None
    corrections: int = 0
    trace: Trace = field(default_factory=Trace)
    details: dict[str, Any] = field(default_factory=dict)  # each step's extra output (grading, routing, ...)
    seconds: float = 0.0
    p_lacks_answer: float | None = None  # with a decline: how sure the system is that the sources lack the answer
    failed_steps: list[str] = field(default_factory=list)  # steps whose LLM call failed or whose reply was unusable
    failed: bool = False  # no answer could be produced: every answer call failed or gave nothing usable
    error: str | None = None  # the first failure, "step: endpoint + cause", as one line for a CLI or API caller
    warnings: list[str] = field(default_factory=list)  # usable but degraded: "answer: reply cut at max_tokens=256"
    answer_mode: str | None = None  # "grounded" (a span copied from a source) or "free"
    evidence: dict[str, Any] | None = None  # where the answer stands verbatim in a source: source, start, end, sentence (span_decoding.evidence_for)
    rewritten_question: str | None = None  # a follow-up as it was searched and answered: rewritten with the history (and kept)
    clarification: dict[str, Any] | None = None  # the question was asked back: reason, options (label, scope), prompt
    first_token_s: float | None = None  # seconds from the question to the answer's first streamed token (streamed runs)

    def highlighted_sentence(self, mark: tuple[str, str] = ("**", "**")) -> str | None:
        """The evidence sentence with the answer's span between ``mark`` (markdown bold by default)."""
        e = self.evidence
        if not e:
            return None
        text = self.sources[e["source"] - 1].content or ""
        return text[e["sentence_start"]:e["start"]] + mark[0] + text[e["start"]:e["end"]] + mark[1] + text[e["end"]:e["sentence_end"]]


def read_follow_up(result: AgenticResult, out: dict[str, Any]) -> None:
    rewrite = out.get("follow_up", {}).get("rewrite")
    if rewrite:
        result.details["follow_up"] = rewrite
        if rewrite.get("kept") and rewrite.get("rewritten"):
            result.rewritten_question = rewrite["rewritten"]


def result_from_outputs(question: str, out: dict[str, Any], trace: Trace, features: Any) -> AgenticResult:
    if "per_part" in out:
        result = planned_result(question, out, trace)
        read_follow_up(result, out)
        return result
    result = AgenticResult(question=question, answer="", sources=[], trace=trace)
    read_follow_up(result, out)
    if "router" in out:
        result.route = out["router"].get("route")
        result.details["routing"] = out["router"].get("routing")
    if out.get("sql", {}).get("sql") or out.get("sql", {}).get("error"):
        sql = out["sql"]
        result.details["sql"] = {"sql": sql.get("sql"), "rows": sql.get("rows"), "value": sql.get("value"), "ok": sql.get("ok"), "error": sql.get("error")}
    if out.get("guard", {}).get("quarantined"):
        result.details["quarantined"] = out["guard"]["quarantined"]
    for step, key in (("hyde", "hyde"), ("rerank", "reranking"), ("grade", "grading"), ("self_correction", "hallucination")):
        if key in out.get(step, {}):
            result.details[key] = out[step][key]
    result.failed_steps = failed_steps(trace)
    result.failed = answer_failed(trace)
    result.error = first_failure(trace, prefer=ANSWER_STEPS if result.failed else ())
    result.warnings = [f"{s.name}: {w}" for s in trace.steps for w in s.warnings]

    if out.get("clarify", {}).get("clarification"):  # asked back: no answer yet, and no confidence in one
        result.clarification = out["clarify"]["clarification"]
        result.answer, result.exit_reason, result.confidence, result.symbol = result.clarification["prompt"], "needs_clarification", None, "?"
        return result
    if "direct_answer" in out:  # the router chose no retrieval: no sources, so no calibrated confidence
        result.answer, result.exit_reason = reply_text(out["direct_answer"].get("replies")) or NO_ANSWER, "no_retrieval"
        if result.failed:
            result.exit_reason = "answer_failed"
        return result
    if "collections" in out.get("select", {}):  # which part of the index was searched, and why
        result.details["collections"] = {"searched": out["select"]["collections"], **out["select"].get("selection", {})}
    if "filters" in out.get("intent", {}):
        result.details["filters"] = {"filters": out["intent"]["filters"], "reasons": out["intent"].get("reasons", [])}
    if "queries" in out.get("expand", {}):
        result.details["expansion"] = {"queries": out["expand"]["queries"], "terms": out["expand"].get("terms", []), "failed": out["expand"].get("failed")}
    if "fallback" in out.get("fallback", {}):  # which strategies ran, why, and how each ended (also when none recovered)
        result.details["fallback"] = out["fallback"]["fallback"]
    context = out.get("context_check", {})
    if "no_context" in context or "context" not in context:
        # Nothing to answer from: no LLM call, and a decline is never confident.
        result.answer, result.exit_reason, result.confidence, result.symbol, result.p_lacks_answer = NO_ANSWER, "no_context", 0.0, "○", 1.0
        return result
    result.sources = list(context["context"])
    if "documents" in out.get("multi_hop", {}):  # the follow-up retrievals' chunks come first; citations count them
        hop = out["multi_hop"]
        result.sources = list(hop["documents"])
        result.details["multi_hop"] = {"exit_reason": hop["exit_reason"], "hops": hop["hops"], "query": hop["query"]}
    result.answer_mode = answer_mode_of(out, trace)
    corrected = out.get("self_correction", {})
    if "replies" in corrected:
        result.answer = reply_text(corrected["replies"]) or NO_ANSWER
        if features.self_correction:
            result.exit_reason = corrected.get("exit_reason")
        result.corrections = int(corrected.get("corrections") or 0)
    else:
        result.answer = reply_text(out.get("answer", {}).get("replies")) or NO_ANSWER
    if result.failed:  # the answer's own call failed: say so, never "supported"
        result.exit_reason = "answer_failed"

    scored = out.get("confidence")
    if not scored:  # the scorer never ran: no number is better than a made-up one
        result.confidence, result.symbol = 0.0, "○"
        return result
    result.confidence, result.symbol = scored["confidence"], scored["symbol"]
    result.details["confidence"] = scored["components"]
    result.p_lacks_answer = scored["p_lacks_answer"]
    result.declined = is_decline(result.answer)
    if not result.declined and not result.failed:
        result.evidence = evidence_for(result.answer, result.sources)
    if scored["decline"] and features.confidence_floor > 0:
        result.declined = True
        result.details["declined_answer"] = result.answer
        result.answer = NO_ANSWER + " Closest sources: " + ", ".join(sorted({str(d.meta.get("source")) for d in result.sources}))
    return result


def planned_result(question: str, out: dict[str, Any], trace: Trace) -> AgenticResult:
    """A decomposed question: the merged answer, every part's own result under ``details["parts"]``."""
    merged = out["per_part"]
    parts = merged.get("parts") or []
    result = AgenticResult(question=question, answer=merged.get("answer") or NO_ANSWER, sources=list(merged.get("documents") or []), trace=trace)
    result.confidence, result.symbol, result.declined = merged.get("confidence", 0.0), merged.get("symbol", "○"), bool(merged.get("declined"))
    result.details["parts"] = parts
    result.details["decomposition"] = out.get("decompose", {}).get("decomposition")
    routes = {p["route"] for p in parts if p.get("route")}
    result.route = routes.pop() if len(routes) == 1 else None
    modes = {p["answer_mode"] for p in parts if p.get("answer_mode")}
    result.answer_mode = modes.pop() if len(modes) == 1 else ("mixed" if modes else None)
    result.corrections = sum(int(p.get("corrections") or 0) for p in parts)
    result.failed_steps = failed_steps(trace)
    result.failed = bool(parts) and all(p.get("failed") for p in parts)
    result.error = first_failure(trace, prefer=ANSWER_STEPS if result.failed else ())
    result.warnings = [f"{s.name}: {w}" for s in trace.steps for w in s.warnings]
    reasons = {p.get("exit_reason") for p in parts}
    result.exit_reason = reasons.pop() if len(reasons) == 1 else "parts: " + ", ".join(str(p.get("exit_reason")) for p in parts)
    if len(parts) == 1:
        result.evidence = parts[0].get("evidence")
    return result


def answer_mode_of(out: dict[str, Any], trace: Trace) -> str | None:
    """How the answer was written: the route policy's or the selector's choice, else what the answer step recorded."""
    if out.get("answer", {}).get("mode"):
        return out["answer"]["mode"]
    for step in reversed(trace.steps):
        if step.name == "answer":
            return step.decision.get("mode")
    return None


def failed_result(question: str, trace: Trace, error: BaseException) -> AgenticResult:
    """The graph raised (a bug, a component that broke its contract): an explicit failure, confidence 0."""
    result = AgenticResult(question=question, answer=NO_ANSWER, sources=[], trace=trace, confidence=0.0, symbol="○", exit_reason="pipeline_error", failed=True)
    result.failed_steps = failed_steps(trace) or [getattr(error, "component_name", None) or "pipeline"]
    result.details["error"] = f"{type(error).__name__}: {str(error)[:300]}"
    result.error = first_failure(trace) or f"{result.failed_steps[0]}: {result.details['error']}"
    return result
