"""Retrieval with the real embedded embedder over sample_docs/."""

import pytest
from haystack import Pipeline

from ragkit.index.store import RagIndex
from ragkit.index.retrieval import MAX_QUERY_CHARS, HybridRetriever, QueryError, build_hybrid_pipeline

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("mode", ["dense", "sparse", "hybrid"])
def test_each_mode_finds_the_right_article(hybrid, mode):
    result = hybrid.retrieve("Where was Nikola Tesla born?", top_k=3, mode=mode)
    assert result.documents[0].meta["source"] == "wikipedia/Nikola_Tesla.md"
    assert all(d.score is not None for d in result.documents)
    assert "retrieve" in result.timings and ("embed" in result.timings) == (mode != "sparse")


def test_hybrid_finds_content_from_pdf_and_html(hybrid):
    pdf = hybrid.retrieve("What does functools.lru_cache do?", top_k=3).documents
    assert any(d.meta["source"].endswith("library_functools.pdf") and d.meta.get("page") for d in pdf)
    html = hybrid.retrieve("How do I use a list as a stack?", top_k=3).documents
    assert any(d.meta["source"].endswith("tutorial_datastructures.html") for d in html)


def test_top_k_is_per_call(hybrid):
    assert len(hybrid.retrieve("Rhine", top_k=2).documents) == 2
    assert len(hybrid.retrieve("Rhine", top_k=7).documents) == 7


@pytest.mark.parametrize("query", ["", "   \n", None])
def test_empty_query_is_a_clear_error(hybrid, query):
    with pytest.raises(QueryError, match="empty"):
        hybrid.retrieve(query)


def test_100kb_query_is_a_clear_error(hybrid):
    with pytest.raises(QueryError, match=f"at most {MAX_QUERY_CHARS:,}"):
        hybrid.retrieve("tesla " * 20_000)


def test_query_against_an_empty_index_is_an_explicit_empty_result(fast_config):
    empty = HybridRetriever(RagIndex(embedder="all-MiniLM-L6-v2", dim=384), fast_config.models)
    result = empty.retrieve("Where was Nikola Tesla born?")
    assert result.documents == []


def test_hybrid_as_a_plain_haystack_pipeline(sample_index):
    pipeline = build_hybrid_pipeline(sample_index, top_k=3)
    assert isinstance(pipeline, Pipeline)
    q = "Which team won Super Bowl 50?"
    docs = pipeline.run({"embedder": {"text": q}, "sparse": {"query": q}})["joiner"]["documents"]
    assert len(docs) == 3 and docs[0].meta["source"] == "wikipedia/Super_Bowl_50.md"


@pytest.mark.parametrize("question", ["Which team won Super Bowl 50?", "Where was Nikola Tesla born?", "How do I use a list as a stack?", "Rhine"])
def test_hybrid_pipeline_ranks_as_retrieve_does(sample_index, hybrid, question):
    pipeline = build_hybrid_pipeline(sample_index, top_k=5)
    piped = pipeline.run({"embedder": {"text": question}, "sparse": {"query": question}})["joiner"]["documents"]
    direct = hybrid.retrieve(question, top_k=5, mode="hybrid").documents
    assert [d.id for d in piped] == [d.id for d in direct]
    assert [d.score for d in piped] == pytest.approx([d.score for d in direct])


def test_hierarchical_index_merges_children_into_parents(tmp_path, fast_config):
    from dataclasses import replace

    from conftest import SAMPLE_DOCS
    from ragkit.index.indexer import build_index

    config = replace(fast_config, index=replace(fast_config.index, hierarchical=True, parent_words=60, child_words=20))
    build_index(SAMPLE_DOCS / "wikipedia" / "Rhine.md", tmp_path / "h", config, progress=False)
    index = RagIndex.load(tmp_path / "h")
    assert index.parents and all("__parent_id" in d.meta for d in index.chunks.values())
    retriever = HybridRetriever(index, fast_config.models)
    result = retriever.retrieve("How long is the Rhine and where does it flow?", top_k=20)
    assert "merge" in result.timings
    assert any(d.id in index.parents for d in result.documents)  # at least one parent replaced its children
    scores = [d.score for d in result.documents]
    assert None not in scores and scores == sorted(scores, reverse=True)
