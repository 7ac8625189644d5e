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

``route_policy``, ``context_check`` and ``correction_router`` are Haystack ``ConditionalRouter`` s.
The self-correction loop is a ``SuperComponent`` (:func:`ragkit.components.self_correction.correction_loop`)
because a loop must see the same sources on every pass, and Haystack keeps a sub-pipeline's own
inputs across passes while it consumes a component's output once; it is bounded by
``max_corrections`` (its exit reason says which bound ended it) with Haystack's
``max_runs_per_component`` as the backstop. The answer prompt is a ``ChatPromptBuilder`` whose
template renders byte-for-byte what :func:`ragkit.llm.prompts.context_messages` sends (the grader
and the judge send the same sources first, so llama.cpp evaluates them once per question).

Inputs the caller gives (the question, ``top_k`` when no router sets it) are listed in the
pipeline's ``metadata["ragkit"]`` so an exported YAML can be run without this module's help:
:func:`graph_inputs` builds the ``data`` for ``Pipeline.run``.

Usage::

    pipe = build_pipeline(Features.all_on(), index=index, generator=llm, models=config.models)
    out = pipe.run(graph_inputs(pipe, "Where was Tesla born?"), include_outputs_from=OUTPUTS)
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from haystack import Document, Pipeline
from haystack.components.builders import ChatPromptBuilder
from haystack.components.joiners import BranchJoiner
from haystack.components.routers import ConditionalRouter
from haystack.dataclasses import ChatMessage

from ragkit.components.answer_mode import AnswerModeSelector
from ragkit.components.confidence import ConfidenceScorer
from ragkit.components.document_grader import DocumentGrader
from ragkit.components.collection_selector import CollectionSelector
from ragkit.components.evidence_selector import EvidenceSelector
from ragkit.components.intent_filter import IntentFilter
from ragkit.components.query_expander import KeywordExpander
from ragkit.components.fallback_retriever import FallbackRetriever
from ragkit.components.multi_hop import MultiHopReasoner
from ragkit.components.per_part import PerPartAnswerer
from ragkit.components.query_decomposer import QueryDecomposer
from ragkit.components.guarded_generator import GuardedGenerator
from ragkit.components.hallucination_detector import HallucinationDetector, support_threshold_for
from ragkit.components.hyde import HyDEEmbedder
from ragkit.components.injection_guard import InjectionGuard
from ragkit.components.index_retriever import IndexRetriever
from ragkit.components.query_rewriter import QueryRewriter
from ragkit.components.query_router import QueryRouter
from ragkit.components.retrieval_gate import RetrievalGate
from ragkit.components.reranker import Reranker
from ragkit.components.self_correction import correction_loop
from ragkit.components.sql_answerer import SqlAnswerer
from ragkit.config import ModelConfig, RagConfig
from ragkit.index.store import RagIndex
from ragkit.llm.generators import build_text_embedder
from ragkit.llm.prompts import answer_prompt_builder
from ragkit.pipeline.features import Features

DIRECT_SYSTEM = "Answer briefly and helpfully."


class _QuietUnsafeRouter(logging.Filter):
    """ConditionalRouter warns on every init with unsafe=True; ragkit's router templates are its own constants."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Unsafe mode is enabled" not in record.getMessage()


logging.getLogger("haystack.components.routers.conditional_router").addFilter(_QuietUnsafeRouter())
# Outputs the engine reads after a run (components that are not in a given graph are ignored).
OUTPUTS = {"decompose", "per_part", "rewrite", "gate", "select", "intent", "expand", "multi_hop", "sql", "fallback", "router", "answer_mode", "hyde", "retrieve", "guard", "rerank", "grade", "context_check", "evidence", "answer", "self_correction", "confidence", "direct_answer"}

# Components that start retrieval: with the gate on they get the question only when it says "retrieve".
GATED = {"router", "route_policy", "embed", "hyde", "retrieve", "sql", "select", "intent", "expand"}  # (fallback waits on retrieve's documents)


def policy_routes(features: Features) -> list[dict[str, Any]]:
    """``route_policy``'s branches: no retrieval (SIMPLE), retrieval with HyDE, retrieval without."""
    routes = []
    for name, policy in features.route_policy.items():
        condition = f"{{{{ route == {name!r} }}}}"
        if not policy["retrieve"]:
            routes.append({"condition": condition, "output": "{{ query }}", "output_name": "direct_query", "output_type": str})
            continue
        branch = "hyde_query" if features.hyde and policy.get("hyde", True) and features.retrieval_mode != "sparse" else "search_query"
        top_k = int(policy.get("top_k") or features.top_k)
        mode = features.answer_mode_for(name)
        routes.append(_retrieving_route(features, condition, branch, top_k, mode, features.grader_for(name)))
    # a route the policy does not know (a custom router): retrieve as plain RAG would
    fallback_mode = features.answer_mode if features.answer_mode != "auto" else "free"
    routes.append(_retrieving_route(features, "{{ true }}", "search_query", features.top_k, fallback_mode, features.grader_backend))
    return routes


def _retrieving_route(features: Features, condition: str, branch: str, top_k: int, mode: str, grader: str) -> dict[str, Any]:
    route = {"condition": condition, "output": ["{{ query }}", str(top_k), mode], "output_name": [branch, "top_k", "answer_mode"], "output_type": [str, int, str]}
    if features.grading:  # the route's grader (a policy may cap a route at the no-LLM one)
        route["output"].append(grader)
        route["output_name"].append("grader_backend")
        route["output_type"].append(str)
    return route


def selector_policy(features: Features) -> dict[str, str]:
    """Without a router, the rules-read route → answer mode; SIMPLE questions still retrieve there, so
    they get the fact lookup's mode."""
    policy = {route: features.answer_mode_for(route) for route in features.route_policy}
    policy["SIMPLE"] = features.answer_mode_for("FACTUAL")
    return policy


def context_routes() -> list[dict[str, Any]]:
    """Documents go on to the answer only when there are any (a passthrough route keeps them Documents
    without the router's unsafe mode, which Pipeline.load refuses by default)."""
    return [
        {"condition": "{{ documents | length > 0 }}", "output": "documents", "output_passthrough": True, "output_name": "context", "output_type": list[Document]},
        {"condition": "{{ true }}", "output": "{{ documents | length }}", "output_name": "no_context", "output_type": int},
    ]


def support_threshold(features: Features, models: ModelConfig) -> float:
    return features.support_threshold if features.support_threshold is not None else support_threshold_for(features.hallucination_backend, models.llm)


def build_pipeline(
    features: Features,
    generator: Any,
    index: RagIndex | None = None,
    index_path: str | None = None,
    config: RagConfig | None = None,
    step_generators: dict[str, Any] | None = None,
) -> Pipeline:
    """The graph for ``features``; ``generator`` serves every LLM step (one model, one prompt cache) but
    those ``step_generators`` names (``Features.step_models``, loaded by the engine)."""
    f = features.validate()
    config = config or RagConfig()
    if f.decompose:
        return build_planning_pipeline(f, generator, index, index_path, config, step_generators)

    def llm(step: str) -> Any:
        return (step_generators or {}).get(step, generator)

    prompt = f.step_prompts.get
    models = config.models
    embedder = models.embedder
    needs_embedding = f.retrieval_mode != "sparse"
    use_hyde = f.hyde and needs_embedding
    hyde_routes = f.routing and use_hyde and any(p["retrieve"] and p.get("hyde", True) for p in f.route_policy.values())
    plain_routes = not f.routing or any(p["retrieve"] and not (use_hyde and p.get("hyde", True)) for p in f.route_policy.values())
    direct_routes = f.routing and any(not p["retrieve"] for p in f.route_policy.values())
    threshold = support_threshold(f, models)

    # Nothing in the outer graph loops (the correction loop bounds itself inside its SuperComponent):
    # one run per component per question, and Haystack stops anything that tries a second.
    pipe = Pipeline(max_runs_per_component=1)
    inputs: dict[str, list[str]] = {"question": ["retrieve.query", "confidence.question"], "top_k": [], "answer_mode": []}

    def takes_top_k(socket: str) -> None:
        """``top_k`` from the route's policy with routing on, else from the caller."""
        if f.routing:
            pipe.connect("route_policy.top_k", socket)
        else:
            inputs["top_k"].append(socket)

    # -- which question reaches retrieval, and how it is embedded --------------------------------
    embedding_senders: list[str] = []
    if f.routing:
        pipe.add_component("router", QueryRouter(backend=f.router_backend, generator=llm("router") if f.router_backend == "llm" else None, embedder_model=embedder, prompt=prompt("router")))
        pipe.add_component("route_policy", ConditionalRouter(routes=policy_routes(f)))
        pipe.connect("router.route", "route_policy.route")
        inputs["question"] += ["router.query", "route_policy.query"]
    if needs_embedding and plain_routes and (not use_hyde or f.routing):
        pipe.add_component("embed", build_text_embedder(models))
        embedding_senders.append("embed.embedding")
        if not f.routing:  # with routing, route_policy.search_query feeds it
            inputs["question"].append("embed.text")
    if use_hyde and (hyde_routes or not f.routing):
        pipe.add_component("hyde", HyDEEmbedder(generator=llm("hyde"), embedder_model=embedder, n_passages=f.hyde_passages, prompt=prompt("hyde")))
        embedding_senders.append("hyde.embedding")
        if not f.routing:
            inputs["question"].append("hyde.query")

    candidates = max(f.rerank_candidates, f.top_k) if f.rerank else 0
    pipe.add_component("retrieve", IndexRetriever(
        index=index, index_path=index_path, mode=f.retrieval_mode, candidates=candidates,
        sparse_weight=config.hybrid_sparse_weight, merge_threshold=config.index.merge_threshold, embedder=embedder,
    ))
    if len(embedding_senders) > 1:
        pipe.add_component("query_embedding", BranchJoiner(list[float]))
        for sender in embedding_senders:
            pipe.connect(sender, "query_embedding.value")
        pipe.connect("query_embedding.value", "retrieve.query_embedding")
    elif embedding_senders:
        pipe.connect(embedding_senders[0], "retrieve.query_embedding")
    takes_top_k("retrieve.top_k")
    filter_sender = narrow_the_search(pipe, f, inputs, index, index_path, embedder, llm)
    if f.expand and f.retrieval_mode != "dense":  # more words for BM25; the dense side keeps the question
        pipe.add_component("expand", KeywordExpander(backend=f.expand_backend, generator=llm("expand") if f.expand_backend == "llm" else None, index=index, index_path=index_path))
        inputs["question"].append("expand.query")
        pipe.connect("expand.queries", "retrieve.sparse_queries")
        if filter_sender:
            pipe.connect(filter_sender, "expand.filters")
    if f.routing:
        if "embed" in pipe.graph.nodes:
            pipe.connect("route_policy.search_query", "embed.text")
        if "hyde" in pipe.graph.nodes:
            pipe.connect("route_policy.hyde_query", "hyde.query")

    # -- guard, rerank, grade, and whether anything is left to answer from ---------------------------
    last = "retrieve.documents"
    if f.injection_guard:  # before any LLM reads the chunks: the grader obeys "grade this 10" too
        pipe.add_component("guard", InjectionGuard())
        pipe.connect(last, "guard.documents")
        last = "guard.documents"
    if f.rerank:
        pipe.add_component("rerank", Reranker(backend=f.rerank_backend, model=f.rerank_model, generator=llm("rerank") if f.rerank_backend == "llm" else None))
        pipe.connect(last, "rerank.documents")
        inputs["question"].append("rerank.query")
        takes_top_k("rerank.top_k")
        last = "rerank.documents"
    if f.grading:
        pipe.add_component("grade", DocumentGrader(backend=f.grader_backend, generator=llm("grade") if f.grader_backend == "llm" else None, threshold=f.grade_threshold, embedder_model=embedder, prompt=prompt("grade")))
        pipe.connect(last, "grade.documents")
        inputs["question"].append("grade.query")
        if f.routing:
            pipe.connect("route_policy.grader_backend", "grade.backend")
        last = "grade.documents"
    if f.sql_route:  # counting / summing questions: one read-only query over the tables, its result source [1]
        pipe.add_component("sql", SqlAnswerer(generator=llm("sql"), tables=f.sql_tables, only_numeric=True, prompt=prompt("sql")))
        pipe.connect(last, "sql.documents")
        inputs["question"].append("sql.query")
        last = "sql.documents"
    if f.fallback:  # too little evidence? the next retrieval strategy, bounded and traced
        pipe.add_component("fallback", FallbackRetriever(
            index=index, index_path=index_path, main_mode=f.retrieval_mode, strategies=f.fallback_strategies, check=f.fallback_check,
            coverage_threshold=f.fallback_coverage, sufficiency_threshold=f.sufficiency_threshold, max_attempts=f.max_fallbacks,
            max_llm_calls=f.fallback_llm_calls, generator=llm("fallback"), embedder=embedder, sql_tables=f.sql_tables,
        ))
        pipe.connect(last, "fallback.documents")
        inputs["question"].append("fallback.question")
        if filter_sender:
            pipe.connect(filter_sender, "fallback.filters")
        takes_top_k("fallback.top_k")
        last = "fallback.documents"
    pipe.add_component("context_check", ConditionalRouter(routes=context_routes()))
    pipe.connect(last, "context_check.documents")
    context = "context_check.context"
    if f.multi_hop:  # do the sources answer it? if not, follow the bridge entity (bounded)
        pipe.add_component("multi_hop", MultiHopReasoner(
            generator=llm("multi_hop"), index=index, index_path=index_path, retrieval_mode=f.retrieval_mode, embedder=embedder, prompt=prompt("multi_hop"),
            sparse_weight=config.hybrid_sparse_weight, max_iterations=f.max_iterations, max_llm_calls=f.hop_llm_calls, threshold=f.sufficiency_threshold,
            check=f.hop_check, coverage_threshold=f.hop_coverage,
        ))
        pipe.connect(context, "multi_hop.documents")
        inputs["question"].append("multi_hop.question")
        takes_top_k("multi_hop.top_k")
        context = "multi_hop.documents"

    # -- answer, check and correct, confidence ----------------------------------------------------
    pipe.add_component("confidence", ConfidenceScorer(floor=f.confidence_floor, model=models.llm))
    pipe.connect("retrieve.signals", "confidence.signals")
    pipe.connect(context, "confidence.documents")
    # a grounded answer copies from one evidence sentence, chosen without an LLM (EvidenceSelector)
    grounded = f.answer_mode != "free"
    if grounded:
        pipe.add_component("evidence", EvidenceSelector(index=index, index_path=index_path, embedder=embedder))
        pipe.connect(context, "evidence.documents")
        pipe.connect("evidence.signals", "confidence.evidence_signals")
        if f.multi_hop:  # the sentence to copy from answers the question about the bridges found
            pipe.connect("multi_hop.query", "evidence.question")
        else:
            inputs["question"].append("evidence.question")
    if f.hallucination_check:
        detector = HallucinationDetector(
            backend=f.hallucination_backend, generator=llm("hallucination") if f.hallucination_backend == "llm_judge" else None, hhem_model=f.hhem_model, threshold=threshold,
            judge_spans=f.judge_spans,
        )
        max_corrections = f.max_corrections if f.self_correction else 0
        pipe.add_component("self_correction", correction_loop(llm("answer"), detector, threshold, max_corrections, models.max_new_tokens, prompt("answer")))
        pipe.connect(context, "self_correction.documents")
        inputs["question"].append("self_correction.question")
        mode_sockets = ["self_correction.mode"]
        if grounded:
            pipe.connect("evidence.evidence", "self_correction.evidence")
        for socket in ("answer", "support", "answer_ok", "answer_tokens"):
            pipe.connect(f"self_correction.{socket}", f"confidence.{socket}")
    else:
        pipe.add_component("answer_prompt", answer_prompt_builder(prompt("answer")))
        pipe.add_component("answer", GuardedGenerator(generator=llm("answer"), max_tokens=models.max_new_tokens))
        pipe.connect(context, "answer_prompt.documents")
        pipe.connect(context, "answer.documents")  # the grounded mode's spans come from them
        pipe.connect("answer_prompt.prompt", "answer.messages")
        inputs["question"] += ["answer_prompt.question", "answer.question"]
        mode_sockets = ["answer_prompt.mode", "answer.mode"]
        if grounded:
            pipe.connect("evidence.evidence", "answer_prompt.evidence")
            pipe.connect("evidence.evidence", "answer.evidence")
        pipe.connect("answer.text", "confidence.answer")
        pipe.connect("answer.ok", "confidence.answer_ok")
        pipe.connect("answer.tokens", "confidence.answer_tokens")

    # -- how the answer is written: the route's policy, the rules read of the question, or fixed ----
    if grounded:
        mode_sockets.append("evidence.mode")
    if f.routing:
        for socket in mode_sockets:
            pipe.connect("route_policy.answer_mode", socket)
    elif f.answer_mode == "auto":
        pipe.add_component("answer_mode", AnswerModeSelector(policy=selector_policy(f)))
        inputs["question"].append("answer_mode.question")
        for socket in mode_sockets:
            pipe.connect("answer_mode.mode", socket)
    else:
        inputs["answer_mode"] += mode_sockets

    # -- before everything: rewrite the question, and gate whether it needs retrieval at all ---------
    direct_senders = ["route_policy.direct_query"] if direct_routes else []
    if f.rewrite or f.gate:
        front = None
        if f.rewrite:
            pipe.add_component("rewrite", QueryRewriter(backend=f.rewrite_backend, generator=llm("rewrite") if f.rewrite_backend == "llm" else None, prompt=prompt("rewrite")))
            front = "rewrite.query"
        if f.gate:
            pipe.add_component("gate", RetrievalGate(backend=f.gate_backend, generator=llm("gate") if f.gate_backend == "llm" else None, prompt=prompt("gate")))
            if front:
                pipe.connect(front, "gate.query")
            direct_senders.append("gate.direct_query")
        given = ["rewrite.query"] if f.rewrite else (["gate.query"] if f.gate else [])
        for socket in inputs["question"]:
            if f.gate and socket.split(".")[0] in GATED:  # retrieval and what starts it wait for the gate's yes
                pipe.connect("gate.search_query", socket)
            elif front:
                pipe.connect(front, socket)
            else:
                given.append(socket)
        inputs["question"] = given
    if direct_senders:
        pipe.add_component("direct_prompt", ChatPromptBuilder(template=[ChatMessage.from_system(prompt("direct_answer") or DIRECT_SYSTEM), ChatMessage.from_user("{{ question }}")], required_variables=["question"]))
        pipe.add_component("direct_answer", GuardedGenerator(generator=llm("direct_answer"), max_tokens=models.max_new_tokens, step="direct_answer"))
        if len(direct_senders) > 1:  # the gate's no and the router's SIMPLE route both answer without sources
            pipe.add_component("direct_question", BranchJoiner(str))
            for sender in direct_senders:
                pipe.connect(sender, "direct_question.value")
            pipe.connect("direct_question.value", "direct_prompt.question")
        else:
            pipe.connect(direct_senders[0], "direct_prompt.question")
        pipe.connect("direct_prompt.prompt", "direct_answer.messages")

    pipe.metadata["ragkit"] = {
        "inputs": inputs,
        "top_k": f.top_k,
        "answer_mode": f.answer_mode,
        "collections": list(f.collections) or None,
        "support_threshold": threshold if f.hallucination_check else None,
        "deadline_s": config.deadline_s,  # an exported graph keeps the question's deadline (RAGKIT_DEADLINE_S overrides)
        "features": f.to_dict(),
    }
    return pipe


def narrow_the_search(pipe: Pipeline, f: Features, inputs: dict[str, list[str]], index, index_path, embedder: str, llm) -> str | None:
    """``select`` (the collections the question fits, or the caller's list) and ``intent`` (metadata the
    question's words or its route ask for), in front of retrieval; returns the socket with the filters."""
    sender = None
    if f.select_collections != "off" or f.collections:
        backend = "llm" if f.select_collections == "llm" else "embedding"  # an explicit list overrides either
        pipe.add_component("select", CollectionSelector(index=index, index_path=index_path, backend=backend, generator=llm("select") if backend == "llm" else None, embedder_model=embedder))
        inputs["question"].append("select.query")
        if f.collections:
            inputs["collections"] = ["select.collections"]
        sender = "select.filters"
    if f.intent_filters:
        pipe.add_component("intent", IntentFilter(index=index, index_path=index_path, route_filters=f.route_filters or None))
        inputs["question"].append("intent.query")
        if f.routing:
            pipe.connect("router.route", "intent.route")
        if sender:
            pipe.connect(sender, "intent.filters")
        sender = "intent.filters"
    if sender:
        pipe.connect(sender, "retrieve.filters")
    return sender


def build_planning_pipeline(f: Features, generator: Any, index: RagIndex | None, index_path: str | None, config: RagConfig, step_generators: dict[str, Any] | None = None) -> Pipeline:
    """decompose -> per_part: the question's parts, each answered by the graph of ``f`` without planning."""
    inner_features = replace(f, decompose=False)
    inner = build_pipeline(inner_features, generator, index=index, index_path=index_path, config=config, step_generators=step_generators)
    pipe = Pipeline(max_runs_per_component=1)
    pipe.add_component("decompose", QueryDecomposer(backend=f.decomposer_backend, generator=(step_generators or {}).get("decompose", generator) if f.decomposer_backend != "rules" else None,
                                                     max_parts=f.max_parts, prompt=f.step_prompts.get("decompose")))
    pipe.add_component("per_part", PerPartAnswerer(pipeline=inner, features=inner_features.to_dict()))
    pipe.connect("decompose.parts", "per_part.parts")
    pipe.connect("decompose.kind", "per_part.kind")
    pipe.metadata["ragkit"] = {
        **inner.metadata["ragkit"],
        "inputs": {"question": ["decompose.query", "per_part.question"], "top_k": [], "answer_mode": []},
        "support_threshold": None,  # the inner graph gets its own
        "features": f.to_dict(),
    }
    return pipe


def graph_inputs(pipe: Pipeline, question: str) -> dict[str, dict[str, Any]]:
    """``Pipeline.run`` data for ``question``: every socket the graph leaves for the caller."""
    meta = pipe.metadata.get("ragkit") or {}
    values = {"question": question, "top_k": meta.get("top_k", Features().top_k), "answer_mode": meta.get("answer_mode", "free"), "collections": meta.get("collections")}
    data: dict[str, dict[str, Any]] = {}
    for name, sockets in (meta.get("inputs") or {}).items():
        for socket in sockets:
            component_name, input_name = socket.split(".", 1)
            data.setdefault(component_name, {})[input_name] = values[name]
    if meta.get("support_threshold") is not None:
        data.setdefault("confidence", {})["support_threshold"] = meta["support_threshold"]
    return data


class DrawingOnlyLLM:
    """Stands in for the LLM when a graph is only drawn: nothing is loaded, nothing is called."""

    def to_dict(self) -> dict[str, Any]:
        return {"type": f"{__name__}.DrawingOnlyLLM", "init_parameters": {}}

    def run(self, messages, **kwargs):  # pragma: no cover - a drawing never runs
        raise RuntimeError("the drawing-only LLM cannot answer")


def features_label(features: Features) -> str:
    on = [name for name in ("rewrite", "gate", "decompose", "expand", "intent_filters", "multi_hop", "fallback", "sql_route", "routing", "hyde", "rerank", "grading", "hallucination_check", "self_correction") if getattr(features, name)]
    return "plain RAG" if not on else " + ".join(on)


def draw(features: Features, config: RagConfig | None = None) -> str:
    """The Mermaid text of the graph ``features`` compile to, without loading any model or index."""
    from ragkit.pipeline.mermaid import to_mermaid

    return to_mermaid(build_pipeline(features, DrawingOnlyLLM(), index_path="(drawing)", config=config), title=features_label(features))
