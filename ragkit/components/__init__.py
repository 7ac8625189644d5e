"""ragkit's Haystack components; each is usable alone in any Haystack ``Pipeline``.

Every component of this package is importable from here, e.g.
``from ragkit.components import DocumentGrader, QueryRouter, Reranker``
(``tests/test_public_api.py`` holds this list to the ``@component`` classes of the package's files).

Imported on first use: ``ragkit.index.retrieval`` imports the retrievers from this package, and
``IndexRetriever`` imports ``ragkit.index.retrieval`` — eager imports here would go round in a circle.
"""

import importlib

_COMPONENTS = {
    "AmbiguityCheck": "ragkit.components.ambiguity_check",
    "AnswerModeSelector": "ragkit.components.answer_mode",
    "BM25sRetriever": "ragkit.components.sparse_retriever",
    "CollectionSelector": "ragkit.components.collection_selector",
    "ConfidenceScorer": "ragkit.components.confidence",
    "DocumentGrader": "ragkit.components.document_grader",
    "EvidenceSelector": "ragkit.components.evidence_selector",
    "FaissRetriever": "ragkit.components.dense_retriever",
    "FallbackRetriever": "ragkit.components.fallback_retriever",
    "FollowUpRewriter": "ragkit.components.follow_up_rewriter",
    "GuardedGenerator": "ragkit.components.guarded_generator",
    "HallucinationDetector": "ragkit.components.hallucination_detector",
    "HybridScoreJoiner": "ragkit.components.score_fusion",
    "HyDEEmbedder": "ragkit.components.hyde",
    "IndexRetriever": "ragkit.components.index_retriever",
    "InjectionGuard": "ragkit.components.injection_guard",
    "IntentFilter": "ragkit.components.intent_filter",
    "KeywordExpander": "ragkit.components.query_expander",
    "MultiHopReasoner": "ragkit.components.multi_hop",
    "PerPartAnswerer": "ragkit.components.per_part",
    "QueryDecomposer": "ragkit.components.query_decomposer",
    "QueryRewriter": "ragkit.components.query_rewriter",
    "QueryRouter": "ragkit.components.query_router",
    "Reranker": "ragkit.components.reranker",
    "RetrievalGate": "ragkit.components.retrieval_gate",
    "SelfCorrectingAnswerer": "ragkit.components.self_correction",
    "SqlAnswerer": "ragkit.components.sql_answerer",
    "TextToolCallGenerator": "ragkit.components.text_tool_calls",
    "GrammarToolCallGenerator": "ragkit.components.grammar_tool_calls",
    "TokenChunker": "ragkit.components.token_chunker",
}
__all__ = list(_COMPONENTS)


def __getattr__(name: str):
    if name in _COMPONENTS:
        return getattr(importlib.import_module(_COMPONENTS[name]), name)
    raise AttributeError(f"module 'ragkit.components' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
