"""With the real 0.5B model: the shared prompt prefix is really reused from llama.cpp's cache, and
all features on stay within the LLM-call budget."""

import pytest
from haystack import Document
from haystack.dataclasses import ChatMessage

from ragkit.llm.aligned_reuse import DEFAULT_BLOCK
from ragkit.pipeline.engine import AgenticRAG
from ragkit.components.document_grader import grade_task
from ragkit.pipeline.features import Features
from ragkit.llm.probe import probe_for
from ragkit.llm.prompts import context_messages
from ragkit.llm.structured import answer_constraint, int_list_constraint, parse_int_list

pytestmark = [pytest.mark.integration, pytest.mark.llm]


def test_all_features_reuse_the_sources_prefix(sample_index, fast_config, local_llm):
    local_llm._model.reset()  # a cold cache, so every reused token was put there by this question
    # judge_spans: the judge also checks the copied span (by default a verbatim span skips it, see the next test)
    rag = AgenticRAG(Features.all_on(judge_spans=True), config=fast_config, index=sample_index, chat_generator=local_llm)
    result = rag.ask("Where was Nikola Tesla born?")
    trace = result.trace
    assert result.answer and result.route == "FACTUAL" and trace.llm_calls <= 4 + 2 * result.corrections
    # a fact lookup is not graded (the route's policy) and its answer reads one evidence sentence
    assert trace.step("grade").llm_calls == 0
    answer, judge = trace.step("answer"), trace.step("hallucination")
    assert answer.prompt_tokens > 50 and answer.prompt_tokens_reused < 20  # the first to read the evidence
    # the judge reads the same system + evidence prefix the answer left in the cache, reused in whole
    # blocks (ragkit/llm/aligned_reuse.py): at most one block short of the shared 60%
    assert judge.prompt_tokens_reused >= DEFAULT_BLOCK and judge.prompt_tokens_reused % DEFAULT_BLOCK == 0
    assert judge.prompt_tokens_reused > 0.6 * judge.prompt_tokens - DEFAULT_BLOCK
    assert trace.prompt_tokens_evaluated == trace.prompt_tokens - trace.prompt_tokens_reused
    assert trace.prompt_tokens_evaluated < trace.prompt_tokens


def test_by_default_a_copied_span_costs_no_judge_call(sample_index, fast_config, local_llm):
    rag = AgenticRAG(Features.all_on(), config=fast_config, index=sample_index, chat_generator=local_llm)
    result = rag.ask("Where was Nikola Tesla born?")
    judge = result.trace.step("hallucination")
    assert result.answer_mode == "grounded" and judge.llm_calls == 0 and judge.prompt_tokens == 0
    assert judge.decision.get("judged") == "no: verbatim span" and result.exit_reason == "span_copied"


GRADING_CASES = [
    ("Where was Nikola Tesla born?", ["Nikola Tesla was born in Smiljan in 1856.", "The Rhine flows into the North Sea.", "Tesla moved to New York in 1884."]),
    ("What is the capital of France?", ["Paris is the capital and largest city of France.", "Paris is the capital of France; it has been since the 10th century.", "Lyon is known for its cuisine."]),
    ("How long is the Rhine?", ["The Rhine is about 1,230 km long.", "Bananas are yellow.", "The Rhine rises in the Swiss Alps.", "The Danube flows east."]),
]


@pytest.mark.parametrize("question,texts", GRADING_CASES)
def test_logit_grading_picks_what_the_grammar_sampler_picks(local_llm, question, texts):
    """The grader reads its scores from the allowed tokens' logits instead of llama.cpp's grammar
    sampler; greedy under the grammar must give exactly the same list."""
    documents = [Document(content=t, meta={"title": "t"}) for t in texts]
    messages = context_messages(documents, grade_task(question, len(texts)))
    out = probe_for(local_llm).score_list(messages, len(texts))
    kwargs = {**int_list_constraint(local_llm, len(texts)), "max_tokens": 4 * len(texts) + 4, "temperature": 0.0}
    sampled = parse_int_list(local_llm.run(messages=messages, generation_kwargs=kwargs)["replies"][0].text, len(texts))
    assert out["scores"] == sampled
    assert out["prompt_tokens"] > 50 and out["reply_tokens"] >= len(texts)


def test_the_first_token_mask_keeps_a_citation_mark_out_of_an_answer(local_llm):
    """Told to reply with only "[1]", the real model under the answer constraint must start with something else."""
    messages = [ChatMessage.from_user("Reply with exactly this and nothing else: [1]")]
    free = local_llm.run(messages=messages, generation_kwargs={"max_tokens": 8, "temperature": 0.0})["replies"][0].text.strip()
    kwargs = {**answer_constraint(local_llm), "max_tokens": 8, "temperature": 0.0}
    constrained = local_llm.run(messages=messages, generation_kwargs=kwargs)["replies"][0].text
    assert free.startswith("[1]")  # the test only means something if the model would have emitted it
    assert constrained.strip() and not constrained.lstrip().startswith("[")


def test_a_streamed_answer_reports_its_tokens_and_their_probabilities(sample_index, fast_config):
    """Streaming (the notebook panel) used to report 0 prompt and 0 completion tokens for the answer step."""
    from ragkit.llm.generators import build_chat_generator

    chunks = []
    streaming = build_chat_generator(fast_config.models, streaming_callback=chunks.append)
    result = AgenticRAG(Features(), config=fast_config, index=sample_index, chat_generator=streaming).ask("Where was Nikola Tesla born?")
    answer = result.trace.step("answer")
    assert chunks and answer.prompt_tokens > 100 and answer.completion_tokens > 0
    assert abs(answer.completion_tokens - len(chunks)) <= 2  # one streamed chunk per generated token
    assert 0 < answer.decision["token_p_mean"] <= 1 and answer.decision["token_p_min"] <= answer.decision["token_p_mean"]
    assert result.details["confidence"]["token_p_mean"] == answer.decision["token_p_mean"]
