"""ragkit's Haystack components; each is usable alone in any Haystack ``Pipeline``.

Imported on first use: ``ragkit.index.retrieval`` imports the retrievers from here, and
``IndexRetriever`` imports ``ragkit.index.retrieval`` — eager imports would go round in a circle.
"""

import importlib

_COMPONENTS = {
    "AnswerModeSelector": "ragkit.components.answer_mode",
    "BM25sRetriever": "ragkit.components.sparse_retriever",
    "CollectionSelector": "ragkit.components.collection_selector",
    "FaissRetriever": "ragkit.components.dense_retriever",
    "GuardedGenerator": "ragkit.components.guarded_generator",
    "HybridScoreJoiner": "ragkit.components.score_fusion",
    "IndexRetriever": "ragkit.components.index_retriever",
    "IntentFilter": "ragkit.components.intent_filter",
    "KeywordExpander": "ragkit.components.query_expander",
    "MultiHopReasoner": "ragkit.components.multi_hop",
    "PerPartAnswerer": "ragkit.components.per_part",
    "QueryDecomposer": "ragkit.components.query_decomposer",
    "SqlAnswerer": "ragkit.components.sql_answerer",
    "TextToolCallGenerator": "ragkit.components.text_tool_calls",
    "TokenChunker": "ragkit.components.token_chunker",
}
__all__ = list(_COMPONENTS)


def __getattr__(name: str):
    if name in _COMPONENTS:
        return getattr(importlib.import_module(_COMPONENTS[name]), name)
    raise AttributeError(f"module 'ragkit.components' has no attribute {name!r}")
