"""KeywordExpander: the LLM backend under valid, garbage, refusing, failing and repeating replies;
pseudo-relevance feedback from the index; fusing the expanded BM25 lists; serialization."""

import pytest
from conftest import make_chunks
from haystack import Document, Pipeline
from haystack.components.generators.chat import MockChatGenerator

from ragkit.components.query_expander import (
    KeywordExpander, expanded_sparse_search, expansion_constraint, expansion_grammar, fuse_lists, parse_expansions,
)
from ragkit.index.store import RagIndex
from ragkit.pipeline.trace import RagkitTracer

QUESTION = "Where was Tesla born?"
TEXTS = [
    "Nikola Tesla was born in Smiljan, a village in the Lika region, in 1856.",
    "Tesla moved to New York in 1884 and worked for Thomas Edison.",
    "The Rhine flows from the Alps into the North Sea.",
    "Smiljan lies in Lika, near Gospic, and has a memorial centre for Tesla.",
    "The Danube is the second-longest river in Europe.",
]


def counting_llm(reply):
    calls = []

    def respond(messages):
        calls.append(messages)
        if isinstance(reply, Exception):
            raise reply
        return reply

    return MockChatGenerator(response_fn=respond), calls


@pytest.fixture(scope="module")
def index():
    idx = RagIndex(embedder="fake", dim=8)
    idx.add(make_chunks("tesla.md", TEXTS))
    return idx


# -- the llm backend -----------------------------------------------------------------------------
def test_a_valid_reply_gives_the_question_then_the_expansions():
    llm, calls = counting_llm('{"queries": ["Nikola Tesla birthplace", "Tesla native village Smiljan"]}')
    out = KeywordExpander(backend="llm", chat_generator=llm).run(query=QUESTION)
    assert out["queries"] == [QUESTION, "Nikola Tesla birthplace", "Tesla native village Smiljan"]
    assert out["terms"] == ["nikola", "birthplace", "native", "village", "smiljan"]
    assert out["failed"] is None and len(calls) == 1
    assert "2 short alternative queries" in calls[0][0].text and calls[0][1].text == f"Query: {QUESTION}"


@pytest.mark.parametrize("reply", [
    "", "{]", "Here are some queries: Tesla birthplace, Tesla home", '{"queries": "Tesla birthplace"}',
    '{"answer": ["Tesla birthplace"]}', '{"queries": [1, 2]}', '{"queries": ["", "  ", "?!"]}',
    '{"queries": ["' + " ".join(["word"] * 30) + '"]}',  # babble: far more words than a query
])
def test_garbage_leaves_the_question_alone_and_says_so(reply):
    llm, _ = counting_llm(reply)
    out = KeywordExpander(backend="llm", chat_generator=llm).run(query=QUESTION)
    assert out["queries"] == [QUESTION] and out["terms"] == []
    assert out["failed"].startswith("parse_failed"), out["failed"]


@pytest.mark.parametrize("reply", [
    "I'm sorry, but I can't help with that.",
    '{"queries": ["I cannot help with that request", "Sorry, I am unable to"]}',
])
def test_a_refusal_is_a_failure_not_an_expansion(reply):
    llm, _ = counting_llm(reply)
    out = KeywordExpander(backend="llm", chat_generator=llm).run(query=QUESTION)
    assert out["queries"] == [QUESTION] and out["failed"].startswith("parse_failed")


def test_an_llm_exception_degrades_and_is_traced():
    llm, _ = counting_llm(RuntimeError("server down"))
    pipeline = Pipeline()
    pipeline.add_component("expand", KeywordExpander(backend="llm", chat_generator=llm))
    with RagkitTracer().collect() as trace:
        out = pipeline.run({"expand": {"query": QUESTION}})["expand"]
    assert out["queries"] == [QUESTION] and out["failed"].startswith("llm_error: ") and "RuntimeError" in out["failed"]
    step = trace.step("expand")
    assert step.fallbacks and step.llm_calls == 1 and step.decision["expansions"] == 0


def test_duplicate_expansions_and_repeats_of_the_question_are_dropped():
    llm, _ = counting_llm('{"queries": ["Tesla birthplace", "tesla   BIRTHPLACE", "where was tesla born"]}')
    out = KeywordExpander(backend="llm", chat_generator=llm, n_expansions=3).run(query=QUESTION)
    assert out["queries"] == [QUESTION, "Tesla birthplace", "where was tesla born"]
    llm, _ = counting_llm('{"queries": ["Where was Tesla born?", "where  was tesla BORN?"]}')
    out = KeywordExpander(backend="llm", chat_generator=llm).run(query=QUESTION)
    assert out["queries"] == [QUESTION] and out["failed"].startswith("parse_failed")


def test_replies_are_bounded_and_salvaged():
    # more than asked for: the first n kept; a reply cut at max_tokens keeps its complete strings
    assert parse_expansions('{"queries": ["Tesla birthplace", "Tesla home", "Tesla village"]}', QUESTION, 2) == ["Tesla birthplace", "Tesla home"]
    assert parse_expansions('{"queries": ["Tesla birthplace", "Nikola Te', QUESTION, 2) == ["Tesla birthplace"]
    assert parse_expansions('```json\n{"queries": ["Tesla birthplace"]}\n```', QUESTION, 2) == ["Tesla birthplace"]

    seen = {}

    class RecordingGenerator:
        def run(self, messages, generation_kwargs=None):
            seen.update(generation_kwargs or {})
            from haystack.dataclasses import ChatMessage

            return {"replies": [ChatMessage.from_assistant('{"queries": ["Tesla birthplace", "Tesla home"]}')]}

    KeywordExpander(backend="llm", chat_generator=RecordingGenerator()).run(query=QUESTION)
    assert seen["max_tokens"] <= 60 and seen["temperature"] == 0.0


def test_the_constraints_llama_cpp_and_openai():
    from llama_cpp import LlamaGrammar

    for n in (1, 2, 4):
        grammar = expansion_grammar(n)
        LlamaGrammar.from_string(grammar, verbose=False)  # parses
        assert grammar.count("item") == n + 1
    FakeOpenAIChatGenerator = type("FakeOpenAIChatGenerator", (), {})
    schema = expansion_constraint(FakeOpenAIChatGenerator(), 3)["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["queries"]["minItems"] == schema["properties"]["queries"]["maxItems"] == 3


def test_haystacks_prompt_template_can_be_used():
    from haystack.components.query.query_expander import DEFAULT_PROMPT_TEMPLATE

    llm, calls = counting_llm('{"queries": ["Tesla birthplace", "Tesla home town"]}')
    out = KeywordExpander(backend="llm", chat_generator=llm, prompt_template=DEFAULT_PROMPT_TEMPLATE).run(query=QUESTION)
    assert out["queries"][1:] == ["Tesla birthplace", "Tesla home town"]
    assert len(calls[0]) == 1 and f'Query: "{QUESTION}"' in calls[0][0].text and "exactly 2 expanded queries" in calls[0][0].text


# -- the prf backend -----------------------------------------------------------------------------
def test_prf_adds_terms_from_the_feedback_chunks_not_from_the_question(index):
    out = KeywordExpander(backend="prf", index=index, feedback_docs=2, n_terms=4).run(query=QUESTION)
    feedback = index.sparse_search(QUESTION, 2)
    assert out["failed"] is None and len(out["queries"]) == 2 and len(out["terms"]) == 4
    assert out["queries"][0] == QUESTION and out["queries"][1] == f"{QUESTION} {' '.join(out['terms'])}"
    feedback_words = {w.strip(",.").lower() for d in feedback for w in d.content.split()}
    question_terms = set().union(*index.terms([QUESTION]))
    for term in out["terms"]:
        assert term in feedback_words, term
        assert not index.terms([term])[0] & question_terms, term
    assert out["terms"][0] == "1856" and "nikola" in out["terms"]  # the best chunk holds most of the feedback's score
    assert not {"rhine", "danube", "river"} & set(out["terms"])  # from chunks BM25 did not feed back


def test_prf_weighs_terms_by_feedback_frequency_and_idf():
    idx = RagIndex(embedder="fake", dim=8)
    idx.add(make_chunks("coil.md", ["tesla coil resonance", "tesla coil voltage", "river rhine", "river danube", "voltage meter"]))
    out = KeywordExpander(backend="prf", index=idx, feedback_docs=2, n_terms=3).run(query="tesla")
    # coil: in both feedback chunks; resonance: in one, but rarer in the index than voltage
    assert out["terms"] == ["coil", "resonance", "voltage"] and out["queries"] == ["tesla", "tesla coil resonance voltage"]


def test_prf_with_nothing_to_feed_back(index):
    out = KeywordExpander(backend="prf", index=index).run(query="quantum chromodynamics")
    assert out == {"queries": ["quantum chromodynamics"], "terms": [], "failed": out["failed"]} and out["failed"].startswith("no_feedback")
    empty = RagIndex(embedder="fake", dim=8)
    out = KeywordExpander(backend="prf", index=empty).run(query=QUESTION)
    assert out["queries"] == [QUESTION] and out["failed"].startswith("empty_index")
    assert expanded_sparse_search(empty, [QUESTION, "Tesla birthplace"], top_k=5) == []
    out = KeywordExpander(backend="prf", index=index).run(query="  ")
    assert out["queries"] == ["  "] and out["failed"].startswith("empty_query")


# -- fusing the lists ----------------------------------------------------------------------------
def _docs(*pairs):
    return [Document(id=i, content=i, score=s) for i, s in pairs]


@pytest.mark.parametrize("fusion", ["rrf", "scaled_sum"])
def test_fusion_favours_chunks_both_lists_found(fusion):
    original = _docs(("a", 9.0), ("b", 8.0), ("c", 2.0))
    expanded = _docs(("b", 20.0), ("d", 19.0), ("a", 5.0))
    fused = fuse_lists([original, expanded], top_k=3, fusion=fusion)
    assert [d.id for d in fused][:2] in (["a", "b"], ["b", "a"]) and len(fused) == 3
    assert {d.id for d in fused} <= {"a", "b", "c", "d"}
    # the question's list's share of the weight decides between the two lists' first hits
    lists = [_docs(("x", 9.0)), _docs(("z", 30.0))]
    assert [d.id for d in fuse_lists(lists, top_k=2, fusion=fusion, original_weight=0.8)] == ["x", "z"]
    assert [d.id for d in fuse_lists(lists, top_k=2, fusion=fusion, original_weight=0.2)] == ["z", "x"]
    assert [d.id for d in fuse_lists(lists, top_k=1, fusion=fusion)] == ["x"]  # a tie: the question's list first
    with pytest.raises(ValueError):
        fuse_lists([original, expanded], top_k=3, fusion="max")


def test_expanded_search_finds_what_only_the_expansion_matches(index):
    plain = index.sparse_search("Tesla born", 2)
    assert plain[0].content == TEXTS[0] and plain[1].content != TEXTS[3]  # the memorial chunk only says "Tesla"
    fused = expanded_sparse_search(index, ["Tesla born", "memorial centre Gospic"], top_k=2)
    assert {d.content for d in fused} == {TEXTS[0], TEXTS[3]}
    # one query (or repeats of it) is plain BM25, scores and all
    same = expanded_sparse_search(index, ["Tesla born", "Tesla born"], top_k=3)
    assert [(d.id, d.score) for d in same] == [(d.id, d.score) for d in index.sparse_search("Tesla born", 3)]


# -- construction and serialization --------------------------------------------------------------
def test_round_trips(tmp_path, index):
    llm = MockChatGenerator(responses='{"queries": ["a b"]}')
    expander = KeywordExpander(backend="llm", chat_generator=llm, n_expansions=3, max_tokens=40)
    back = KeywordExpander.from_dict(expander.to_dict())
    assert (back.backend, back.n_expansions, back.max_tokens, back.prompt_template) == ("llm", 3, 40, None)
    assert type(back.chat_generator).__name__ == "MockChatGenerator"

    index.save(tmp_path / "index")
    prf = KeywordExpander(backend="prf", index_path=str(tmp_path / "index"), feedback_docs=2, n_terms=3)
    back = KeywordExpander.from_dict(prf.to_dict())
    assert (back.feedback_docs, back.n_terms) == (2, 3)
    assert back.run(query=QUESTION) == prf.run(query=QUESTION)

    with pytest.raises(ValueError):
        KeywordExpander(backend="prf", index=RagIndex(embedder="fake", dim=8)).to_dict()  # never saved
    for bad in [dict(backend="llm"), dict(backend="prf"), dict(backend="synonyms", index=index), dict(backend="prf", index=index, n_terms=0)]:
        with pytest.raises(ValueError):
            KeywordExpander(**bad)


def test_a_metadata_filter_limits_the_feedback_and_the_search():
    idx = RagIndex(embedder="fake", dim=8)
    idx.add(make_chunks("tesla.md", TEXTS[:2]) + make_chunks("cars.md", ["Tesla sells the Model S, an electric car with a large battery."]))
    only_cars = {"source": ["cars.md"]}
    out = KeywordExpander(backend="prf", index=idx, feedback_docs=3, n_terms=3).run(query=QUESTION, filters=only_cars)
    assert out["failed"] is None and set(out["terms"]) <= {"sells", "model", "electric", "car", "large", "battery"}
    found = expanded_sparse_search(idx, out["queries"], top_k=5, filters=only_cars)
    assert [d.meta["source"] for d in found] == ["cars.md"]
