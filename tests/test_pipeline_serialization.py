"""Every ragkit component in one Haystack Pipeline survives a YAML round trip — once ragkit is
allowlisted for deserialization, as Haystack 3 requires for any non-Haystack module."""

import pytest
from haystack import Pipeline
from haystack.core.errors import DeserializationError
from haystack_integrations.components.generators.llama_cpp import LlamaCppChatGenerator

from ragkit.components.confidence import ConfidenceScorer
from ragkit.components.dense_retriever import FaissRetriever
from ragkit.components.document_grader import DocumentGrader
from ragkit.components.guarded_generator import GuardedGenerator
from ragkit.components.hallucination_detector import HallucinationDetector
from ragkit.components.hyde import HyDEEmbedder
from ragkit.components.index_retriever import IndexRetriever
from ragkit.components.query_router import QueryRouter
from ragkit.components.reranker import Reranker
from ragkit.components.self_correction import SelfCorrectingAnswerer
from ragkit.components.sparse_retriever import BM25sRetriever
from ragkit.components.token_chunker import TokenChunker


def llm():
    # __init__ is cheap: nothing is loaded until warm_up(), so a path is enough to serialize
    return LlamaCppChatGenerator(model="/models/qwen2.5-0.5b.gguf", n_ctx=2048)


def every_component(index_dir) -> Pipeline:
    pipe = Pipeline()
    pipe.add_component("chunker", TokenChunker(chunk_tokens=64, overlap_tokens=8))
    pipe.add_component("router", QueryRouter(backend="rules"))
    pipe.add_component("hyde", HyDEEmbedder(chat_generator=llm(), n_passages=2))
    pipe.add_component("sparse", BM25sRetriever(index_path=str(index_dir), top_k=7))
    pipe.add_component("dense", FaissRetriever(index_path=str(index_dir), top_k=7))
    pipe.add_component("hybrid", IndexRetriever(index_path=str(index_dir), mode="hybrid", candidates=12, sparse_weight=0.7))
    pipe.add_component("reranker", Reranker(backend="bi-encoder", top_k=4))
    pipe.add_component("grader", DocumentGrader(backend="llm", chat_generator=llm(), threshold=5.0))
    pipe.add_component("answer", GuardedGenerator(chat_generator=llm(), max_tokens=64))
    pipe.add_component("detector", HallucinationDetector(backend="llm_judge", chat_generator=llm(), threshold=0.6))
    pipe.add_component("corrector", SelfCorrectingAnswerer(chat_generator=llm(), threshold=0.6, max_corrections=2))
    pipe.add_component("confidence", ConfidenceScorer(floor=0.4))
    pipe.connect("sparse.documents", "reranker.documents")
    pipe.connect("reranker.documents", "grader.documents")
    return pipe


@pytest.mark.integration
def test_yaml_round_trip_with_ragkit_allowlisted(sample_index_dir):
    pipe = every_component(sample_index_dir)
    text = pipe.dumps()
    loaded = Pipeline.loads(text, allowed_modules=["ragkit.*"])
    before, after = pipe.to_dict(), loaded.to_dict()
    assert after["components"] == before["components"]
    def edges(d):
        return sorted((c["sender"], c["receiver"]) for c in d["connections"])
    assert edges(after) == edges(before)
    hybrid = loaded.get_component("hybrid")
    assert (hybrid.mode, hybrid.candidates, hybrid.sparse_weight) == ("hybrid", 12, 0.7)
    corrector = loaded.get_component("corrector")
    assert corrector.max_corrections == 2 and corrector.detector.threshold == 0.6
    assert loaded.get_component("grader").chat_generator.model_path == "/models/qwen2.5-0.5b.gguf"


@pytest.mark.integration
def test_haystack_refuses_ragkit_until_allowlisted(sample_index_dir):
    with pytest.raises(DeserializationError, match="ragkit"):
        Pipeline.loads(every_component(sample_index_dir).dumps())
