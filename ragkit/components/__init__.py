"""ragkit's Haystack components; each is usable alone in any Haystack ``Pipeline``."""

from ragkit.components.dense_retriever import FaissRetriever
from ragkit.components.index_retriever import IndexRetriever
from ragkit.components.sparse_retriever import BM25sRetriever
from ragkit.components.token_chunker import TokenChunker

__all__ = ["BM25sRetriever", "FaissRetriever", "IndexRetriever", "TokenChunker"]
