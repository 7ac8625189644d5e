"""Compile a :class:`~ragkit.pipeline.features.Features` config into one Haystack ``Pipeline``.

Every toggle adds nodes or edges to one graph; plain RAG (``Features()``) is the smallest graph::

    embed → retrieve → guard → context_check → answer_prompt → answer → confidence
                                answer_mode ──────────┴────────────┘

(``guard`` sets aside chunks that address the model; ``Features(injection_guard=False)`` drops it.
``answer_mode`` reads the question with the router's rules: a fact lookup gets a grounded span
answer, anything else free text; with routing on, the route's policy decides instead, and a fixed
``Features(answer_mode="grounded" | "free")`` needs neither.)

All on, the graph branches and loops::

    router → route_policy ─direct_query→ direct_prompt → direct_answer            (SIMPLE: no retrieval)
                          ─search_query→ embed ─┐
                          ─hyde_query──→ hyde ──┴→ query_embedding (BranchJoiner) → retrieve
    retrieve → guard → rerank → grade → context_check ─no_context→ (end)
                                              ─context→ self_correction → confidence
    self_correction (SuperComponent): answer_prompt → answer → hallucination → correction_router
                                      ↑───────────── retry (stricter task) ─────────┘

``route_policy``, ``context_check`` and ``correction_router`` are ``ConditionalRouter`` s (route tables:
:mod:`ragkit.pipeline.routes`); the loop is :class:`~ragkit.components.self_correction.SelfCorrectingAnswerer`,
a ``SuperComponent`` bounded by ``max_corrections``. The answer prompt renders byte-for-byte what
:func:`ragkit.llm.prompts.context_messages` sends, so the grader, the answer and the judge share one
sources prefix and llama.cpp evaluates it once per question.

Inputs the caller gives (the question, as ``query``; ``top_k`` when no router sets it) are listed in
the pipeline's ``metadata["ragkit"]`` so an exported YAML can be run without this module's help:
:func:`ragkit.pipeline.graph_io.graph_inputs` builds the ``data`` for ``Pipeline.run``.

Usage::

    pipe = build_pipeline(Features.all_on(), chat_generator=llm, index=index, config=config)
    out = pipe.run(graph_inputs(pipe, "Where was Tesla born?"), include_outputs_from=outputs_of(pipe))
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from haystack import Pipeline
from haystack.components.joiners import BranchJoiner
from haystack.components.routers import ConditionalRouter

from ragkit.components.ambiguity_check import AmbiguityCheck
from ragkit.components.answer_mode import AnswerModeSelector
from ragkit.components.collection_selector import CollectionSelector
from ragkit.eval.refit import calibration_beside_index
from ragkit.components.confidence import ConfidenceScorer
from ragkit.components.document_grader import DocumentGrader
from ragkit.components.evidence_selector import EvidenceSelector
from ragkit.components.fallback_retriever import FallbackRetriever
from ragkit.components.guarded_generator import GuardedGenerator
from ragkit.components.hallucination_detector import HallucinationDetector, support_threshold_for
from ragkit.components.hyde import HyDEEmbedder
from ragkit.components.index_retriever import IndexRetriever
from ragkit.components.injection_guard import InjectionGuard
from ragkit.components.intent_filter import IntentFilter
from ragkit.components.multi_hop import MultiHopReasoner
from ragkit.components.per_part import PerPartAnswerer
from ragkit.components.query_decomposer import QueryDecomposer
from ragkit.components.query_expander import KeywordExpander
from ragkit.components.query_router import QueryRouter
from ragkit.components.reranker import Reranker
from ragkit.components.self_correction import SelfCorrectingAnswerer
from ragkit.components.sql_answerer import SqlAnswerer
from ragkit.config import ModelConfig, RagConfig
from ragkit.index.store import RagIndex
from ragkit.llm.generators import build_text_embedder
from ragkit.llm.prompts import answer_prompt_builder
from ragkit.pipeline.features import Features
from ragkit.pipeline.graph_front import add_follow_up, add_gate_and_rewrite
from ragkit.pipeline.routes import context_routes, policy_routes, selector_policy

ENDS = {"confidence": "answer + confidence", "context_check.no_context": "no sources: declines, no LLM call", "direct_answer": "answer without sources",
        "clarify.clarification": "asks which one is meant, no LLM call"}



def support_threshold(features: Features, models: ModelConfig) -> float:
    return features.support_threshold if features.support_threshold is not None else support_threshold_for(features.hallucination_backend, models.llm)


def build_pipeline(
    features: Features,
    chat_generator: Any,
    index: RagIndex | None = None,
    index_path: str | None = None,
    config: RagConfig | None = None,
    step_generators: dict[str, Any] | None = None,
) -> Pipeline:
    """The graph for ``features``; ``chat_generator`` serves every LLM step (one model, one prompt cache)
    but those ``step_generators`` names (``Features.step_models``, loaded by the engine)."""
    f = features.validate()
    config = config or RagConfig()
    if f.decompose:
        return build_planning_pipeline(f, chat_generator, index, index_path, config, step_generators)
    return _GraphBuilder(f, chat_generator, index, index_path, config, step_generators or {}).build()


class _GraphBuilder:
    """One graph, stage by stage; ``inputs`` collects the sockets the caller fills."""

    def __init__(self, f: Features, chat_generator: Any, index: RagIndex | None, index_path: str | None, config: RagConfig, step_generators: dict[str, Any]):
        self.f, self.index, self.index_path, self.config = f, index, index_path, config
        self.chat_generator, self.step_generators = chat_generator, step_generators
        self.embedder = config.models.embedder
        # Nothing in the outer graph loops (the correction loop bounds itself inside its SuperComponent):
        # one run per component per question, and Haystack stops anything that tries a second.
        self.pipe = Pipeline(max_runs_per_component=1)
        self.inputs: dict[str, list[str]] = {"query": ["confidence.query"], "top_k": [], "answer_mode": [], "scope": ["retrieve.scope"], "streaming_callback": []}

    def llm(self, step: str) -> Any:
        return self.step_generators.get(step, self.chat_generator)

    def prompt(self, step: str) -> str | None:
        return self.f.step_prompts.get(step)

    def add(self, name: str, instance: Any, query_socket: str | None = None) -> None:
        self.pipe.add_component(name, instance)
        if query_socket:
            self.inputs["query"].append(f"{name}.{query_socket}")

    def takes_top_k(self, socket: str) -> None:
        """``top_k`` from the route's policy with routing on, else from the caller."""
        if self.f.routing:
            self.pipe.connect("route_policy.top_k", socket)
        else:
            self.inputs["top_k"].append(socket)

    def build(self) -> Pipeline:
        self.retrieval()
        last = self.filter_documents("retrieve.documents")
        self.pipe.add_component("context_check", ConditionalRouter(routes=context_routes()))
        self.pipe.connect(last, "context_check.documents")
        context = "context_check.context"
        if self.f.multi_hop:
            context = self.multi_hop(context)
        self.answer(context)
        self.gate_and_rewrite()
        self.follow_up()
        f = self.f
        self.pipe.metadata["ragkit"] = {
            "inputs": self.inputs,
            "top_k": f.top_k,
            "answer_mode": f.answer_mode,
            "collections": list(f.collections) or None,
            "support_threshold": support_threshold(f, self.config.models) if f.hallucination_check else None,
            "deadline_s": self.config.deadline_s,  # an exported graph keeps the question's deadline (RAGKIT_DEADLINE_S overrides)
            "features": f.to_dict(),
            "ends": ENDS,  # where a run ends, for the drawing
        }
        return self.pipe

    # -- which question reaches retrieval, and how it is embedded --------------------------------
    def retrieval(self) -> None:
        f, pipe = self.f, self.pipe
        needs_embedding = f.retrieval_mode != "sparse"
        use_hyde = f.hyde and needs_embedding
        hyde_routes = f.routing and use_hyde and any(p["retrieve"] and p.get("hyde", True) for p in f.route_policy.values())
        plain_routes = not f.routing or any(p["retrieve"] and not (use_hyde and p.get("hyde", True)) for p in f.route_policy.values())
        embedding_senders: list[str] = []
        if f.routing:
            self.add("router", QueryRouter(backend=f.router_backend, chat_generator=self.llm("router") if f.router_backend == "llm" else None,
                                           embedder_model=self.embedder, prompt=self.prompt("router")), "query")
            self.add("route_policy", ConditionalRouter(routes=policy_routes(f)), "query")
            pipe.connect("router.route", "route_policy.route")
        if needs_embedding and plain_routes and (not use_hyde or f.routing):
            self.add("embed", build_text_embedder(self.config.models), None if f.routing else "text")  # with routing, route_policy.search_query feeds it
            embedding_senders.append("embed.embedding")
        if use_hyde and (hyde_routes or not f.routing):
            self.add("hyde", HyDEEmbedder(chat_generator=self.llm("hyde"), embedder_model=self.embedder, n_passages=f.hyde_passages, prompt=self.prompt("hyde")),
                     None if f.routing else "query")
            embedding_senders.append("hyde.embedding")

        candidates = max(f.rerank_candidates, f.top_k) if f.rerank else 0
        self.add("retrieve", IndexRetriever(
            index=self.index, index_path=self.index_path, mode=f.retrieval_mode, top_k=f.top_k, candidates=candidates,
            sparse_weight=self.config.hybrid_sparse_weight, merge_threshold=self.config.index.merge_threshold, embedder=self.embedder,
        ), None if f.routing else "query")
        if f.routing:  # retrieval's question arrives only on a retrieving branch
            pipe.connect("route_policy.query", "retrieve.query")
        if len(embedding_senders) > 1:
            pipe.add_component("query_embedding", BranchJoiner(list[float]))
            for sender in embedding_senders:
                pipe.connect(sender, "query_embedding.value")
            pipe.connect("query_embedding.value", "retrieve.query_embedding")
        elif embedding_senders:
            pipe.connect(embedding_senders[0], "retrieve.query_embedding")
        self.takes_top_k("retrieve.top_k")
        filter_sender = self.narrow_the_search()
        if f.expand and f.retrieval_mode != "dense":  # more words for BM25; the dense side keeps the question
            self.add("expand", KeywordExpander(backend=f.expand_backend, chat_generator=self.llm("expand") if f.expand_backend == "llm" else None,
                                               index=self.index, index_path=self.index_path), "query")
            pipe.connect("expand.queries", "retrieve.sparse_queries")
            if filter_sender:
                pipe.connect(filter_sender, "expand.filters")
        if f.routing:
            if "embed" in pipe.graph.nodes:
                pipe.connect("route_policy.search_query", "embed.text")
            if "hyde" in pipe.graph.nodes:
                pipe.connect("route_policy.hyde_query", "hyde.query")
        self.filter_sender = filter_sender

    def narrow_the_search(self) -> str | None:
        """``select`` (the collections the question fits, or the caller's list) and ``intent`` (metadata the
        question's words or its route ask for), in front of retrieval; returns the socket with the filters."""
        f, sender = self.f, None
        if f.select_collections != "off" or f.collections:
            backend = "llm" if f.select_collections == "llm" else "embedding"  # an explicit list overrides either
            self.add("select", CollectionSelector(index=self.index, index_path=self.index_path, backend=backend,
                                                  chat_generator=self.llm("select") if backend == "llm" else None, embedder_model=self.embedder), "query")
            if f.collections:
                self.inputs["collections"] = ["select.collections"]
            sender = "select.filters"
        if f.intent_filters:
            self.add("intent", IntentFilter(index=self.index, index_path=self.index_path, route_filters=f.route_filters or None), "query")
            if f.routing:
                self.pipe.connect("router.route", "intent.route")
            if sender:
                self.pipe.connect(sender, "intent.filters")
            sender = "intent.filters"
        if sender:
            self.pipe.connect(sender, "retrieve.filters")
        return sender

    # -- guard, rerank, grade, SQL, fallback ---------------------------------------------------------
    def filter_documents(self, last: str) -> str:
        f, pipe = self.f, self.pipe
        if f.injection_guard:  # before any LLM reads the chunks: the grader obeys "grade this 10" too
            self.add("guard", InjectionGuard())
            pipe.connect(last, "guard.documents")
            last = "guard.documents"
        if f.clarify:  # before any LLM reads the chunks: an ambiguous question is asked back, not answered
            self.add("clarify", AmbiguityCheck(ratio=f.clarify_ratio, index=self.index, index_path=self.index_path), "query")
            pipe.connect(last, "clarify.documents")
            self.inputs["scope"].append("clarify.scope")
            last = "clarify.documents"
        if f.rerank:
            self.add("rerank", Reranker(backend=f.rerank_backend, model=f.rerank_model, chat_generator=self.llm("rerank") if f.rerank_backend == "llm" else None), "query")
            pipe.connect(last, "rerank.documents")
            self.takes_top_k("rerank.top_k")
            last = "rerank.documents"
        if f.grading:
            self.add("grade", DocumentGrader(backend=f.grader_backend, chat_generator=self.llm("grade") if f.grader_backend == "llm" else None,
                                             threshold=f.grade_threshold, embedder_model=self.embedder, prompt=self.prompt("grade")), "query")
            pipe.connect(last, "grade.documents")
            if f.routing:
                pipe.connect("route_policy.grader_backend", "grade.backend")
            last = "grade.documents"
        if f.sql_route:  # counting / summing questions: one read-only query over the tables, its result source [1]
            self.add("sql", SqlAnswerer(chat_generator=self.llm("sql"), tables=f.sql_tables, only_numeric=True, prompt=self.prompt("sql")), "query")
            pipe.connect(last, "sql.documents")
            last = "sql.documents"
        if f.fallback:  # too little evidence? the next retrieval strategy, bounded and traced
            self.add("fallback", FallbackRetriever(
                index=self.index, index_path=self.index_path, main_mode=f.retrieval_mode, strategies=f.fallback_strategies, check=f.fallback_check,
                coverage_threshold=f.fallback_coverage, sufficiency_threshold=f.sufficiency_threshold, max_attempts=f.max_fallbacks,
                max_llm_calls=f.fallback_llm_calls, chat_generator=self.llm("fallback"), embedder=self.embedder, sql_tables=f.sql_tables,
            ), "query")
            pipe.connect(last, "fallback.documents")
            self.inputs["scope"].append("fallback.scope")
            if self.filter_sender:
                pipe.connect(self.filter_sender, "fallback.filters")
            self.takes_top_k("fallback.top_k")
            last = "fallback.documents"
        return last

    def multi_hop(self, context: str) -> str:
        """Do the sources answer it? If not, follow the bridge entity (bounded)."""
        f = self.f
        self.add("multi_hop", MultiHopReasoner(
            chat_generator=self.llm("multi_hop"), index=self.index, index_path=self.index_path, retrieval_mode=f.retrieval_mode, embedder=self.embedder,
            prompt=self.prompt("multi_hop"), sparse_weight=self.config.hybrid_sparse_weight, max_iterations=f.max_iterations,
            max_llm_calls=f.hop_llm_calls, threshold=f.sufficiency_threshold, check=f.hop_check, coverage_threshold=f.hop_coverage,
        ), "query")
        self.pipe.connect(context, "multi_hop.documents")
        self.takes_top_k("multi_hop.top_k")
        return "multi_hop.documents"

    # -- answer, check and correct, confidence ----------------------------------------------------
    def answer(self, context: str) -> None:
        f, pipe, models = self.f, self.pipe, self.config.models
        # the index's own calibration (``ragkit calibrate``) when it has one, else the shipped one
        own = calibration_beside_index(self.index_path or getattr(self.index, "path", None))
        self.add("confidence", ConfidenceScorer(floor=f.confidence_floor, model=models.llm, calibration=own))
        pipe.connect("retrieve.signals", "confidence.signals")
        pipe.connect(context, "confidence.documents")
        # a grounded answer copies from one evidence sentence, chosen without an LLM (EvidenceSelector)
        grounded = f.answer_mode != "free"
        if grounded:
            self.add("evidence", EvidenceSelector(index=self.index, index_path=self.index_path, embedder=self.embedder), None if f.multi_hop else "query")
            pipe.connect(context, "evidence.documents")
            pipe.connect("evidence.signals", "confidence.evidence_signals")
            if f.multi_hop:  # the sentence to copy from answers the question about the bridges found
                pipe.connect("multi_hop.query", "evidence.query")
        if f.hallucination_check:
            threshold = support_threshold(f, models)
            detector = HallucinationDetector(
                backend=f.hallucination_backend, chat_generator=self.llm("hallucination") if f.hallucination_backend == "llm_judge" else None,
                hhem_model=f.hhem_model, threshold=threshold, judge_spans=f.judge_spans,
            )
            max_corrections = f.max_corrections if f.self_correction else 0
            self.add("self_correction", SelfCorrectingAnswerer(
                chat_generator=self.llm("answer"), detector=detector, threshold=threshold, max_corrections=max_corrections,
                max_tokens=models.max_new_tokens, answer_task=self.prompt("answer"),
            ), "query")
            pipe.connect(context, "self_correction.documents")
            mode_sockets = ["self_correction.mode"]
            if grounded:
                pipe.connect("evidence.evidence", "self_correction.evidence")
            self.inputs["streaming_callback"].append("self_correction.streaming_callback")
            for sender, receiver in (("replies", "replies"), ("support", "support"), ("answer_ok", "answer_ok"), ("answer_tokens", "answer_tokens")):
                pipe.connect(f"self_correction.{sender}", f"confidence.{receiver}")
        else:
            self.add("answer_prompt", answer_prompt_builder(self.prompt("answer")), "query")
            self.add("answer", GuardedGenerator(chat_generator=self.llm("answer"), max_tokens=models.max_new_tokens), "query")
            pipe.connect(context, "answer_prompt.documents")
            pipe.connect(context, "answer.documents")  # the grounded mode's spans come from them
            pipe.connect("answer_prompt.prompt", "answer.messages")
            self.inputs["streaming_callback"].append("answer.streaming_callback")
            mode_sockets = ["answer_prompt.mode", "answer.mode"]
            if grounded:
                pipe.connect("evidence.evidence", "answer_prompt.evidence")
                pipe.connect("evidence.evidence", "answer.evidence")
            pipe.connect("answer.replies", "confidence.replies")
            pipe.connect("answer.ok", "confidence.answer_ok")
            pipe.connect("answer.tokens", "confidence.answer_tokens")
        if grounded:
            mode_sockets.append("evidence.mode")
        self.answer_mode(mode_sockets)

    def answer_mode(self, mode_sockets: list[str]) -> None:
        """How the answer is written: the route's policy, the rules read of the question, or fixed."""
        f = self.f
        if f.routing:
            for socket in mode_sockets:
                self.pipe.connect("route_policy.answer_mode", socket)
        elif f.answer_mode == "auto":
            self.add("answer_mode", AnswerModeSelector(policy=selector_policy(f)), "query")
            for socket in mode_sockets:
                self.pipe.connect("answer_mode.mode", socket)
        else:
            self.inputs["answer_mode"] += mode_sockets

    # -- before everything: rewrite the question, gate it, and resolve a follow-up (graph_front.py) -----
    def gate_and_rewrite(self) -> None:
        add_gate_and_rewrite(self)

    def follow_up(self) -> None:
        if self.f.follow_ups:
            add_follow_up(self.pipe, self.inputs, self.f, self.llm("follow_up"), self.index, self.index_path, self.embedder)


def build_planning_pipeline(f: Features, chat_generator: Any, index: RagIndex | None, index_path: str | None, config: RagConfig,
                            step_generators: dict[str, Any] | None = None) -> Pipeline:
    """decompose -> per_part: the question's parts, each answered by the graph of ``f`` without planning."""
    # the parts are asked after the follow-up is resolved, and are not asked back (clarify reads one question's evidence)
    inner_features = replace(f, decompose=False, follow_ups=False, clarify=False)
    inner = build_pipeline(inner_features, chat_generator, index=index, index_path=index_path, config=config, step_generators=step_generators)
    pipe = Pipeline(max_runs_per_component=1)
    decomposer_llm = (step_generators or {}).get("decompose", chat_generator) if f.decomposer_backend != "rules" else None
    pipe.add_component("decompose", QueryDecomposer(backend=f.decomposer_backend, chat_generator=decomposer_llm, max_parts=f.max_parts, prompt=f.step_prompts.get("decompose")))
    pipe.add_component("per_part", PerPartAnswerer(pipeline=inner, features=inner_features.to_dict()))
    pipe.connect("decompose.parts", "per_part.parts")
    pipe.connect("decompose.kind", "per_part.kind")
    inputs = {"query": ["decompose.query", "per_part.query"], "top_k": [], "answer_mode": [], "scope": ["per_part.scope"],
              "streaming_callback": ["per_part.streaming_callback"]}
    if f.follow_ups:
        add_follow_up(pipe, inputs, f, (step_generators or {}).get("follow_up", chat_generator), index, index_path, config.models.embedder)
    pipe.metadata["ragkit"] = {
        **inner.metadata["ragkit"],
        "inputs": inputs,
        "support_threshold": None,  # the inner graph gets its own
        "features": f.to_dict(),
        "ends": {"per_part": "one answer per part, cited"},
    }
    return pipe
