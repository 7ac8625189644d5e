"""With the real 0.5B model: the shared prompt prefix is really reused from llama.cpp's cache, and
all features on stay within the LLM-call budget."""

import pytest

from ragkit.agentic import AgenticRAG
from ragkit.features import Features

pytestmark = [pytest.mark.integration, pytest.mark.llm]


def test_all_features_reuse_the_sources_prefix(sample_index, fast_config, local_llm):
    local_llm._model.reset()  # a cold cache, so every reused token was put there by this question
    rag = AgenticRAG(Features.all_on(), config=fast_config, index=sample_index, generator=local_llm)
    result = rag.ask("Where was Nikola Tesla born?")
    trace = result.trace
    assert result.answer and result.route == "FACTUAL" and trace.llm_calls <= 4 + 2 * result.corrections
    grade, judge = trace.step("grade"), trace.step("hallucination")
    assert grade.prompt_tokens > 200 and grade.prompt_tokens_reused < 20  # the first to read the sources
    # the judge reads the same system + sources prefix the answer left in the cache
    assert judge.prompt_tokens_reused > 0.7 * judge.prompt_tokens
    assert trace.prompt_tokens_evaluated == trace.prompt_tokens - trace.prompt_tokens_reused
    assert trace.prompt_tokens_evaluated < trace.prompt_tokens
