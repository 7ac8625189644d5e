"""FallbackRetriever: the coverage and LLM checks, each strategy bound, failures, and the engine's trace."""

import pytest
from haystack import Document
from haystack.components.generators.chat import MockChatGenerator

from ragkit.components.fallback_retriever import FallbackRetriever
from ragkit.index.coverage import coverage
from ragkit.index.store import RagIndex
from ragkit.pipeline.features import Features
from ragkit.pipeline.drawing import draw

QUESTION = "Where was Nikola Tesla born?"


@pytest.fixture(scope="module")
def index(tmp_path_factory, fast_config):
    from ragkit.index.indexer import build_index

    folder = tmp_path_factory.mktemp("docs")
    (folder / "tesla.md").write_text("# Tesla\n\nNikola Tesla was born in Smiljan in 1856. He studied engineering at Graz.\n")
    (folder / "rhine.md").write_text("# Rhine\n\nThe Rhine flows from the Swiss Alps to the North Sea.\n")
    (folder / "danube.md").write_text("# Danube\n\nThe Danube flows through Vienna, Budapest and Belgrade to the Black Sea.\n")
    path = tmp_path_factory.mktemp("index") / "index"
    build_index(folder, path, fast_config, progress=False)
    return RagIndex.load(path)


def rhine(index):
    return [d for d in index.chunks.values() if "Rhine" in d.content]


class Failing:
    def run(self, messages, **kwargs):
        raise TimeoutError("the server did not answer")


def test_coverage_is_the_best_chunks_weighted_share():
    weights = {"tesla": 2.0, "born": 1.0}
    assert coverage(weights, [{"tesla"}, {"tesla", "born"}]) == 1.0
    assert coverage(weights, [{"tesla"}]) == pytest.approx(2 / 3)
    assert coverage(weights, []) == 0.0 and coverage({}, [{"x"}]) == 0.0


def test_enough_evidence_runs_no_strategy(index):
    tesla = [d for d in index.chunks.values() if "Smiljan" in d.content]
    out = FallbackRetriever(index=index).run(query=QUESTION, documents=tesla, top_k=2)
    assert out["fallback"]["exit_reason"] == "sufficient" and out["fallback"]["attempts"] == [] and out["documents"] == tesla


def test_nothing_left_after_grading_is_recovered_by_the_next_mode(index):
    out = FallbackRetriever(index=index, main_mode="hybrid", strategies=["hybrid", "sparse", "dense"]).run(query=QUESTION, documents=[], top_k=2)
    info = out["fallback"]
    assert info["exit_reason"] == "recovered" and info["initial"] == {"coverage": 0.0}
    first = info["attempts"][0]
    assert first["strategy"] == "sparse" and first["why"] == "no chunks left to answer from" and first["result"] == "sufficient"
    assert "Smiljan" in out["documents"][0].content and len(out["documents"]) <= 2


def test_off_topic_evidence_gets_the_new_chunks_first(index):
    out = FallbackRetriever(index=index, main_mode="dense", strategies=["sparse"]).run(query=QUESTION, documents=rhine(index), top_k=2)
    info = out["fallback"]
    assert info["attempts"][0]["why"].startswith("question-term coverage 0.0 <")
    assert info["exit_reason"] == "recovered" and "Smiljan" in out["documents"][0].content


def test_attempts_are_bounded(index):
    never = FallbackRetriever(index=index, main_mode="hybrid", strategies=["sparse", "dense"], coverage_threshold=1.0, max_attempts=1)
    out = never.run(query="Which engineer was born in 1856 near Graz and loved pigeons?", documents=[], top_k=2)
    assert out["fallback"]["exit_reason"] == "max_attempts" and len(out["fallback"]["attempts"]) == 1
    exhausted = FallbackRetriever(index=index, main_mode="hybrid", strategies=["sparse"], coverage_threshold=1.0)
    out = exhausted.run(query="Which engineer was born in 1856 near Graz and loved pigeons?", documents=[], top_k=2)
    assert out["fallback"]["exit_reason"] == "exhausted"


def test_the_llm_budget_stops_before_a_costly_strategy(index):
    hyde_only = FallbackRetriever(index=index, strategies=["hyde"], chat_generator=MockChatGenerator(responses="Tesla was born in Smiljan."), max_llm_calls=0)
    out = hyde_only.run(query=QUESTION, documents=[], top_k=2)
    assert out["fallback"]["exit_reason"] == "budget" and out["fallback"]["attempts"] == []


def test_a_failing_strategy_is_recorded_and_the_next_one_runs(index):
    out = FallbackRetriever(index=index, strategies=["hyde", "sparse"], chat_generator=Failing(), max_llm_calls=2).run(query=QUESTION, documents=[], top_k=2)
    attempts = out["fallback"]["attempts"]
    assert [a["strategy"] for a in attempts] == ["hyde", "sparse"]
    assert attempts[0]["result"] == "failed" and "HyDE wrote no passage" in attempts[0]["error"]
    assert attempts[1]["result"] == "sufficient" and out["fallback"]["exit_reason"] == "recovered"


@pytest.mark.parametrize("reply, exit_reason", [("no", "exhausted"), ("yes", "sufficient"), ("{]", "check_failed")])
def test_the_llm_check(index, reply, exit_reason):
    step = FallbackRetriever(index=index, main_mode="hybrid", strategies=["sparse"], check="llm", chat_generator=MockChatGenerator(responses=reply), max_llm_calls=4)
    out = step.run(query=QUESTION, documents=rhine(index), top_k=2)
    assert out["fallback"]["exit_reason"] == exit_reason
    if exit_reason == "check_failed":
        assert out["documents"] == rhine(index) and out["fallback"]["error"]


def test_round_trip_and_validation(index):
    step = FallbackRetriever(index_path=str(index.path), strategies=["sparse", "hyde"], chat_generator=MockChatGenerator(responses="x"), coverage_threshold=0.4)
    again = FallbackRetriever.from_dict(step.to_dict())
    assert again.strategies == ["sparse", "hyde"] and again.coverage_threshold == 0.4
    with pytest.raises(ValueError):
        FallbackRetriever(index=index, strategies=["teleport"])
    with pytest.raises(ValueError):
        FallbackRetriever(index=index, strategies=["hyde"])  # needs a generator
    with pytest.raises(ValueError):
        Features(fallback=True, fallback_strategies=[]).validate()


def test_the_engine_traces_each_attempt(index, fast_config):
    from ragkit.pipeline.engine import AgenticRAG

    def grade_everything_away(documents):  # stands in for a grader that rejected every chunk
        return {"documents": []}

    f = Features(fallback=True, fallback_strategies=["sparse"], answer_mode="free", top_k=2)
    rag = AgenticRAG(f, config=fast_config, index=index, chat_generator=MockChatGenerator(responses="Smiljan [1]."), replace_steps={"guard": grade_everything_away})
    result = rag.ask(QUESTION)
    assert result.details["fallback"]["exit_reason"] == "recovered" and result.sources
    step = result.trace.step("fallback")
    assert step.decision["exit_reason"] == "recovered" and step.decision["tried"] == "sparse"
    assert "fallback" in draw(f)
