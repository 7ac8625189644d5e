"""Block-aligned prompt-cache reuse (ragkit/llm/aligned_reuse.py): what is evaluated where, on a recording
stand-in for ``llama_cpp.Llama``; and, with the real 0.5B, that a probability and a greedy reply (its text and
each token's probability) no longer depend on what the model was asked before. That test fails with
``block=None`` (llama.cpp's exact reuse): P(yes) 0.379 vs 0.391 fresh, token probabilities 0.587 vs 0.572."""

from __future__ import annotations

import numpy as np
import pytest

from ragkit.llm.aligned_reuse import AlignedReuse, attach


class RecordingLlama:
    """The parts of ``llama_cpp.Llama`` the reuse touches, with llama-cpp-python's own prefix logic in ``generate``."""

    def __init__(self, n_batch: int = 512):
        self.n_batch, self.n_tokens = n_batch, 0
        self.input_ids = np.zeros(4096, dtype=np.intc)
        self.evaluated: list[tuple[int, int]] = []  # (first position, tokens) of every llama.cpp decode

    @property
    def _input_ids(self) -> np.ndarray:
        return self.input_ids[: self.n_tokens]

    @staticmethod
    def longest_token_prefix(a, b) -> int:
        n = 0
        for x, y in zip(a, b):
            if x != y:
                break
            n += 1
        return n

    def eval(self, tokens) -> None:
        for i in range(0, len(tokens), self.n_batch):
            batch = list(tokens[i : i + self.n_batch])
            self.evaluated.append((self.n_tokens, len(batch)))
            self.input_ids[self.n_tokens : self.n_tokens + len(batch)] = batch
            self.n_tokens += len(batch)

    def generate(self, tokens, reply=(901, 902, 903)):
        tokens = list(tokens)
        if self.n_tokens > 0:  # as Llama.generate: keep the shared prefix, re-evaluate >= 1 token
            shared = self.longest_token_prefix(self._input_ids, tokens)
            exact = shared == len(tokens) == self.n_tokens
            keep = len(tokens) if exact else (shared - 1 if shared == len(tokens) else shared)
            tokens, self.n_tokens = ([] if exact else tokens[keep:]), keep
        self.eval(tokens)
        for token in reply:
            yield token
            self.eval([token])


def prompt(n: int, first: int = 0) -> list[int]:
    return list(range(first, first + n))


def test_a_prompt_is_evaluated_in_blocks_at_fixed_positions():
    llm = RecordingLlama()
    reuse = attach(llm, block=64)
    reuse.evaluate(prompt(150), reuse.start_for(prompt(150)))
    assert llm.evaluated == [(0, 64), (64, 64), (128, 22)]
    assert reuse.reusable == 128 and llm.n_tokens == 150


@pytest.mark.parametrize("shared, start", [(100, 64), (128, 128), (140, 128), (150, 128), (20, 0)])
def test_a_new_prompt_reuses_only_the_whole_blocks_it_shares(shared, start):
    llm = RecordingLlama()
    reuse = attach(llm, block=64)
    reuse.evaluate(prompt(150), 0)
    new = prompt(shared) + prompt(200 - shared, first=5000) if shared < 150 else prompt(150)
    assert reuse.start_for(new) == start
    llm.evaluated.clear()
    reuse.evaluate(new, start)
    assert llm.evaluated[0][0] == start and all(first % 64 == 0 for first, _ in llm.evaluated)


def test_generate_reevaluates_its_prompt_from_a_block_boundary_then_decodes_one_token_at_a_time():
    llm = RecordingLlama()
    reuse = attach(llm, block=64)
    reuse.evaluate(prompt(300), 0)
    llm.evaluated.clear()
    reply = list(llm.generate(prompt(200) + prompt(90, first=7000)))  # shares 200 tokens: llama.cpp would start at 200
    assert reply == [901, 902, 903]
    assert llm.evaluated == [(192, 64), (256, 34), (290, 1), (291, 1), (292, 1)]
    assert reuse.reusable == 256  # the decoded tokens are not reusable by another prompt


def test_decoded_tokens_are_never_reused_by_the_next_prompt():
    llm = RecordingLlama()
    reuse = attach(llm, block=64)
    list(llm.generate(prompt(130)))
    follow_up = llm._input_ids.tolist() + prompt(80, first=9000)  # the prompt, its reply, more
    assert reuse.start_for(follow_up) == 128


def test_the_same_prompt_again_samples_from_the_logits_already_there():
    llm = RecordingLlama()
    reuse = attach(llm, block=64)
    reuse.evaluate(prompt(150), 0)
    llm.evaluated.clear()
    generation = llm.generate(prompt(150))
    next(generation)
    assert llm.evaluated == []  # the aligned evaluation of this very prompt left its logits


def test_an_eval_outside_the_wrapper_lowers_what_is_reusable():
    llm = RecordingLlama()
    reuse = attach(llm, block=64)
    reuse.evaluate(prompt(300), 0)
    llm.n_tokens = 100  # someone managing the cache by hand re-evaluates from position 100
    llm.eval(prompt(50, first=100))
    assert reuse.reusable == 100
    assert reuse.start_for(prompt(300)) == 64


def test_attach_is_idempotent_and_checks_the_block():
    llm = RecordingLlama(n_batch=128)
    assert attach(llm) is attach(llm)
    with pytest.raises(ValueError, match="block must be between 1 and n_batch=128"):
        AlignedReuse(RecordingLlama(n_batch=128), block=256)
    with pytest.raises(ValueError, match="not a block boundary"):
        attach(llm).evaluate(prompt(100), 10)


def test_block_none_is_llama_cpps_exact_prefix_reuse():
    llm = RecordingLlama()
    reuse = attach(llm, block=None)
    reuse.evaluate(prompt(150), 0)
    assert reuse.start_for(prompt(140) + prompt(10, first=800)) == 140
    llm.evaluated.clear()
    list(llm.generate(prompt(100) + prompt(30, first=700)))
    assert llm.evaluated[0] == (100, 30)


# -- the real model ---------------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.llm
def test_a_probability_and_a_greedy_reply_depend_on_their_prompt_alone(local_llm):
    from haystack.dataclasses import ChatMessage
    from llama_cpp import LogitsProcessorList

    from ragkit.llm.probe import probe_for
    from ragkit.llm.structured import TokenProbabilities

    probe, llm = probe_for(local_llm), local_llm._model
    source = " ".join(f"Fact {i}: the tower number {i} stands {i * 7 % 23} metres north of the river gate." for i in range(40))
    question = [ChatMessage.from_system("Answer from the source."), ChatMessage.from_user(f"Source: {source}\n\nDoes tower 17 stand north of the gate? Answer yes or no.")]
    labels = {"yes": ["yes", "Yes"], "no": ["no", "No"]}

    def history(n: int) -> None:  # a prompt sharing an unaligned prefix of the question's, then a reply
        other = [ChatMessage.from_system("Answer from the source."), ChatMessage.from_user(f"Source: {source[: 97 * n]} Which tower is tallest?")]
        local_llm.run(messages=other, generation_kwargs={"max_tokens": 6, "temperature": 0.0})

    def reply() -> tuple[str, list[float]]:  # the greedy text and each chosen token's probability (what confidence reads)
        recorder = TokenProbabilities()
        kwargs = {"max_tokens": 12, "temperature": 0.0, "logits_processor": LogitsProcessorList([recorder])}
        return local_llm.run(messages=question, generation_kwargs=kwargs)["replies"][0].text, recorder.probabilities

    llm.reset()
    fresh, fresh_reply = probe.choice_probs(question, labels), reply()
    for n in (3, 7, 11, 13):
        history(n)
        assert probe.choice_probs(question, labels) == fresh
        history(n + 1)
        assert reply() == fresh_reply


@pytest.mark.integration
@pytest.mark.llm
def test_a_replys_log_probabilities_are_those_its_greedy_decoding_saw(local_llm):
    """continuation_logprobs scores a given reply token by token; on the model's own greedy reply each
    token's probability is the one decoding recorded, and a reply it would not give scores lower."""
    from haystack.dataclasses import ChatMessage
    from llama_cpp import LogitsProcessorList

    from ragkit.llm.probe import probe_for
    from ragkit.llm.structured import TokenProbabilities

    probe = probe_for(local_llm)
    question = [ChatMessage.from_system("Answer from the source in a few words."),
                ChatMessage.from_user("Source: The river gate of Tarn was built in 1412 by the mason Edda Holm.\n\nWho built the river gate?")]
    recorder = TokenProbabilities()
    kwargs = {"max_tokens": 8, "temperature": 0.0, "logits_processor": LogitsProcessorList([recorder])}
    local_llm._model.reset()
    reply = local_llm.run(messages=question, generation_kwargs=kwargs)["replies"][0].text
    n = len(recorder.probabilities)
    scored = probe.continuation_logprobs(question, reply)
    assert len(scored) >= n - 1  # the end-of-turn token ends decoding but is not part of the reply's text
    assert np.exp(scored[: n - 1]) == pytest.approx(recorder.probabilities[: n - 1], abs=1e-4)
    assert sum(probe.continuation_logprobs(question, "Ulla Berg, a carpenter")) < sum(scored)
    with pytest.raises(ValueError, match="empty"):
        probe.continuation_logprobs(question, "")


@pytest.mark.integration
@pytest.mark.llm
def test_the_judges_default_faithfulness_is_p_yes_times_its_likelihood_of_the_answer(local_llm):
    """With a llama.cpp judge the default faithfulness is P(yes) to "is this answer correct?" times the geometric
    mean of the judge's token probabilities of the answer as its own grounded reply; a span it would not pick scores lower."""
    import math

    from haystack import Document

    from ragkit.eval.judge import LocalJudge

    sources = [Document(content="The river gate of Tarn was built in 1412 by the mason Edda Holm. The bridge was painted by Ulla Berg in 1630.")]
    judge, p_yes_only = LocalJudge(local_llm), LocalJudge(local_llm, task="correct")
    assert judge.task == "correct_x_likelihood"
    question = "Who built the river gate of Tarn?"
    for answer in ("Edda Holm [1]", "Ulla Berg [1]"):
        score, failure = judge.faithfulness(question, answer, sources)
        logprobs = judge.answer_logprobs(question, answer, sources)
        assert failure is None and len(logprobs) >= 2
        assert score == pytest.approx(p_yes_only.faithfulness(question, answer, sources)[0] * math.exp(sum(logprobs) / len(logprobs)))
    assert judge.faithfulness(question, "Edda Holm [1]", sources)[0] > judge.faithfulness(question, "Ulla Berg [1]", sources)[0]
    assert judge.faithfulness(question, "[1]", sources) == (None, "judge: an empty answer has no likelihood to read")  # a counted failure
