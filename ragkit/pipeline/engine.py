"""``AgenticRAG``: the components assembled from one :class:`~ragkit.pipeline.features.Features` config.

Order of steps (each only when its toggle is on): route → embed → HyDE → retrieve → rerank →
grade → answer → hallucination check → self-correction → confidence. Every step runs inside a
Haystack tracing span named like Pipeline's own (``haystack.component.run``), so the
:class:`~ragkit.pipeline.trace.RagkitTracer` that traces user pipelines also traces this one, and a step
that raises is recorded and switched off for this question instead of failing it.

With the hallucination check on, answering and checking run as one Haystack pipeline loop
(:class:`~ragkit.components.self_correction.SelfCorrectingAnswerer`): a ``ConditionalRouter``
sends the answer back for a stricter retry while its support score is under the threshold and
corrections remain, and records the exit reason (``supported``, ``max_corrections``,
``no_context``, ``unknown``). Its inner components appear in the trace as their own steps.

Usage::

    rag = AgenticRAG(Features(grading=True, hallucination_check=True), index_dir=".ragkit/index")
    result = rag.ask("How does lru_cache differ from cache?")
    result.answer, result.confidence, result.symbol, result.route, result.trace.table()
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from haystack import Document, tracing
from haystack.dataclasses import ChatMessage

from ragkit.components.confidence import ConfidenceScorer, is_decline
from ragkit.components.document_grader import DocumentGrader
from ragkit.components.hallucination_detector import HallucinationDetector, support_threshold_for
from ragkit.components.hyde import HyDEEmbedder
from ragkit.components.query_router import QueryRouter
from ragkit.components.reranker import Reranker
from ragkit.components.self_correction import SelfCorrectingAnswerer
from ragkit.config import RagConfig
from ragkit.pipeline.features import Features
from ragkit.index.store import RagIndex
from ragkit.llm.generators import build_chat_generator
from ragkit.llm.prompts import NO_ANSWER, answer_task, context_messages
from ragkit.index.retrieval import HybridRetriever, check_query
from ragkit.index.sentence_vectors import SentenceVectorCache
from ragkit.llm.structured import answer_constraint, call_llm, parse_answer
from ragkit.pipeline.trace import RagkitTracer, Trace

DIRECT_SYSTEM = "Answer briefly and helpfully."
TOKEN_SIGNALS = ("token_p_mean", "token_p_min", "token_p_first")


def answer_token_signals(trace: Trace) -> dict[str, float]:
    """The final answer's token probabilities, as the answer step recorded them (the last one to run)."""
    for step in reversed(trace.steps):
        if step.name == "answer" and any(k in step.decision for k in TOKEN_SIGNALS):
            return {k: float(step.decision[k]) for k in TOKEN_SIGNALS if k in step.decision}
    return {}


def failed_steps(trace: Trace) -> list[str]:
    """Steps that raised, or whose LLM call failed or gave an unusable reply (each named once, in order)."""
    return list(dict.fromkeys(s.name for s in trace.steps if s.error or s.fallbacks))


def answer_failed(trace: Trace) -> bool:
    """Every answer call failed (a failed correction retry that kept the first answer is not this)."""
    answers = [s for s in trace.steps if s.name == "answer"]
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


class AgenticRAG:
    def __init__(self, features: Features | None = None, index_dir: str | Path = ".ragkit/index", config: RagConfig | None = None, generator=None, index: RagIndex | None = None):
        self.features = (features or Features()).validate()
        self.config = config or RagConfig()
        self.index = index if index is not None else RagIndex.load(index_dir, expected_embedder=self.config.models.embedder)
        self.generator = generator if generator is not None else build_chat_generator(self.config.models)
        self.retriever = HybridRetriever(self.index, self.config.models, merge_threshold=self.config.index.merge_threshold, sparse_weight=self.config.hybrid_sparse_weight)
        self.tracer = RagkitTracer()
        self._components: dict[str, Any] = {}
        self._sentence_vectors_ready = False

    def prepare_sentence_vectors(self, progress: bool = False) -> dict[str, int]:
        """Embed every sentence of the index once for the bi-encoder reranker (kept next to a saved
        index, so later processes only load them); runs on the first reranked question."""
        reranker = self._component("reranker")
        cache = reranker.sentence_cache()
        path = SentenceVectorCache.file_for(self.index.path, cache.embedder_model) if self.index.path else None
        loaded = cache.load(path) if path else 0
        embedded = reranker.prepare(list(self.index.chunks.values()), progress=progress)
        if embedded and path:
            try:
                cache.save(path)
            except OSError:  # a read-only index folder: the vectors stay in memory for this process
                pass
        self._sentence_vectors_ready = True
        return {"loaded": loaded, "embedded": embedded, "cached": len(cache)}

    @property
    def support_threshold(self) -> float:
        """The hallucination check's cut: the configured one, else the judge's calibrated one."""
        f = self.features
        return f.support_threshold if f.support_threshold is not None else support_threshold_for(f.hallucination_backend, self.config.models.llm)

    # -- components, built on first use -------------------------------------------------------
    def _component(self, name: str):
        if name not in self._components:
            f, embedder = self.features, self.config.models.embedder
            self._components[name] = {
                "router": lambda: QueryRouter(backend=f.router_backend, generator=self.generator if f.router_backend == "llm" else None, embedder_model=embedder),
                "hyde": lambda: HyDEEmbedder(generator=self.generator, embedder_model=embedder, n_passages=f.hyde_passages),
                "reranker": lambda: Reranker(backend=f.rerank_backend, model=f.rerank_model, generator=self.generator if f.rerank_backend == "llm" else None),
                "grader": lambda: DocumentGrader(backend=f.grader_backend, generator=self.generator if f.grader_backend == "llm" else None, threshold=f.grade_threshold, embedder_model=embedder),
                "corrector": lambda: SelfCorrectingAnswerer(
                    generator=self.generator,
                    detector=HallucinationDetector(backend=f.hallucination_backend, generator=self.generator if f.hallucination_backend == "llm_judge" else None, hhem_model=f.hhem_model, threshold=self.support_threshold),
                    threshold=self.support_threshold,
                    max_corrections=f.max_corrections if f.self_correction else 0,
                    max_tokens=self.config.models.max_new_tokens,
                ),
                "confidence": lambda: ConfidenceScorer(floor=f.confidence_floor, model=self.config.models.llm),
            }[name]()
        return self._components[name]

    def _step(self, name: str, fn, inputs: dict[str, Any], component_type: str):
        """Run one step in a tracing span; on an exception record it and return None."""
        with tracing.tracer.trace("haystack.component.run", tags={"haystack.component.name": name, "haystack.component.type": component_type}) as span:
            span.set_content_tag("haystack.component.input", inputs)
            try:
                out = fn(**inputs)
            except Exception as exc:  # a broken step is switched off for this question, not fatal
                span.set_tag("ragkit.error", f"{type(exc).__name__}: {str(exc)[:200]}")
                span.set_tag("ragkit.fallback", f"{name}: step failed, skipped ({type(exc).__name__})")
                return None
            span.set_content_tag("haystack.component.output", out if isinstance(out, dict) else {"value": out})
            return out

    def _record_failure(self, name: str, exc: Exception) -> None:
        with tracing.tracer.trace("haystack.component.run", tags={"haystack.component.name": name, "haystack.component.type": "Pipeline"}) as span:
            span.set_tag("ragkit.error", f"{type(exc).__name__}: {str(exc)[:200]}")
            span.set_tag("ragkit.fallback", f"{name}: failed, answered without it ({type(exc).__name__})")

    def _retrieve(self, query: str, depth: int, mode: str, embedding) -> dict[str, Any]:
        found = self.retriever.retrieve(query, top_k=depth, mode=mode, query_embedding=embedding)
        return {"documents": found.documents, "signals": found.signals}

    def _answer(self, question: str, documents: list[Document]) -> str:
        answer = self._step("answer", lambda messages: self._generate(messages, "answer"), {"messages": context_messages(documents, answer_task(question))}, "ChatGenerator")
        return answer if answer else NO_ANSWER

    def _generate(self, messages: list[ChatMessage], step: str) -> str | None:
        kwargs = {"max_tokens": self.config.models.max_new_tokens, "temperature": 0.0, **answer_constraint(self.generator)}
        reply = call_llm(self.generator, messages, parse_answer, kwargs, step=step)
        return reply.value if reply.ok else None

    # -- the question ---------------------------------------------------------------------------
    def ask(self, question: str) -> AgenticResult:
        question = check_query(question)
        f = self.features
        started = time.perf_counter()
        with self.tracer.collect() as trace:
            result = AgenticResult(question=question, answer="", sources=[], trace=trace)
            policy: dict[str, Any] = {"retrieve": True, "top_k": f.top_k, "hyde": True}
            if f.routing:
                out = self._step("router", self._component("router").run, {"query": question}, "QueryRouter")
                if out:
                    result.route = out["route"]
                    result.details["routing"] = out["routing"]
                    policy = f.route_policy[result.route]
            if not policy["retrieve"]:
                answer = self._step("answer", lambda messages: self._generate(messages, "answer"), {"messages": [ChatMessage.from_system(DIRECT_SYSTEM), ChatMessage.from_user(question)]}, "ChatGenerator")
                result.answer, result.exit_reason = (answer or NO_ANSWER), "no_retrieval"
                result.failed_steps = failed_steps(trace)  # no sources, so no calibrated confidence: it stays None
                result.failed = answer_failed(trace)
                if result.failed:
                    result.exit_reason = "answer_failed"
                result.seconds = time.perf_counter() - started
                return result

            top_k = policy["top_k"] or f.top_k
            embedding = None
            if f.retrieval_mode != "sparse" or f.hyde:
                out = self._step("embed", lambda text: {"embedding": self.retriever.embed(text)}, {"text": question}, "SentenceTransformersTextEmbedder")
                embedding = out["embedding"] if out else None
            if f.hyde and policy.get("hyde", True) and embedding is not None:
                out = self._step("hyde", self._component("hyde").run, {"query": question, "query_embedding": embedding}, "HyDEEmbedder")
                if out:
                    embedding = out["embedding"]
                    result.details["hyde"] = out["hyde"]
            mode = f.retrieval_mode if embedding is not None or f.retrieval_mode == "sparse" else "sparse"
            depth = max(f.rerank_candidates, top_k) if f.rerank else top_k
            out = self._step("retrieve", lambda query: self._retrieve(query, depth, mode, embedding), {"query": question}, "HybridRetriever")
            documents = out["documents"] if out else []
            signals: dict[str, float] = dict(out["signals"]) if out else {}
            if f.rerank and documents:
                if f.rerank_backend == "bi-encoder" and not self._sentence_vectors_ready:
                    self._step("sentence_vectors", self.prepare_sentence_vectors, {}, "SentenceVectorCache")
                out = self._step("rerank", self._component("reranker").run, {"query": question, "documents": documents, "top_k": top_k}, "Reranker")
                documents = out["documents"] if out else documents[:top_k]
                if out:
                    result.details["reranking"] = out["reranking"]
            documents = documents[:top_k]
            grades = None
            if f.grading and documents:
                out = self._step("grade", self._component("grader").run, {"query": question, "documents": documents}, "DocumentGrader")
                if out:
                    documents, grades = out["documents"], [d.meta.get("grade") for d in out["documents"]]
                    result.details["grading"] = out["grading"]
            result.sources = documents

            support = None
            if not documents:
                result.answer, result.exit_reason = NO_ANSWER, "no_context"
            elif f.hallucination_check:
                # answer → judge → (retry under the strict prompt)*: a Haystack pipeline loop whose
                # components trace themselves; without self-correction it is bounded at 0 retries.
                try:
                    out = self._component("corrector").run(question=question, documents=documents)
                except Exception as exc:  # the loop machinery itself failed: answer plainly instead
                    self._record_failure("self_correction", exc)
                    out = None
                if out:
                    result.answer, support, result.corrections = out["answer"], out["support"], out["corrections"]
                    result.details["hallucination"] = out["hallucination"]
                    if f.self_correction:
                        result.exit_reason = out["exit_reason"]
                else:
                    result.answer = self._answer(question, documents)
            else:
                result.answer = self._answer(question, documents)

            signals.update(answer_token_signals(trace))
            result.failed_steps = failed_steps(trace)
            result.failed = answer_failed(trace)
            if result.failed:  # the answer's own call failed: say so, never "supported"
                result.exit_reason = "answer_failed"
            inputs = {
                "documents": documents, "answer": result.answer, "question": question, "grades": grades, "support": support,
                "support_threshold": self.support_threshold if support is not None else None, "signals": signals, "failed_steps": result.failed_steps,
            }
            out = self._step("confidence", self._component("confidence").run, inputs, "ConfidenceScorer")
            if out is None:  # the scorer itself broke: no number is better than a made-up one
                result.confidence, result.symbol = 0.0, "○"
            if out:
                result.confidence, result.symbol = out["confidence"], out["symbol"]
                result.details["confidence"] = out["components"]
                result.p_lacks_answer = out["p_lacks_answer"]
                result.declined = result.declined or is_decline(result.answer)
                if out["decline"] and f.confidence_floor > 0:
                    result.declined = True
                    result.details["declined_answer"] = result.answer
                    result.answer = NO_ANSWER + " Closest sources: " + ", ".join(sorted({str(d.meta.get('source')) for d in documents})) if documents else NO_ANSWER
        result.seconds = time.perf_counter() - started
        return result
