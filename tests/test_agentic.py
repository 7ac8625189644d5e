"""AgenticRAG end to end over sample_docs/ with the real embedder and a scripted MockChatGenerator."""

import re

import pytest
from haystack.components.generators.chat import MockChatGenerator

from ragkit.pipeline.engine import AgenticRAG
from ragkit.pipeline.features import Features
from ragkit.llm.prompts import NO_ANSWER

pytestmark = pytest.mark.integration


class ScriptedLLM:
    """Answers each kind of prompt the pipeline sends; counts calls per kind."""

    def __init__(self, judge=("yes",), grades=None, answer="Tesla was born in Smiljan [1].", fail=()):
        self.judge = list(judge)
        self.grades = grades
        self.answer = answer
        self.fail = set(fail)
        self.calls = []

    def __call__(self, messages):
        text = messages[-1].text
        if "rate how useful" in text:
            kind = "grade"
        elif "for each of the" in text and "claims" in text:
            kind = "judge"
        elif "only facts stated" in text:
            kind = "correct"
        elif "Task: find the answer" in text:
            kind = "answer"
        else:
            kind = "other"
        self.calls.append(kind)
        if kind in self.fail:
            raise RuntimeError(f"{kind} broke")
        if kind == "grade":
            n = text.count("<source id=")
            return "[" + ",".join(str(g) for g in (self.grades or [9] + [1] * (n - 1))[:n]) + "]"
        if kind == "judge":
            n = len(re.findall(r"^\d+\. ", text.split("Claims:")[1], re.M))
            label = self.judge.pop(0) if len(self.judge) > 1 else self.judge[0]
            return "[" + ",".join(f'"{label}"' for _ in range(n)) + "]"
        if kind == "correct":
            return "Tesla was born in Smiljan [1]."
        return self.answer


def make(sample_index, fast_config, features, script):
    return AgenticRAG(features, config=fast_config, index=sample_index, chat_generator=MockChatGenerator(response_fn=script))


def test_plain_rag_is_one_llm_call_with_a_trace(sample_index, fast_config):
    script = ScriptedLLM()
    result = make(sample_index, fast_config, Features(answer_mode="free"), script).ask("Where was Nikola Tesla born?")
    assert result.answer.startswith("Tesla was born in Smiljan") and script.calls == ["answer"]
    assert [s.name for s in result.trace.steps] == ["embed", "retrieve", "guard", "context_check", "answer_prompt", "answer", "confidence"]
    assert result.trace.llm_calls == 1 and result.sources[0].meta["source"] == "wikipedia/Nikola_Tesla.md"
    assert 0 < result.confidence <= 1 and result.symbol in "●◐○"


def test_all_features_stay_within_four_llm_calls(sample_index, fast_config):
    script = ScriptedLLM()
    graded = Features().route_policy
    graded["FACTUAL"].pop("grader")  # the default policy leaves fact lookups ungraded (tested below)
    features = Features.all_on(answer_mode="free", router_backend="rules", rerank_backend="bi-encoder", route_policy=graded)
    result = make(sample_index, fast_config, features, script).ask("Where was Nikola Tesla born?")
    assert result.route == "FACTUAL" and result.exit_reason == "supported" and result.corrections == 0
    # FACTUAL: the route policy skips HyDE (BM25 finds named entities); grade + answer + judge
    assert script.calls == ["grade", "answer", "judge"] and result.trace.llm_calls <= 4
    assert result.details["grading"]["dropped"] and len(result.sources) == 1
    names = [s.name for s in result.trace.steps]
    # the first reranked question of an AgenticRAG makes sure every sentence of the index has a vector (before the graph runs)
    assert names == [
        "sentence_vectors", "router", "route_policy", "embed", "query_embedding", "retrieve", "guard", "rerank", "grade",
        "context_check", "answer_prompt", "answer", "hallucination", "correction_router", "confidence",
    ]
    assert result.trace.step("correction_router").decision["exit_reason"] == "supported"
    default = ScriptedLLM()
    make(sample_index, fast_config, Features.all_on(answer_mode="free", router_backend="rules"), default).ask("Where was Nikola Tesla born?")
    assert default.calls == ["answer", "judge"]  # FACTUAL: the route policy does not grade


def test_analytical_route_runs_hyde_and_retrieves_deeper(sample_index, fast_config):
    script = ScriptedLLM()
    features = Features.all_on(answer_mode="free", router_backend="rules", grading=False)
    result = make(sample_index, fast_config, features, script).ask("Why did Tesla's alternating current system win over direct current?")
    assert result.route == "ANALYTICAL" and script.calls[0] == "other"  # the HyDE passage
    assert result.trace.step("hyde") is not None and len(result.sources) == features.route_policy["ANALYTICAL"]["top_k"]


def test_unsupported_answer_is_corrected_once_then_exits(sample_index, fast_config):
    script = ScriptedLLM(judge=("no", "yes"), answer="Tesla was born in Paris [1].")
    features = Features(answer_mode="free", hallucination_check=True, self_correction=True, max_corrections=2)
    result = make(sample_index, fast_config, features, script).ask("Where was Nikola Tesla born?")
    assert result.exit_reason == "supported" and result.corrections == 1
    assert result.answer == "Tesla was born in Smiljan [1]." and script.calls == ["answer", "judge", "correct", "judge"]
    # the loop is a Haystack pipeline: its components show up once per pass
    names = [s.name for s in result.trace.steps]
    assert names.count("answer") == 2 and names.count("hallucination") == 2 and names.count("correction_count") == 1


def test_correction_is_bounded(sample_index, fast_config):
    script = ScriptedLLM(judge=("no",))
    features = Features(answer_mode="free", hallucination_check=True, self_correction=True, max_corrections=1)
    result = make(sample_index, fast_config, features, script).ask("Where was Nikola Tesla born?")
    assert result.exit_reason == "max_corrections" and result.corrections == 1 and script.calls.count("correct") == 1


def test_simple_route_skips_retrieval(sample_index, fast_config):
    script = ScriptedLLM(answer="Hello! How can I help?")
    result = make(sample_index, fast_config, Features(answer_mode="free", routing=True, router_backend="rules"), script).ask("hello")
    assert result.route == "SIMPLE" and result.sources == [] and result.exit_reason == "no_retrieval"
    assert [s.name for s in result.trace.steps] == ["router", "route_policy", "direct_prompt", "direct_answer"]


def test_failing_steps_degrade_instead_of_crashing(sample_index, fast_config):
    script = ScriptedLLM(fail={"grade", "answer"})
    features = Features(answer_mode="free", grading=True)
    result = make(sample_index, fast_config, features, script).ask("Where was Nikola Tesla born?")
    assert result.answer == NO_ANSWER
    assert len(result.sources) == features.top_k  # grading failed: every chunk kept
    assert any("grader: llm_error" in f for f in result.trace.fallbacks)
    assert any("answer: llm_error" in f for f in result.trace.fallbacks)


@pytest.mark.parametrize("features", [Features(answer_mode="free"), Features.all_on(answer_mode="free")], ids=["plain", "all_on"])
def test_a_failed_answer_call_is_reported_never_a_confident_supported_answer(sample_index, fast_config, features):
    """A dead LLM used to give "The documents don't say." at ● 0.92 with exit reason `supported`."""
    script = ScriptedLLM(fail={"answer", "correct", "grade", "judge", "other"})
    result = make(sample_index, fast_config, features, script).ask("Where was Nikola Tesla born?")
    assert result.failed and result.exit_reason == "answer_failed" and "answer" in result.failed_steps
    assert result.symbol == "○" and result.confidence < 0.5
    assert result.details["confidence"]["failed_steps"] == result.failed_steps


def test_a_failed_grader_caps_confidence_and_is_named(sample_index, fast_config):
    result = make(sample_index, fast_config, Features(answer_mode="free", grading=True), ScriptedLLM(fail={"grade"})).ask("Where was Nikola Tesla born?")
    assert not result.failed and result.answer.startswith("Tesla")
    assert result.failed_steps == ["grade"] and result.symbol == "○"


def test_a_declined_answer_reports_how_sure_the_system_is_that_the_sources_lack_it(sample_index, fast_config):
    result = make(sample_index, fast_config, Features(answer_mode="free"), ScriptedLLM(answer=NO_ANSWER)).ask("Where was Nikola Tesla born?")
    assert result.declined and result.confidence == 0.0 and result.symbol == "○"
    assert result.p_lacks_answer is not None and 0.0 <= result.p_lacks_answer <= 1.0


def test_low_confidence_declines_and_lists_the_closest_sources(sample_index, fast_config):
    script = ScriptedLLM(judge=("no",), grades=[1, 1, 1, 1, 1])
    features = Features(answer_mode="free", grading=True, hallucination_check=True, confidence_floor=0.5)
    result = make(sample_index, fast_config, features, script).ask("Where was Nikola Tesla born?")
    assert result.declined and result.answer.startswith(NO_ANSWER + " Closest sources:")
    assert result.details["declined_answer"].startswith("Tesla")


def test_features_validation_and_yaml(tmp_path):
    path = tmp_path / "f.yaml"
    path.write_text("grading: true\ngrade_threshold: 6\nretrieval_mode: sparse\n")
    features = Features.from_yaml(path)
    assert features.grading and features.grade_threshold == 6 and features.retrieval_mode == "sparse"
    assert Features.from_dict(features.to_dict()) == features
    with pytest.raises(ValueError, match="self_correction needs"):
        Features(answer_mode="free", self_correction=True).validate()
    with pytest.raises(ValueError, match="Unknown"):
        Features.from_dict({"turbo": True})


def test_correction_retry_that_fails_keeps_the_previous_answer(sample_index, fast_config):
    script = ScriptedLLM(judge=("no",), answer="Tesla was born in Paris [1].", fail={"correct"})
    features = Features(answer_mode="free", hallucination_check=True, self_correction=True, max_corrections=1)
    result = make(sample_index, fast_config, features, script).ask("Where was Nikola Tesla born?")
    assert result.answer == "Tesla was born in Paris [1]." and result.exit_reason == "max_corrections"
    assert any("answer: llm_error" in f for f in result.trace.fallbacks)


def test_judge_that_cannot_score_exits_unknown_without_retry(sample_index, fast_config):
    script = ScriptedLLM(fail={"judge"})
    features = Features(answer_mode="free", hallucination_check=True, self_correction=True, max_corrections=2)
    result = make(sample_index, fast_config, features, script).ask("Where was Nikola Tesla born?")
    assert result.exit_reason == "unknown" and result.corrections == 0 and "correct" not in script.calls
    assert result.answer.startswith("Tesla was born in Smiljan")


def test_reranking_reads_sentence_vectors_computed_once_per_index(sample_index_dir, fast_config, tmp_path):
    import shutil

    from ragkit.index.store import RagIndex
    from ragkit.index.sentence_vectors import SentenceVectorCache

    index_dir = tmp_path / "index"
    shutil.copytree(sample_index_dir, index_dir)
    index = RagIndex.load(index_dir)
    rag = make(index, fast_config, Features(answer_mode="free", rerank=True), ScriptedLLM())
    first = rag.ask("Where was Nikola Tesla born?")
    prepared = first.trace.step("sentence_vectors")
    assert prepared is not None and SentenceVectorCache.file_for(index_dir, "all-MiniLM-L6-v2").is_file()
    second = rag.ask("When did Tesla move to the United States?")
    assert second.trace.step("sentence_vectors") is None
    # every candidate sentence was already cached: the question is the only text embedded
    assert second.trace.step("rerank").decision["sentences_embedded_now"] == 0
    assert second.trace.step("rerank").decision["sentences"] > 0
