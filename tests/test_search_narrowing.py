"""The engine with collections, intent filters, expansion and fallbacks wired in (mock LLM, real embedder)."""

import pytest
from haystack.components.generators.chat import MockChatGenerator

from ragkit.index.store import RagIndex
from ragkit.pipeline.features import Features
from ragkit.pipeline.drawing import DrawingOnlyLLM
from ragkit.pipeline.graph import build_pipeline

TESLA = "Where was Nikola Tesla born?"


@pytest.fixture(scope="module")
def two_collections(tmp_path_factory, fast_config):
    from ragkit.index.indexer import build_index

    rivers, people = tmp_path_factory.mktemp("rivers"), tmp_path_factory.mktemp("people")
    (rivers / "rhine.md").write_text("# Rhine\n\nThe Rhine flows from the Swiss Alps to the North Sea.\n")
    (rivers / "danube.md").write_text("# Danube\n\nThe Danube flows through Vienna and Budapest to the Black Sea.\n")
    (people / "tesla.md").write_text("# Tesla\n\nNikola Tesla was born in Smiljan in 1856. He studied engineering at Graz.\n")
    (people / "curie.txt").write_text("Marie Curie was born in Warsaw in 1867. She studied physics in Paris.\n")
    path = tmp_path_factory.mktemp("index") / "index"
    build_index(rivers, path, fast_config, progress=False, collection="rivers", description="European rivers: their sources, courses and mouths")
    build_index(people, path, fast_config, progress=False, collection="people", description="Biographies of scientists and inventors: births, studies, discoveries")
    return RagIndex.load(path)


def ask(index, config, features, question=TESLA):
    from ragkit.pipeline.engine import AgenticRAG

    return AgenticRAG(features, config=config, index=index, chat_generator=MockChatGenerator(responses="An answer [1].")).ask(question)


def collections_of(result):
    return {d.meta.get("collection") for d in result.sources}


def test_the_selector_searches_the_collection_the_question_fits(two_collections, fast_config):
    result = ask(two_collections, fast_config, Features(select_collections="embedding", answer_mode="free", top_k=3))
    assert result.details["collections"]["searched"] == ["people"] and collections_of(result) == {"people"}
    assert result.trace.step("select") is not None


def test_an_explicit_collection_list_overrides_the_selector(two_collections, fast_config):
    result = ask(two_collections, fast_config, Features(select_collections="embedding", collections=["rivers"], answer_mode="free", top_k=3))
    assert collections_of(result) == {"rivers"}


def test_the_question_words_narrow_the_file_type(two_collections, fast_config):
    result = ask(two_collections, fast_config, Features(intent_filters=True, answer_mode="free", top_k=3), "According to the text files, where was someone born?")
    assert {d.meta.get("file_type") for d in result.sources} == {"text"}
    assert result.details["filters"]["filters"] and result.details["filters"]["reasons"]


def test_a_route_filter_applies_on_its_route(two_collections, fast_config):
    f = Features(routing=True, intent_filters=True, route_filters={"FACTUAL": {"collection": ["people"]}}, top_k=3)
    result = ask(two_collections, fast_config, f, "Which sea does the Rhine flow into?")
    assert result.route == "FACTUAL" and collections_of(result) == {"people"}


def test_expansion_feeds_the_keyword_side(two_collections, fast_config):
    result = ask(two_collections, fast_config, Features(expand=True, retrieval_mode="sparse", answer_mode="free", top_k=2))
    expansion = result.details["expansion"]
    assert expansion["queries"][0] == TESLA and result.trace.step("expand") is not None
    dense_only = build_pipeline(Features(expand=True, retrieval_mode="dense"), DrawingOnlyLLM(), index_path="(drawing)")
    assert "expand" not in dense_only.graph.nodes  # no keyword side to widen


def test_the_fallback_drops_the_collection_filter_when_it_found_nothing_useful(two_collections, fast_config):
    f = Features(collections=["rivers"], fallback=True, fallback_strategies=["all_collections"], answer_mode="free", top_k=2)
    result = ask(two_collections, fast_config, f)
    fallback = result.details["fallback"]
    assert fallback["exit_reason"] == "recovered" and fallback["attempts"][0]["strategy"] == "all_collections"
    assert "people" in collections_of(result)


def test_the_cli_flags_set_the_features():
    from argparse import Namespace

    from ragkit.ui.cli import _features

    f = _features(Namespace(collection=["people", "rivers"], select_collections="llm", fallback=True))
    assert f.collections == ["people", "rivers"] and f.select_collections == "llm" and f.fallback
    assert _features(Namespace()).collections == []
