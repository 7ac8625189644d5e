"""MultiHopReasoner: sufficiency check, bridge entity, follow-up retrieval, and every bound — with mock LLMs."""

import pytest
from haystack import Document
from haystack.components.generators.chat import MockChatGenerator

from ragkit.components.multi_hop import EXIT_REASONS, MultiHopReasoner, follow_up_query, normalized
from ragkit.pipeline.features import Features
from ragkit.pipeline.drawing import draw
from ragkit.pipeline.trace import RagkitTracer

QUESTION = "Who was the grandfather of the emperor who founded the Yuan dynasty?"


@pytest.fixture(scope="module")
def hop_index(tmp_path_factory, fast_config):
    from ragkit.index.indexer import build_index

    folder = tmp_path_factory.mktemp("docs")
    (folder / "yuan.md").write_text("# Yuan dynasty\n\nThe Yuan dynasty was founded by Kublai Khan in 1271. It ruled China until 1368.\n")
    (folder / "kublai.md").write_text("# Kublai Khan\n\nKublai Khan was a grandson of Genghis Khan. His brother Möngke ruled before him.\n")
    (folder / "rhine.md").write_text("# Rhine\n\nThe Rhine flows from the Swiss Alps to the North Sea through Germany and the Netherlands.\n")
    path = tmp_path_factory.mktemp("index") / "index"
    build_index(folder, path, fast_config, progress=False)
    return str(path)


def first_retrieval(index_path, question=QUESTION, top_k=1):
    from ragkit.components.index_retriever import IndexRetriever

    return IndexRetriever(index_path=index_path, mode="sparse").run(query=question, top_k=top_k)["documents"]


def scripted(replies):
    """yes/no checks and bridge requests get the next scripted reply for their kind."""
    calls = []

    def respond(messages):
        text = messages[-1].text
        kind = "check" if "Reply yes or no" in text else "bridge"
        calls.append(kind)
        queue = replies[kind]
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return MockChatGenerator(response_fn=respond), calls


def test_follow_up_is_the_bridge_and_what_the_evidence_did_not_cover():
    query = follow_up_query(QUESTION, "Kublai Khan", "The Yuan dynasty was founded by Kublai Khan in 1271.")
    assert query == "Kublai Khan grandfather emperor"
    assert normalized("Kublai Khan grandfather") == normalized("grandfather Kublai  Khan?")


def test_insufficient_evidence_follows_the_bridge_then_stops_when_sufficient(hop_index):
    llm, calls = scripted({"check": ["no", "yes"], "bridge": ["Kublai Khan"]})
    docs = first_retrieval(hop_index)
    hop = MultiHopReasoner(chat_generator=llm, index_path=hop_index, retrieval_mode="sparse", max_iterations=2, max_llm_calls=4, check="llm")
    with RagkitTracer().collect() as trace:
        out = hop.run(query=QUESTION, documents=docs, top_k=2)
    assert out["exit_reason"] == "sufficient" and calls == ["check", "bridge", "check"]
    assert out["hops"][0]["bridge"] == "Kublai Khan" and out["hops"][0]["query"].startswith("Kublai Khan")
    assert any("grandson of Genghis Khan" in (d.content or "") for d in out["documents"])
    assert out["documents"][-1].id == docs[0].id  # what the first retrieval found is kept, after the new chunks
    assert "Kublai Khan" in out["query"]


@pytest.mark.parametrize("iterations, budget, expected, n_calls", [(1, 4, "max_iterations", 2), (3, 1, "budget", 1), (3, 3, "budget", 3)])
def test_every_bound_holds_and_is_the_exit_reason(hop_index, iterations, budget, expected, n_calls):
    llm, calls = scripted({"check": ["no"], "bridge": ["Kublai Khan", "Genghis Khan", "Möngke"]})
    hop = MultiHopReasoner(chat_generator=llm, index_path=hop_index, retrieval_mode="sparse", max_iterations=iterations, max_llm_calls=budget, check="llm")
    out = hop.run(query=QUESTION, documents=first_retrieval(hop_index), top_k=1)
    assert out["exit_reason"] == expected and len(calls) == n_calls <= budget


def test_a_query_is_never_sent_twice(hop_index):
    llm, calls = scripted({"check": ["no"], "bridge": ["Kublai Khan"]})  # the same bridge every time
    out = MultiHopReasoner(chat_generator=llm, index_path=hop_index, retrieval_mode="sparse", max_iterations=4, max_llm_calls=12, check="llm").run(
        query=QUESTION, documents=first_retrieval(hop_index), top_k=1)
    assert out["exit_reason"] == "no_new_query" and [h.get("bridge") for h in out["hops"]] == ["Kublai Khan", "Kublai Khan"]


@pytest.mark.parametrize("reply", ["maybe", "", "I cannot help with that."])
def test_a_garbage_check_reply_ends_it_as_a_traced_failure_keeping_the_documents(hop_index, reply):
    llm, _ = scripted({"check": [reply], "bridge": ["Kublai Khan"]})
    docs = first_retrieval(hop_index)
    with RagkitTracer().collect() as trace:
        out = MultiHopReasoner(chat_generator=llm, index_path=hop_index, retrieval_mode="sparse", check="llm").run(query=QUESTION, documents=docs, top_k=1)
    assert out["exit_reason"] == "check_failed" and out["documents"] == docs and "error" in out["hops"][0]
    assert out["exit_reason"] in EXIT_REASONS


def test_a_bridge_that_is_not_in_the_sources_is_no_new_query(hop_index):
    llm, _ = scripted({"check": ["no"], "bridge": ["Napoleon Bonaparte"]})
    out = MultiHopReasoner(chat_generator=llm, index_path=hop_index, retrieval_mode="sparse", check="llm").run(query=QUESTION, documents=first_retrieval(hop_index), top_k=1)
    assert out["exit_reason"] == "no_new_query" and out["hops"][0]["bridge"] == ""


def test_round_trip_and_validation():
    hop = MultiHopReasoner(chat_generator=MockChatGenerator(responses="yes"), index_path="/tmp/nowhere", max_iterations=3, max_llm_calls=5, threshold=0.4, check="llm", coverage_threshold=0.55)
    again = MultiHopReasoner.from_dict(hop.to_dict())
    assert (again.max_iterations, again.max_llm_calls, again.threshold, again.check, again.coverage_threshold) == (3, 5, 0.4, "llm", 0.55)
    with pytest.raises(ValueError):
        MultiHopReasoner(chat_generator=MockChatGenerator(responses="yes"), index_path="/tmp/nowhere", check="vibes")
    with pytest.raises(ValueError):
        Features(multi_hop=True, hop_check="vibes").validate()
    with pytest.raises(ValueError):
        MultiHopReasoner(chat_generator=MockChatGenerator(responses="yes"), max_iterations=0)
    with pytest.raises(ValueError):
        Features(multi_hop=True, max_iterations=9).validate()


def test_the_engine_runs_multi_hop_and_reports_its_hops(hop_index, fast_config):
    from ragkit.index.store import RagIndex
    from ragkit.pipeline.engine import AgenticRAG

    llm, calls = scripted({"check": ["no", "yes"], "bridge": ["Kublai Khan"]})
    rag = AgenticRAG(Features(multi_hop=True, hop_check="llm", retrieval_mode="sparse", answer_mode="free", top_k=1), config=fast_config, index=RagIndex.load(hop_index), chat_generator=llm)
    result = rag.ask(QUESTION)
    assert result.details["multi_hop"]["exit_reason"] == "sufficient"
    assert any("Genghis" in (d.content or "") for d in result.sources)
    step = result.trace.step("multi_hop")
    assert step is not None and step.llm_calls == 3 and step.decision["exit_reason"] == "sufficient"
    assert "multi_hop" in draw(Features(multi_hop=True))


# -- the coverage check (the default): no LLM call to decide, the LLM only names the bridge ---------------
def test_coverage_check_calls_no_llm_when_the_best_chunk_covers_the_question(hop_index):
    llm, calls = scripted({"check": ["no"], "bridge": ["Kublai Khan"]})
    question = "Who founded the Yuan dynasty?"
    out = MultiHopReasoner(chat_generator=llm, index_path=hop_index, retrieval_mode="sparse").run(query=question, documents=first_retrieval(hop_index, question), top_k=1)
    assert out["exit_reason"] == "sufficient" and calls == [] and out["hops"][0]["coverage"] >= 0.7


def test_coverage_check_hops_for_what_the_first_chunk_lacks_then_checks_the_follow_up(hop_index):
    llm, calls = scripted({"check": ["no"], "bridge": ["Kublai Khan"]})
    hop = MultiHopReasoner(chat_generator=llm, index_path=hop_index, retrieval_mode="sparse", max_iterations=2, max_llm_calls=4)
    out = hop.run(query=QUESTION, documents=first_retrieval(hop_index), top_k=1)
    first, second = out["hops"][0], out["hops"][1]
    assert first["coverage"] < 0.7 and first["bridge"] == "Kublai Khan" and first["new_documents"] == 1
    # the second check measures the follow-up query ("Kublai Khan grandfather emperor") on the chunk it found
    assert "coverage" in second and calls == ["bridge"] + ["bridge"] * ("bridge" in second)
    assert any("grandson of Genghis Khan" in (d.content or "") for d in out["documents"])


def test_coverage_threshold_zero_never_hops_and_one_always_tries(hop_index):
    question = "Who founded the Yuan dynasty?"
    never, calls = scripted({"check": ["no"], "bridge": ["Kublai Khan"]})
    assert MultiHopReasoner(chat_generator=never, index_path=hop_index, retrieval_mode="sparse", coverage_threshold=0.0).run(
        query=question, documents=first_retrieval(hop_index, question), top_k=1)["exit_reason"] == "sufficient" and calls == []
    always, calls = scripted({"check": ["no"], "bridge": ["Kublai Khan"]})
    out = MultiHopReasoner(chat_generator=always, index_path=hop_index, retrieval_mode="sparse", coverage_threshold=1.0, max_iterations=1).run(
        query=question + " Whose grandson?", documents=first_retrieval(hop_index, question), top_k=1)
    assert calls and out["exit_reason"] in ("max_iterations", "no_new_query")


def test_features_wire_the_check_into_the_graph():
    from ragkit.pipeline.graph import build_pipeline

    pipe = build_pipeline(Features(multi_hop=True, hop_coverage=0.65), MockChatGenerator(responses="x"), index_path="/tmp/nowhere")
    hop = pipe.get_component("multi_hop")
    assert (hop.check, hop.coverage_threshold) == ("coverage", 0.65)
