"""Collections (index side, manifest, CLI), filtered retrieval, CollectionSelector and IntentFilter.

Unit tests use a fake 8-d embedder and MockChatGenerator; the tests marked ``integration`` index
small folders with the real embedded all-MiniLM-L6-v2 (from the sentence-transformers package
data, offline)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from haystack import Document
from haystack.components.generators.chat import MockChatGenerator

from conftest import fake_embedding
from ragkit.components.collection_selector import CollectionSelector
from ragkit.components.intent_filter import IntentFilter
from ragkit.index.filters import FilterError, check_collection_name, merge_filters, normalize_filters
from ragkit.index.records import sha256
from ragkit.index.retrieval import HybridRetriever
from ragkit.index.store import IndexCorruptedError, RagIndex

WIKI_N, DOCS_N = 120, 8


def _chunk(i: int, text: str, source: str, collection: str | None, file_type: str, section: str | None = None) -> Document:
    meta = {"source": source, "file_type": file_type, "chunk_index": i}
    if collection is not None:
        meta["collection"] = collection
    if section is not None:
        meta["section"] = section
    return Document(content=text, meta=meta, embedding=fake_embedding(text))


def _fixture_index(dense_index: str = "flat") -> RagIndex:
    """120 wiki chunks (markdown, two sections, two files) that all mention rivers, and 8
    python-docs chunks (PDF and HTML) that mention rivers less: unfiltered, the docs rank low."""
    index = RagIndex(embedder="fake", dim=8, dense_index=dense_index)
    wiki = [
        _chunk(i, f"The river {i} flows past town {i}; river barges and river banks, river river.", f"wiki/River{i % 2}.md", "wiki", "markdown",
               "Early life" if i % 3 == 0 else "Course")
        for i in range(WIKI_N)
    ]
    docs = [
        _chunk(i, f"functools.partial example {i} with a river of arguments.", "functools.pdf" if i < 5 else "errors.html", "python-docs",
               "pdf" if i < 5 else "html")
        for i in range(DOCS_N)
    ]
    index.add(wiki, source_hashes={"wiki/River0.md": "a", "wiki/River1.md": "b"})
    index.add(docs, source_hashes={"functools.pdf": "c", "errors.html": "d"})
    index.add([_chunk(0, "How to install: run pip install.", "README.md", "python-docs", "markdown", "Install")])
    index.collections.update({"wiki": "Encyclopedia articles about rivers and towns", "python-docs": "Python library documentation"})
    return index


@pytest.fixture
def index() -> RagIndex:
    return _fixture_index()


@pytest.fixture
def saved(index, tmp_path) -> Path:
    index.save(tmp_path / "idx")
    return tmp_path / "idx"


# -- the filter format -----------------------------------------------------------------------------
def test_filter_format_normalizes_aliases_and_rejects_what_it_cannot_apply():
    assert normalize_filters(None) is None and normalize_filters({}) is None
    assert normalize_filters({"file_type": ["md", ".PDF", "txt", "md"], "collection": "wiki"}) == {
        "file_type": ["markdown", "pdf", "text"], "collection": ["wiki"]}
    for bad in (["wiki"], {"collection": []}, {"collection": [["nested"]]}, {"": ["x"]}, {"operator": "XOR", "conditions": []}):
        with pytest.raises(FilterError):
            normalize_filters(bad)
    assert merge_filters({"collection": ["a", "b"]}, {"collection": ["b", "c"], "file_type": "pdf"}) == {"collection": ["b"], "file_type": ["pdf"]}
    assert merge_filters({"collection": ["a"]}, {"collection": ["b"]}) is None  # contradiction
    assert merge_filters(None, {"collection": "a"}) == {"collection": ["a"]} and merge_filters(None, None) == {}


def test_collection_names_are_short_slugs():
    assert check_collection_name("python-docs_2") == "python-docs_2"
    for bad in ("", "Wiki", "has space", "-lead", "x" * 49, "../etc", None, 3):
        with pytest.raises(ValueError, match="slug"):
            check_collection_name(bad)


# -- the index ---------------------------------------------------------------------------------------
def test_every_chunk_has_a_collection_and_a_source_stays_in_one(index):
    plain = RagIndex(embedder="fake", dim=8)
    plain.add([Document(content="no collection given", meta={"source": "a.md"}, embedding=fake_embedding("x"))])
    assert next(iter(plain.chunks.values())).meta["collection"] == "default" and plain.collections == {"default": ""}
    assert plain.sources["a.md"].collection == "default"
    with pytest.raises(ValueError, match="one collection"):
        index.add([_chunk(99, "more river", "functools.pdf", "wiki", "pdf")])
    with pytest.raises(ValueError, match="slug"):
        index.add([_chunk(99, "bad name", "new.md", "Not A Slug", "markdown")])
    assert len(index) == WIKI_N + DOCS_N + 1  # the refused batches changed nothing
    assert index.collection_counts() == {"wiki": WIKI_N, "python-docs": DOCS_N + 1}


def test_manifest_round_trip_keeps_collections_descriptions_and_meta(index, saved):
    manifest = json.loads((RagIndex.live_dir(saved) / "manifest.json").read_text())
    assert manifest["collections"] == {"python-docs": "Python library documentation", "wiki": "Encyclopedia articles about rivers and towns"}
    assert manifest["sources"]["functools.pdf"]["collection"] == "python-docs"
    again = RagIndex.load(saved)
    assert again.collections == index.collections and again.collection_counts() == index.collection_counts()
    assert {d.meta["collection"] for d in again.chunks.values()} == {"wiki", "python-docs"}
    assert again.sources["wiki/River0.md"].collection == "wiki"


def _make_old_format(folder: Path) -> None:
    """Rewrite a saved version as ragkit wrote it before collections: no "collection" in any chunk's
    meta or source entry, no "collections" in the manifest (checksums updated to match)."""
    live = RagIndex.live_dir(folder)
    manifest = json.loads((live / "manifest.json").read_text())
    for name in ("chunks.jsonl", "parents.jsonl"):
        lines = []
        for line in (live / name).read_text().splitlines():
            record = json.loads(line)
            record["meta"].pop("collection", None)
            lines.append(json.dumps(record))
        (live / name).write_text("".join(line + "\n" for line in lines))
        manifest["files"][name] = sha256(live / name)
    manifest.pop("collections")
    for info in manifest["sources"].values():
        info.pop("collection")
    (live / "manifest.json").write_text(json.dumps(manifest))


def test_an_index_from_before_collections_loads_with_everything_in_default(saved):
    _make_old_format(saved)
    old = RagIndex.load(saved)
    assert old.collections == {"default": ""} and old.collection_counts() == {"default": WIKI_N + DOCS_N + 1}
    assert {s.collection for s in old.sources.values()} == {"default"}
    assert len(old.sparse_search("river", 200, filters={"collection": ["default"]})) == len(old.sparse_search("river", 200))
    old.save(saved)  # the next save writes the new format
    assert json.loads((RagIndex.live_dir(saved) / "manifest.json").read_text())["collections"] == {"default": ""}


def test_a_manifest_with_malformed_collections_is_refused(saved):
    live = RagIndex.live_dir(saved)
    manifest = json.loads((live / "manifest.json").read_text())
    manifest["collections"] = ["wiki"]
    (live / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexCorruptedError, match="collections"):
        RagIndex.load(saved)


def test_moving_sources_retags_without_touching_vectors(index):
    q = fake_embedding("functools.partial example 3 with a river of arguments.")
    before = [d.id for d in index.dense_search(q, 3)]
    assert index.move_sources({"errors.html": "wiki"}) == 3
    assert index.sources["errors.html"].collection == "wiki"
    assert index.collection_counts() == {"wiki": WIKI_N + 3, "python-docs": 6}
    assert [d.id for d in index.dense_search(q, 3)] == before  # same chunks, same ids
    assert {d.meta["source"] for d in index.sparse_search("functools", 10, filters={"collection": "python-docs"})} == {"functools.pdf"}


# -- filtered retrieval ------------------------------------------------------------------------------
def _exact_dense(index: RagIndex, query: list[float], admitted: set[str], k: int) -> list[str]:
    vectors = {cid: index._dense.reconstruct(index._faiss_id[cid]) for cid in admitted}
    q = np.asarray(query, dtype="float32")
    q /= np.linalg.norm(q)
    return sorted(admitted, key=lambda cid: -float(vectors[cid] @ q))[:k]


@pytest.mark.parametrize("dense_index", ["flat", "hnsw"])
def test_filtered_dense_search_is_the_exact_top_k_of_the_matching_chunks(dense_index):
    index = _fixture_index(dense_index)
    query = fake_embedding("a question about rivers")
    unfiltered = index.dense_search(query, 5)
    docs = {cid for cid, d in index.chunks.items() if d.meta["collection"] == "python-docs"}
    found = index.dense_search(query, 5, filters={"collection": ["python-docs"]})
    assert len(found) == 5 and all(d.meta["collection"] == "python-docs" for d in found)
    assert [d.id for d in found] == _exact_dense(index, query, docs, 5)
    # post-filtering the unfiltered top 5 would have returned fewer (the docs are 9 of 129 chunks)
    assert sum(d.meta["collection"] == "python-docs" for d in unfiltered) < 5
    assert index.dense_search(query, 5) == unfiltered  # no filter: unchanged


def test_filtered_sparse_search_is_the_top_k_of_the_matching_chunks(index):
    everything = index.sparse_search("river", len(index))
    admitted = [d for d in everything if d.meta["file_type"] in ("pdf", "html")]
    found = index.sparse_search("river", 5, filters={"file_type": ["pdf", "html"]})
    assert len(found) == 5 and all(d.meta["file_type"] in ("pdf", "html") for d in found)
    # the same scores as the best 5 admitted chunks of the unfiltered ranking (ties may swap places)
    assert [round(d.score, 5) for d in found] == [round(d.score, 5) for d in admitted[:5]]
    assert all(d.meta["file_type"] == "markdown" for d in index.sparse_search("river", 5))  # post-filtering these would leave nothing


def test_hybrid_retrieval_with_filters_returns_top_k_matching_chunks(index):
    retriever = HybridRetriever(index, embedder=object())  # never called: every call passes query_embedding
    query = fake_embedding("rivers")
    for mode in ("dense", "sparse", "hybrid"):
        result = retriever.retrieve("river arguments", top_k=4, mode=mode, query_embedding=query, filters={"collection": ["python-docs"], "file_type": "pdf"})
        assert len(result.documents) == 4, mode
        assert all(d.meta["source"] == "functools.pdf" for d in result.documents), mode
    haystack_style = {"operator": "AND", "conditions": [{"field": "meta.collection", "operator": "==", "value": "python-docs"},
                                                        {"field": "meta.file_type", "operator": "==", "value": "pdf"}]}
    same = retriever.retrieve("river arguments", top_k=4, query_embedding=query, filters=haystack_style)
    simple = retriever.retrieve("river arguments", top_k=4, query_embedding=query, filters={"collection": "python-docs", "file_type": "pdf"})
    assert [d.id for d in same.documents] == [d.id for d in simple.documents]
    assert retriever.retrieve("river", top_k=4, query_embedding=query, filters={"collection": ["nowhere"]}).documents == []
    with pytest.raises(FilterError, match="colection"):
        retriever.retrieve("river", top_k=4, query_embedding=query, filters={"colection": ["wiki"]})
    with pytest.raises(FilterError, match="empty list"):
        retriever.retrieve("river", top_k=4, query_embedding=query, filters={"collection": []})


def test_index_retriever_takes_filters_on_its_socket(saved):
    from ragkit.components.index_retriever import IndexRetriever

    retriever = IndexRetriever(index_path=str(saved), mode="sparse")
    out = retriever.run(query="river", top_k=3, filters={"collection": ["python-docs"]})
    assert len(out["documents"]) == 3 and {d.meta["collection"] for d in out["documents"]} == {"python-docs"}
    assert {d.meta["collection"] for d in retriever.run(query="river", top_k=3)["documents"]} == {"wiki"}
    assert "filters" in retriever.__haystack_input__._sockets_dict


# -- CollectionSelector ------------------------------------------------------------------------------
def _selector(index, reply=None, raises=None):
    calls = []

    def respond(messages):
        calls.append(messages)
        if raises:
            raise raises
        return reply

    return CollectionSelector(index=index, backend="llm", chat_generator=MockChatGenerator(response_fn=respond)), calls


def test_llm_selector_takes_a_valid_name_and_falls_back_to_all_on_garbage_or_failure(index):
    selector, calls = _selector(index, reply="python-docs")
    out = selector.run(query="What does functools.partial do?")
    assert out["collections"] == ["python-docs"] and out["filters"] == {"collection": ["python-docs"]}
    assert out["scores"] == {"python-docs": 1.0, "wiki": 0.0} and "fallback" not in out["selection"]
    system = calls[0][0].text
    assert "- wiki: Encyclopedia articles" in system and "- python-docs: Python library" in system

    garbage, _ = _selector(index, reply="banana bread")
    out = garbage.run(query="What does functools.partial do?")
    assert sorted(out["collections"]) == ["python-docs", "wiki"] and out["filters"] == {}
    assert out["selection"]["fallback"].startswith("parse_failed")

    broken, _ = _selector(index, raises=TimeoutError("server gone"))
    out = broken.run(query="What does functools.partial do?")
    assert out["filters"] == {} and out["selection"]["fallback"].startswith("llm_error") and "server gone" in out["selection"]["fallback"]


def test_explicit_collections_override_and_unknown_names_are_reported_not_raised(index):
    selector, calls = _selector(index, reply="wiki")
    out = selector.run(query="anything", collections=["python-docs"])
    assert out["collections"] == ["python-docs"] and out["filters"] == {"collection": ["python-docs"]} and not calls
    out = selector.run(query="anything", collections=["nope", "wiki"])
    assert out["collections"] == ["wiki"] and "'nope'" in out["selection"]["errors"][0] and "python-docs, wiki" in out["selection"]["errors"][0]
    out = selector.run(query="anything", collections=["nope"])
    assert sorted(out["collections"]) == ["python-docs", "wiki"] and out["filters"] == {} and out["selection"]["errors"]
    assert not calls


def test_selector_is_a_free_no_op_with_one_collection_or_no_descriptions(index):
    one = RagIndex(embedder="fake", dim=8)
    one.add([_chunk(0, "only text", "a.md", "solo", "markdown")])
    one.collections["solo"] = "Everything"
    selector, calls = _selector(one, reply="solo")
    out = selector.run(query="anything")
    assert out == {"collections": ["solo"], "filters": {}, "scores": {}, "selection": out["selection"]} and not calls
    assert selector.run(query="anything", collections=["solo"])["filters"] == {}
    empty, calls = _selector(RagIndex(embedder="fake", dim=8), reply="x")
    assert empty.run(query="anything")["collections"] == [] and not calls

    index.collections.update({"wiki": "", "python-docs": ""})
    for backend in ("embedding", "llm"):
        selector = CollectionSelector(index=index, backend=backend, chat_generator=MockChatGenerator(responses="wiki"))
        out = selector.run(query="anything")
        assert out["filters"] == {} and "no collection has a description" in out["selection"]["reason"]
        assert selector._embedder is None  # the embedding model was never loaded


def test_selector_round_trips_through_to_dict(saved):
    selector = CollectionSelector(index_path=str(saved), backend="llm", chat_generator=MockChatGenerator(responses="wiki"), margin=0.2, min_similarity=0.1)
    again = CollectionSelector.from_dict(selector.to_dict())
    assert again.to_dict() == selector.to_dict() and again.backend == "llm" and again.margin == 0.2
    assert again.run(query="rivers")["collections"] == ["wiki"]
    with pytest.raises(ValueError):
        CollectionSelector(index_path=str(saved), backend="llm")
    with pytest.raises(ValueError):
        CollectionSelector(index_path=str(saved), backend="magic")
    with pytest.raises(ValueError, match="in-memory"):
        CollectionSelector(index=RagIndex(embedder="fake", dim=8)).to_dict()


# -- IntentFilter ------------------------------------------------------------------------------------
@pytest.mark.parametrize("question, expected", [
    ("According to the PDF, what does partial return?", {"file_type": ["pdf"]}),
    ("What does the PDF say about partial?", {"file_type": ["pdf"]}),
    ("Where do the rivers flow, in the markdown notes?", {"file_type": ["markdown"]}),
    ("Find it in the PDF or the HTML pages", {"file_type": ["pdf", "html"]}),
    ("How do I convert a PDF to text?", {}),
    ("How are fonts stored in a PDF?", {}),
    ("What does River1.md say about barges?", {"source": ["wiki/River1.md"]}),
    ("What does wiki/River0.md say?", {"source": ["wiki/River0.md"]}),
    ("How do I install it, according to the README?", {"source": ["README.md"]}),
    ("What happened under the 'Early life' section?", {"section": ["Early life"]}),
    ("What is in the course section?", {"section": ["Course"]}),
    ("Which towns are in the wiki collection?", {"collection": ["wiki"]}),
    ("Where was Tesla born?", {}),
])
def test_intent_rules(index, question, expected):
    out = IntentFilter(index=index).run(query=question)
    assert out["filters"] == expected, out["reasons"]


def test_intent_filters_the_index_cannot_satisfy_are_dropped_with_a_reason(index):
    intent = IntentFilter(index=index)
    out = intent.run(query="Is it in the source code?")
    assert out["filters"] == {} and "code files, but the index holds none" in out["reasons"][0]
    out = intent.run(query="Which rivers are in the atlas collection?")
    assert out["filters"] == {} and "'atlas'" in out["reasons"][0]
    # the selector chose python-docs, whose only markdown chunk is the README: both apply
    out = intent.run(query="What is in the markdown docs?", filters={"collection": ["python-docs"]})
    assert out["filters"] == {"collection": ["python-docs"], "file_type": ["markdown"]}
    # ... but python-docs has no "Early life" section: that step is dropped, the collection stays
    out = intent.run(query="What happened under the Early life section?", filters={"collection": ["python-docs"]})
    assert out["filters"] == {"collection": ["python-docs"]} and "would match no chunk" in out["reasons"][-1]
    out = intent.run(query="Which towns are in the wiki collection?", filters={"collection": ["python-docs"]})
    assert out["filters"] == {"collection": ["python-docs"]} and "contradicts" in out["reasons"][-1]
    out = intent.run(query="anything", filters={"collection": ["nowhere"]})
    assert out["filters"] == {} and "would match no chunk" in out["reasons"][0]
    no_sections = RagIndex(embedder="fake", dim=8)
    no_sections.add([_chunk(0, "text", "a.md", "solo", "markdown")])
    out = IntentFilter(index=no_sections).run(query="What is under the Course section?")
    assert out["filters"] == {} and "records no sections" in out["reasons"][0]


def test_route_policy_applies_only_on_its_route(index):
    intent = IntentFilter(index=index, route_filters={"SUMMARY": {"file_type": ["md"]}, "CODE": {"file_type": ["python"]}})
    assert intent.run(query="Summarize the rivers", route="SUMMARY")["filters"] == {"file_type": ["markdown"]}
    assert intent.run(query="Summarize the rivers", route="FACTUAL")["filters"] == {}
    assert intent.run(query="Summarize the rivers")["filters"] == {}
    out = intent.run(query="show me", route="CODE")
    assert out["filters"] == {} and "route CODE policy" in out["reasons"][0] and "no chunk" in out["reasons"][0]
    assert IntentFilter(index=index, rules=False).run(query="According to the PDF?")["filters"] == {}
    with pytest.raises(FilterError):
        IntentFilter(index=index, route_filters={"X": {"file_type": []}})
    with pytest.raises(ValueError):
        IntentFilter(index=index, route_filters={"X": {}})


def test_intent_filter_round_trips_through_to_dict(saved):
    intent = IntentFilter(index_path=str(saved), route_filters={"SUMMARY": {"collection": ["wiki"]}}, rules=False)
    again = IntentFilter.from_dict(intent.to_dict())
    assert again.to_dict() == intent.to_dict()
    assert again.run(query="x", route="SUMMARY")["filters"] == {"collection": ["wiki"]}


def test_selector_and_intent_filter_chain_into_the_retriever_in_a_pipeline(saved):
    from haystack import Pipeline

    from ragkit.components.index_retriever import IndexRetriever

    pipe = Pipeline()
    pipe.add_component("select", CollectionSelector(index_path=str(saved), backend="llm", chat_generator=MockChatGenerator(responses="python-docs")))
    pipe.add_component("intent", IntentFilter(index_path=str(saved)))
    pipe.add_component("retrieve", IndexRetriever(index_path=str(saved), mode="sparse"))
    pipe.connect("select.filters", "intent.filters")
    pipe.connect("intent.filters", "retrieve.filters")
    question = "According to the PDF, what is a river of arguments?"
    out = pipe.run({"select": {"query": question}, "intent": {"query": question}, "retrieve": {"query": question, "top_k": 3}})
    assert [d.meta["source"] for d in out["retrieve"]["documents"]] == ["functools.pdf"] * 3


def test_the_chain_round_trips_through_haystack_yaml(saved):
    from haystack import Pipeline

    from ragkit.components.index_retriever import IndexRetriever

    pipe = Pipeline()
    pipe.add_component("select", CollectionSelector(index_path=str(saved), backend="llm", chat_generator=MockChatGenerator(responses="wiki"), margin=0.3))
    pipe.add_component("intent", IntentFilter(index_path=str(saved), route_filters={"SUMMARY": {"file_type": ["markdown"]}}))
    pipe.add_component("retrieve", IndexRetriever(index_path=str(saved), mode="sparse"))
    pipe.connect("select.filters", "intent.filters")
    pipe.connect("intent.filters", "retrieve.filters")
    loaded = Pipeline.loads(pipe.dumps(), allowed_modules=["ragkit.*"])
    assert loaded.to_dict()["components"] == pipe.to_dict()["components"]
    assert loaded.get_component("intent").route_filters == {"SUMMARY": {"file_type": ["markdown"]}}
    assert loaded.get_component("select").margin == 0.3


# -- with the real embedder: build_index, the CLI, the embedding selector -----------------------------
WIKI_FILES = {
    "Rhine.md": "# Rhine\n\n## Course\n\nThe Rhine is a European river that flows from the Swiss Alps to the North Sea. "
                "Barges carry coal and grain along the Rhine past Basel, Cologne and Rotterdam.\n",
    "Tesla.md": "# Nikola Tesla\n\n## Early life\n\nNikola Tesla was an inventor born in 1856 in Smiljan, in the Austrian Empire. "
                "He worked for Edison in New York before founding his own laboratory.\n",
}
PYDOCS_FILES = {
    "errors.txt": "Errors and exceptions. A try statement catches an exception: put the risky code in the try clause "
                  "and handle the error in an except clause. raise throws an exception of your own.\n",
    "functools.html": "<html><body><h1>functools</h1><p>functools.partial returns a new callable with some arguments of a "
                      "Python function fixed. functools.lru_cache memoizes a function's results.</p></body></html>",
}


def _write(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def two_collections(tmp_path_factory):
    from ragkit.config import RagConfig
    from ragkit.index.indexer import build_index

    root = tmp_path_factory.mktemp("collections")
    wiki, pydocs = _write(root / "docs" / "wiki", WIKI_FILES), _write(root / "docs" / "pydocs", PYDOCS_FILES)
    index_dir = root / "idx"
    first = build_index(wiki, index_dir, RagConfig(), progress=False, collection="wiki", description="Encyclopedia articles: rivers, geography, inventors and history")
    second = build_index(pydocs, index_dir, RagConfig(), progress=False, collection="python-docs", description="Python documentation: exceptions, functools")
    return root, index_dir, first, second


@pytest.mark.integration
def test_build_index_puts_two_folders_in_two_collections(two_collections):
    from ragkit.config import RagConfig
    from ragkit.index.indexer import build_index

    root, index_dir, first, second = two_collections
    assert first.collection == "wiki" and second.collection == "python-docs" and second.chunks_added >= 2
    index = RagIndex.load(index_dir)
    assert index.collections == {"wiki": "Encyclopedia articles: rivers, geography, inventors and history", "python-docs": "Python documentation: exceptions, functools"}
    assert {s: i.collection for s, i in index.sources.items()} == {
        "Rhine.md": "wiki", "Tesla.md": "wiki", str(root / "docs" / "pydocs" / "errors.txt"): "python-docs",
        str(root / "docs" / "pydocs" / "functools.html"): "python-docs"}
    assert {d.meta["file_type"] for d in index.chunks.values() if d.meta["collection"] == "python-docs"} == {"text", "html"}
    assert all(d.meta["collection"] == "wiki" for d in index.sparse_search("river barges", 10, filters={"collection": "wiki"}))

    # a new description replaces the old one without re-embedding anything
    again = build_index(root / "docs" / "wiki", index_dir, RagConfig(), progress=False, collection="wiki", description="Wikipedia: the Rhine and Tesla")
    assert again.description_changed and again.chunks_added == 0 and again.added == []
    assert RagIndex.load(index_dir).collections["wiki"] == "Wikipedia: the Rhine and Tesla"
    with pytest.raises(ValueError, match="slug"):
        build_index(root / "docs" / "wiki", index_dir, RagConfig(), progress=False, collection="Bad Name")


@pytest.mark.integration
def test_reindexing_unchanged_files_into_another_collection_moves_them(tmp_path):
    from ragkit.config import RagConfig
    from ragkit.index.indexer import build_index

    docs = _write(tmp_path / "docs", WIKI_FILES)
    build_index(docs, tmp_path / "idx", RagConfig(), progress=False)
    assert RagIndex.load(tmp_path / "idx").collections == {"default": ""}
    moved = build_index(docs, tmp_path / "idx", RagConfig(), progress=False, collection="wiki", description="Rivers and inventors")
    assert sorted(moved.moved) == ["Rhine.md", "Tesla.md"] and moved.chunks_added == 0
    index = RagIndex.load(tmp_path / "idx")
    assert index.collections == {"wiki": "Rivers and inventors"} and set(index.collection_counts()) == {"wiki"}  # "default" emptied and dropped
    (docs / "Rhine.md").write_text("# Rhine\n\nThe Rhine now has a new paragraph about ferries.\n")
    kept = build_index(docs, tmp_path / "idx", RagConfig(), progress=False)  # no --collection: a changed file stays where it was
    assert kept.added == ["Rhine.md"] and RagIndex.load(tmp_path / "idx").sources["Rhine.md"].collection == "wiki"


@pytest.mark.integration
def test_cli_index_with_collection_and_info_lists_collections(tmp_path, capsys):
    from ragkit.ui.cli import main

    wiki, pydocs = _write(tmp_path / "wiki", WIKI_FILES), _write(tmp_path / "pydocs", PYDOCS_FILES)
    idx = str(tmp_path / "idx")
    assert main(["index", str(wiki), "--index-dir", idx, "--quiet", "--collection", "wiki", "--description", "Rivers and inventors"]) == 0
    assert "into collection wiki" in capsys.readouterr().out
    assert main(["index", str(pydocs), "--index-dir", idx, "--quiet", "--collection", "python-docs", "--description", "Python docs"]) == 0
    capsys.readouterr()
    assert main(["info", "--index-dir", idx]) == 0
    out = capsys.readouterr().out
    counts = RagIndex.load(idx).collection_counts()
    assert "collections (2):" in out
    assert f"wiki — {counts['wiki']} chunks from 2 sources: Rivers and inventors" in out
    assert f"python-docs — {counts['python-docs']} chunks from 2 sources: Python docs" in out
    assert main(["index", str(wiki), "--index-dir", idx, "--quiet", "--collection", "Not OK"]) == 2
    assert "slug" in capsys.readouterr().err
    assert main(["index", str(wiki), "--index-dir", idx, "--quiet", "--collection", "wiki", "--dry-run", "--description", "New"]) == 0
    assert "would set the description of collection wiki" in capsys.readouterr().out
    assert RagIndex.load(idx).collections["wiki"] == "Rivers and inventors"  # a dry run writes nothing


@pytest.mark.integration
@pytest.mark.parametrize("question, expected", [
    ("Where was Nikola Tesla born?", ["wiki"]),
    ("Which cities does the Rhine flow past?", ["wiki"]),
    ("How do I catch an exception in Python?", ["python-docs"]),
    ("What does functools.partial return?", ["python-docs"]),
])
def test_embedding_selector_routes_by_description(two_collections, question, expected):
    _root, index_dir, _first, _second = two_collections
    selector = CollectionSelector(index_path=str(index_dir), backend="embedding")
    selector.warm_up()
    out = selector.run(query=question)
    assert out["collections"] == expected, out
    assert out["filters"] == {"collection": expected} and set(out["scores"]) == {"wiki", "python-docs"}


@pytest.mark.integration
def test_embedding_selector_keeps_everything_for_an_off_topic_question(two_collections):
    _root, index_dir, _first, _second = two_collections
    out = CollectionSelector(index_path=str(index_dir)).run(query="hello there")
    assert out["filters"] == {} and "no description matches" in out["selection"]["reason"]
    # the engine may pass the question's embedding it already has: same choice, no second embedding
    from ragkit.llm.generators import shared_text_embedder

    vector = shared_text_embedder("all-MiniLM-L6-v2").run(text="What does functools.partial return?")["embedding"]
    out = CollectionSelector(index_path=str(index_dir)).run(query="What does functools.partial return?", query_embedding=vector)
    assert out["collections"] == ["python-docs"]
